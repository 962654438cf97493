// Clients that go away mid-query (killed, disconnected, closed by pgfleet): PostgreSQL stops the
// query at once, the server stays counted until it is clean and then serves again, and PostgreSQL
// never sees more server connections than the budget allows.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/http_client.h"

namespace pgfleet::testing {
namespace {

using Clock = std::chrono::steady_clock;

class AbandonedQueryTest : public IntegrationTest {
 protected:
  // Backends running `sql` now.
  std::string Running(const std::string& sql) {
    return pg().QueryValue(
        absl::StrCat("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = '",
                     sql, "' AND pid <> pg_backend_pid()"));
  }
  // A client process that logs in through pgfleet, sends `sql` and waits to be killed.
  pid_t StartClientProcess(const std::string& conninfo, const std::string& sql) {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    // The child uses libpq only, and never returns into the test binary.
    PGconn* c = PQconnectdb(conninfo.c_str());
    if (PQstatus(c) != CONNECTION_OK || PQsendQuery(c, sql.c_str()) != 1) _exit(2);
    while (PQflush(c) > 0) {
    }
    for (;;) pause();
  }
};

TEST_F(AbandonedQueryTest, ClientKilledDuringALongQueryLeavesNoQueryRunning) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  const std::string sql = "SELECT pg_sleep(30)";
  const pid_t child = StartClientProcess(fleet.ConnString(), sql);
  ASSERT_GT(child, 0);
  const bool running = WaitFor([&] { return Running(sql) == "1"; });
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(running) << fleet.Log();
  // PostgreSQL is told at once, not when the query next writes (30 s later).
  EXPECT_EQ(WaitFor([&] { return Running(sql); }, [](const std::string& n) { return n == "0"; },
                    std::chrono::seconds(2)),
            "0");
  // The pool's one server is clean again and serves the next client at once.
  auto next = Connect(fleet.ConnString());
  const auto start = Clock::now();
  EXPECT_EQ(Value(next, "SELECT 'next'"), "next");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(ServerConnections(), 1) << "the server was kept, not replaced";
  EXPECT_EQ(
      WaitFor([&] { return MetricSum(fleet.metrics_port(), "pgfleet_cancel_abandoned_total"); },
              [](double n) { return n == 1; }),
      1);
}

// A pipeline whose client left during its first query: the cancel stops that query, and the next
// one (after its own Sync) starts only then, so that cancel cannot reach it. pgfleet cancels again
// while the abandoned work still runs, so no query of it runs on for long: not until it ends, nor
// until server_connect_timeout closes the server.
TEST_F(AbandonedQueryTest, EveryQueryOfAnAbandonedPipelineIsStopped) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  server_connect_timeout: 60s\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  const std::vector<std::string> pipeline = {"SELECT pg_sleep(30.1)", "SELECT pg_sleep(30.2)",
                                             "SELECT pg_sleep(30.3)"};
  ASSERT_EQ(PQenterPipelineMode(c.get()), 1);
  for (const std::string& sql : pipeline) {
    ASSERT_EQ(PQsendQueryParams(c.get(), sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0), 1);
    ASSERT_EQ(PQpipelineSync(c.get()), 1);
  }
  ASSERT_EQ(PQflush(c.get()), 0);
  ASSERT_EQ(
      WaitFor([&] { return Running(pipeline[0]); }, [](const std::string& n) { return n == "1"; }),
      "1");
  const auto left = Clock::now();
  c.reset();
  for (const std::string& sql : pipeline) {
    // Each one is seen running (or was over before a look), then stopped within seconds.
    EXPECT_EQ(WaitFor([&] { return Running(sql); }, [](const std::string& n) { return n == "0"; },
                      std::chrono::seconds(5)),
              "0")
        << sql << "\n"
        << fleet.Log();
  }
  EXPECT_LT(Clock::now() - left, std::chrono::seconds(10));
  // Three queries, and one CancelRequest stops at most two (PostgreSQL signals the backend twice,
  // and the second signal may land in the next query): at least one cancel was a repeated one.
  EXPECT_GE(
      WaitFor([&] { return MetricSum(fleet.metrics_port(), "pgfleet_cancel_repeated_total"); },
              [](double n) { return n >= 1; }),
      1);
  // The server was kept: clean again, it serves the next client.
  auto next = Connect(fleet.ConnString());
  EXPECT_EQ(Value(next, "SELECT 'next'"), "next") << ErrorOf(next);
  EXPECT_EQ(ServerConnections(), 1) << "the server was kept, not replaced";
}

