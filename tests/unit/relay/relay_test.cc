// The relay without sockets: byte streams in, what each side gets and the release rule out.
#include "pooler/relay/relay.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/relay/relay_test_link.h"

namespace pgfleet::pool::relay_testing {
namespace relay_test {

TEST(RelayTest, SimpleQueryIsReleasableOnceAnsweredOutsideATransaction) {
  Link link;
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.FromClient(Query("select 1")), Query("select 1"));
  EXPECT_FALSE(link.relay().IsReleasable());
  EXPECT_TRUE(link.relay().query_in_progress());
  const std::string answer = Row("1") + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(answer), answer);
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.observer().answered, 1);
}

TEST(RelayTest, TransactionBlockHoldsTheServerUntilItEnds) {
  Link link;
  link.FromClient(Query("begin"));
  link.FromServer(Complete("BEGIN") + Ready('T'));
  EXPECT_FALSE(link.relay().IsReleasable());
  EXPECT_TRUE(link.relay().in_transaction());
  link.FromClient(Query("select x"));
  link.FromServer(Error() + Ready('E'));
  EXPECT_FALSE(link.relay().IsReleasable());
  link.FromClient(Query("rollback"));
  link.FromServer(Complete("ROLLBACK") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.observer().errors, std::vector<std::string>{"42P01"});
}

TEST(RelayTest, EverySyncInFlightMustBeAnsweredBeforeRelease) {
  Link link;
  std::string pipeline;
  for (int i = 0; i < 5; ++i) pipeline += Parse("", "select 1") + Bind("") + Execute() + Sync();
  EXPECT_EQ(link.FromClient(pipeline), pipeline);
  const std::string one = ParseComplete() + BindComplete() + Row("1") + Complete("SELECT 1");
  for (int i = 0; i < 4; ++i) {
    link.FromServer(one + Ready('I'));
    EXPECT_FALSE(link.relay().IsReleasable()) << "after answer " << i + 1;
  }
  link.FromServer(one + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, ExtendedMessagesWithoutSyncHoldTheServer) {
  Link link;
  link.FromClient(Parse("", "select 1") + Bind("") + Execute());
  EXPECT_TRUE(link.client().unsynced);
  link.FromServer(ParseComplete() + BindComplete() + Row("1") + Complete("SELECT 1"));
  EXPECT_FALSE(link.relay().IsReleasable());
  link.FromClient(Sync());
  EXPECT_FALSE(link.relay().IsReleasable());
  link.FromServer(Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, PipelineWithAnErrorMidwaySkipsToItsSyncAndGoesOn) {
  Link link(/*track_prepared=*/true);
  // Three transactions: the second fails at its Execute; its named statement never exists.
  const std::string first = Parse("a", "select 1") + Bind("a") + Execute() + Sync();
  const std::string second = Parse("b", "select x") + Bind("b") + Execute() + Sync();
  const std::string third = Parse("", "select 3") + Bind("") + Execute() + Sync();
  const std::string sent = link.FromClient(first + second + third);
  EXPECT_NE(sent.find("pgfleet_"), std::string::npos) << "named statements are renamed";
  link.FromServer(ParseComplete() + BindComplete() + Row("1") + Complete("SELECT 1") + Ready('I'));
  EXPECT_FALSE(link.relay().IsReleasable());
  // PostgreSQL answers the failing Parse with an error and skips Bind and Execute.
  EXPECT_EQ(link.FromServer(Error() + Ready('I')), Error() + Ready('I'));
  EXPECT_FALSE(link.relay().IsReleasable());
  const std::string third_answer =
      ParseComplete() + BindComplete() + Row("3") + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(third_answer), third_answer);
  EXPECT_TRUE(link.relay().IsReleasable());
  // The failed Parse left nothing on the server: a new Bind of "b" is refused, of "a" renamed.
  EXPECT_EQ(link.relay().statements().size(), 1u);
}

TEST(RelayTest, CopyFromStdinHoldsTheServerUntilTheClientEndsIt) {
  Link link;
  link.FromClient(Query("copy t from stdin"));
  link.FromServer(CopyInResponse());
  EXPECT_TRUE(link.client().in_copy_in);
  const std::string data = CopyData("1\n") + CopyData("2\n");
  EXPECT_EQ(link.FromClient(data), data);
  EXPECT_FALSE(link.relay().IsReleasable());
  link.FromClient(CopyDone());
  EXPECT_TRUE(link.verdict().copy_ended);
  EXPECT_FALSE(link.client().in_copy_in);
  link.FromServer(Complete("COPY 2") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, FailedCopyIsReleasedAtTheClientsCopyDone) {
  Link link;
  link.FromClient(Query("copy t from stdin"));
  link.FromServer(CopyInResponse());
  link.FromClient(CopyData("bad\n"));
  // PostgreSQL ends the COPY itself on bad data; the client has not finished sending.
  link.FromServer(Error("22P02") + Ready('I'));
  EXPECT_FALSE(link.relay().IsReleasable()) << "the client is still inside COPY";
  link.FromClient(CopyData("more\n") + CopyFail());
  EXPECT_TRUE(link.verdict().copy_ended);
  EXPECT_TRUE(link.relay().IsReleasable());
}

// libpq runs an extended-protocol COPY FROM STDIN as Parse/Bind/Execute/Sync, then CopyData,
// CopyDone and another Sync. PostgreSQL ignores the first Sync (it arrives in copy-in mode): the
// two Syncs get one ReadyForQuery, which must release the server.
TEST(RelayTest, ExtendedCopyFromStdinOwesOneReadyForQueryForItsTwoSyncs) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync());
    link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
    EXPECT_TRUE(link.client().in_copy_in);
    EXPECT_TRUE(link.relay().query_in_progress()) << "the COPY is running";
    link.FromClient(CopyData("1\n") + CopyDone());
    EXPECT_FALSE(link.client().in_copy_in);
    link.FromServer(Complete("COPY 1"));
    EXPECT_FALSE(link.relay().IsReleasable()) << "the server waits for a Sync after the COPY";
    EXPECT_TRUE(link.relay().query_in_progress());
    link.FromClient(Sync());
    EXPECT_EQ(link.FromServer(Ready('I')), Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
    EXPECT_FALSE(link.relay().query_in_progress());
  }
}

