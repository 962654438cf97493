// Pool modes, queueing, limits and parameter tracking through a real PostgreSQL.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class PoolingTest : public IntegrationTest {};

TEST_F(PoolingTest, TransactionModeSharesOneServerBetweenClients) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto a = Connect(fleet.ConnString());
  auto b = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(a)) << ErrorOf(a);
  ASSERT_TRUE(Ok(b)) << ErrorOf(b);
  std::string pid_a = Value(a, "SELECT pg_backend_pid()");
  std::string pid_b = Value(b, "SELECT pg_backend_pid()");
  EXPECT_EQ(pid_a, pid_b) << "pool_size 1 must serve both clients from one server";
  EXPECT_EQ(ServerConnections(), 1);
}

TEST_F(PoolingTest, TransactionModeKeepsServerForWholeTransaction) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto a = Connect(fleet.ConnString());
  auto b = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(a) && Ok(b));
  ASSERT_TRUE(ResultOk(Exec(a, "BEGIN")));
  std::string first = Value(a, "SELECT pg_backend_pid()");
  // b runs meanwhile and must get the other server.
  std::string other = Value(b, "SELECT pg_backend_pid()");
  EXPECT_NE(first, other);
  EXPECT_EQ(Value(a, "SELECT pg_backend_pid()"), first);
  ASSERT_TRUE(ResultOk(Exec(a, "COMMIT")));
}

TEST_F(PoolingTest, SessionModeKeepsSessionStateAndResetsOnRelease) {
  PgfleetProcess fleet(PoolConfig("session", 1));
  {
    auto a = Connect(fleet.ConnString());
    ASSERT_TRUE(Ok(a)) << ErrorOf(a);
    ASSERT_TRUE(ResultOk(Exec(a, "SET work_mem = '7MB'")));
    EXPECT_EQ(Value(a, "SHOW work_mem"), "7MB");
    ASSERT_TRUE(ResultOk(Exec(a, "PREPARE p AS SELECT 1")));
  }
  // The next client gets the same server, cleaned by DISCARD ALL.
  auto b = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(b)) << ErrorOf(b);
  EXPECT_EQ(Value(b, "SHOW work_mem"), "4MB");
  EXPECT_EQ(Value(b, "SELECT count(*) FROM pg_prepared_statements"), "0");
}

TEST_F(PoolingTest, StatementModeRefusesMultiStatementTransactions) {
  PgfleetProcess fleet(PoolConfig("statement", 2));
  auto a = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(a));
  EXPECT_EQ(Value(a, "SELECT 41 + 1"), "42");
  // The refusal arrives as a FATAL right after BEGIN's result; libpq reports it either as the next
  // query's error or, when it arrives between queries, through the notice processor.
  std::string notices;
  PQsetNoticeProcessor(
      a.get(), [](void* arg, const char* text) { *static_cast<std::string*>(arg) += text; },
      &notices);
  ResultPtr r = Exec(a, "BEGIN");
  ResultPtr next = Exec(a, "SELECT 1");
  EXPECT_FALSE(ResultOk(next));
  EXPECT_THAT(ErrorOf(a) + notices,
              HasSubstr("transaction blocks not allowed in statement pooling mode"));
  auto b = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(b));
  EXPECT_EQ(Value(b, "SELECT 'still serving'"), "still serving");
}

TEST_F(PoolingTest, ClientsQueueInArrivalOrderWhenPoolIsFull) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  constexpr int kClients = 12;
  std::atomic<int> ok{0};
  std::atomic<int> max_seen{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      auto c = Connect(fleet.ConnString());
      if (!Ok(c)) return;
      if (ResultOk(Exec(c, "SELECT pg_sleep(0.2)"))) ++ok;
    });
  }
  std::atomic<bool> finished{false};
  std::thread joiner([&] {
    for (auto& t : threads) t.join();
    finished = true;
  });
  // Sample for as long as the clients run (however slowly they start on a busy machine).
  WaitFor(
      [&] {
        max_seen = std::max(max_seen.load(), ServerConnections());
        return finished.load();
      },
      std::chrono::seconds(60), std::chrono::milliseconds(50));
  joiner.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_LE(max_seen.load(), 2);
  EXPECT_GE(max_seen.load(), 1);
}

TEST_F(PoolingTest, MaxClientConnRejectsOneTooMany) {
  PgfleetProcess fleet(PoolConfig("transaction", 2, "  max_client_conn: 3\n"));
  std::vector<ConnPtr> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(held.back())) << ErrorOf(held.back());
  }
  auto extra = Connect(fleet.ConnString());
  EXPECT_FALSE(Ok(extra));
  EXPECT_THAT(ErrorOf(extra), HasSubstr("no more connections allowed (max_client_conn)"));
  held.pop_back();
  // pgfleet frees the slot once it has read the client's Terminate: retry until it has.
  ConnPtr again;
  WaitFor([&] {
    again = Connect(fleet.ConnString());
    return Ok(again);
  });
  EXPECT_TRUE(Ok(again)) << ErrorOf(again);
}