// Abandoned work that survives cancels (here a function that catches them for 3 s) is cancelled
// again and again, but ever less often (RepeatCancel): a handful of cancel connections, not four
// a second, and the first cancel after it stops catching them stops it.
TEST_F(AbandonedQueryTest, WorkThatSurvivesCancelsIsCancelledEverLessOften) {
  pg().Exec(
      "CREATE OR REPLACE FUNCTION survives_cancels(seconds float8) RETURNS void LANGUAGE plpgsql"
      " AS $$ DECLARE until timestamptz := clock_timestamp() + make_interval(secs => seconds);"
      " BEGIN"
      "   WHILE clock_timestamp() < until LOOP"
      "     BEGIN PERFORM pg_sleep(0.01); EXCEPTION WHEN query_canceled THEN NULL; END;"
      "   END LOOP;"
      "   PERFORM pg_sleep(30);"
      " END $$");
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  server_connect_timeout: 60s\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  const std::string sql = "SELECT survives_cancels(3)";
  ASSERT_EQ(PQsendQuery(c.get(), sql.c_str()), 1);
  ASSERT_EQ(WaitFor([&] { return Running(sql); }, [](const std::string& n) { return n == "1"; }),
            "1");
  c.reset();
  // Cancels at about 0, 0.3, 0.8 and 1.8 s after the client left are caught; the one at about
  // 3.8 s stops it.
  EXPECT_EQ(WaitFor([&] { return Running(sql); }, [](const std::string& n) { return n == "0"; },
                    std::chrono::seconds(15)),
            "0")
      << fleet.Log();
  // The fixed quarter-second wait before RepeatCancel (build of 80b630b) sent 9 here.
  const double repeated =
      WaitFor([&] { return MetricSum(fleet.metrics_port(), "pgfleet_cancel_repeated_total"); },
              [](double n) { return n >= 3; });
  EXPECT_GE(repeated, 3);
  EXPECT_LE(repeated, 7);
}

TEST_F(AbandonedQueryTest, ClientGoneInsideATransactionIsRolledBackAndItsServerReused) {
  pg().Exec("DROP TABLE IF EXISTS abandoned_tx; CREATE TABLE abandoned_tx (id int)");
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(c, "BEGIN")));
  ASSERT_TRUE(ResultOk(Exec(c, "INSERT INTO abandoned_tx VALUES (1)")));
  const std::string sql = "SELECT pg_sleep(20)";
  ASSERT_EQ(PQsendQuery(c.get(), sql.c_str()), 1);
  ASSERT_TRUE(WaitFor([&] { return Running(sql) == "1"; }));
  // Gone without a Terminate, as when its pod or network goes away.
  shutdown(PQsocket(c.get()), SHUT_RDWR);
  c.reset();
  EXPECT_EQ(WaitFor([&] { return Running(sql); }, [](const std::string& n) { return n == "0"; },
                    std::chrono::seconds(2)),
            "0");
  auto next = Connect(fleet.ConnString());
  EXPECT_EQ(Value(next, "SELECT count(*) FROM abandoned_tx"), "0");
  EXPECT_EQ(Value(next, "SELECT 'outside'"), "outside");
  // The server was rolled back before it served again: nothing is left open in PostgreSQL.
  EXPECT_EQ(pg().QueryValue("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in "
                            "transaction%'"),
            "0");
  EXPECT_EQ(ServerConnections(), 1);
}

TEST_F(AbandonedQueryTest, ClientsAbandoningQueriesNeverPushPostgresPastMaxDbConnections) {
  constexpr int kBudget = 12;
  constexpr int kClients = 128;
  PgfleetProcess fleet(
      absl::StrCat("workers: 4\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                   ", max_db_connections: ", kBudget,
                   "}\npool:\n  pool_mode: transaction\n  default_pool_size: ", kBudget, "\n"));
  ASSERT_EQ(
      WaitFor([&] { return WorkerPids(fleet.pid()).size(); }, [](size_t n) { return n >= 4; }), 4u);
  const auto duration = std::chrono::seconds(4);
  const auto deadline = Clock::now() + duration;
  std::atomic<int> queries{0};
  std::atomic<int> abandoned{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 random(static_cast<unsigned>(i));
      // A third of the clients leave mid-query, at a random moment, half of them without a
      // Terminate; the others keep querying.
      const bool leaves = i % 3 == 0;
      ConnPtr c;
      for (int n = 0; n < 10000 && Clock::now() < deadline; ++n) {
        if (!Ok(c)) c = Connect(fleet.ConnString());
        if (!Ok(c)) continue;
        if (!leaves) {
          if (ResultOk(Exec(c, "SELECT pg_sleep(0.02)"))) ++queries;
          continue;
        }
        if (PQsendQuery(c.get(), "SELECT pg_sleep(1)") != 1) {
          c.reset();
          continue;
        }
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 150)(random)));
        if (random() % 2 == 0) shutdown(PQsocket(c.get()), SHUT_RDWR);
        c.reset();
        ++abandoned;
      }
    });
  }
  // Every 50 ms while the load runs (bounded).
  const int most = MaxWhileJoining(
      threads, [&] { return ServerConnections(); }, duration + std::chrono::seconds(60));
  EXPECT_LE(most, kBudget);
  EXPECT_GT(queries.load(), 0);
  EXPECT_GT(abandoned.load(), 0);
  EXPECT_GT(MetricSum(fleet.metrics_port(), "pgfleet_cancel_abandoned_total"), 0);
  // Nothing abandoned keeps running, and every server is clean and serves again.
  EXPECT_EQ(WaitFor([&] { return Running("SELECT pg_sleep(1)"); },
                    [](const std::string& n) { return n == "0"; }),
            "0");
  auto c = Connect(fleet.ConnString());
  EXPECT_EQ(Value(c, "SELECT 'served'"), "served");
  EXPECT_LE(ServerConnections(), kBudget);
}

}  // namespace
}  // namespace pgfleet::testing
