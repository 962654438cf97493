// One pool per pod: a pod's workers share each pool's size and servers. Long queries on one
// worker do not stall that worker's other clients while the pod has idle servers elsewhere; the
// pool's size holds for the pod; a killed worker's servers return to the pod; a server that moved
// between workers keeps its prepared statements and parameters right.
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/http_client.h"

namespace pgfleet::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string PodConfig(int workers, int pool_size, const std::string& pool_extra = "") {
  return absl::StrCat(
      "workers: ", workers,
      "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", PgServer::Shared().port(),
      "}\npool:\n  pool_mode: transaction\n  default_pool_size: ", pool_size, "\n", pool_extra);
}

// Every worker forked and accepting: the port answers before all of them are (slow under the
// sanitizers), and a client the kernel gives to a missing worker would wait in its backlog.
void WaitForWorkers(const PgfleetProcess& fleet, size_t n) {
  ASSERT_EQ(WaitFor([&] { return WorkerPids(fleet.pid()).size(); },
                    [&](size_t count) { return count >= n; }, std::chrono::seconds(10)),
            n);
  // Each worker answers once it runs its loop; many connections reach all of them.
  auto probe = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(probe)) << ErrorOf(probe);
}

// The log lines about server connections opening and closing, to explain a count.
std::string ServerEvents(const PgfleetProcess& fleet) {
  std::string out;
  for (auto line : absl::StrSplit(fleet.Log(), '\n')) {
    if (absl::StrContains(line, "server_login") || absl::StrContains(line, "server_disconnect") ||
        absl::StrContains(line, "server_connect") || absl::StrContains(line, "handoff")) {
      absl::StrAppend(&out, line, "\n");
    }
  }
  return out;
}

class PodPoolTest : public IntegrationTest {
 protected:
  // Runs `clients` connections doing `sql` in a loop for `duration`; returns the slowest query
  // and counts the queries, sampling the server connections PostgreSQL sees meanwhile.
  struct LoadResult {
    std::chrono::milliseconds slowest{0};
    int queries = 0;
    int failures = 0;
    int max_servers = 0;
    std::string first_error;
  };
  LoadResult RunLoad(const PgfleetProcess& fleet, int clients, std::chrono::milliseconds duration) {
    std::atomic<int64_t> slowest_ms{0};
    std::atomic<int> queries{0};
    std::atomic<int> failures{0};
    std::mutex error_mu;
    std::string first_error;
    auto fail = [&](const ConnPtr& c) {
      ++failures;
      std::lock_guard<std::mutex> lock(error_mu);
      if (first_error.empty()) first_error = ErrorOf(c);
    };
    const auto deadline = Clock::now() + duration;
    std::vector<std::thread> threads;
    for (int i = 0; i < clients; ++i) {
      threads.emplace_back([&] {
        auto c = Connect(fleet.ConnString());
        if (!Ok(c)) {
          fail(c);
          return;
        }
        for (int n = 0; n < 100000 && Clock::now() < deadline; ++n) {
          const auto start = Clock::now();
          if (!ResultOk(Exec(c, "SELECT 1"))) {
            fail(c);
            return;
          }
          const int64_t ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
          int64_t seen = slowest_ms.load();
          while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
          }
          ++queries;
        }
      });
    }
    const int max_servers = MaxWhileJoining(
        threads, [&] { return ServerConnections(); }, duration + std::chrono::seconds(30));
    return {std::chrono::milliseconds(slowest_ms.load()), queries.load(), failures.load(),
            max_servers, first_error};
  }
};