TEST_F(PoolingTest, UnknownDatabaseGetsInvalidCatalogName) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString("postgres", "nosuchdb"));
  EXPECT_FALSE(Ok(c));
  EXPECT_THAT(ErrorOf(c), HasSubstr("no such database: nosuchdb"));
}

// Eight clients, alternating between two (user, database) pairs, each hold a server for 0.3 s.
struct BudgetRun {
  int servers_seen = 0;  // the most server connections that ran the query at one look
  int served = 0;        // clients whose query succeeded
};
BudgetRun RunEightSleepers(const PgfleetProcess& fleet, const std::string& tag,
                           const std::pair<std::string, std::string>& even,
                           const std::pair<std::string, std::string>& odd) {
  const std::string sql = absl::StrCat("SELECT pg_sleep(0.3), '", tag, "'");
  std::vector<std::thread> threads;
  std::atomic<int> served{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const auto& [user, database] = i % 2 ? odd : even;
      auto c = Connect(fleet.ConnString(user, database));
      if (Ok(c) && ResultOk(Exec(c, sql))) ++served;
    });
  }
  std::atomic<bool> finished{false};
  std::thread joiner([&] {
    for (auto& t : threads) t.join();
    finished = true;
  });
  // Look at pg_stat_activity for as long as the clients run (at least until a server has run the
  // query), so the cap is checked at every look rather than at one moment that may come too early
  // or too late on a busy machine.
  BudgetRun run;
  WaitFor(
      [&] {
        const int now = std::stoi(PgServer::Shared().QueryValue(absl::StrCat(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(0.3), ''", tag,
            "''%' AND pid <> pg_backend_pid()")));
        run.servers_seen = std::max(run.servers_seen, now);
        return finished && run.servers_seen > 0;
      },
      std::chrono::seconds(60));
  joiner.join();
  run.served = served.load();
  return run;
}

// The budget held (never more than 2 servers), yet every client was served in turn. On failure
// pgfleet's log says which pool waited for what.
void ExpectCappedAtTwoAndAllServed(const BudgetRun& run, const PgfleetProcess& fleet) {
  EXPECT_GE(run.servers_seen, 1);
  EXPECT_LE(run.servers_seen, 2);
  EXPECT_EQ(run.served, 8) << fleet.Log();
}

TEST_F(PoolingTest, MaxDbConnectionsCapsServersAcrossUsers) {
  PgfleetProcess fleet(absl::StrCat("databases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                                    ", max_db_connections: 2}\n",
                                    "pool: {pool_mode: transaction, default_pool_size: 5}\n"));
  BudgetRun run =
      RunEightSleepers(fleet, "db_cap", {"otheruser", "postgres"}, {"postgres", "postgres"});
  ExpectCappedAtTwoAndAllServed(run, fleet);
}

TEST_F(PoolingTest, MaxUserConnectionsCapsServersAcrossDatabases) {
  // Two database entries for one PostgreSQL database: two pools of the same user.
  PgfleetProcess fleet(absl::StrCat(
      "databases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
      "}\n  alias: {host: 127.0.0.1, port: ", pg().port(), ", dbname: postgres}\n",
      "pool: {pool_mode: transaction, default_pool_size: 5, max_user_connections: 2}\n"));
  BudgetRun run =
      RunEightSleepers(fleet, "user_cap", {"postgres", "alias"}, {"postgres", "postgres"});
  ExpectCappedAtTwoAndAllServed(run, fleet);
}

TEST_F(PoolingTest, ParametersAreReappliedWhenServerChanges) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto tokyo = Connect(fleet.ConnString("postgres", "postgres", "application_name=tokyo_app"));
  auto plain = Connect(fleet.ConnString("postgres", "postgres", "application_name=plain_app"));
  ASSERT_TRUE(Ok(tokyo) && Ok(plain));
  ASSERT_TRUE(ResultOk(Exec(tokyo, "SET TimeZone = 'Asia/Tokyo'")));
  // Both share the single server; each must see its own values.
  EXPECT_EQ(Value(plain, "SHOW TimeZone"), Value(Connect(pg().ConnString()), "SHOW TimeZone"));
  EXPECT_EQ(Value(plain, "SELECT current_setting('application_name')"), "plain_app");
  EXPECT_EQ(Value(tokyo, "SHOW TimeZone"), "Asia/Tokyo");
  EXPECT_EQ(Value(tokyo, "SELECT current_setting('application_name')"), "tokyo_app");
  EXPECT_EQ(Value(plain, "SHOW TimeZone"), Value(Connect(pg().ConnString()), "SHOW TimeZone"));
  EXPECT_EQ(std::string(PQparameterStatus(tokyo.get(), "TimeZone")), "Asia/Tokyo");
}

