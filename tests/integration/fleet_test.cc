// The fleet: N workers on one port, cancels forwarded to the owning worker, budgets split, a
// killed worker restarted, and a rolling restart under load.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

std::string FleetConfig(int workers, const std::string& pool_extra = "",
                        const std::string& top_extra = "") {
  return absl::StrCat("workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ",
                      PgServer::Shared().port(), "}\npool:\n  pool_mode: transaction\n", pool_extra,
                      top_extra);
}

// The supervisor's port accepts before it has forked every worker (slower under the sanitizers):
// the children of `supervisor` once there are `n` of them, or whatever there are after 5 s.
std::vector<pid_t> WaitForWorkers(pid_t supervisor, size_t n) {
  return WaitFor([&] { return WorkerPids(supervisor); },
                 [&](const std::vector<pid_t>& pids) { return pids.size() >= n; },
                 std::chrono::seconds(5));
}

// True when nothing listens on 127.0.0.1:`port` any more (a plain TCP connect is refused).
bool PortRefuses(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool refused = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 &&
                       errno == ECONNREFUSED;
  close(fd);
  return refused;
}

class FleetTest : public IntegrationTest {
 protected:
  // Starts `n` sessions each running pg_sleep(30), cancels each through the shared port and
  // returns how many stopped within 1 s of their cancel.
  int CancelSleepingSessions(PgfleetProcess& fleet, int n) {
    std::vector<ConnPtr> conns;
    for (int i = 0; i < n; ++i) {
      conns.push_back(Connect(fleet.ConnString()));
      EXPECT_TRUE(Ok(conns.back())) << ErrorOf(conns.back());
      EXPECT_EQ(PQsendQuery(conns.back().get(), "SELECT pg_sleep(30)"), 1);
    }
    // Wait until PostgreSQL runs all of them, so no cancel reaches a still-queued client.
    WaitFor([&] {
      return pg().QueryValue(
                 "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
                 "query = 'SELECT pg_sleep(30)'") == std::to_string(n);
    });
    // Cancel every session through the shared port (each lands on whichever worker the kernel
    // picks), then collect results: a session counts when it stopped within 1 s of its cancel.
    std::vector<Clock::time_point> sent(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
      PGcancel* cancel = PQgetCancel(conns[i].get());
      char err[256];
      PQcancel(cancel, err, sizeof(err));
      PQfreeCancel(cancel);
      sent[i] = Clock::now();
    }
    std::vector<bool> done(conns.size(), false);
    int stopped = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    while (Clock::now() < deadline) {
      std::vector<pollfd> fds;
      for (size_t i = 0; i < conns.size(); ++i) {
        if (!done[i]) fds.push_back({PQsocket(conns[i].get()), POLLIN, 0});
      }
      if (fds.empty()) break;
      poll(fds.data(), fds.size(), 20);
      for (size_t i = 0; i < conns.size(); ++i) {
        if (done[i]) continue;
        PGconn* c = conns[i].get();
        PQconsumeInput(c);
        if (PQisBusy(c)) continue;
        done[i] = true;
        ResultPtr r(PQgetResult(c));
        if (SqlState(r) == "57014" && Clock::now() - sent[i] < std::chrono::seconds(1)) ++stopped;
      }
    }
    // Whatever was not cancelled must not keep sleeping into later tests.
    pg().Exec(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query = "
        "'SELECT pg_sleep(30)' AND pid <> pg_backend_pid()");
    return stopped;
  }
};

TEST_F(FleetTest, CancelsReachTheOwningWorkerWhicheverWorkerReceivesThem) {
  PgfleetProcess fleet(FleetConfig(4, "  default_pool_size: 240\n"));
  ASSERT_EQ(WaitForWorkers(fleet.pid(), 4).size(), 4u) << fleet.Log();
  EXPECT_EQ(CancelSleepingSessions(fleet, 200), 200) << fleet.Log().substr(0, 4000);
}

TEST_F(FleetTest, WithoutForwardingMostCancelsLandOnTheWrongWorker) {
  PgfleetProcess fleet(
      FleetConfig(4, "  default_pool_size: 160\n", "peering:\n  forward_cancels: false\n"));
  const int stopped = CancelSleepingSessions(fleet, 40);
  // About 1 in 4 lands on the owner by chance; the rest are lost.
  EXPECT_LE(stopped, 25);
  EXPECT_GE(stopped, 1);
}

TEST_F(FleetTest, KilledWorkerIsRestartedAndThePortKeepsServing) {
  PgfleetProcess fleet(FleetConfig(2, "  default_pool_size: 4\n"));
  auto workers = WaitForWorkers(fleet.pid(), 2);
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[0], SIGKILL);
  int ok = 0;
  for (int i = 0; i < 40; ++i) {
    auto c = Connect(fleet.ConnString());
    if (Ok(c) && Value(c, "SELECT 'up'") == "up") ++ok;
  }
  EXPECT_EQ(ok, 40);
  auto after = WaitForWorkers(fleet.pid(), 2);
  EXPECT_EQ(after.size(), 2u);
  EXPECT_THAT(after, ::testing::Not(::testing::Contains(workers[0])));
  EXPECT_THAT(fleet.Log(), HasSubstr("event=worker_died"));
}

