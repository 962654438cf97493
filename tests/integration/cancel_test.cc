// Query cancellation through pooler-minted keys: of queries PostgreSQL runs, and of queries that
// still wait in pgfleet for a server.
#include <poll.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/http_client.h"
#include "tests/integration/harness/tcp_forwarder.h"

namespace pgfleet::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The next result of `c` within `timeout`, the NULL that ends each query's results skipped (in
// pipeline mode one comes between queries); null when none came in time.
ResultPtr NextResult(PGconn* c, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int nulls = 0;
  while (Clock::now() < deadline) {
    if (PQconsumeInput(c) == 0) return nullptr;
    if (!PQisBusy(c)) {
      if (PGresult* r = PQgetResult(c)) return ResultPtr(r);
      if (++nulls > 1) return nullptr;  // the query's results are over: nothing more will come
      continue;
    }
    pollfd fd = {PQsocket(c), POLLIN, 0};
    poll(&fd, 1, 20);
  }
  return nullptr;
}

bool SendCancel(PGconn* c) {
  PGcancel* cancel = PQgetCancel(c);
  char err[256];
  const bool sent = PQcancel(cancel, err, sizeof(err)) == 1;
  PQfreeCancel(cancel);
  return sent;
}

class CancelTest : public IntegrationTest {
 public:
  using IntegrationTest::pg;

 protected:
  // Clients waiting for a server in the whole pod, as SHOW POOLS counts them.
  int Waiting(const ConnPtr& admin) {
    ResultPtr r = Exec(admin, "SHOW POOLS");
    int waiting = 0;
    for (const Row& row : RowsOf(r)) {
      int n = 0;
      if (row.at("database") == "postgres" && absl::SimpleAtoi(row.at("cl_waiting"), &n)) {
        waiting += n;
      }
    }
    return waiting;
  }
  // Starts `sql` on `holder` and waits until PostgreSQL runs it: the pool's one server is busy.
  void HoldTheServer(const ConnPtr& holder, const std::string& sql) {
    ASSERT_EQ(PQsendQuery(holder.get(), sql.c_str()), 1);
    ASSERT_EQ(
        WaitFor(
            [&] {
              return pg().QueryValue(absl::StrCat(
                  "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = '", sql,
                  "'"));
            },
            [](const std::string& n) { return n == "1"; }),
        "1");
  }
};

TEST_F(CancelTest, CancelStopsLongQueryWithinASecond) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(PQsendQuery(c.get(), "SELECT pg_sleep(30)"), 1);
  // Until PostgreSQL runs it: a cancel that arrives earlier has no query to stop.
  WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(30)'") != "0";
  });
  const auto start = Clock::now();
  PGcancel* cancel = PQgetCancel(c.get());
  char err[256];
  ASSERT_EQ(PQcancel(cancel, err, sizeof(err)), 1) << err;
  PQfreeCancel(cancel);
  ResultPtr r(PQgetResult(c.get()));
  const auto elapsed = Clock::now() - start;
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_EQ(SqlState(r), "57014");
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  // The connection and its server remain usable.
  EXPECT_EQ(Value(c, "SELECT 'after cancel'"), "after cancel");
}

