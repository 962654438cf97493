// Timeouts and pool sizing knobs: query_wait_timeout, query_timeout, idle_transaction_timeout,
// client_idle_timeout, min_pool_size, reserve pool, server_lifetime, server_check_query/delay,
// unix socket listener.
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;

class TimeoutsTest : public IntegrationTest {};

TEST_F(TimeoutsTest, QueryWaitTimeoutFailsQueuedClient) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  query_wait_timeout: 300ms\n"));
  auto holder = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(holder, "BEGIN")));
  auto waiter = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(waiter));
  ResultPtr r = Exec(waiter, "SELECT 1");
  EXPECT_FALSE(ResultOk(r));
  EXPECT_THAT(ErrorOf(waiter), HasSubstr("query_wait_timeout"));
  EXPECT_TRUE(ResultOk(Exec(holder, "COMMIT")));
}

TEST_F(TimeoutsTest, QueryTimeoutEndsLongQuery) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  query_timeout: 300ms\n"));
  auto c = Connect(fleet.ConnString());
  const auto start = std::chrono::steady_clock::now();
  ResultPtr r = Exec(c, "SELECT pg_sleep(10)");
  EXPECT_FALSE(ResultOk(r));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_THAT(ErrorOf(c), HasSubstr("query_timeout"));
  // The backend was cancelled, not left sleeping behind a closed socket.
  EXPECT_EQ(WaitFor(
                [&] {
                  return pg().QueryValue(
                      "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
                      "query = 'SELECT pg_sleep(10)'");
                },
                [](const std::string& n) { return n == "0"; }),
            "0");
  auto d = Connect(fleet.ConnString());
  EXPECT_EQ(Value(d, "SELECT 'next'"), "next");
}

TEST_F(TimeoutsTest, IdleTransactionTimeoutClosesIdleInTransactionClient) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  idle_transaction_timeout: 300ms\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(c, "BEGIN")));
  // The client stays idle in its transaction until pgfleet closes it.
  WaitFor([&] { return fleet.Log().find("idle_transaction_timeout") != std::string::npos; });
  EXPECT_FALSE(ResultOk(Exec(c, "SELECT 1")));
  auto d = Connect(fleet.ConnString());
  EXPECT_EQ(Value(d, "SELECT 'freed'"), "freed");
}

// PgBouncer 1.25's transaction_timeout (issue 35): a transaction kept busy with short statements
// (so neither query_timeout nor idle_transaction_timeout fires) is ended at the limit, and so is
// one long statement; short transactions go on.
TEST_F(TimeoutsTest, TransactionTimeoutEndsALongTransaction) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  transaction_timeout: 1s\n"));
  auto quick = Connect(fleet.ConnString());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ResultOk(Exec(quick, "BEGIN")));
    ASSERT_TRUE(ResultOk(Exec(quick, "SELECT pg_sleep(0.4)")));
    ASSERT_TRUE(ResultOk(Exec(quick, "COMMIT")));
  }
  auto busy = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(busy, "BEGIN")));
  bool ended = false;
  for (int i = 0; i < 20 && !ended; ++i) ended = !ResultOk(Exec(busy, "SELECT pg_sleep(0.2)"));
  EXPECT_TRUE(ended);
  EXPECT_THAT(PQerrorMessage(busy.get()), HasSubstr("transaction_timeout"));
  auto single = Connect(fleet.ConnString());
  ResultPtr r = Exec(single, "SELECT pg_sleep(5)");
  EXPECT_FALSE(ResultOk(r));
  EXPECT_THAT(PQerrorMessage(single.get()), HasSubstr("transaction_timeout"));
  auto after = Connect(fleet.ConnString());
  EXPECT_EQ(Value(after, "SELECT 'freed'"), "freed");
}

TEST_F(TimeoutsTest, ClientIdleTimeoutClosesIdleClient) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  client_idle_timeout: 300ms\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_EQ(Value(c, "SELECT 1"), "1");
  // The client stays idle until pgfleet closes it.
  WaitFor([&] { return fleet.Log().find("client_idle_timeout") != std::string::npos; });
  EXPECT_FALSE(ResultOk(Exec(c, "SELECT 1")));
  EXPECT_THAT(fleet.Log(), HasSubstr("client_idle_timeout"));
}

