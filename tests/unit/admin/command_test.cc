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

// PgBouncer's other process-controlling commands (issue 35).
TEST(ParseCommandTest, PgBouncersOtherCommands) {
  EXPECT_EQ(ParseCommand("KILL")->verb, Verb::kKill);  // every database
  EXPECT_EQ(ParseCommand("KILL")->database, "");
  auto kill_client = ParseCommand("kill_client 4294967297;");
  ASSERT_TRUE(kill_client.ok()) << kill_client.status();
  EXPECT_EQ(kill_client->verb, Verb::kKillClient);
  EXPECT_EQ(kill_client->client_id, 4294967297u);
  EXPECT_EQ(ParseCommand("DISABLE app")->verb, Verb::kDisable);
  EXPECT_EQ(ParseCommand("enable app")->database, "app");
  EXPECT_EQ(ParseCommand("SUSPEND")->verb, Verb::kSuspend);
  EXPECT_EQ(ParseCommand("SHUTDOWN")->shutdown, ShutdownMode::kNow);
  EXPECT_EQ(ParseCommand("shutdown wait_for_servers")->shutdown, ShutdownMode::kWaitForServers);
  EXPECT_EQ(ParseCommand("SHUTDOWN WAIT_FOR_CLIENTS;")->shutdown, ShutdownMode::kWaitForClients);
  EXPECT_EQ(ParseCommand("SHOW TOTALS")->what, "totals");
  EXPECT_EQ(CommandTag(Verb::kKillClient), "KILL_CLIENT");
}

TEST(ParseCommandTest, SetTakesAKeyAndAQuotedOrBareValue) {
  auto set = ParseCommand("SET log_connections = 1;");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->verb, Verb::kSet);
  EXPECT_EQ(set->setting, "log_connections");
  EXPECT_EQ(set->value, "1");
  auto quoted = ParseCommand("set Server_Check_Query = 'select ''x''' ");
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  EXPECT_EQ(quoted->setting, "server_check_query");
  EXPECT_EQ(quoted->value, "select 'x'");
  auto to = ParseCommand("SET default_pool_size TO 50");
  ASSERT_TRUE(to.ok()) << to.status();
  EXPECT_EQ(to->value, "50");
  EXPECT_EQ(ParseCommand("SET x = ")->value, "");
  EXPECT_FALSE(ParseCommand("SET nothing").ok());
  EXPECT_FALSE(ParseCommand("SET = 1").ok());
  EXPECT_EQ(CommandTag(Verb::kSet), "SET");
}

TEST(ParseCommandTest, EmptyStatement) {
  EXPECT_EQ(ParseCommand("")->verb, Verb::kEmpty);
  EXPECT_EQ(ParseCommand(" ; ;")->verb, Verb::kEmpty);
}

TEST(ParseCommandTest, InvalidCommands) {
  for (const char* bad :
       {"SHOW", "SHOW NOPE", "SHOW POOLS extra", "SELECT 1", "KILL a b", "PAUSE a b", "RELOAD now",
        "SHUTDOWN x", "RESUME \"unterminated", "DISABLE", "ENABLE a b", "KILL_CLIENT",
        "KILL_CLIENT abc", "SUSPEND now", "SHUTDOWN WAIT_FOR_NOTHING"}) {
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