// A client's cancel whose connection to PostgreSQL is refused (a listen queue full for a
// moment, a proxy restarting) is retried: pgfleet's cancel reaches PostgreSQL once it accepts
// again, and the query stops. It was dropped after the first refusal, and the query ran on.
TEST_F(CancelTest, ACancelWhoseConnectionIsRefusedIsRetried) {
  TcpForwarder forwarder(pg().port());
  PgfleetProcess fleet(
      absl::StrCat("workers: 1\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", forwarder.port(),
                   "}\npool:\n  pool_mode: transaction\n  default_pool_size: 2\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(PQsendQuery(c.get(), "SELECT pg_sleep(20)"), 1);
  ASSERT_TRUE(WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(20)'") != "0";
  }));
  forwarder.StopAccepting();
  const int accepted_before = forwarder.accepted();
  const auto start = Clock::now();
  ASSERT_TRUE(SendCancel(c.get()));
  // pgfleet's CancelRequest to PostgreSQL is refused: the query still runs a while later.
  EXPECT_EQ(NextResult(c.get(), std::chrono::milliseconds(400)), nullptr);
  forwarder.ResumeAccepting();
  ResultPtr r = NextResult(c.get(), std::chrono::seconds(5));
  ASSERT_NE(r, nullptr) << "the cancel was not retried: the query ran on\n" << fleet.Log();
  EXPECT_EQ(SqlState(r), "57014");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_GT(forwarder.accepted(), accepted_before);  // the retry's connection
  EXPECT_THAT(fleet.Log(), ::testing::HasSubstr("event=cancel_retry"));
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_EQ(Value(c, "SELECT 'after cancel'"), "after cancel");
}

TEST_F(CancelTest, LateCancelDoesNotHitTheNextQuery) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(Value(c, "SELECT 1"), "1");
  PGcancel* cancel = PQgetCancel(c.get());
  char err[256];
  // Nothing is running: the key's query is over, so the request must be dropped.
  ASSERT_EQ(PQcancel(cancel, err, sizeof(err)), 1) << err;
  PQfreeCancel(cancel);
  auto other = Connect(fleet.ConnString());
  EXPECT_EQ(Value(other, "SELECT pg_sleep(0.3)::text || 'done'"), "done");
  EXPECT_EQ(Value(c, "SELECT pg_sleep(0.3)::text || 'done'"), "done");
}

TEST_F(CancelTest, ForgedKeyCancelsNothing) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(PQsendQuery(c.get(), "SELECT pg_sleep(0.5)::text || 'finished'"), 1);
  // A cancel for PostgreSQL's real backend pid (what a client would see without pgfleet) or for a
  // made-up key must not reach the query.
  std::string cmd = absl::StrCat(
      "python3 -c \"import socket,struct; s=socket.create_connection(('127.0.0.1',", fleet.port(),
      ")); s.sendall(struct.pack('!iiii',16,80877102,12345,6789)); s.recv(1)\"");
  RunCommand(cmd);
  ResultPtr r(PQgetResult(c.get()));
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), "finished");
}