TEST_F(PodPoolTest, LongQueriesDoNotStallClientsWhileThePodHasIdleServers) {
  // The scenario: a pool of 4 for the pod, 4 workers, two long queries, eight clients.
  // With a static quarter of the pool per worker, clients on the long queries' workers waited
  // the whole 6 s; with one pool they take the pod's other servers.
  PgfleetProcess fleet(PodConfig(4, 4));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 4));
  std::vector<ConnPtr> sleepers;
  for (int i = 0; i < 2; ++i) {
    sleepers.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(sleepers.back())) << ErrorOf(sleepers.back());
    ASSERT_EQ(PQsendQuery(sleepers.back().get(), "SELECT pg_sleep(6)"), 1);
  }
  ASSERT_TRUE(WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(6)'") == "2";
  }));
  const LoadResult load = RunLoad(fleet, 8, std::chrono::seconds(3));
  EXPECT_EQ(load.failures, 0) << load.first_error;
  EXPECT_GT(load.queries, 80);
  EXPECT_LT(load.slowest, std::chrono::milliseconds(1000));
  // The pod never opened more than its pool's size, whatever each worker needed.
  EXPECT_LE(load.max_servers, 4) << ServerEvents(fleet);
  EXPECT_GE(load.max_servers, 3);
  for (auto& c : sleepers) {
    ResultPtr r(PQgetResult(c.get()));
    EXPECT_TRUE(ResultOk(r)) << ErrorOf(c);
  }
}