// New clients hear the startup values of the servers as they are now: every login refreshes
// them, and RECONNECT makes the next client wait for a fresh login.
TEST_F(PoolingTest, StartupParametersFollowTheServersLogins) {
  pg().Exec("DROP DATABASE IF EXISTS paramtest");
  pg().Exec("CREATE DATABASE paramtest");
  PgfleetProcess fleet(
      absl::StrCat("workers: 1\ndatabases:\n  paramtest: {host: 127.0.0.1, port: ", pg().port(),
                   "}\npool:\n  pool_mode: transaction\n  default_pool_size: 2\n"
                   "admin:\n  users: [postgres]\n"));
  auto first = Connect(fleet.ConnString("postgres", "paramtest"));
  ASSERT_TRUE(Ok(first)) << ErrorOf(first);
  const std::string initial = PQparameterStatus(first.get(), "DateStyle");
  ASSERT_TRUE(ResultOk(Exec(first, "BEGIN")));  // holds the pool's first server
  pg().Exec("ALTER DATABASE paramtest SET DateStyle = 'SQL, DMY'");
  // A second client needs a second server: its login sees the new default...
  auto second = Connect(fleet.ConnString("postgres", "paramtest"));
  ASSERT_TRUE(Ok(second)) << ErrorOf(second);
  // ... and what it was told at its own welcome is what its session shows.
  EXPECT_EQ(Value(second, "SHOW DateStyle"), PQparameterStatus(second.get(), "DateStyle"));
  // Every client after that login is told the server's current value.
  auto third = Connect(fleet.ConnString("postgres", "paramtest"));
  ASSERT_TRUE(Ok(third)) << ErrorOf(third);
  EXPECT_EQ(std::string(PQparameterStatus(third.get(), "DateStyle")), "SQL, DMY") << initial;
  EXPECT_EQ(Value(third, "SHOW DateStyle"), "SQL, DMY");
  ASSERT_TRUE(ResultOk(Exec(first, "COMMIT")));
  // RECONNECT: the next client waits for a new login rather than hearing the old values.
  pg().Exec("ALTER DATABASE paramtest SET DateStyle = 'German, DMY'");
  auto admin = Connect(fleet.ConnString("postgres", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  ASSERT_TRUE(ResultOk(Exec(admin, "RECONNECT paramtest")));
  auto fourth = Connect(fleet.ConnString("postgres", "paramtest"));
  ASSERT_TRUE(Ok(fourth)) << ErrorOf(fourth);
  EXPECT_EQ(std::string(PQparameterStatus(fourth.get(), "DateStyle")), "German, DMY");
  EXPECT_EQ(Value(fourth, "SHOW DateStyle"), "German, DMY");
  first.reset();
  second.reset();
  third.reset();
  fourth.reset();
  admin.reset();
  fleet.Stop();
  pg().Exec("DROP DATABASE IF EXISTS paramtest WITH (FORCE)");
}

TEST_F(PoolingTest, ReloadAppliesNewPoolSize) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  fleet.RewriteConfig(PoolConfig("transaction", 3));
  fleet.Signal(SIGHUP);
  WaitFor([&] { return fleet.Log().find("event=reloaded") != std::string::npos; });
  std::vector<std::thread> threads;
  std::atomic<int> max_seen{0};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      auto c = Connect(fleet.ConnString());
      (void)Exec(c, "SELECT pg_sleep(0.5)");
    });
  }
  // Servers stay open once the clients are done (server_idle_timeout is 10 minutes).
  max_seen = WaitFor([&] { return ServerConnections(); }, [](int n) { return n >= 3; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(max_seen.load(), 3);
  EXPECT_THAT(fleet.Log(), HasSubstr("event=reloaded"));
}

// PgBouncer's log_connections / log_disconnections: one line per login and one per disconnect,
// with its reason, or none of either.
TEST_F(PoolingTest, ConnectionLogLinesFollowTheLogSettings) {
  for (bool logged : {true, false}) {
    SCOPED_TRACE(logged ? "logged" : "quiet");
    const std::string flag = logged ? "true" : "false";
    PgfleetProcess fleet(PoolConfig(
        "transaction", 1, "",
        absl::StrCat("log: {log_connections: ", flag, ", log_disconnections: ", flag, "}\n")));
    {
      auto first = Connect(fleet.ConnString());
      EXPECT_EQ(Value(first, "SELECT 1"), "1");
    }
    // The one worker answers this client only after it has read the first one's Terminate.
    auto second = Connect(fleet.ConnString());
    EXPECT_EQ(Value(second, "SELECT 2"), "2");
    const std::string log = fleet.Log();
    EXPECT_THAT(log, HasSubstr("event=worker_ready"));
    if (logged) {
      EXPECT_THAT(log, HasSubstr("event=client_login"));
      EXPECT_THAT(log, HasSubstr("event=client_disconnect"));
      EXPECT_THAT(log, HasSubstr("reason=\"client close request\""));
    } else {
      EXPECT_THAT(log, Not(HasSubstr("client_login")));
      EXPECT_THAT(log, Not(HasSubstr("client_disconnect")));
    }
  }
}

}  // namespace
}  // namespace pgfleet::testing