TEST_F(TimeoutsTest, MinPoolSizeOpensServersAhead) {
  PgfleetProcess fleet(PoolConfig("transaction", 5, "  min_pool_size: 3\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_EQ(Value(c, "SELECT 1"), "1");
  EXPECT_EQ(WaitFor([&] { return ServerConnections(); }, [](int n) { return n >= 3; }), 3);
}

TEST_F(TimeoutsTest, ServerIdleTimeoutClosesUnusedServers) {
  PgfleetProcess fleet(PoolConfig("transaction", 2, "  server_idle_timeout: 200ms\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_EQ(Value(c, "SELECT 1"), "1");
  EXPECT_EQ(ServerConnections(), 1);
  EXPECT_EQ(WaitFor([&] { return ServerConnections(); }, [](int n) { return n == 0; }), 0);
  EXPECT_EQ(Value(c, "SELECT 2"), "2");
}

TEST_F(TimeoutsTest, ReservePoolServesClientsWaitingTooLong) {
  PgfleetProcess fleet(
      PoolConfig("transaction", 1, "  reserve_pool_size: 1\n  reserve_pool_timeout: 200ms\n"));
  auto holder = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(holder, "BEGIN")));
  auto waiter = Connect(fleet.ConnString());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Value(waiter, "SELECT 'reserve'"), "reserve");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(ResultOk(Exec(holder, "COMMIT")));
}

TEST_F(TimeoutsTest, UnixSocketListenerServesClients) {
  char tmpl[] = "/tmp/pgfleet-sock-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  PgfleetProcess fleet(PoolConfig("transaction", 1), "", "  unix_socket_dir: " + dir + "\n");
  auto c =
      Connect(absl::StrCat("host=", dir, " port=", fleet.port(), " user=postgres dbname=postgres"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  EXPECT_EQ(Value(c, "SELECT 'over unix'"), "over unix");
}

TEST_F(TimeoutsTest, ServerLifetimeRetiresServersBetweenTransactionsOnly) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  server_lifetime: 1s\n"));
  auto c = Connect(fleet.ConnString());
  const std::string first = Value(c, "SELECT pg_backend_pid()");
  // A transaction that outlives server_lifetime keeps its server to the end.
  ASSERT_TRUE(ResultOk(Exec(c, "BEGIN")));
  EXPECT_EQ(Value(c, "SELECT pg_backend_pid() FROM pg_sleep(1.5)"), first);
  ASSERT_TRUE(ResultOk(Exec(c, "COMMIT")));
  // Released, the old server is not used again: the next transaction gets a new one.
  const std::string second = Value(c, "SELECT pg_backend_pid()");
  EXPECT_NE(second, first);
  // pgfleet closed the old one (its backend exits a moment after the Terminate).
  EXPECT_EQ(
      WaitFor(
          [&] {
            return pg().QueryValue("SELECT count(*) FROM pg_stat_activity WHERE pid = " + first);
          },
          [](const std::string& n) { return n == "0"; }, std::chrono::seconds(2)),
      "0");
}

// The check query bumps a session counter on the server, so the test sees each check run.
TEST_F(TimeoutsTest, ServerCheckQueryRunsOnlyOnServersIdleLongerThanTheCheckDelay) {
  PgfleetProcess fleet(
      PoolConfig("transaction", 1,
                 "  server_check_delay: 500ms\n"
                 "  server_check_query: \"SELECT set_config('pgfleet.checks', (coalesce(nullif("
                 "current_setting('pgfleet.checks', true), ''), '0')::int + 1)::text, false)\"\n"));
  auto c = Connect(fleet.ConnString());
  const std::string kChecks =
      "SELECT coalesce(nullif(current_setting('pgfleet.checks', true), ''), '0')";
  const std::string before = Value(c, kChecks);
  // Used again at once: no check.
  EXPECT_EQ(Value(c, kChecks), before);
  EXPECT_EQ(Value(c, kChecks), before);
  // Idle for longer than server_check_delay: checked once before the client gets it.
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  EXPECT_EQ(Value(c, kChecks), std::to_string(std::stoi(before) + 1));
  EXPECT_EQ(Value(c, kChecks), std::to_string(std::stoi(before) + 1));
}

}  // namespace
}  // namespace pgfleet::testing