// The same inside a transaction (statement mode must not take it for a transaction left open),
// with a Sync sent during the COPY (ignored too) and the COPY failed by the client.
TEST(RelayTest, SyncsSentDuringCopyFromStdinAreOwedNothing) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Query("begin"));
    link.FromServer(Complete("BEGIN") + Ready('T'));
    link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync());
    link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
    link.FromClient(CopyData("1\n") + Sync() + Typed('H', "") + CopyFail() + Sync());
    EXPECT_FALSE(link.relay().TransactionLeftOpen());
    link.FromServer(Error("57014") + Ready('E'));
    EXPECT_FALSE(link.relay().query_in_progress());
    EXPECT_TRUE(link.relay().TransactionLeftOpen());
    link.FromClient(Query("rollback"));
    link.FromServer(Complete("ROLLBACK") + Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// A simple Query's COPY keeps its own ReadyForQuery; a Sync pipelined after it is ignored.
TEST(RelayTest, SyncAfterASimpleQueryCopyFromStdinIsIgnored) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Query("copy t from stdin") + Sync());
    link.FromServer(CopyInResponse());
    link.FromClient(CopyData("1\n") + CopyDone());
    link.FromServer(Complete("COPY 1") + Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// A client may pipeline past a COPY FROM STDIN before the CopyInResponse comes. Here it sends its
// CopyDone too: PostgreSQL ignores the batch's Sync (copy-in mode), ends the COPY at the CopyDone
// and reads what follows outside it, so the Query after it gets its ReadyForQuery, which also
// answers the COPY's batch. The client is not in COPY when the CopyInResponse arrives: nothing
// more is owed once the Query is answered.
TEST(RelayTest, CopyDonePipelinedBeforeTheCopyInResponseEndsTheCopy) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync() + CopyDone() +
                    Query("select 1"));
    link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
    EXPECT_FALSE(link.client().in_copy_in) << "the client sent its CopyDone already";
    link.FromServer(Complete("COPY 0"));
    EXPECT_FALSE(link.relay().IsReleasable());
    link.FromServer(Row("1") + Complete("SELECT 1") + Ready('I'));
    EXPECT_FALSE(link.relay().query_in_progress());
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// The same with a Sync after the CopyDone: the two Syncs get one ReadyForQuery.
TEST(RelayTest, SyncAfterAPipelinedCopyDoneAnswersTheCopysBatch) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync() +
                    CopyData("1\n") + CopyDone() + Sync());
    link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
    EXPECT_FALSE(link.client().in_copy_in);
    EXPECT_TRUE(link.relay().query_in_progress());
    link.FromServer(Complete("COPY 1") + Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// A simple Query's COPY fails on the first CopyData the client pipelined; PostgreSQL answers the
// Query (ErrorResponse, ReadyForQuery) and reads the batch after it outside the COPY: that batch's
// Sync is owed a ReadyForQuery (only Syncs right after the COPY's command are read in copy-in
// mode). The client, which has not ended its COPY, does that later (PostgreSQL drops the CopyDone).
TEST(RelayTest, SyncsAfterAMessageThatCannotBeInsideTheCopyAreOwedTheirAnswer) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Query("copy t from stdin") + CopyData("bad\n") + Parse("", "select 1") +
                    Bind("") + Execute() + Sync());
    link.FromServer(CopyInResponse());
    EXPECT_TRUE(link.client().in_copy_in);
    link.FromServer(Error("22P02") + Ready('I'));
    EXPECT_TRUE(link.relay().query_in_progress()) << "the batch's Sync is still owed";
    link.FromClient(CopyDone());
    EXPECT_FALSE(link.relay().IsReleasable());
    link.FromServer(ParseComplete() + BindComplete() + Row("1") + Complete("SELECT 1") +
                    Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// A Sync the client sends inside COPY FROM STDIN never reaches the server: PostgreSQL would ignore
// it while the COPY runs, and answer it only if the COPY had already failed.
TEST(RelayTest, SyncInsideASimpleCopyIsKeptFromTheServer) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Query("copy t from stdin"));
    link.FromServer(CopyInResponse());
    EXPECT_EQ(link.FromClient(CopyData("1\n") + Sync() + CopyData("2\n")),
              CopyData("1\n") + CopyData("2\n"));
    EXPECT_TRUE(link.client().in_copy_in);
    EXPECT_EQ(link.FromClient(CopyDone()), CopyDone());
    EXPECT_FALSE(link.relay().IsReleasable());
    link.FromServer(Complete("COPY 2"));
    EXPECT_FALSE(link.relay().IsReleasable());
    EXPECT_EQ(link.FromServer(Ready('I')), Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// Bad data fails the COPY at once (ErrorResponse, ReadyForQuery); PostgreSQL would answer a Sync
// that came after it. Kept from the server, it is owed nothing: the Query's ReadyForQuery releases
// the server, and nothing comes after it.
TEST(RelayTest, SyncAfterBadDataInASimpleCopyIsKeptFromTheServer) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Query("copy t from stdin"));
    link.FromServer(CopyInResponse());
    EXPECT_EQ(link.FromClient(CopyData("bad\n") + Sync() + CopyDone()),
              CopyData("bad\n") + CopyDone());
    EXPECT_EQ(link.FromServer(Error("22P02")), Error("22P02"));
    EXPECT_FALSE(link.relay().IsReleasable());
    EXPECT_EQ(link.FromServer(Ready('I')), Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
    EXPECT_FALSE(link.relay().query_in_progress());
  }
}