TEST_F(PodPoolTest, APoolSmallerThanTheWorkerCountServesEveryWorker) {
  // A pool of 2 for 4 workers: with static shares two workers had no server at all.
  PgfleetProcess fleet(PodConfig(4, 2, "  query_wait_timeout: 20s\nadmin:\n  users: [admin]\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 4));
  const LoadResult load = RunLoad(fleet, 8, std::chrono::seconds(3));
  EXPECT_EQ(load.failures, 0) << load.first_error;
  EXPECT_GT(load.queries, 80);
  EXPECT_LT(load.slowest, std::chrono::milliseconds(1000));
  EXPECT_LE(load.max_servers, 2) << ServerEvents(fleet);
  // Clients on workers without a server of their own were served by servers that moved.
  EXPECT_TRUE(WaitFor([&] { return MetricSum(fleet, "pgfleet_server_handoffs_total") > 0; }));
  // SHOW POOLS shows the moves for the pod's one pool: every server given was taken.
  ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  auto show_pools = [&](const std::string& column) {
    ResultPtr pools = Exec(admin, "SHOW POOLS");
    const auto rows = RowsOf(pools);
    return rows.size() == 1 ? std::stoi(rows[0].at(column)) : -1;
  };
  const int handed_over = show_pools("sv_handed_over");
  EXPECT_GT(handed_over, 0);
  EXPECT_EQ(WaitFor([&] { return show_pools("sv_adopted"); },
                    [&](int adopted) { return adopted == handed_over; }),
            handed_over);
  // /metrics publishes a moment later than SHOW answers.
  EXPECT_EQ(WaitFor([&] { return MetricSum(fleet, "pgfleet_server_handoffs_total"); },
                    [&](double sum) { return sum == handed_over; }),
            handed_over);
}

TEST_F(PodPoolTest, TheReservePoolIsThePods) {
  // A pool of 2 and a reserve of 1 for the pod of 4 workers: with both servers in long queries,
  // clients on any worker get the one reserve server after reserve_pool_timeout, and the pod
  // never opens more than 3 (a reserve per worker would open up to 6).
  PgfleetProcess fleet(PodConfig(
      4, 2, "  reserve_pool_size: 1\n  reserve_pool_timeout: 200ms\n  query_wait_timeout: 20s\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 4));
  std::vector<ConnPtr> sleepers;
  for (int i = 0; i < 2; ++i) {
    sleepers.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(sleepers.back())) << ErrorOf(sleepers.back());
    ASSERT_EQ(PQsendQuery(sleepers.back().get(), "SELECT pg_sleep(4)"), 1);
  }
  ASSERT_TRUE(WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(4)'") == "2";
  }));
  const LoadResult load = RunLoad(fleet, 8, std::chrono::seconds(2));
  EXPECT_EQ(load.failures, 0) << load.first_error;
  EXPECT_GT(load.queries, 20);
  EXPECT_EQ(load.max_servers, 3) << ServerEvents(fleet);
  for (auto& c : sleepers) {
    ResultPtr r(PQgetResult(c.get()));
    EXPECT_TRUE(ResultOk(r)) << ErrorOf(c);
  }
}

TEST_F(PodPoolTest, AKilledWorkersServersReturnToThePod) {
  PgfleetProcess fleet(PodConfig(2, 2, "  query_wait_timeout: 30s\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 2));
  // Two open transactions hold the pod's whole pool.
  std::vector<ConnPtr> holders;
  for (int i = 0; i < 2; ++i) {
    holders.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(holders.back()));
    ASSERT_TRUE(ResultOk(Exec(holders.back(), "BEGIN")));
    ASSERT_TRUE(ResultOk(Exec(holders.back(), "SELECT 1")));
  }
  ASSERT_EQ(WaitFor([&] { return ServerConnections(); }, [](int n) { return n == 2; }), 2);
  // SIGKILL every worker: none can give anything back itself.
  for (pid_t pid : WorkerPids(fleet.pid())) kill(pid, SIGKILL);
  const auto killed_at = Clock::now();
  // The supervisor returns their room: a new client is served by a restarted worker, well
  // before query_wait_timeout (30 s), which is where it would end if the room stayed taken.
  ConnPtr c;
  ASSERT_TRUE(WaitFor(
      [&] {
        c = Connect(fleet.ConnString("postgres", "postgres", "connect_timeout=2"));
        return Ok(c);
      },
      std::chrono::seconds(10)))
      << ErrorOf(c);
  ASSERT_EQ(PQsendQuery(c.get(), "SELECT 1"), 1);
  pollfd fd{PQsocket(c.get()), POLLIN, 0};
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline && PQisBusy(c.get())) {
    poll(&fd, 1, 50);
    PQconsumeInput(c.get());
  }
  ASSERT_FALSE(PQisBusy(c.get())) << "the pod's room never came back";
  ResultPtr r(PQgetResult(c.get()));
  const bool served = ResultOk(r);
  EXPECT_TRUE(served);
  EXPECT_LT(Clock::now() - killed_at, std::chrono::seconds(10));
}

TEST_F(PodPoolTest, AServerThatMovedKeepsPreparedStatementsAndParameters) {
  // One server for the pod and two workers: whenever consecutive clients sit on different
  // workers, the server moves. Each client's statement and application_name must be right on it.
  PgfleetProcess fleet(PodConfig(2, 1, "  max_prepared_statements: 10\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 2));
  constexpr int kClients = 12;
  std::vector<ConnPtr> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(clients.back())) << ErrorOf(clients.back());
    ASSERT_TRUE(ResultOk(Exec(clients.back(), absl::StrCat("SET application_name = 'c", i, "'"))));
    ResultPtr prepared(PQprepare(clients.back().get(), "double_it",
                                 "SELECT $1::int * 2, current_setting('application_name')", 1,
                                 nullptr));
    ASSERT_TRUE(ResultOk(prepared)) << ErrorOf(clients.back());
  }
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < kClients; ++i) {
      const std::string arg = std::to_string(round * 100 + i);
      const char* values[] = {arg.c_str()};
      ResultPtr r(PQexecPrepared(clients[i].get(), "double_it", 1, values, nullptr, nullptr, 0));
      ASSERT_TRUE(ResultOk(r)) << "client " << i << " round " << round << ": "
                               << ErrorOf(clients[i]);
      EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), std::to_string((round * 100 + i) * 2));
      EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 1)), absl::StrCat("c", i));
    }
  }
  EXPECT_EQ(ServerConnections(), 1);
  // With twelve clients spread over two workers, the server moved between them.
  EXPECT_TRUE(WaitFor(
      [&] { return MetricSum(fleet.metrics_port(), "pgfleet_server_handoffs_total") > 0; }));
}

