// The relay and a client's DEALLOCATE or Close of a statement pgfleet renamed, where they come
// behind other messages (a pipeline, or a transaction whose server is busy): they act on the
// client's names in stream order, their answers come in their turn, and what PostgreSQL would
// skip or fail leaves the name as it was.
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "pooler/relay/relay.h"
#include "tests/unit/relay/relay_test_link.h"

namespace pgfleet::pool::relay_testing {
namespace {

std::string StandInQuery() { return Query(kDeallocateStandIn); }
std::string StandInParse() { return Parse("", kDeallocateStandIn); }
// psycopg's DEALLOCATE in a pipeline (libpq before 17): PQsendQueryParams, no Sync.
std::string ExtendedDeallocate(std::string_view name) {
  return Parse("", std::string("DEALLOCATE ") + std::string(name)) + Bind("") + Describe('P', "") +
         Execute();
}
std::string ClientError(std::string_view sqlstate, std::string_view message) {
  return Build([&](StringSink& s) { protocol::BuildErrorResponse(s, "ERROR", sqlstate, message); });
}

// A client that prepared "a" (select 1) on this server.
void Prepare(Link& link, std::string_view name = "a", std::string_view sql = "select 1") {
  link.FromClient(Parse(name, sql) + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  link.TakeClientAnswers();
}

TEST(RelayDeallocateTest, SimpleDeallocateBehindABusyServerRunsTheStandInAnsweredAsDeallocate) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  EXPECT_EQ(link.FromClient(Query("begin") + Query("select 2") + Query("DEALLOCATE a")),
            Query("begin") + Query("select 2") + StandInQuery());
  EXPECT_FALSE(link.client().statements.contains("a")) << "gone at its place in the stream";
  EXPECT_EQ(link.FromServer(Complete("BEGIN") + Ready('T') + Row("2") + Complete("SELECT 1") +
                            Ready('T') + Complete(kDeallocateStandInTag) + Ready('T')),
            Complete("BEGIN") + Ready('T') + Row("2") + Complete("SELECT 1") + Ready('T') +
                Complete("DEALLOCATE") + Ready('T'));
  EXPECT_EQ(link.TakeClientAnswers(), Complete("BEGIN") + Ready('T') + Row("2") +
                                          Complete("SELECT 1") + Ready('T') +
                                          Complete("DEALLOCATE") + Ready('T'));
  EXPECT_FALSE(link.client().statements.contains("a"));
  // The server keeps its copy for the cache to decide.
  EXPECT_EQ(link.relay().statements().size(), 1u);
  link.FromClient(Query("commit"));
  link.FromServer(Complete("COMMIT") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayDeallocateTest, ExtendedDeallocateInAPipelineIsAnsweredInItsTurn) {
  Link link(/*track_prepared=*/true);
  Prepare(link, "_pg3_0");
  // psycopg's pipeline: an Execute of the statement, its DEALLOCATE, another query, one Sync.
  EXPECT_EQ(link.FromClient(Bind("_pg3_0") + Execute() + ExtendedDeallocate("_pg3_0") +
                            Parse("", "select 3") + Bind("") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + StandInParse() + Bind("") + Describe('P', "") +
                Execute() + Parse("", "select 3") + Bind("") + Execute() + Sync());
  EXPECT_EQ(link.TakeClientAnswers(), "");
  const std::string before = BindComplete() + Row("1") + Complete("SELECT 1");
  const std::string after =
      ParseComplete() + BindComplete() + Row("3") + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(before + ParseComplete() + BindComplete() + NoData() +
                            Complete(kDeallocateStandInTag) + after),
            before + ParseComplete() + BindComplete() + NoData() + Complete("DEALLOCATE") + after);
  EXPECT_FALSE(link.client().statements.contains("_pg3_0"));
  EXPECT_TRUE(link.relay().IsReleasable());
  // The name is free for another query.
  EXPECT_EQ(link.FromClient(Parse("_pg3_0", "select 4") + Sync()),
            Parse(Renamed("select 4"), "select 4") + Sync());
}

TEST(RelayDeallocateTest, ByteByByteFeedsGiveTheSameStreams) {
  const std::string client =
      Query("select 2") + Query("DEALLOCATE a") + ExtendedDeallocate("b") + Sync();
  const std::string server =
      Row("2") + Complete("SELECT 1") + Ready('I') + Complete(kDeallocateStandInTag) + Ready('I') +
      ParseComplete() + BindComplete() + NoData() + Complete(kDeallocateStandInTag) + Ready('I');
  Link whole(/*track_prepared=*/true);
  Prepare(whole, "a");
  Prepare(whole, "b", "select 2");
  const std::string whole_to_server = whole.FromClient(client);
  const std::string whole_to_client = whole.FromServer(server);
  Link bytes(/*track_prepared=*/true);
  Prepare(bytes, "a");
  Prepare(bytes, "b", "select 2");
  std::string to_server;
  for (char c : client) to_server += bytes.FromClient(std::string_view(&c, 1));
  std::string to_client;
  for (char c : server) to_client += bytes.FromServer(std::string_view(&c, 1));
  EXPECT_EQ(to_server, whole_to_server);
  EXPECT_EQ(to_client, whole_to_client);
  EXPECT_EQ(to_client, Row("2") + Complete("SELECT 1") + Ready('I') + Complete("DEALLOCATE") +
                           Ready('I') + ParseComplete() + BindComplete() + NoData() +
                           Complete("DEALLOCATE") + Ready('I'));
  EXPECT_TRUE(bytes.client().statements.empty());
  EXPECT_TRUE(bytes.relay().IsReleasable());
}

// PostgreSQL skips a DEALLOCATE after an error in its batch: the statement keeps its name.
TEST(RelayDeallocateTest, DeallocateSkippedAfterAnErrorKeepsTheName) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  link.FromClient(Describe('P', "p") + ExtendedDeallocate("a") + Sync());
  EXPECT_FALSE(link.client().statements.contains("a"));
  EXPECT_EQ(link.FromServer(Error("34000") + Ready('I')), Error("34000") + Ready('I'));
  EXPECT_TRUE(link.client().statements.contains("a"));
  EXPECT_TRUE(link.relay().IsReleasable());
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Sync()),
            Bind(Renamed("select 1")) + Execute() + Sync());
}