// SIGTERM: new clients are refused at once, open transactions finish, then the fleet exits.
TEST_F(FleetTest, SigtermRefusesNewClientsAndLetsOpenTransactionsFinish) {
  PgfleetProcess fleet(FleetConfig(2, "  shutdown_timeout: 20s\n"));
  ASSERT_EQ(WaitForWorkers(fleet.pid(), 2).size(), 2u);
  auto in_transaction = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(in_transaction, "BEGIN")));
  ASSERT_TRUE(ResultOk(Exec(in_transaction, "CREATE TEMP TABLE drained (v int)")));
  fleet.Signal(SIGTERM);
  // The supervisor and then each worker close their copies of the listening sockets.
  WaitFor([&] { return PortRefuses(fleet.port()); });

  // Not left waiting in a backlog until the drain ends: refused, within the second.
  const auto start = Clock::now();
  auto late = Connect(fleet.ConnString("postgres", "postgres", "connect_timeout=5"));
  EXPECT_FALSE(Ok(late));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1)) << ErrorOf(late);
  EXPECT_THAT(ErrorOf(late), HasSubstr("refused"));

  // The open transaction goes on to its end.
  ASSERT_TRUE(ResultOk(Exec(in_transaction, "INSERT INTO drained VALUES (1)")));
  EXPECT_EQ(Value(in_transaction, "SELECT count(*) FROM drained"), "1");
  ASSERT_TRUE(ResultOk(Exec(in_transaction, "COMMIT")));
  // Then its client is closed between transactions and the fleet exits, long before the timeout.
  const bool exited = WaitFor([&] { return !fleet.Running(); }, std::chrono::seconds(5));
  EXPECT_TRUE(exited) << fleet.Log();
  EXPECT_FALSE(ResultOk(Exec(in_transaction, "SELECT 1")));
}

TEST_F(FleetTest, SigtermClosesTransactionsStillOpenAtTheShutdownTimeout) {
  PgfleetProcess fleet(FleetConfig(2, "  shutdown_timeout: 1s\n"));
  auto in_transaction = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(in_transaction, "BEGIN")));
  const auto start = Clock::now();
  fleet.Signal(SIGTERM);
  const bool exited = WaitFor([&] { return !fleet.Running(); });
  EXPECT_TRUE(exited) << fleet.Log();
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(900));
  EXPECT_FALSE(ResultOk(Exec(in_transaction, "SELECT 1")));
  EXPECT_THAT(fleet.Log(), HasSubstr("forced=true"));
}

// PgBouncer's signals (issue 35): SIGUSR1 is PAUSE and SIGUSR2 RESUME, on every worker of the pod.
// SIGUSR1 used to kill the supervisor, and SIGUSR2 rolled the workers.
TEST_F(FleetTest, SigusrOnePausesEveryWorkerAndSigusrTwoResumes) {
  PgfleetProcess fleet(FleetConfig(2, "", "admin:\n  users: [admin]\n"));
  const std::vector<pid_t> workers = WaitForWorkers(fleet.pid(), 2);
  ASSERT_EQ(workers.size(), 2u);
  // Clients logged in before the pause (a login itself waits while no server is open).
  std::vector<ConnPtr> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(clients.back())) << ErrorOf(clients.back());
  }
  fleet.Signal(SIGUSR1);
  ASSERT_TRUE(WaitFor([&] { return CountInLog(fleet.Log(), "event=admin_paused") >= 2; }))
      << fleet.Log();
  // A query sent now waits, whichever worker its client landed on.
  for (auto& c : clients) ASSERT_EQ(PQsendQuery(c.get(), "SELECT 1"), 1);
  const auto answered = [&] {
    int n = 0;
    for (auto& c : clients) {
      PQconsumeInput(c.get());
      if (!PQisBusy(c.get())) ++n;
    }
    return n;
  };
  EXPECT_EQ(WaitFor(
                answered, [](int n) { return n > 0; }, std::chrono::milliseconds(500)),
            0);
  // The console says so, as PgBouncer's SHOW STATE does.
  ConnPtr console = Connect(fleet.ConnString("admin", "pgbouncer"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  ResultPtr state = Exec(console, "SHOW STATE");
  ASSERT_EQ(PQntuples(state.get()), 3) << PQerrorMessage(console.get());
  EXPECT_STREQ(PQgetvalue(state.get(), 0, 0), "active");
  EXPECT_STREQ(PQgetvalue(state.get(), 0, 1), "no");
  EXPECT_STREQ(PQgetvalue(state.get(), 1, 0), "paused");
  EXPECT_STREQ(PQgetvalue(state.get(), 1, 1), "yes");
  EXPECT_TRUE(fleet.Running());
  EXPECT_EQ(WorkerPids(fleet.pid()), workers);  // not a rolling restart either
  fleet.Signal(SIGUSR2);
  EXPECT_EQ(WaitFor(answered, [](int n) { return n == 4; }), 4);
  for (auto& c : clients) {
    ResultPtr r(PQgetResult(c.get()));
    EXPECT_TRUE(ResultOk(r));
  }
  state = Exec(console, "SHOW STATE");
  ASSERT_EQ(PQntuples(state.get()), 3);
  EXPECT_STREQ(PQgetvalue(state.get(), 1, 1), "no");
  EXPECT_THAT(fleet.Log(), HasSubstr("event=pause_requested"));
  EXPECT_THAT(fleet.Log(), HasSubstr("event=resume_requested"));
}

// SIGQUIT is PgBouncer's immediate shutdown: an open transaction does not hold it up.
TEST_F(FleetTest, SigquitShutsDownAtOnce) {
  PgfleetProcess fleet(FleetConfig(2, "  shutdown_timeout: 30s\n"));
  ASSERT_EQ(WaitForWorkers(fleet.pid(), 2).size(), 2u);
  auto in_transaction = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(in_transaction, "BEGIN")));
  const auto start = Clock::now();
  fleet.Signal(SIGQUIT);
  EXPECT_TRUE(WaitFor([&] { return !fleet.Running(); }, std::chrono::seconds(10))) << fleet.Log();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(ResultOk(Exec(in_transaction, "SELECT 1")));
}