TEST_F(CancelTest, QueuedQueriesCancelledThroughOtherWorkersFailWithinASecond) {
  pg().Exec("DROP TABLE IF EXISTS cancelled_queue; CREATE TABLE cancelled_queue (id int)");
  // One server for a pod of four workers, so queries queue in pgfleet on every worker.
  PgfleetProcess fleet(
      absl::StrCat("workers: 4\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                   "}\npool:\n  pool_mode: transaction\n  default_pool_size: 1\n",
                   "admin:\n  users: [admin]\n"));
  ASSERT_EQ(
      WaitFor([&] { return WorkerPids(fleet.pid()).size(); }, [](size_t n) { return n >= 4; }), 4u);
  // Logged in and served once on whichever worker the kernel picked (each worker learns the
  // server's parameters from the server it is handed), so they can queue behind the holder.
  constexpr int kQueued = 12;
  std::vector<ConnPtr> clients;
  for (int i = 0; i < kQueued + 1; ++i) {
    clients.push_back(Connect(fleet.ConnString()));
    ASSERT_EQ(Value(clients.back(), "SELECT 'in'"), "in") << ErrorOf(clients.back());
  }
  ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  const ConnPtr& holder = clients[0];
  ASSERT_NO_FATAL_FAILURE(HoldTheServer(holder, "SELECT 42 FROM pg_sleep(4)"));
  for (int i = 1; i <= kQueued; ++i) {
    const std::string sql = absl::StrCat("INSERT INTO cancelled_queue VALUES (", i, ")");
    ASSERT_EQ(PQsendQuery(clients[i].get(), sql.c_str()), 1);
  }
  ASSERT_EQ(WaitFor([&] { return Waiting(admin); }, [](int n) { return n == kQueued; }), kQueued);
  // Each cancel goes to the pod's port: the kernel gives most of them to a worker other than the
  // client's, which forwards it to the owner.
  for (int i = 1; i <= kQueued; ++i) {
    const auto start = Clock::now();
    ASSERT_TRUE(SendCancel(clients[i].get()));
    ResultPtr r = NextResult(clients[i].get(), std::chrono::seconds(1));
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(1)) << i;
    EXPECT_EQ(SqlState(r), "57014") << i << ": " << PQerrorMessage(clients[i].get());
    EXPECT_THAT(PQerrorMessage(clients[i].get()),
                ::testing::HasSubstr("canceling statement due to user request"));
    EXPECT_EQ(NextResult(clients[i].get(), std::chrono::milliseconds(100)), nullptr);
  }
  // The running query is unaffected, and the cancelled ones never ran.
  ResultPtr held = NextResult(holder.get(), std::chrono::seconds(10));
  ASSERT_EQ(PQresultStatus(held.get()), PGRES_TUPLES_OK) << PQerrorMessage(holder.get());
  EXPECT_EQ(std::string(PQgetvalue(held.get(), 0, 0)), "42");
  EXPECT_EQ(pg().QueryValue("SELECT count(*) FROM cancelled_queue"), "0");
  for (int i = 1; i <= kQueued; ++i) EXPECT_EQ(Value(clients[i], "SELECT 'after'"), "after") << i;
  EXPECT_EQ(ServerConnections(), 1);
  // Counted where the clients live; most came through a sibling.
  EXPECT_EQ(WaitFor([&] { return MetricSum(fleet.metrics_port(), "pgfleet_cancel_queued_total"); },
                    [](double n) { return n == kQueued; }),
            kQueued);
  EXPECT_GT(MetricSum(fleet.metrics_port(), "pgfleet_cancel_forwarded_total"), 0);
}

// What pgx does when a query's context deadline passes: a CancelRequest, and the session closed
// right after, without waiting for the query's answer. The kernel gives the cancel's connection to
// any worker of the pod; whichever one it is, and whether the forwarded cancel or the client's
// goodbye reaches the owner first, the query must stop.
void CancelThenDisconnect(CancelTest& test, int workers) {
  PgfleetProcess fleet(absl::StrCat(
      "workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", test.pg().port(),
      "}\npool:\n  pool_mode: transaction\n  default_pool_size: 8\n"));
  ASSERT_EQ(WaitFor([&] { return WorkerPids(fleet.pid()).size(); },
                    [&](size_t n) { return n >= static_cast<size_t>(workers); }),
            static_cast<size_t>(workers));
  const std::string sql = absl::StrCat("SELECT pg_sleep(30) AS cancel_then_disconnect_", workers);
  const std::string running = absl::StrCat(
      "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = '", sql, "'");
  constexpr int kRounds = 50;
  for (int i = 0; i < kRounds; ++i) {
    ConnPtr c = Connect(fleet.ConnString());
    ASSERT_TRUE(Ok(c)) << ErrorOf(c);
    ASSERT_EQ(PQsendQuery(c.get(), sql.c_str()), 1);
    // Until PostgreSQL runs it: a cancel that arrives earlier has no query to stop.
    ASSERT_EQ(WaitFor([&] { return test.pg().QueryValue(running); },
                      [](const std::string& n) { return n == "1"; }),
              "1")
        << i;
    PGcancel* cancel = PQgetCancel(c.get());
    // The cancel goes out on its own thread while the session closes at once (Terminate, then
    // the socket), so the two race as they do in pgx.
    std::thread canceller([cancel] {
      char err[256];
      (void)PQcancel(cancel, err, sizeof(err));
    });
    if (i % 2 == 0) std::this_thread::yield();
    c.reset();
    canceller.join();
    PQfreeCancel(cancel);
    // None is left running: every round's query stopped.
    ASSERT_EQ(WaitFor([&] { return test.pg().QueryValue(running); },
                      [](const std::string& n) { return n == "0"; }, std::chrono::seconds(3)),
              "0")
        << "round " << i << "\n"
        << fleet.Log();
  }
  // The pool's servers are clean again and serve.
  ConnPtr after = Connect(fleet.ConnString());
  EXPECT_EQ(Value(after, "SELECT 'after'"), "after") << ErrorOf(after);
}