TEST_F(PodPoolTest, MinPoolSizeIsThePods) {
  // min_pool_size 3 for a pod of 4 workers, and one client: the worker it landed on keeps 3
  // servers ahead of demand for the pod (a static quarter of it would have been 1).
  PgfleetProcess fleet(PodConfig(4, 4, "  min_pool_size: 3\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 4));
  auto client = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(client, "SELECT 1"))) << ErrorOf(client);
  EXPECT_EQ(WaitFor([&] { return ServerConnections(); }, [](int n) { return n >= 3; }), 3);
  // The janitor runs every 100 ms: over a second it opens no more.
  int most = 0;
  WaitFor(
      [&] {
        most = std::max(most, ServerConnections());
        return false;
      },
      std::chrono::seconds(1), std::chrono::milliseconds(50));
  EXPECT_EQ(most, 3);
}

TEST_F(PodPoolTest, ACancelStopsAQueryOnAServerThatMoved) {
  // One server for two workers: it moves between clients of both; a cancel for any of them
  // reaches the backend that server holds, through whichever worker the CancelRequest lands on.
  PgfleetProcess fleet(PodConfig(2, 1));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 2));
  std::vector<ConnPtr> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(ResultOk(Exec(clients.back(), "SELECT 1"))) << ErrorOf(clients.back());
  }
  ASSERT_TRUE(WaitFor(
      [&] { return MetricSum(fleet.metrics_port(), "pgfleet_server_handoffs_total") > 0; }));
  for (auto& c : clients) {
    ASSERT_EQ(PQsendQuery(c.get(), "SELECT pg_sleep(30)"), 1);
    ASSERT_TRUE(WaitFor([&] {
      return pg().QueryValue(
                 "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
                 "query = 'SELECT pg_sleep(30)'") == "1";
    }));
    PGcancel* cancel = PQgetCancel(c.get());
    char err[256];
    EXPECT_EQ(PQcancel(cancel, err, sizeof(err)), 1) << err;
    PQfreeCancel(cancel);
    const auto sent = Clock::now();
    pollfd fd{PQsocket(c.get()), POLLIN, 0};
    while (PQisBusy(c.get()) && Clock::now() - sent < std::chrono::seconds(5)) {
      poll(&fd, 1, 20);
      PQconsumeInput(c.get());
    }
    ASSERT_FALSE(PQisBusy(c.get())) << "the cancel did not reach the query";
    ResultPtr r(PQgetResult(c.get()));
    EXPECT_EQ(SqlState(r), "57014");
    while (ResultPtr rest{PQgetResult(c.get())}) {
    }
  }
}