// libpq's extended COPY with a Sync inside it: kept from the server; the Sync after the CopyDone
// brings the batch's ReadyForQuery.
TEST(RelayTest, SyncInsideAnExtendedCopyIsKeptAndTheOneAfterItAnswersTheBatch) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    Link link(track_prepared);
    link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync());
    link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
    EXPECT_EQ(link.FromClient(CopyData("1\n") + Sync() + CopyDone()), CopyData("1\n") + CopyDone());
    link.FromServer(Complete("COPY 1"));
    EXPECT_FALSE(link.relay().IsReleasable()) << "the server waits for a Sync after the COPY";
    EXPECT_EQ(link.FromClient(Sync()), Sync());
    EXPECT_FALSE(link.relay().IsReleasable());
    EXPECT_EQ(link.FromServer(Ready('I')), Ready('I'));
    EXPECT_TRUE(link.relay().IsReleasable());
  }
}

// A Sync pipelined after CopyData before the CopyInResponse came was sent on: PostgreSQL ignores it
// if the COPY still runs when it reads it, and answers it if that data failed the COPY. The COPY's
// end tells: a CommandComplete says it was ignored; an error right after that data, answered.
TEST(RelayTest, SyncAfterCopyDataBeforeTheCopyInResponseIsOwedIfTheCopyFails) {
  for (const bool track_prepared : {false, true}) {
    SCOPED_TRACE(track_prepared ? "track_prepared" : "plain");
    {
      Link link(track_prepared);
      link.FromClient(Query("copy t from stdin") + CopyData("1\n") + Sync());
      link.FromServer(CopyInResponse());
      link.FromClient(CopyDone());
      link.FromServer(Complete("COPY 1") + Ready('I'));
      EXPECT_TRUE(link.relay().IsReleasable()) << "the COPY succeeded: the Sync was ignored";
    }
    {
      Link link(track_prepared);
      link.FromClient(Query("copy t from stdin") + CopyData("bad\n") + Sync());
      link.FromServer(CopyInResponse() + Error("22P02") + Ready('I'));
      link.FromClient(CopyDone());
      EXPECT_FALSE(link.relay().IsReleasable()) << "the Sync may be answered";
      EXPECT_EQ(link.FromServer(Ready('I')), Ready('I'));
      EXPECT_TRUE(link.relay().IsReleasable());
    }
  }
}