TEST_F(CancelTest, CancelThenImmediateDisconnectThroughTwoWorkersLeavesNothingRunning) {
  CancelThenDisconnect(*this, 2);
}

TEST_F(CancelTest, CancelThenImmediateDisconnectThroughFourWorkersLeavesNothingRunning) {
  CancelThenDisconnect(*this, 4);
}

// A cancel that reaches the owner only after the client's goodbye: the owner already sent
// PostgreSQL a cancel for the abandoned query, and PostgreSQL may have missed it (a backend that
// has not started the query yet ignores it). The query here survives a first cancel by design.
// The late cancel, arriving through whichever worker the kernel picked, is taken by the owner for
// the abandoned query (or dropped once it is over), and the query stops within moments: through
// the late cancel or through the owner's own next one (pool_abandon.cc, kCancelAgainAfter).
TEST_F(CancelTest, CancelArrivingAfterTheClientLeftStillStopsItsQuery) {
  // PostgreSQL signals the backend twice for one CancelRequest (its pid and its process group),
  // and the second signal may come after the first was caught: the function swallows cancels for
  // 100 ms after the first, then sleeps on, uncaught.
  pg().Exec(
      "CREATE OR REPLACE FUNCTION survives_one_cancel(tag text) RETURNS void LANGUAGE plpgsql AS $$"
      " DECLARE caught timestamptz;"
      " BEGIN"
      "   BEGIN PERFORM pg_sleep(30); EXCEPTION WHEN query_canceled THEN NULL; END;"
      "   caught := clock_timestamp();"
      "   WHILE clock_timestamp() - caught < interval '100 ms' LOOP"
      "     BEGIN PERFORM pg_sleep(0.01); EXCEPTION WHEN query_canceled THEN NULL; END;"
      "   END LOOP;"
      "   PERFORM pg_sleep(30);"
      " END $$");
  // Debug logging: cancel_finished says whether each cancel was sent, dropped or failed.
  PgfleetProcess fleet(
      absl::StrCat("workers: 2\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                   "}\npool:\n  pool_mode: transaction\n  default_pool_size: 4\n"
                   "  server_connect_timeout: 60s\nlog: {level: debug}\n"));
  ASSERT_EQ(
      WaitFor([&] { return WorkerPids(fleet.pid()).size(); }, [](size_t n) { return n >= 2; }), 2u);
  // Rounds, so that the late cancel lands on the owner and on its sibling (the kernel's pick).
  constexpr int kRounds = 8;
  for (int i = 0; i < kRounds; ++i) {
    const std::string sql = absl::StrCat("SELECT survives_one_cancel('round_", i, "')");
    const std::string running =
        absl::StrCat("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = '",
                     absl::StrReplaceAll(sql, {{"'", "''"}}), "'");
    ConnPtr c = Connect(fleet.ConnString());
    ASSERT_TRUE(Ok(c)) << ErrorOf(c);
    ASSERT_EQ(PQsendQuery(c.get(), sql.c_str()), 1);
    // Inside its first sleep, where the function catches a cancel.
    ASSERT_EQ(WaitFor([&] { return pg().QueryValue(running + " AND wait_event = 'PgSleep'"); },
                      [](const std::string& n) { return n == "1"; }),
              "1");
    // Freed however the round ends (an ASSERT below returns early).
    std::unique_ptr<PGcancel, decltype(&PQfreeCancel)> cancel(PQgetCancel(c.get()), &PQfreeCancel);
    c.reset();  // gone mid-query: pgfleet cancels it, and the query survives that cancel
    char err[256];
    ASSERT_EQ(PQcancel(cancel.get(), err, sizeof(err)), 1) << err;
    cancel.reset();
    // Stopped long before server_connect_timeout (60 s) would close its server.
    EXPECT_EQ(WaitFor([&] { return pg().QueryValue(running); },
                      [](const std::string& n) { return n == "0"; }, std::chrono::seconds(5)),
              "0")
        << "round " << i << "\n"
        << fleet.Log();
  }
  EXPECT_GT(MetricSum(fleet.metrics_port(), "pgfleet_cancel_forwarded_total"), 0);
  // Every late cancel was either taken for its abandoned query or dropped because it was over;
  // none was taken for anything else.
  EXPECT_THAT(fleet.Log(), ::testing::HasSubstr("cancel_request client=gone"));
}

