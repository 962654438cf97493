// Faults around the fleet (issue 8): PostgreSQL unreachable when pgfleet starts, a worker
// SIGKILLed under load, and log writes failing because the log disk is full.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/http_client.h"

namespace pgfleet::testing {
namespace fault_fleet_test {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string FleetConfig(int workers, int pg_port, const std::string& top_extra = "") {
  return absl::StrCat("workers: ", workers,
                      "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg_port,
                      "}\npool:\n  pool_mode: transaction\n  default_pool_size: 8\n", top_extra);
}

// The supervisor's port accepts before it has forked every worker: the children of `supervisor`
// once there are `n` of them, or whatever there are after 5 s.
std::vector<pid_t> WaitForWorkers(pid_t supervisor, size_t n) {
  return WaitFor([&] { return WorkerPids(supervisor); },
                 [&](const std::vector<pid_t>& pids) { return pids.size() >= n; },
                 std::chrono::seconds(5));
}

// Every row of a query's result as column -> value (empty on an error).
std::vector<Row> Rows(const ConnPtr& conn, const std::string& sql) {
  return RowsOf(Exec(conn, sql));
}

int LocalPort(const ConnPtr& c) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(PQsocket(c.get()), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return ntohs(addr.sin_port);
}

enum class Outcome { kOk, kError, kTimeout };

// Runs `sql` and waits for its result at most `timeout`: a client that a pooler leaves hanging
// shows up as kTimeout instead of hanging the test.
Outcome QueryWithin(PGconn* c, const char* sql, milliseconds timeout) {
  if (PQsendQuery(c, sql) != 1) return Outcome::kError;
  const auto deadline = Clock::now() + timeout;
  bool failed = false;
  while (Clock::now() < deadline) {
    while (!PQisBusy(c)) {
      PGresult* r = PQgetResult(c);
      if (r == nullptr) return failed ? Outcome::kError : Outcome::kOk;
      const auto status = PQresultStatus(r);
      failed |= status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK;
      PQclear(r);
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pollfd pfd{PQsocket(c), POLLIN, 0};
    if (pfd.fd < 0) return Outcome::kError;
    poll(&pfd, 1, static_cast<int>(std::max<int64_t>(1, left.count())));
    if (PQconsumeInput(c) != 1) failed = true;  // the result (an error) follows
  }
  return Outcome::kTimeout;
}

class FaultFleetTest : public IntegrationTest {};

TEST_F(FaultFleetTest, PostgresUnreachableAtStartThenServedOnceItComes) {
  // initdb before pgfleet starts, so PostgreSQL's start below is quick; nothing listens yet.
  PgServer later(FreePort());
  PgfleetProcess fleet(FleetConfig(2, later.port()));
  ASSERT_TRUE(fleet.Running()) << fleet.Log();
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/healthz"), 200);
  // Not ready for the right reason once the workers have reported (bounded: 10 s).
  std::string body;
  const int status = WaitFor([&] { return HttpGet(fleet.metrics_port(), "/readyz", &body); },
                             [&](int) { return body.find("PostgreSQL") != std::string::npos; });
  EXPECT_EQ(status, 503);
  EXPECT_THAT(body, HasSubstr("PostgreSQL is not reachable"));
  // A client that arrives during the outage waits for a server (bounded by
  // query_wait_timeout) rather than being refused...
  std::atomic<bool> early_done{false};
  std::string early_result;
  Clock::time_point early_served_at;
  std::thread early([&] {
    auto c = Connect(fleet.ConnString());
    early_result = Ok(c) ? Value(c, "SELECT 'waited'") : ErrorOf(c);
    early_served_at = Clock::now();
    early_done = true;
  });
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(early_done.load()) << early_result;

  later.Start();
  const auto up = Clock::now();
  // ... and is served once PostgreSQL is there, as is every new client, and the pod is ready.
  early.join();  // bounded by libpq's connect_timeout (10 s)
  EXPECT_EQ(early_result, "waited");
  EXPECT_LT(early_served_at - up, std::chrono::seconds(5));
  int served = 0;
  for (int i = 0; i < 8; ++i) {  // the kernel spreads them over both workers
    auto c = Connect(fleet.ConnString("postgres", "postgres", "connect_timeout=3"));
    if (Ok(c) && Value(c, "SELECT 'up'") == "up") ++served;
  }
  EXPECT_EQ(served, 8) << fleet.Log().substr(0, 4000);
  WaitFor([&] { return HttpGet(fleet.metrics_port(), "/readyz", &body) == 200; },
          std::chrono::seconds(5));
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/readyz", &body), 200) << body;
  EXPECT_LT(Clock::now() - up, std::chrono::seconds(10));
}

// One client running queries in a loop, on a known worker.
struct LoopClient {
  ConnPtr conn;
  int slot = -1;
  std::atomic<int> ok_before_kill{0};
  std::atomic<int> ok_after_kill{0};
  std::atomic<bool> failed{false};
  Outcome failure = Outcome::kOk;
  milliseconds failed_after_kill{-1};
  bool connection_lost = false;
};

// Connects clients until each of the two workers has at least 3 (the kernel picks the worker;
// bounded at 40), with each client's worker slot from SHOW CLIENTS, and each slot's pid from
// SHOW WORKERS.
void ConnectToBothWorkers(const PgfleetProcess& fleet,
                          std::vector<std::unique_ptr<LoopClient>>* clients,
                          std::map<int, pid_t>* slot_pid) {
  std::map<int, int> per_slot;
  auto admin = Connect(fleet.ConnString("admin", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  while (clients->size() < 40 && (per_slot[0] < 3 || per_slot[1] < 3)) {
    auto client = std::make_unique<LoopClient>();
    client->conn = Connect(fleet.ConnString());
    ASSERT_TRUE(Ok(client->conn)) << ErrorOf(client->conn);
    const std::string port = std::to_string(LocalPort(client->conn));
    for (const Row& row : Rows(admin, "SHOW CLIENTS")) {
      if (row.at("port") == port && row.at("addr") == "127.0.0.1") {
        ASSERT_TRUE(absl::SimpleAtoi(row.at("worker"), &client->slot));
      }
    }
    ASSERT_GE(client->slot, 0) << "client on port " << port << " not in SHOW CLIENTS";
    ++per_slot[client->slot];
    clients->push_back(std::move(client));
  }
  ASSERT_GE(per_slot[0], 3);
  ASSERT_GE(per_slot[1], 3);
  for (const Row& row : Rows(admin, "SHOW WORKERS")) {
    int slot = -1, pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(row.at("worker"), &slot));
    ASSERT_TRUE(absl::SimpleAtoi(row.at("pid"), &pid));
    (*slot_pid)[slot] = pid;
  }
  ASSERT_EQ(slot_pid->size(), 2u);
}

TEST_F(FaultFleetTest, WorkerKilledUnderLoadDropsOnlyItsOwnClients) {
  PgfleetProcess fleet(FleetConfig(2, pg().port(), "admin:\n  users: [admin]\n"));
  ASSERT_EQ(WaitForWorkers(fleet.pid(), 2).size(), 2u) << fleet.Log();
  std::vector<std::unique_ptr<LoopClient>> clients;
  std::map<int, pid_t> slot_pid;
  ASSERT_NO_FATAL_FAILURE(ConnectToBothWorkers(fleet, &clients, &slot_pid));
  const std::vector<pid_t> before = WorkerPids(fleet.pid());
  std::vector<pid_t> shown = {slot_pid[0], slot_pid[1]};
  std::sort(shown.begin(), shown.end());
  ASSERT_EQ(before, shown);
  const int victim_slot = 0;
  const pid_t victim = slot_pid[victim_slot];

  std::atomic<bool> stop{false};
  std::atomic<bool> killed{false};
  Clock::time_point killed_at;
  std::vector<std::thread> load;
  for (auto& client : clients) {
    load.emplace_back([&, c = client.get()] {
      for (int n = 0; n < 100000 && !stop; ++n) {
        const bool after = killed;  // read before the query: counts only queries sent after
        const Outcome outcome = QueryWithin(c->conn.get(), "SELECT 1", milliseconds(3000));
        if (outcome != Outcome::kOk) {
          c->failure = outcome;
          c->failed_after_kill =
              after ? std::chrono::duration_cast<milliseconds>(Clock::now() - killed_at)
                    : milliseconds(-1);
          c->connection_lost = PQstatus(c->conn.get()) == CONNECTION_BAD;
          c->failed = true;
          return;
        }
        ++(after ? c->ok_after_kill : c->ok_before_kill);
        std::this_thread::sleep_for(milliseconds(2));
      }
    });
  }
  auto all = [&](auto pred) {
    return std::all_of(clients.begin(), clients.end(), [&](auto& c) { return pred(*c); });
  };
  // Bounded waits: every client busy, then after the kill every victim failed and every
  // survivor went on.
  WaitFor([&] { return all([](LoopClient& c) { return c.ok_before_kill >= 3; }); },
          std::chrono::seconds(5));
  killed_at = Clock::now();
  killed = true;
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  WaitFor(
      [&] {
        return all([&](LoopClient& c) {
          return c.slot == victim_slot ? c.failed.load() : c.ok_after_kill >= 20;
        });
      },
      std::chrono::seconds(5));
  stop = true;
  for (auto& t : load) t.join();

  for (const auto& c : clients) {
    SCOPED_TRACE(absl::StrCat("client on worker ", c->slot));
    EXPECT_GE(c->ok_before_kill.load(), 3);
    if (c->slot == victim_slot) {
      // Its connection is gone: an error within a bounded time, not a hang.
      EXPECT_TRUE(c->failed.load());
      EXPECT_EQ(c->failure, Outcome::kError);
      EXPECT_TRUE(c->connection_lost);
      EXPECT_LT(c->failed_after_kill, milliseconds(3000));
    } else {
      EXPECT_FALSE(c->failed.load()) << "a client of the other worker saw an error";
      EXPECT_GE(c->ok_after_kill.load(), 20);
    }
  }
  // The supervisor restarts the worker; the port keeps serving.
  const std::vector<pid_t> after = WaitFor(
      [&] { return WorkerPids(fleet.pid()); },
      [&](const std::vector<pid_t>& pids) {
        return pids.size() == 2 && std::find(pids.begin(), pids.end(), victim) == pids.end();
      },
      std::chrono::seconds(5));
  EXPECT_EQ(after.size(), 2u);
  EXPECT_THAT(after, ::testing::Not(::testing::Contains(victim)));
  EXPECT_THAT(after, ::testing::Contains(slot_pid[1 - victim_slot]));
  int served = 0;
  for (int i = 0; i < 10; ++i) {
    auto c = Connect(fleet.ConnString("postgres", "postgres", "connect_timeout=3"));
    if (Ok(c) && Value(c, "SELECT 'up'") == "up") ++served;
  }
  EXPECT_EQ(served, 10);
  EXPECT_THAT(fleet.Log(), HasSubstr("event=worker_died"));
}

// Debug level with connection logging: every login, logout and query tries to log.
constexpr char kChattyLog[] =
    "log: {level: debug, log_connections: true, log_disconnections: true}\n";

// pgbench through `fleet`, a new connection per transaction (-C), so every transaction logs; then
// one more query. Expects no error, and the same workers as before (none died or restarted).
void ExpectPgbenchServedWithoutLosingAWorker(PgfleetProcess& fleet) {
  ASSERT_TRUE(fleet.Running());
  const std::vector<pid_t> workers = WaitForWorkers(fleet.pid(), 2);
  ASSERT_EQ(workers.size(), 2u);
  const std::string script = fleet.dir() + "/select1.sql";
  ASSERT_EQ(RunCommand(absl::StrCat("echo 'SELECT 1;' > ", script)), 0);
  // Bounded by -t and by timeout(1): a data path stuck behind the log shows up as exit=124.
  const std::string out = RunCommandOutput(
      absl::StrCat("timeout 20 pgbench -n -C -c 8 -j 2 -t 100 -f ", script, " -h 127.0.0.1 -p ",
                   fleet.port(), " -U postgres postgres 2>&1; echo exit=$?"));
  EXPECT_THAT(out, HasSubstr("exit=0")) << out;
  EXPECT_THAT(out, HasSubstr("number of transactions actually processed: 800/800")) << out;
  EXPECT_THAT(out, HasSubstr("number of failed transactions: 0 (0.000%)")) << out;
  auto c = Connect(fleet.ConnString("postgres", "postgres", "connect_timeout=3"));
  EXPECT_TRUE(Ok(c)) << ErrorOf(c);
  EXPECT_EQ(Value(c, "SELECT 'still serving'"), "still serving");
  EXPECT_EQ(WorkerPids(fleet.pid()), workers);
  EXPECT_TRUE(fleet.Running());
}

// A worker SIGKILLed while its servers run queries (issue 34): PostgreSQL ends the orphaned
// backends within client_connection_check_interval, which every server login sets, and the pod
// keeps the dead worker's servers counted until then. Before, its room went back at once, the
// surviving worker opened servers while PostgreSQL still ran the orphans, and PostgreSQL listed 5
// to 7 backends for a budget of 4.
TEST_F(FaultFleetTest, AWorkerKilledMidQueryNeverPutsPostgresOverTheBudget) {
  constexpr int kBudget = 4;
  PgfleetProcess fleet(
      absl::StrCat("workers: 2\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                   ", max_db_connections: ", kBudget, "}\npool:\n  pool_mode: transaction\n",
                   "  default_pool_size: ", kBudget, "\nadmin:\n  users: [admin]\n"));
  ASSERT_EQ(WaitForWorkers(fleet.pid(), 2).size(), 2u) << fleet.Log();
  // Clients on both workers, each running pg_sleep(1.5) in a loop on a thread of its own.
  std::vector<std::unique_ptr<LoopClient>> clients;
  std::map<int, pid_t> slot_pid;
  ASSERT_NO_FATAL_FAILURE(ConnectToBothWorkers(fleet, &clients, &slot_pid));

  // PostgreSQL's view: pgfleet's backends of the database, sampled every 20 ms.
  // The load and the sampler run until `stop`; the sampler paces itself on it, ending at once.
  std::atomic<bool> stop{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  std::atomic<int> max_backends{0};
  std::atomic<int> samples{0};
  std::atomic<int> active{0};
  std::thread sampler([&] {
    auto conn = Connect(pg().ConnString() + " application_name=budget-sampler");
    const std::string sql = absl::StrCat(
        "SELECT count(*) AS total, count(*) FILTER (WHERE state = 'active') AS running "
        "FROM pg_stat_activity "
        "WHERE datname = 'postgres' AND backend_type = 'client backend' AND "
        "application_name <> 'budget-sampler' AND backend_start >= '",
        test_start_, "'");
    for (int n = 0; n < 2000 && !stop; ++n) {
      std::vector<Row> rows = Rows(conn, sql);
      if (rows.size() == 1) {
        int total = 0, running = 0;
        if (absl::SimpleAtoi(rows[0].at("total"), &total) &&
            absl::SimpleAtoi(rows[0].at("running"), &running)) {
          max_backends = std::max(max_backends.load(), total);
          active = running;
          ++samples;
        }
      }
      std::unique_lock<std::mutex> lock(stop_mu);
      stop_cv.wait_for(lock, milliseconds(20), [&] { return stop.load(); });
    }
  });
  std::atomic<bool> killed{false};
  std::atomic<int> survivor_ok_after_kill{0};
  std::vector<std::thread> load;
  for (auto& client : clients) {
    load.emplace_back([&, c = client.get()] {
      for (int n = 0; n < 20 && !stop; ++n) {
        const bool after = killed;
        if (QueryWithin(c->conn.get(), "SELECT pg_sleep(1.5)", milliseconds(15000)) !=
            Outcome::kOk) {
          c->failed = true;
          return;
        }
        if (after && c->slot != 0) ++survivor_ok_after_kill;
      }
    });
  }
  // Every server busy, then the kill of worker 0 while its servers run their queries.
  EXPECT_TRUE(WaitFor([&] { return active.load() >= kBudget; }, std::chrono::seconds(10)));
  killed = true;
  ASSERT_EQ(kill(slot_pid[0], SIGKILL), 0);
  // The survivor serves its clients again once the dead worker's backends are gone.
  EXPECT_TRUE(WaitFor([&] { return survivor_ok_after_kill.load() >= 2; }, std::chrono::seconds(8)))
      << fleet.Log();
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    stop = true;
  }
  stop_cv.notify_all();
  for (auto& t : load) t.join();
  sampler.join();
  EXPECT_GT(samples.load(), 50);
  EXPECT_LE(max_backends.load(), kBudget) << fleet.Log();
  for (auto& client : clients) {
    if (client->slot != 0) EXPECT_FALSE(client->failed) << "a client of the surviving worker";
  }
  EXPECT_THAT(fleet.Log(), HasSubstr("event=dead_worker_servers_held"));
}

TEST_F(FaultFleetTest, LogWritesFailingWithEnospcDoNotStopTheDataPath) {
  // stdout and stderr on /dev/full: every log write fails with ENOSPC, as on a full log disk.
  PgfleetProcess fleet(FleetConfig(2, pg().port(), kChattyLog), "", "", "127.0.0.1", "/dev/full");
  for (pid_t pid : WaitForWorkers(fleet.pid(), 2)) {
    ASSERT_EQ(RunCommandOutput(absl::StrCat("readlink /proc/", pid, "/fd/2")), "/dev/full\n");
  }
  ExpectPgbenchServedWithoutLosingAWorker(fleet);
}

// Reads what is in a non-blocking FIFO now, waiting at most `timeout` for `until` to appear.
std::string ReadFifo(int fd, const std::string& until, milliseconds timeout) {
  std::string got;
  char buf[65536];
  const auto deadline = Clock::now() + timeout;
  for (int i = 0; i < 100000; ++i) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (until.empty() || got.find(until) != std::string::npos || Clock::now() >= deadline) break;
    pollfd pfd{fd, POLLIN, 0};
    poll(&pfd, 1, 50);
  }
  return got;
}

TEST_F(FaultFleetTest, LogPipeThatNobodyReadsDoesNotStopTheDataPath) {
  // stderr into a FIFO whose reader never reads, as when a container's log collector stalls on
  // a full disk: once the pipe's 64 KiB are full, every further log write would wait.
  char tmpl[] = "/tmp/pgfleet-logfifo-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string fifo = dir + "/stderr";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  {
    PgfleetProcess fleet(FleetConfig(2, pg().port(), kChattyLog), "", "", "127.0.0.1", fifo);
    ExpectPgbenchServedWithoutLosingAWorker(fleet);
    // The collector catches up: the next line that gets through says how many were lost.
    ReadFifo(reader, "", milliseconds(0));
    // Each worker reports its own losses: enough new clients that both workers log again (the
    // kernel spreads connections over the two slot sockets).
    for (int i = 0; i < 16; ++i) {
      auto c = Connect(fleet.ConnString());
      EXPECT_EQ(Value(c, "SELECT 1"), "1");
    }
    EXPECT_THAT(ReadFifo(reader, "event=log_lines_dropped", milliseconds(3000)),
                HasSubstr("event=log_lines_dropped count="));
    // Closing the reader first lets even a blocked writer go (EPIPE), so the fleet can stop.
    close(reader);
  }
  RunCommand(absl::StrCat("rm -rf '", dir, "'"));
}

}  // namespace fault_fleet_test
}  // namespace pgfleet::testing