// DEALLOCATE is not transactional: an error after it in its batch leaves the name gone.
TEST(RelayDeallocateTest, ErrorAfterADeallocateInItsBatchLeavesTheNameGone) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  link.FromClient(ExtendedDeallocate("a") + Describe('P', "nope") + Sync());
  EXPECT_EQ(link.FromServer(ParseComplete() + BindComplete() + NoData() +
                            Complete(kDeallocateStandInTag) + Error("34000") + Ready('I')),
            ParseComplete() + BindComplete() + NoData() + Complete("DEALLOCATE") + Error("34000") +
                Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// In a failed transaction DEALLOCATE fails (25P02), and so does the stand-in in its place.
TEST(RelayDeallocateTest, DeallocateInAFailedTransactionFailsAndKeepsTheName) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  link.FromClient(Query("begin") + Query("select bad") + Query("DEALLOCATE a"));
  EXPECT_EQ(
      link.FromServer(Complete("BEGIN") + Ready('T') + Error("42703") + Ready('E') +
                      Error("25P02") + Ready('E')),
      Complete("BEGIN") + Ready('T') + Error("42703") + Ready('E') + Error("25P02") + Ready('E'));
  EXPECT_TRUE(link.client().statements.contains("a"));
  // The same, extended: the stand-in's Parse fails.
  link.FromClient(ExtendedDeallocate("a") + Sync());
  EXPECT_EQ(link.FromServer(Error("25P02") + Ready('E')), Error("25P02") + Ready('E'));
  EXPECT_TRUE(link.client().statements.contains("a"));
  link.FromClient(Query("rollback"));
  link.FromServer(Complete("ROLLBACK") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// A Close skipped after an error in its batch gets no CloseComplete and takes no name away.
TEST(RelayDeallocateTest, CloseSkippedAfterAnErrorKeepsTheName) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  EXPECT_EQ(link.FromClient(Describe('P', "p") + Close('S', "a") + Sync()),
            Describe('P', "p") + Sync());
  EXPECT_EQ(link.TakeClientAnswers(), "");
  EXPECT_EQ(link.FromServer(Error("34000") + Ready('I')), Error("34000") + Ready('I'));
  EXPECT_TRUE(link.client().statements.contains("a"));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// Undone last first: a Close then a re-Parse of the name for another query, both skipped, leave
// the name to its first query; a Parse then a Close of a new name leave it free.
TEST(RelayDeallocateTest, SkippedCloseAndReParseLeaveTheNameAsBefore) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  link.FromClient(Describe('P', "p") + Close('S', "a") + Parse("a", "select 2") +
                  Parse("n", "select 3") + Close('S', "n") + Sync());
  EXPECT_EQ(link.client().statements.count("a"), 1u);
  link.FromServer(Error("34000") + Ready('I'));
  ASSERT_TRUE(link.client().statements.contains("a"));
  EXPECT_EQ(link.client().statements.at("a")->server_name, Renamed("select 1"));
  EXPECT_FALSE(link.client().statements.contains("n"));
  EXPECT_TRUE(link.relay().IsReleasable());
}

TEST(RelayDeallocateTest, CloseInAPipelineIsAnsweredAfterTheAnswersBeforeIt) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  EXPECT_EQ(link.FromClient(Bind("a") + Execute() + Close('S', "a") + Bind("a") + Sync()),
            Bind(Renamed("select 1")) + Execute() + Bind(kMissingStatementName) + Sync());
  EXPECT_EQ(link.TakeClientAnswers(), "");
  EXPECT_EQ(link.FromServer(BindComplete() + Complete("SELECT 1") + Error("26000") + Ready('I')),
            BindComplete() + Complete("SELECT 1") + CloseComplete() +
                ClientError("26000", "prepared statement \"a\" does not exist") + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// A DEALLOCATE parsed but executed only after the client closed the name: PostgreSQL's ERROR.
TEST(RelayDeallocateTest, DeallocateOfANameClosedInBetweenFails) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  EXPECT_EQ(
      link.FromClient(Parse("", "DEALLOCATE a") + Bind("") + Close('S', "a") + Execute() + Sync()),
      StandInParse() + Bind("") + Describe('S', kMissingStatementName) + Sync());
  EXPECT_EQ(link.FromServer(ParseComplete() + BindComplete() + Error("26000") + Ready('I')),
            ParseComplete() + BindComplete() + CloseComplete() +
                ClientError("26000", "prepared statement \"a\" does not exist") + Ready('I'));
  EXPECT_TRUE(link.relay().IsReleasable());
}

// Only an Execute makes DEALLOCATE happen: a Parse of it alone, or a portal of it replaced by
// another Bind, leaves the name.
TEST(RelayDeallocateTest, DeallocateNotExecutedLeavesTheName) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  EXPECT_EQ(link.FromClient(Parse("", "DEALLOCATE a") + Bind("") + Parse("", "select 5") +
                            Bind("") + Execute() + Sync()),
            StandInParse() + Bind("") + Parse("", "select 5") + Bind("") + Execute() + Sync());
  const std::string answer = ParseComplete() + BindComplete() + ParseComplete() + BindComplete() +
                             Row("5") + Complete("SELECT 1") + Ready('I');
  EXPECT_EQ(link.FromServer(answer), answer);
  EXPECT_TRUE(link.client().statements.contains("a"));
  // A named portal of it runs it.
  EXPECT_EQ(
      link.FromClient(Parse("", "DEALLOCATE a") + Bind("", "q") +
                      Build([](StringSink& s) { protocol::BuildExecute(s, "q", 0); }) + Sync()),
      StandInParse() + Bind("", "q") +
          Build([](StringSink& s) { protocol::BuildExecute(s, "q", 0); }) + Sync());
  EXPECT_EQ(link.FromServer(ParseComplete() + BindComplete() + Complete(kDeallocateStandInTag) +
                            Ready('I')),
            ParseComplete() + BindComplete() + Complete("DEALLOCATE") + Ready('I'));
  EXPECT_FALSE(link.client().statements.contains("a"));
}

// DEALLOCATE of a name pgfleet does not rename for this client (SQL PREPARE, or nothing) is the
// server's, unchanged.
TEST(RelayDeallocateTest, OtherDeallocatesReachTheServerUnchanged) {
  Link link(/*track_prepared=*/true);
  Prepare(link);
  for (const std::string& message :
       {Query("DEALLOCATE b"), Query("DEALLOCATE ALL"), Query("select 1; DEALLOCATE a"),
        ExtendedDeallocate("b") + Sync()}) {
    EXPECT_EQ(link.FromClient(message), message);
  }
  EXPECT_TRUE(link.client().statements.contains("a"));
}

}  // namespace
}  // namespace pgfleet::pool::relay_testing