TEST_F(CancelTest, PipelineWhoseFirstQueryIsCancelledWhileQueuedFailsOnlyThatQuery) {
  pg().Exec("DROP TABLE IF EXISTS cancelled_pipeline; CREATE TABLE cancelled_pipeline (id int)");
  PgfleetProcess fleet(PoolConfig("transaction", 1, "", "admin:\n  users: [admin]\n"));
  auto holder = Connect(fleet.ConnString());
  auto c = Connect(fleet.ConnString());
  auto admin = Connect(fleet.ConnString("admin", "pgfleet"));
  ASSERT_TRUE(Ok(holder) && Ok(c) && Ok(admin)) << ErrorOf(c) << ErrorOf(admin);
  ASSERT_NO_FATAL_FAILURE(HoldTheServer(holder, "SELECT 42 FROM pg_sleep(2)"));
  ASSERT_EQ(PQenterPipelineMode(c.get()), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "INSERT INTO cancelled_pipeline VALUES (1)", 0, nullptr,
                              nullptr, nullptr, nullptr, 0),
            1);
  ASSERT_EQ(PQpipelineSync(c.get()), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "SELECT 'second'", 0, nullptr, nullptr, nullptr, nullptr, 0),
            1);
  ASSERT_EQ(PQpipelineSync(c.get()), 1);
  ASSERT_EQ(PQflush(c.get()), 0);
  ASSERT_EQ(WaitFor([&] { return Waiting(admin); }, [](int n) { return n == 1; }), 1);
  const auto start = Clock::now();
  ASSERT_TRUE(SendCancel(c.get()));
  ResultPtr first = NextResult(c.get(), std::chrono::seconds(1));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(PQresultStatus(first.get()), PGRES_FATAL_ERROR);
  EXPECT_EQ(SqlState(first), "57014");
  ResultPtr sync = NextResult(c.get(), std::chrono::seconds(1));
  EXPECT_EQ(PQresultStatus(sync.get()), PGRES_PIPELINE_SYNC);
  // The rest of the pipeline kept its place and runs once the server is free.
  ResultPtr second = NextResult(c.get(), std::chrono::seconds(10));
  ASSERT_EQ(PQresultStatus(second.get()), PGRES_TUPLES_OK) << PQerrorMessage(c.get());
  EXPECT_EQ(std::string(PQgetvalue(second.get(), 0, 0)), "second");
  sync = NextResult(c.get(), std::chrono::seconds(1));
  EXPECT_EQ(PQresultStatus(sync.get()), PGRES_PIPELINE_SYNC);
  ASSERT_EQ(PQexitPipelineMode(c.get()), 1);
  ResultPtr held = NextResult(holder.get(), std::chrono::seconds(10));
  EXPECT_EQ(std::string(PQgetvalue(held.get(), 0, 0)), "42");
  EXPECT_EQ(pg().QueryValue("SELECT count(*) FROM cancelled_pipeline"), "0");
}

}  // namespace
}  // namespace pgfleet::testing
