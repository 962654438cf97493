// The relay when its client went away mid-query: how the server's unfinished work is ended and
// when the server is clean again.
#include <string>

#include "gtest/gtest.h"
#include "pooler/relay/relay.h"
#include "tests/unit/relay/relay_test_link.h"

namespace pgfleet::pool::relay_testing {
namespace {

using DrainStep = Relay::DrainStep;

// Abandons the link's client; returns what the server is sent.
std::string Abandon(Link& link, bool* reusable = nullptr) {
  StringSink to_server;
  const bool ok = link.relay().Abandon(absl::UnixEpoch(), to_server);
  if (reusable != nullptr) *reusable = ok;
  EXPECT_EQ(link.relay().client(), nullptr);
  return to_server.bytes();
}
std::string CopyFailed() {
  return Build([](StringSink& s) { protocol::BuildCopyFail(s, "client disconnected"); });
}
std::string FailedBatchEnd() { return Close('P', "") + Execute() + Sync(); }

TEST(RelayAbandonTest, RunningQueryIsDrainedWithoutReachingAnyone) {
  Link link;
  link.FromClient(Query("select pg_sleep(30)"));
  bool reusable = false;
  EXPECT_EQ(Abandon(link, &reusable), "");
  EXPECT_TRUE(reusable);
  EXPECT_TRUE(link.relay().query_in_progress());
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kWait);
  // The cancel lands: PostgreSQL's answer goes nowhere.
  EXPECT_EQ(link.FromServer(Error("57014") + Ready('I')), "");
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

TEST(RelayAbandonTest, OpenTransactionIsRolledBackBeforeTheServerIsClean) {
  Link link;
  link.FromClient(Query("begin"));
  link.FromServer(Complete("BEGIN") + Ready('T'));
  link.FromClient(Query("update t set x = 1"));
  EXPECT_EQ(Abandon(link), "");
  link.FromServer(Complete("UPDATE 1") + Ready('T'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kRollBack);
  StringSink rollback;
  link.relay().AddHiddenQuery(rollback, "ROLLBACK");
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kWait);
  link.FromServer(Complete("ROLLBACK") + Ready('I'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

TEST(RelayAbandonTest, IdleInTransactionNeedsOnlyTheRollBack) {
  Link link;
  link.FromClient(Query("begin"));
  link.FromServer(Complete("BEGIN") + Ready('T'));
  EXPECT_EQ(Abandon(link), "");
  EXPECT_FALSE(link.relay().query_in_progress());
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kRollBack);
}

TEST(RelayAbandonTest, OpenExtendedBatchFailsAndIsSyncedSoItRollsBack) {
  for (bool track_prepared : {false, true}) {
    Link link(track_prepared);
    link.FromClient(Parse("", "insert into t values (1)") + Bind("") + Execute());
    // A Sync alone would commit the insert; the failing Execute before it rolls it back.
    EXPECT_EQ(Abandon(link), FailedBatchEnd());
    EXPECT_TRUE(link.relay().query_in_progress());
    link.FromServer(ParseComplete() + BindComplete() + Complete("INSERT 0 1") + CloseComplete() +
                    Error("34000"));
    EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kWait);
    link.FromServer(Ready('I'));
    EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean) << track_prepared;
  }
}

TEST(RelayAbandonTest, BatchTheServerAlreadySkipsIsOnlySynced) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("", "select 1/0") + Bind("") + Execute());
  link.FromServer(ParseComplete() + BindComplete() + Error("22012"));
  EXPECT_EQ(Abandon(link), FailedBatchEnd());
  // PostgreSQL skips the Close and the Execute: only the Sync is answered.
  link.FromServer(Ready('I'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

TEST(RelayAbandonTest, CopyFromStdinFails) {
  Link link;
  link.FromClient(Query("copy t from stdin"));
  link.FromServer(CopyInResponse());
  link.FromClient(CopyData("1\n"));
  EXPECT_EQ(Abandon(link), CopyFailed());
  link.FromServer(Error("57014") + Ready('I'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

TEST(RelayAbandonTest, ExtendedCopyFromStdinFailsAndGetsTheSyncItWaitsFor) {
  Link link;
  link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync());
  link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
  // PostgreSQL ignored the batch's Sync inside COPY: the failed COPY needs another.
  EXPECT_EQ(Abandon(link), CopyFailed() + Sync());
  link.FromServer(Error("57014"));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kWait);
  link.FromServer(Ready('I'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

TEST(RelayAbandonTest, ExtendedCopyEndedButNotSyncedFailsBeforeItsSync) {
  Link link;
  link.FromClient(Parse("", "copy t from stdin") + Bind("") + Execute() + Sync());
  link.FromServer(ParseComplete() + BindComplete() + CopyInResponse());
  link.FromClient(CopyData("1\n") + CopyDone());
  link.FromServer(Complete("COPY 1"));
  EXPECT_EQ(Abandon(link), FailedBatchEnd());
  link.FromServer(CloseComplete() + Error("34000") + Ready('I'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

TEST(RelayAbandonTest, ClientGoneInsideAMessageCannotBeDrained) {
  Link link;
  const std::string query = Query("select 1");
  link.FromClient(query.substr(0, 8));
  bool reusable = true;
  EXPECT_EQ(Abandon(link, &reusable), "");
  EXPECT_FALSE(reusable);
}

TEST(RelayAbandonTest, StandInAnswersStillLeaveTheQueueOnceUnlinked) {
  Link link(/*track_prepared=*/true);
  link.FromClient(Parse("s1", "select 1") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  // The server has s1: its Parse is answered by pgfleet, in turn after the unnamed Parse's answer.
  link.FromClient(Parse("", "select 2") + Parse("s1", "select 1") + Sync());
  EXPECT_EQ(Abandon(link), "");
  link.FromServer(ParseComplete() + Ready('I'));
  EXPECT_EQ(link.relay().NextDrainStep(), DrainStep::kClean);
}

}  // namespace
}  // namespace pgfleet::pool::relay_testing
