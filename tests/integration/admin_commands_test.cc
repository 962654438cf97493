// PgBouncer's other console commands, fleet-wide (issue 35, item 2): DISABLE/ENABLE, KILL_CLIENT
// by the id SHOW CLIENTS lists, KILL of every database, SHOW TOTALS, client counts in SHOW
// DATABASES and SHOW USERS, SUSPEND refused clearly, SHUTDOWN WAIT_FOR_CLIENTS.
#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace admin_commands_test {

using ::testing::HasSubstr;

class AdminCommandsTest : public IntegrationTest {
 protected:
  static std::string Config() {
    return absl::StrCat(PoolConfig("transaction", 2), "admin:\n  users: [postgres]\n")
        .replace(0, 10, "workers: 2");
  }
  // The console, once both workers serve (the port opens with the first): a command reaches
  // the workers that run.
  static ConnPtr Console(PgfleetProcess& fleet) {
    ConnPtr c = Connect(fleet.ConnString("postgres", "pgbouncer"));
    EXPECT_TRUE(Ok(c)) << ErrorOf(c);
    EXPECT_TRUE(WaitFor([&] { return RowsOf(Exec(c, "SHOW WORKERS")).size() == 2u; }));
    return c;
  }
  static std::vector<Row> Rows(const ConnPtr& console, const std::string& sql) {
    ResultPtr r = Exec(console, sql);
    EXPECT_EQ(PQresultStatus(r.get()), PGRES_TUPLES_OK)
        << sql << ": " << PQerrorMessage(console.get());
    return RowsOf(r);
  }
  static void Run(const ConnPtr& console, const std::string& sql) {
    ResultPtr r = Exec(console, sql);
    EXPECT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK)
        << sql << ": " << PQerrorMessage(console.get());
  }
};

TEST_F(AdminCommandsTest, DisableRefusesNewClientsOfTheDatabaseUntilEnable) {
  PgfleetProcess fleet(Config());
  ConnPtr console = Console(fleet);
  ConnPtr before = Connect(fleet.ConnString());
  ASSERT_EQ(Value(before, "SELECT 1"), "1");
  Run(console, "DISABLE postgres");
  // Every worker refuses: several attempts land on both.
  for (int i = 0; i < 6; ++i) {
    ConnPtr refused = Connect(fleet.ConnString());
    EXPECT_FALSE(Ok(refused));
    EXPECT_THAT(ErrorOf(refused), HasSubstr("database \"postgres\" is disabled"));
  }
  EXPECT_EQ(Value(before, "SELECT 2"), "2");  // a client already in stays
  bool listed = false;
  for (const Row& row : Rows(console, "SHOW DATABASES")) {
    if (row.at("name") == "postgres") listed = row.at("disabled") == "1";
  }
  EXPECT_TRUE(listed);
  Run(console, "ENABLE postgres");
  ConnPtr after = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(after)) << ErrorOf(after);
  EXPECT_EQ(Value(after, "SELECT 3"), "3");
}

TEST_F(AdminCommandsTest, KillClientClosesTheClientShowClientsNamesOnWhicheverWorker) {
  PgfleetProcess fleet(Config());
  ConnPtr console = Console(fleet);
  std::vector<ConnPtr> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(Connect(
        fleet.ConnString("postgres", "postgres", absl::StrCat("application_name=victim", i))));
    ASSERT_EQ(Value(clients.back(), "SELECT 1"), "1");
  }
  // Client counts per database and user.
  for (const Row& row : Rows(console, "SHOW DATABASES")) {
    if (row.at("name") == "postgres") EXPECT_EQ(row.at("current_client_connections"), "4");
  }
  for (const Row& row : Rows(console, "SHOW USERS")) {
    if (row.at("name") == "postgres") EXPECT_EQ(row.at("current_client_connections"), "4");
  }
  std::map<std::string, std::string> ids;  // application_name -> id
  for (const Row& row : Rows(console, "SHOW CLIENTS"))
    ids[row.at("application_name")] = row.at("id");
  for (int victim : {1, 2}) {
    ASSERT_TRUE(ids.contains(absl::StrCat("victim", victim)));
    Run(console, "KILL_CLIENT " + ids[absl::StrCat("victim", victim)]);
  }
  for (int i = 0; i < 4; ++i) {
    const bool killed = i == 1 || i == 2;
    ResultPtr r = Exec(clients[i], "SELECT 1");
    EXPECT_EQ(PQresultStatus(r.get()) == PGRES_TUPLES_OK, !killed) << "client " << i;
    if (killed) EXPECT_THAT(PQerrorMessage(clients[i].get()), HasSubstr("killed by admin"));
  }
}

TEST_F(AdminCommandsTest, KillWithoutADatabaseDropsEveryDatabaseAndShowTotalsSums) {
  PgfleetProcess fleet(Config());
  ConnPtr console = Console(fleet);
  ConnPtr client = Connect(fleet.ConnString());
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Value(client, "SELECT 1"), "1");
  bool counted = false;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Row& row : Rows(console, "SHOW TOTALS")) {
          int64_t n = 0;
          if (row.at("name") == "total_query_count" && absl::SimpleAtoi(row.at("value"), &n)) {
            counted = n >= 5;
          }
        }
        return counted;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(100)));
  ResultPtr suspend = Exec(console, "SUSPEND");
  EXPECT_EQ(PQresultStatus(suspend.get()), PGRES_FATAL_ERROR);
  EXPECT_THAT(PQerrorMessage(console.get()), HasSubstr("SUSPEND is not supported"));
  Run(console, "KILL");
  EXPECT_NE(Value(client, "SELECT 1"), "1");
  Run(console, "RESUME");
  ConnPtr again = Connect(fleet.ConnString());
  EXPECT_EQ(Value(again, "SELECT 1"), "1");
}

// The pod stops taking clients and exits once the last one left, however long that takes.
TEST_F(AdminCommandsTest, ShutdownWaitForClientsExitsWhenTheLastClientLeaves) {
  PgfleetProcess fleet(Config());
  ConnPtr client = Connect(fleet.ConnString());
  ASSERT_EQ(Value(client, "SELECT 1"), "1");
  ConnPtr console = Console(fleet);
  // Answered (and the console closed) only once every worker has no client: send and go on.
  ASSERT_EQ(PQsendQuery(console.get(), "SHUTDOWN WAIT_FOR_CLIENTS"), 1);
  ASSERT_TRUE(WaitFor([&] { return CountInLog(fleet.Log(), "event=admin_wait_for_clients") >= 2; },
                      std::chrono::seconds(10), std::chrono::milliseconds(50)))
      << fleet.Log();
  // New clients are no longer taken; the one inside goes on.
  ConnPtr late = Connect(fleet.ConnString("postgres", "postgres", "connect_timeout=2"));
  EXPECT_FALSE(Ok(late));
  EXPECT_EQ(Value(client, "SELECT 2"), "2");
  EXPECT_TRUE(fleet.Running());
  client.reset();
  EXPECT_TRUE(WaitFor([&] { return !fleet.Running(); }, std::chrono::seconds(20),
                      std::chrono::milliseconds(50)))
      << fleet.Log();
}

}  // namespace admin_commands_test
}  // namespace pgfleet::testing