// Gone, or a zombie nobody reaps yet (a container's init may not): either way not serving.
bool ProcessGone(pid_t pid) {
  const std::string stat = RunCommandOutput(absl::StrCat("cat /proc/", pid, "/stat 2>/dev/null"));
  const size_t paren = stat.rfind(')');
  return stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
}

TEST_F(FleetTest, WorkersDoNotOutliveAKilledSupervisor) {
  PgfleetProcess fleet(FleetConfig(2));
  const std::vector<pid_t> workers = WaitForWorkers(fleet.pid(), 2);
  ASSERT_EQ(workers.size(), 2u);
  fleet.Signal(SIGKILL);
  for (pid_t pid : workers) {
    EXPECT_TRUE(WaitFor([&] { return ProcessGone(pid); }))
        << "worker " << pid << " outlived its supervisor";
  }
}

TEST_F(FleetTest, FleetRefusesMaxClientConnPlusOne) {
  PgfleetProcess fleet(FleetConfig(4, "  default_pool_size: 8\n  max_client_conn: 10\n"));
  std::vector<ConnPtr> held;
  for (int i = 0; i < 10; ++i) {
    held.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(held.back())) << "client " << i << ": " << ErrorOf(held.back());
  }
  auto extra = Connect(fleet.ConnString());
  EXPECT_FALSE(Ok(extra));
  EXPECT_THAT(ErrorOf(extra), HasSubstr("no more connections allowed (max_client_conn)"));
}