TEST_F(PodPoolTest, AFullDatabaseBudgetIsFreedByASiblingsIdleServer) {
  // max_db_connections 1 for the pod: postgres's pool holds the one server, idle, on one worker.
  // A client of another user on the other worker must get room: the sibling closes its idle
  // server for it (with a static split, or eviction only among a worker's own pools, it waited
  // for query_wait_timeout).
  PgfleetProcess fleet(absl::StrCat(
      "workers: 2\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
      ", max_db_connections: 1}\npool:\n  pool_mode: transaction\n  default_pool_size: 2\n"
      "  query_wait_timeout: 5s\nadmin:\n  users: [postgres]\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 2));
  auto admin = Connect(fleet.ConnString("postgres", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  auto holder = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(holder, "SELECT 1"))) << ErrorOf(holder);
  // The worker of postgres's (idle) server, and a client of otheruser on the other worker:
  // SHOW CLIENTS says where each connection is.
  auto worker_of = [&](const std::string& type, const std::string& user) {
    ResultPtr r = Exec(admin, type == "S" ? "SHOW SERVERS" : "SHOW CLIENTS");
    const int user_col = PQfnumber(r.get(), "user");
    const int db_col = PQfnumber(r.get(), "database");
    const int worker_col = PQfnumber(r.get(), "worker");
    for (int row = 0; row < PQntuples(r.get()); ++row) {
      if (PQgetvalue(r.get(), row, user_col) == user &&
          std::string(PQgetvalue(r.get(), row, db_col)) == "postgres") {
        return std::string(PQgetvalue(r.get(), row, worker_col));
      }
    }
    return std::string();
  };
  const std::string holder_worker = WaitFor([&] { return worker_of("S", "postgres"); },
                                            [](const std::string& w) { return !w.empty(); });
  ASSERT_FALSE(holder_worker.empty());
  bool tried = false;
  for (int attempt = 0; attempt < 30 && !tried; ++attempt) {
    // Connecting needs a server (to learn what to welcome with), so it needs the room already.
    const auto start = Clock::now();
    auto other = Connect(fleet.ConnString("otheruser", "postgres"));
    ASSERT_TRUE(Ok(other)) << ErrorOf(other);
    if (worker_of("C", "otheruser") == holder_worker) continue;  // same worker: evicts locally
    tried = true;
    ASSERT_TRUE(ResultOk(Exec(other, "SELECT 1"))) << ErrorOf(other);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  }
  EXPECT_TRUE(tried) << "no client of otheruser landed on the other worker in 30 tries";
  EXPECT_LE(ServerConnections("postgres") + ServerConnections("otheruser"), 2);
}

// Clients per worker as SHOW CLIENTS lists them (the console's own connection included).
std::map<std::string, int> ClientsPerWorker(const ConnPtr& admin) {
  std::map<std::string, int> per_worker;
  for (auto& row : RowsOf(Exec(admin, "SHOW CLIENTS"))) ++per_worker[row.at("worker")];
  return per_worker;
}

TEST_F(PodPoolTest, NewClientsAreSpreadEvenlyOverTheWorkers) {
  // The kernel hashes connections over the workers' SO_REUSEPORT sockets: 12 clients on 4
  // workers land 3 to a worker about 2% of the time. A worker holding more clients than a
  // sibling passes a new one on before reading from it, so every step keeps the workers within
  // one client of each other.
  PgfleetProcess fleet(PodConfig(4, 4, "admin:\n  users: [admin]\n"));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 4));
  ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  // WaitForWorkers' probe is gone: only the console is left.
  ASSERT_EQ(WaitFor([&] { return RowsOf(Exec(admin, "SHOW CLIENTS")).size(); },
                    [](size_t n) { return n == 1; }),
            1u);
  std::vector<ConnPtr> clients;
  for (int i = 0; i < 12; ++i) {
    clients.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(clients.back())) << ErrorOf(clients.back());
    ASSERT_TRUE(ResultOk(Exec(clients.back(), "SELECT 1"))) << ErrorOf(clients.back());
  }
  const std::map<std::string, int> per_worker = ClientsPerWorker(admin);
  ASSERT_EQ(per_worker.size(), 4u);
  int fewest = 13, most = 0, total = 0;
  std::string spread;
  for (const auto& [worker, n] : per_worker) {
    fewest = std::min(fewest, n);
    most = std::max(most, n);
    total += n;
    absl::StrAppend(&spread, " worker ", worker, ": ", n);
  }
  EXPECT_EQ(total, 13);
  EXPECT_LE(most - fewest, 1) << spread;
  // Every client was served where it ended up, passed on or not.
  for (auto& c : clients) EXPECT_TRUE(ResultOk(Exec(c, "SELECT 2"))) << ErrorOf(c);
  // What the counter says adds up with what SHOW CLIENTS shows: each pass is one client.
  EXPECT_LE(MetricSum(fleet, "pgfleet_clients_balanced_total"), 13);
}

TEST_F(PodPoolTest, WithoutBalanceTheKernelAloneSpreadsClients) {
  PgfleetProcess fleet(PodConfig(4, 4), /*userlist=*/"", "  balance_clients: false\n");
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(fleet, 4));
  std::vector<ConnPtr> clients;
  for (int i = 0; i < 12; ++i) {
    clients.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(clients.back())) << ErrorOf(clients.back());
    ASSERT_TRUE(ResultOk(Exec(clients.back(), "SELECT 1"))) << ErrorOf(clients.back());
  }
  // Workers publish their counters every 500 ms: wait until the 12 accepts (and the probe's) show.
  ASSERT_GE(WaitFor([&] { return MetricSum(fleet, "pgfleet_client_connections_total"); },
                    [](double n) { return n >= 13; }),
            13);
  EXPECT_EQ(MetricSum(fleet, "pgfleet_clients_balanced_total"), 0);
}

}  // namespace
}  // namespace pgfleet::testing
