#include "pooler/admin/command.h"

#include "gtest/gtest.h"

namespace pgfleet::admin {
namespace {

TEST(ParseCommandTest, ShowIsCaseInsensitiveAndTakesTrailingSemicolons) {
  auto c = ParseCommand("  show POOLS ; ");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->verb, Verb::kShow);
  EXPECT_EQ(c->what, "pools");
  EXPECT_EQ(ParseCommand("SHOW stats_totals;")->what, "stats_totals");
  EXPECT_EQ(ParseCommand("show State")->what, "state");
  EXPECT_EQ(ParseCommand("show\tWorkers")->what, "workers");
}

TEST(ParseCommandTest, DatabaseArguments) {
  EXPECT_EQ(ParseCommand("PAUSE")->database, "");
  EXPECT_EQ(ParseCommand("pause app")->database, "app");
  EXPECT_EQ(ParseCommand("RESUME \"My Db\"")->database, "My Db");
  EXPECT_EQ(ParseCommand("KILL app")->verb, Verb::kKill);
  EXPECT_EQ(ParseCommand("reconnect app")->verb, Verb::kReconnect);
  EXPECT_EQ(ParseCommand("WAIT_CLOSE")->verb, Verb::kWaitClose);
  EXPECT_EQ(ParseCommand("reload")->verb, Verb::kReload);
  EXPECT_EQ(ParseCommand("SHUTDOWN;")->verb, Verb::kShutdown);
}

TEST(ParseCommandTest, EmptyStatement) {
  EXPECT_EQ(ParseCommand("")->verb, Verb::kEmpty);
  EXPECT_EQ(ParseCommand(" ; ;")->verb, Verb::kEmpty);
}

TEST(ParseCommandTest, InvalidCommands) {
  for (const char* bad : {"SHOW", "SHOW NOPE", "SHOW POOLS extra", "SELECT 1", "KILL", "PAUSE a b",
                          "RELOAD now", "SHUTDOWN x", "RESUME \"unterminated"}) {
    auto c = ParseCommand(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("invalid command"), absl::string_view::npos) << bad;
  }
}

TEST(ParseCommandTest, OnlyShowIsForStatsUsers) {
  EXPECT_FALSE(NeedsAdmin(Verb::kShow));
  EXPECT_TRUE(NeedsAdmin(Verb::kPause));
  EXPECT_TRUE(NeedsAdmin(Verb::kReload));
  EXPECT_EQ(CommandTag(Verb::kWaitClose), "WAIT_CLOSE");
}

}  // namespace
}  // namespace pgfleet::admin