TEST_F(FleetTest, ServerConnectionsNeverExceedMaxDbConnections) {
  PgfleetProcess fleet(absl::StrCat(
      "workers: 4\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
      ", max_db_connections: 8}\npool: {pool_mode: transaction, default_pool_size: 40}\n"));
  std::atomic<bool> stop{false};
  std::atomic<int> max_seen{0};
  std::atomic<int> queries{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 256; ++i) {
    clients.emplace_back([&] {
      auto c = Connect(fleet.ConnString());
      for (int n = 0; n < 1000 && !stop && Ok(c); ++n) {
        if (ResultOk(Exec(c, "SELECT pg_sleep(0.01)"))) ++queries;
      }
    });
  }
  // Samples every 50 ms for at least 3 s, and on (bounded) until the load has used the budget,
  // however slowly 256 clients connect on a busy machine: the cap is checked at every look.
  const auto sampling_started = Clock::now();
  WaitFor(
      [&] {
        max_seen = std::max(max_seen.load(), ServerConnections());
        return Clock::now() - sampling_started >= std::chrono::seconds(3) && max_seen >= 4 &&
               queries > 256;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(50));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_LE(max_seen.load(), 8);
  EXPECT_GE(max_seen.load(), 4);
  EXPECT_GT(queries.load(), 256);
}

TEST_F(FleetTest, RollingRestartUnderPgbenchLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(FleetConfig(4, "  default_pool_size: 40\n"));
  const std::string out_path = fleet.dir() + "/pgbench.out";
  // -C: a new connection per transaction, so every connection attempt during the restart counts.
  std::thread bench([&] {
    RunCommand(absl::StrCat("pgbench -n -S -C -c 64 -j 2 -T 8 -h 127.0.0.1 -p ", fleet.port(),
                            " -U postgres postgres > ", out_path, " 2>&1; echo exit=$? >> ",
                            out_path));
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto before = WaitForWorkers(fleet.pid(), 4);
  fleet.Signal(SIGRTMIN);  // SIGUSR2 is RESUME, as in PgBouncer
  bench.join();
  std::string out = RunCommandOutput("cat " + out_path);
  EXPECT_THAT(out, HasSubstr("exit=0")) << out;
  EXPECT_THAT(out, HasSubstr("number of failed transactions: 0 (0.000%)")) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("connection to server"))) << out;
  // On a loaded 2-core CI machine the last replacement may become ready, and the last old
  // worker finish draining, a little after pgbench's window closes: wait for both (bounded).
  auto old_workers_gone = [&] {
    auto now = WorkerPids(fleet.pid());
    for (pid_t pid : before) {
      if (std::find(now.begin(), now.end(), pid) != now.end()) return false;
    }
    return true;
  };
  WaitFor([&] {
    return fleet.Log().find("event=rolling_restart_done") != std::string::npos &&
           old_workers_gone();
  });
  const std::string log = fleet.Log();
  EXPECT_THAT(log, HasSubstr("event=rolling_restart_done")) << log;
  EXPECT_TRUE(old_workers_gone()) << log;
}

// pgfleet's listeners share their port with SO_REUSEPORT; a second pgfleet on the same address
// and port would have been let in to take a share of new clients without a word. It must refuse
// to start, naming the address and who serves it, and leave the first serving.
TEST_F(FleetTest, SecondPgfleetOnABusyPortExitsWithItsReason) {
  PgfleetProcess fleet(FleetConfig(2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  const std::string where = absl::StrCat("127.0.0.1:", fleet.port());
  // The same config: the same address and port (and metrics port).
  const std::string second = RunCommandOutput(absl::StrCat(
      "timeout 20 ", PgfleetBinary(), " --config ", fleet.config_path(), " 2>&1; echo exit=$?"));
  EXPECT_THAT(second, HasSubstr("exit=1")) << second;
  EXPECT_THAT(second, HasSubstr(absl::StrCat("cannot listen on ", where))) << second;
  EXPECT_THAT(second, HasSubstr(absl::StrCat("pid ", fleet.pid()))) << second;
  // The same port with a runtime directory of its own: the lock is per network namespace, not
  // per directory, so it is refused the same way.
  const std::string other_dir = fleet.dir() + "/elsewhere";
  ASSERT_EQ(RunCommand("mkdir -p " + other_dir), 0);
  std::string config = RunCommandOutput("cat " + fleet.config_path());
  config = absl::StrCat(config, "\npeering:\n  runtime_dir: ", other_dir, "\n");
  const std::string other_config = fleet.dir() + "/other.yaml";
  ASSERT_EQ(RunCommand(absl::StrCat("printf '%s' '", config, "' > ", other_config)), 0);
  const std::string third = RunCommandOutput(absl::StrCat(
      "timeout 20 ", PgfleetBinary(), " --config ", other_config, " 2>&1; echo exit=$?"));
  EXPECT_THAT(third, HasSubstr("exit=1")) << third;
  EXPECT_THAT(third,
              HasSubstr(absl::StrCat("cannot listen on ", where,
                                     ": another pgfleet already serves it (pid ", fleet.pid())))
      << third;
  // The first keeps serving, alone.
  EXPECT_EQ(Value(c, "SELECT 'still served'"), "still served");
  EXPECT_EQ(WorkerPids(fleet.pid()).size(), 2u);
}

// Anything else on the port (here PostgreSQL itself) is refused the same way, by name.
TEST_F(FleetTest, PgfleetRefusesAPortAnotherServerListensOn) {
  char tmpl[] = "/tmp/pgfleet-busy-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string config = dir + "/pgfleet.yaml";
  ASSERT_EQ(RunCommand(absl::StrCat(
                "printf 'listen:\\n  address: 127.0.0.1\\n  port: ", pg().port(),
                "\\n%s\\nmetrics:\\n  listen: \"\"\\n' '", FleetConfig(1), "' > ", config)),
            0);
  const std::string out = RunCommandOutput(
      absl::StrCat("timeout 20 ", PgfleetBinary(), " --config ", config, " 2>&1; echo exit=$?"));
  RunCommand("rm -rf " + dir);
  EXPECT_THAT(out, HasSubstr("exit=1")) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", pg().port(),
                                          ": address already in use by pid ")))
      << out;
  EXPECT_THAT(out, HasSubstr("(postgres)")) << out;
}

}  // namespace
}  // namespace pgfleet::testing