// COPY TO STDOUT ends by itself: the Syncs around it are answered as usual.
TEST(RelayTest, ExtendedCopyToStdoutAnswersEverySync) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("", "copy t to stdout") + Bind("") + Execute() + Sync() + Sync());
  link.FromServer(ParseComplete() + BindComplete() + CopyOutResponse() + CopyData("1\n") +
                  Typed('c', "") + Complete("COPY 1") + Ready('I'));
  EXPECT_FALSE(link.relay().IsReleasable());
  link.FromServer(Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, CopyOutStreamsThroughInPieces) {
  Link link;
  link.FromClient(Query("copy t to stdout"));
  const std::string big(100000, 'x');
  const std::string stream =
      CopyOutResponse() + CopyData(big) + Typed('c', "") + Complete("COPY 1") + Ready('I');
  std::string got;
  for (size_t pos = 0; pos < stream.size(); pos += 4096) {
    got += link.FromServer(std::string_view(stream).substr(pos, 4096));
    if (pos + 4096 < stream.size()) {
      EXPECT_FALSE(link.relay().IsReleasable());
    }
  }
  EXPECT_EQ(got, stream);
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, ClientInsideAMessageHoldsTheServer) {
  Link link;
  link.FromClient(Query("select 1"));
  link.FromServer(Complete("SELECT 1") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
  // A long message streams: its start goes out before the rest has arrived, and until it has,
  // the server cannot serve anyone else.
  const std::string bind =
      Typed('B', std::string("\0\0\0\0\0\x01", 6) + I32(8000) + std::string(8000, 'z') + I16(0));
  EXPECT_EQ(link.FromClient(bind.substr(0, 50)), bind.substr(0, 50));
  EXPECT_TRUE(link.client().mid_message());
  EXPECT_FALSE(link.relay().IsReleasable());
  EXPECT_EQ(link.FromClient(bind.substr(50)), bind.substr(50));
  EXPECT_FALSE(link.client().mid_message());
  EXPECT_FALSE(link.relay().IsReleasable()) << "a Bind without Sync";
}

TEST(RelayTest, ByteByByteFeedsGiveTheSameStreamsAsWholeChunks) {
  const std::string client = Parse("s", "select $1") + Bind("s") + Describe('S', "s") + Execute() +
                             Sync() + Query("select 2") + Close('S', "s") + Sync();
  const std::string server = ParseComplete() + BindComplete() + NoData() + Row("1") +
                             Complete("SELECT 1") + Ready('I') + Row("2") + Complete("SELECT 1") +
                             Ready('I') + Ready('I');
  Link whole(/*track_prepared=*/true);
  const std::string whole_to_server = whole.FromClient(client);
  // Everything the client got, stand-in answers and passed messages alike, in order.
  whole.FromServer(server);
  const std::string whole_to_client = whole.TakeClientAnswers();
  Link bytes(/*track_prepared=*/true);
  std::string to_server;
  for (char c : client) to_server += bytes.FromClient(std::string_view(&c, 1));
  for (char c : server) bytes.FromServer(std::string_view(&c, 1));
  EXPECT_EQ(to_server, whole_to_server);
  EXPECT_EQ(bytes.TakeClientAnswers(), whole_to_client);
  EXPECT_TRUE(whole.relay().IsReleasable());
  EXPECT_TRUE(bytes.relay().IsReleasable());
}

TEST(RelayTest, PreparedStatementsAreRenamedAndReParsedWhereMissing) {
  Link link(/*track_prepared=*/true);
  const std::string sent = link.FromClient(Parse("mine", "select 1") + Sync());
  ASSERT_EQ(link.registry().size(), 1u);
  EXPECT_EQ(sent, Parse(Renamed("select 1"), "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  EXPECT_EQ(link.TakeClientAnswers(), ParseComplete() + Ready('I'));

  // The same client on a server that lacks the statement: pgfleet parses it first, hidden.
  Link other(/*track_prepared=*/true, &link.client());
  const std::string to_new = other.FromClient(Bind("mine") + Execute() + Sync());
  EXPECT_EQ(to_new, Parse(Renamed("select 1"), "select 1") + Bind(Renamed("select 1")) + Execute() +
                        Sync());
  EXPECT_EQ(other.FromServer(ParseComplete() + BindComplete() + Row("1") + Complete("SELECT 1") +
                             Ready('I')),
            BindComplete() + Row("1") + Complete("SELECT 1") + Ready('I'))
      << "the hidden Parse's answer never reaches the client";
  EXPECT_TRUE(other.relay().IsReleasable());
}

TEST(RelayTest, ParseOfAStatementTheServerHasIsAnsweredByPgfleet) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("a", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  link.TakeClientAnswers();
  // The same query under another name: the server has it, nothing is sent for the Parse.
  EXPECT_EQ(link.FromClient(Parse("b", "select 1")), "");
  EXPECT_EQ(link.TakeClientAnswers(), ParseComplete());
  EXPECT_EQ(link.FromClient(Sync()), Sync());
  link.FromServer(Ready('I'));
  EXPECT_EQ(link.TakeClientAnswers(), Ready('I'));
  // Close is answered by pgfleet; the server keeps the statement for others.
  EXPECT_EQ(link.FromClient(Close('S', "a") + Sync()), Sync());
  link.FromServer(Ready('I'));
  EXPECT_EQ(link.TakeClientAnswers(), CloseComplete() + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
  EXPECT_TRUE(link.client().statements.contains("b"));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, EvictionClosesTheLeastRecentlyUsedStatementHidden) {
  Link link(/*track_prepared=*/true);  // max_prepared_statements = 2
  link.FromClient(Parse("a", "select 1") + Parse("b", "select 2") + Sync());
  link.FromServer(ParseComplete() + ParseComplete() + Ready('I'));
  const std::string sent = link.FromClient(Parse("c", "select 3") + Sync());
  EXPECT_EQ(sent,
            Close('S', Renamed("select 1")) + Parse(Renamed("select 3"), "select 3") + Sync());
  link.TakeClientAnswers();
  EXPECT_EQ(link.FromServer(CloseComplete() + ParseComplete() + Ready('I')),
            ParseComplete() + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// An error earlier in the batch makes PostgreSQL skip the eviction Close: the statement stays on
// the server, and pgfleet must not Parse it again (42P05).
TEST(RelayTest, EvictionCloseSkippedAfterAnErrorLeavesTheStatementOnTheServer) {
  Link link(/*track_prepared=*/true);  // max_prepared_statements = 2
  link.FromClient(Parse("a", "select 1") + Parse("b", "begin") + Sync());
  link.FromServer(ParseComplete() + ParseComplete() + Ready('I'));
  EXPECT_EQ(link.FromClient(Describe('P', "p") + Parse("c", "rollback") + Sync()),
            Describe('P', "p") + Close('S', Renamed("select 1")) +
                Parse(Renamed("rollback"), "rollback") + Sync());
  link.FromServer(Error("34000") + Ready('I'));  // the Close and the Parse were skipped
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.relay().statements().size(), 2u);
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + Sync());
  link.FromServer(BindComplete() + Complete("SELECT 1") + Ready('I'));
  // The cache still holds max_prepared_statements: "begin" is the least recently used.
  EXPECT_EQ(link.FromClient(Parse("d", "select 4") + Sync()),
            Close('S', Renamed("begin")) + Parse(Renamed("select 4"), "select 4") + Sync());
}

// In one skipped batch, a statement's first mention says what the server has: "select 1" evicted
// and then re-parsed for a Bind is still there; "rollback", parsed and then evicted, is not.
TEST(RelayTest, SkippedBatchLeavesEachStatementAsItsFirstMentionFoundIt) {
  Link link(/*track_prepared=*/true);  // max_prepared_statements = 2
  link.FromClient(Parse("a", "select 1") + Parse("b", "begin") + Sync());
  link.FromServer(ParseComplete() + ParseComplete() + Ready('I'));
  link.FromClient(Describe('P', "p") + Parse("c", "rollback") + Bind("a") + Parse("d", "select 4") +
                  Sync());
  link.FromServer(Error("34000") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.relay().statements().size(), 2u);
  EXPECT_EQ(link.FromClient(Bind("a") + Bind("b") + Sync()),
            Bind(Renamed("select 1")) + Bind(Renamed("begin")) + Sync());
  link.FromServer(BindComplete() + BindComplete() + Ready('I'));
  // "c" was never prepared (its Parse was skipped): preparing it again sends "rollback" again.
  EXPECT_EQ(link.FromClient(Parse("c", "rollback") + Bind("c") + Sync()),
            Close('S', Renamed("select 1")) + Parse(Renamed("rollback"), "rollback") +
                Bind(Renamed("rollback")) + Sync());
}

// A later batch sent before the failed one's answer came re-parses the evicted statement: the
// server refuses with 42P05 (it still has it), once; then pgfleet knows it is there.
TEST(RelayTest, ReParseRacingASkippedEvictionCloseFailsOnceThenTheStatementIsKnown) {
  Link link(/*track_prepared=*/true);  // max_prepared_statements = 2
  link.FromClient(Parse("a", "select 1") + Parse("b", "begin") + Sync());
  link.FromServer(ParseComplete() + ParseComplete() + Ready('I'));
  link.FromClient(Describe('P', "p") + Parse("c", "rollback") + Sync());
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Sync()),
            Close('S', Renamed("begin")) + Parse(Renamed("select 1"), "select 1") +
                Bind(Renamed("select 1")) + Execute() + Sync());
  link.FromServer(Error("34000") + Ready('I'));
  link.FromServer(CloseComplete() + Error("42P05") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + Sync());
}

// The same race, with the later batch skipped too (an error before its re-Parse): the statement
// was on the server all along, and stays known there.
TEST(RelayTest, ReParseSkippedAfterASkippedEvictionCloseLeavesTheStatementKnown) {
  Link link(/*track_prepared=*/true);  // max_prepared_statements = 2
  link.FromClient(Parse("a", "select 1") + Parse("b", "begin") + Sync());
  link.FromServer(ParseComplete() + ParseComplete() + Ready('I'));
  link.FromClient(Describe('P', "p") + Parse("c", "rollback") + Sync());
  EXPECT_EQ(link.FromClient(Describe('P', "p") + Bind("a") + Execute() + Sync()),
            Describe('P', "p") + Close('S', Renamed("begin")) +
                Parse(Renamed("select 1"), "select 1") + Bind(Renamed("select 1")) + Execute() +
                Sync());
  link.FromServer(Error("34000") + Ready('I') + Error("34000") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + Sync());
}

TEST(RelayTest, EvictionFollowsUseNotPreparationOrder) {
  Link link(/*track_prepared=*/true);  // max_prepared_statements = 2
  link.FromClient(Parse("a", "select 1") + Parse("b", "select 2") + Sync());
  link.FromServer(ParseComplete() + ParseComplete() + Ready('I'));
  // Using "a" makes "b" the least recently used.
  link.FromClient(Bind("a") + Execute() + Sync());
  link.FromServer(BindComplete() + Complete("SELECT 1") + Ready('I'));
  EXPECT_EQ(link.FromClient(Parse("c", "select 3") + Sync()),
            Close('S', Renamed("select 2")) + Parse(Renamed("select 3"), "select 3") + Sync());
}

TEST(RelayTest, StatementEveryClientDroppedIsNotReParsedWhileTheServerHasIt) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("a", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  EXPECT_EQ(link.FromClient(Close('S', "a") + Sync()), Sync());
  link.FromServer(Ready('I'));
  link.TakeClientAnswers();
  EXPECT_TRUE(link.client().statements.empty());
  link.relay().Unlink();

  // Another client prepares the same statement on the same server. The server still has the name
  // (no Close was sent), so a Parse of it would fail with 42P05; pgfleet answers it instead.
  ClientStream other(1u << 30, 1);
  link.relay().Link(&other);
  EXPECT_EQ(link.FromClient(Parse("mine", "select 1") + Bind("mine") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + Sync());
  EXPECT_EQ(link.TakeClientAnswers(), ParseComplete());
  const std::string answer = BindComplete() + Row("1") + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(answer), answer);
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayTest, ServerMovedFromAnotherWorkerKeepsItsStatements) {
  Link from(/*track_prepared=*/true);
  from.FromClient(Parse("a", "select 1") + Parse("b", "select 2") + Sync());
  from.FromServer(ParseComplete() + ParseComplete() + Ready('I'));

  // The receiving worker has its own registry: it interns what the server has and adopts it.
  Link to(/*track_prepared=*/true);
  for (const StatementPtr& statement : from.relay().statements().InLruOrder()) {
    to.relay().statements().Adopt(to.registry().Intern(statement->parse_tail));
  }
  EXPECT_EQ(to.FromClient(Parse("x", "select 2") + Bind("x") + Execute() + Sync()),
            Bind(Renamed("select 2")) + Execute() + Sync());
  EXPECT_EQ(to.TakeClientAnswers(), ParseComplete());
  to.FromServer(BindComplete() + Complete("SELECT 1") + Ready('I'));
  // The adopted LRU order holds: "select 1" is the oldest and goes first.
  EXPECT_EQ(to.FromClient(Parse("y", "select 3") + Sync()),
            Close('S', Renamed("select 1")) + Parse(Renamed("select 3"), "select 3") + Sync());
}

// The ErrorResponse pgfleet sends in PostgreSQL's words.
std::string ClientError(std::string_view sqlstate, std::string_view message) {
  return Build([&](StringSink& s) { protocol::BuildErrorResponse(s, "ERROR", sqlstate, message); });
}
std::string MissingBind(std::string_view portal = "") {
  return Bind(kMissingStatementName, portal);
}

// PostgreSQL answers a Bind or Describe of a statement the session lacks with ERROR 26000, skips
// to the Sync and goes on; so does pgfleet. The server is sent a Bind that fails there, so that
// it skips the rest of the batch too and its Sync rolls back what the batch did.
TEST(RelayTest, UnknownStatementNamesAreErrorsAndTheSessionGoesOn) {
  Link link(/*track_prepared=*/true);
  EXPECT_EQ(link.FromClient(Bind("nope") + Execute() + Sync()), MissingBind() + Execute() + Sync());
  EXPECT_EQ(link.verdict().kind, FrontendVerdict::Kind::kContinue);
  EXPECT_EQ(link.TakeClientAnswers(), "");
  EXPECT_EQ(link.FromServer(Error("26000") + Ready('I')),
            ClientError("26000", "prepared statement \"nope\" does not exist") + Ready('I'));
  EXPECT_EQ(link.observer().errors, std::vector<std::string>{"26000"});
  EXPECT_TRUE(link.relay().IsReleasable());

  EXPECT_EQ(link.FromClient(Describe('S', "nope") + Sync()),
            Describe('S', kMissingStatementName) + Sync());
  EXPECT_EQ(link.FromServer(Error("26000") + Ready('I')),
            ClientError("26000", "prepared statement \"nope\" does not exist") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());

  // The session goes on.
  link.FromClient(Parse("a", "select 1") + Bind("a") + Execute() + Sync());
  const std::string answer = ParseComplete() + BindComplete() + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(answer), answer);
  EXPECT_TRUE(link.relay().IsReleasable());
}

// An error earlier in the batch is the only one: the server skipped the failing Bind, and pgfleet
// reports nothing for it.
TEST(RelayTest, UnknownStatementAfterAnEarlierErrorInTheBatchReportsOnlyTheFirst) {
  Link link(/*track_prepared=*/true);
  EXPECT_EQ(link.FromClient(Bind("", "") + Execute() + Bind("nope") + Execute() + Sync()),
            Bind("", "") + Execute() + MissingBind() + Execute() + Sync());
  EXPECT_EQ(link.FromServer(Error("26000") + Ready('I')), Error("26000") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// Re-preparing a name for another query: ERROR 42P05, in its turn, after the answers before it.
TEST(RelayTest, ReusingANameForAnotherQueryIsAnError) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("a", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  EXPECT_EQ(link.FromClient(Parse("b", "select 2") + Parse("a", "select 3") + Bind("a") + Sync()),
            Parse(Renamed("select 2"), "select 2") + Describe('S', kMissingStatementName) +
                Bind(Renamed("select 1")) + Sync());
  EXPECT_EQ(link.verdict().kind, FrontendVerdict::Kind::kContinue);
  EXPECT_EQ(link.FromServer(ParseComplete() + Error("26000") + Ready('I')),
            ParseComplete() + ClientError("42P05", "prepared statement \"a\" already exists") +
                Ready('I'));
  EXPECT_EQ(link.observer().errors, std::vector<std::string>{"42P05"});
  EXPECT_TRUE(link.relay().IsReleasable());
  // "a" still names its first query.
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + Sync());
}

// A Parse that fails (or is skipped after an error) gives the client no name, as in PostgreSQL:
// the name can be prepared again, for another query.
TEST(RelayTest, AFailedParseLeavesItsNameFree) {
  Link link(/*track_prepared=*/true);
  EXPECT_EQ(link.FromClient(Parse("a", "selec 1") + Sync()),
            Parse(Renamed("selec 1"), "selec 1") + Sync());
  EXPECT_EQ(link.FromServer(Error("42601") + Ready('I')), Error("42601") + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
  EXPECT_EQ(link.FromClient(Parse("a", "select 1") + Sync()),
            Parse(Renamed("select 1"), "select 1") + Sync());
  EXPECT_EQ(link.FromServer(ParseComplete() + Ready('I')), ParseComplete() + Ready('I'));
  EXPECT_TRUE(link.client().statements.contains("a"));

  // Skipped after an earlier error in its batch: not given either.
  link.FromClient(Describe('P', "p") + Parse("b", "select 2") + Sync());
  link.FromServer(Error("34000") + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("b"));
  // A name that was given before keeps it when a re-Parse of the same query is skipped.
  link.FromClient(Describe('P', "p") + Parse("a", "select 1") + Sync());
  link.FromServer(Error("34000") + Ready('I'));
  EXPECT_TRUE(link.client().statements.contains("a"));
}

// A batch pipelined behind one whose Parse of the same name has not been answered: whether the
// name is free depends on that answer, so the relay waits for it (Relay::client_waits) and then
// judges the Parse as PostgreSQL does. Here the first failed: the name is free, the same query
// fails again.
TEST(RelayTest, ParseOfANameAnEarlierBatchInFlightGivesWaitsForItsAnswer) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("a", "selec 1") + Sync());
  EXPECT_EQ(link.FromClient(Parse("a", "selec 1") + Sync()), "");
  EXPECT_TRUE(link.relay().client_waits());
  EXPECT_EQ(link.FromServer(Error("42601") + Ready('I')), Error("42601") + Ready('I'));
  EXPECT_FALSE(link.relay().client_waits());
  EXPECT_EQ(link.TakeResumedToServer(), Parse(Renamed("selec 1"), "selec 1") + Sync());
  EXPECT_EQ(link.FromServer(Error("42601") + Ready('I')), Error("42601") + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// The issue-19 case: a failed Parse, then (after its Sync, in the same write) the name for the
// fixed query. PostgreSQL answers ParseComplete: the name was free. Not 42P05.
TEST(RelayTest, ReParseOfANameWhoseParseFailedInAnEarlierBatchInFlightSucceeds) {
  Link link(/*track_prepared=*/true);
  EXPECT_EQ(link.FromClient(Parse("a", "selec 1") + Sync() + Parse("a", "select 1") + Bind("a") +
                            Execute() + Sync()),
            Parse(Renamed("selec 1"), "selec 1") + Sync());
  EXPECT_EQ(link.FromServer(Error("42601") + Ready('I')), Error("42601") + Ready('I'));
  EXPECT_EQ(link.TakeResumedToServer(), Parse(Renamed("select 1"), "select 1") +
                                            Bind(Renamed("select 1")) + Execute() + Sync());
  const std::string answer = ParseComplete() + BindComplete() + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(answer), answer);
  ASSERT_TRUE(link.client().statements.contains("a"));
  EXPECT_EQ(link.client().statements.at("a")->server_name, Renamed("select 1"));

  // Had the first succeeded, the second is PostgreSQL's 42P05, in its turn.
  link.FromClient(Parse("b", "select 2") + Sync() + Parse("b", "select 3") + Sync());
  EXPECT_TRUE(link.relay().client_waits());
  EXPECT_EQ(link.FromServer(ParseComplete() + Ready('I')), ParseComplete() + Ready('I'));
  EXPECT_EQ(link.TakeResumedToServer(), Describe('S', kMissingStatementName) + Sync());
  EXPECT_EQ(link.FromServer(Error("26000") + Ready('I')),
            ClientError("42P05", "prepared statement \"b\" already exists") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// In one batch PostgreSQL judges a Parse by the messages before it: no waiting there.
TEST(RelayTest, ReParseInTheSameBatchIsJudgedAtOnce) {
  Link link(/*track_prepared=*/true);
  EXPECT_EQ(link.FromClient(Parse("a", "selec 1") + Parse("a", "select 1") + Sync()),
            Parse(Renamed("selec 1"), "selec 1") + Describe('S', kMissingStatementName) + Sync());
  EXPECT_FALSE(link.relay().client_waits());
  EXPECT_EQ(link.FromServer(Error("42601") + Ready('I')), Error("42601") + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
}

TEST(RelayTest, MalformedFramesAreProtocolViolations) {
  Link link;
  link.FromClient(std::string("Q\0\0\0\x02", 5));
  EXPECT_EQ(link.verdict().kind, FrontendVerdict::Kind::kReject);
  EXPECT_EQ(link.verdict().sqlstate, protocol::sqlstate::kProtocolViolation);
  EXPECT_TRUE(link.verdict().protocol_error);

  Link unknown;
  unknown.FromClient(Typed('Z', "I"));
  EXPECT_EQ(unknown.verdict().kind, FrontendVerdict::Kind::kReject);
  EXPECT_TRUE(unknown.verdict().protocol_error);
}

TEST(RelayTest, TerminateStopsTheStreamBeforeIt) {
  Link link;
  EXPECT_EQ(link.FromClient(Query("select 1") + Terminate()), Query("select 1"));
  EXPECT_EQ(link.verdict().kind, FrontendVerdict::Kind::kTerminate);
}

TEST(RelayTest, HiddenQueriesNeverReachTheClient) {
  Link link;
  StringSink to_server;
  link.relay().AddHiddenQuery(to_server, "SET search_path='a'");
  EXPECT_EQ(to_server.bytes(), Query("SET search_path='a'"));
  EXPECT_FALSE(link.relay().IsReleasable());
  EXPECT_EQ(link.FromServer(ParamStatus("search_path", "a") + Complete("SET") + Ready('I')), "");
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_TRUE(link.relay().params().IsSet(5)) << "the server's value is tracked";
  EXPECT_FALSE(link.client().params.IsSet(5)) << "a hidden SET is not the client's wish";
  // The client's own SET is.
  link.FromClient(Query("set search_path=b"));
  EXPECT_EQ(link.FromServer(ParamStatus("search_path", "b") + Complete("SET") + Ready('I')),
            ParamStatus("search_path", "b") + Complete("SET") + Ready('I'));
  EXPECT_EQ(link.client().params.Get(5), "b");
  // A failed hidden query is reported, never shown.
  link.relay().AddHiddenQuery(to_server, "SET x=1");
  EXPECT_EQ(link.FromServer(Error() + Ready('I')), "");
  EXPECT_EQ(link.observer().hidden_failures, 1);
}

TEST(RelayTest, UnlinkedServerOutputGoesNowhere) {
  Link link;
  link.FromClient(Query("select pg_sleep(1)"));
  link.relay().Unlink();
  EXPECT_EQ(link.FromServer(Row("1") + Complete("SELECT 1") + Ready('I')), "");
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.observer().answered, 0);
}

TEST(RelayTest, DiscardAllForgetsEveryPreparedStatement) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("a", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  link.FromClient(Query("discard all"));
  link.FromServer(Complete("DISCARD ALL") + Ready('I'));
  EXPECT_TRUE(link.client().statements.empty());
  EXPECT_EQ(link.relay().statements().size(), 0u);
}

TEST(RelayTest, IdleDeallocateOfARenamedStatementIsAnsweredLocally) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("_pg3_0", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  ClientStream& client = link.client();
  StringSink answer;
  const std::string simple = Query("DEALLOCATE _pg3_0");
  EXPECT_EQ(Relay::AnswerIdleDeallocate(client, AsBytes(simple), answer), simple.size());
  EXPECT_EQ(answer.bytes(), Complete("DEALLOCATE") + Ready('I'));
  EXPECT_TRUE(client.statements.empty());
  // In lower case and after spaces too (the first byte decides nothing else).
  for (const char* sql : {"deallocate _pg3_1", "  DEALLOCATE PREPARE _pg3_1"}) {
    link.FromClient(Parse("_pg3_1", "select 1") + Sync());
    link.FromServer(ParseComplete() + Ready('I'));
    StringSink again;
    const std::string text = Query(sql);
    EXPECT_EQ(Relay::AnswerIdleDeallocate(client, AsBytes(text), again), text.size()) << sql;
  }
  // Not one of ours, or not a DEALLOCATE: the server answers.
  StringSink none;
  EXPECT_EQ(Relay::AnswerIdleDeallocate(client, AsBytes(simple), none), 0u);
  EXPECT_EQ(Relay::AnswerIdleDeallocate(client, AsBytes(Query("select 1")), none), 0u);
  EXPECT_TRUE(none.bytes().empty());

  // psycopg's extended form.
  link.FromClient(Parse("_pg3_1", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  const std::string extended =
      Parse("", "DEALLOCATE _pg3_1") + Bind("") + Describe('P', "") + Execute() + Sync();
  StringSink extended_answer;
  EXPECT_EQ(Relay::AnswerIdleDeallocate(client, AsBytes(extended), extended_answer),
            extended.size());
  EXPECT_EQ(extended_answer.bytes(),
            ParseComplete() + BindComplete() + NoData() + Complete("DEALLOCATE") + Ready('I'));
}

}  // namespace relay_test
}  // namespace pgfleet::pool::relay_testing
