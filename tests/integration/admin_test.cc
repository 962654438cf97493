// The admin console (virtual database "pgfleet") through libpq: SHOW answers for every worker of
// the pod, PAUSE/RESUME around a running pgbench, permissions and errors.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;

std::string AdminConfig(int workers, int pool_size, const std::string& pool_extra = "") {
  return absl::StrCat("workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ",
                      PgServer::Shared().port(),
                      "}\npool:\n  pool_mode: transaction\n  default_pool_size: ", pool_size, "\n",
                      pool_extra, "admin:\n  users: [admin]\n  stats_users: [stats]\n");
}

// Every row of a query's result as column -> value; fails the test on an error.
std::vector<Row> Rows(const ConnPtr& conn, const std::string& sql) {
  ResultPtr r = Exec(conn, sql);
  EXPECT_EQ(PQresultStatus(r.get()), PGRES_TUPLES_OK) << sql << ": " << PQerrorMessage(conn.get());
  return RowsOf(r);
}

int64_t Int(const Row& row, const std::string& column) {
  auto it = row.find(column);
  EXPECT_NE(it, row.end()) << "no column " << column;
  int64_t v = 0;
  if (it != row.end()) {
    EXPECT_TRUE(absl::SimpleAtoi(it->second, &v)) << column << "=" << it->second;
  }
  return v;
}

class AdminTest : public IntegrationTest {
 protected:
  ConnPtr Admin(PgfleetProcess& fleet, const std::string& user = "admin") {
    ConnPtr c = Connect(fleet.ConnString(user, "pgfleet"));
    EXPECT_TRUE(Ok(c)) << ErrorOf(c);
    return c;
  }
};

TEST_F(AdminTest, ShowAnswersForEveryWorkerUnderLoad) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(AdminConfig(2, 16));
  ConnPtr admin = Admin(fleet);
  // The port accepts as soon as one worker serves; wait (bounded) until both answer.
  ASSERT_EQ(WaitFor([&] { return Rows(admin, "SHOW WORKERS").size(); },
                    [](size_t n) { return n >= 2; }, std::chrono::seconds(5)),
            2u);
  // Idle clients, each having run a query, so both workers have clients, servers and stats
  // (with 24 connections the kernel puts all on one worker with probability 2^-23).
  std::vector<ConnPtr> idle;
  for (int i = 0; i < 24; ++i) {
    idle.push_back(Connect(fleet.ConnString()));
    ASSERT_TRUE(Ok(idle.back())) << ErrorOf(idle.back());
    ASSERT_EQ(Value(idle.back(), "SELECT 1"), "1");
  }
  const std::string out = fleet.dir() + "/pgbench.out";
  std::thread bench([&] {
    RunCommand(absl::StrCat("pgbench -n -S -c 6 -j 2 -T 6 -h 127.0.0.1 -p ", fleet.port(),
                            " -U postgres postgres > ", out, " 2>&1; echo exit=$? >> ", out));
  });
  constexpr int kPoolClients = 24 + 6;
  // Until pgbench's clients have logged in.
  WaitFor([&] {
    auto pools = Rows(admin, "SHOW POOLS");
    return pools.size() == 1 &&
           Int(pools[0], "cl_active") + Int(pools[0], "cl_waiting") == kPoolClients;
  });
  for (int round = 0; round < 3; ++round) {
    // SHOW POOLS sums the pool over the workers.
    auto pools = Rows(admin, "SHOW POOLS");
    ASSERT_EQ(pools.size(), 1u);
    EXPECT_EQ(pools[0]["database"], "postgres");
    EXPECT_EQ(Int(pools[0], "cl_active") + Int(pools[0], "cl_waiting"), kPoolClients);
    // SHOW CLIENTS lists every connection once, with the worker that owns it.
    auto clients = Rows(admin, "SHOW CLIENTS");
    std::map<std::string, int> clients_per_worker;
    int pool_clients = 0;
    for (auto& c : clients) {
      ++clients_per_worker[c["worker"]];
      if (c["database"] == "postgres") ++pool_clients;
    }
    EXPECT_EQ(pool_clients, kPoolClients);
    EXPECT_EQ(clients.size(), static_cast<size_t>(kPoolClients + 1));  // + this console
    EXPECT_EQ(clients_per_worker.size(), 2u);
    // SHOW WORKERS: what each worker reports adds up to the pod's answer.
    auto workers = Rows(admin, "SHOW WORKERS");
    ASSERT_EQ(workers.size(), 2u);
    int64_t sum = 0;
    for (auto& w : workers) {
      EXPECT_EQ(w["state"], "ready");
      EXPECT_EQ(Int(w, "clients"), clients_per_worker[w["worker"]]) << "worker " << w["worker"];
      sum += Int(w, "clients");
    }
    EXPECT_EQ(sum, kPoolClients + 1);
  }
  bench.join();
  EXPECT_THAT(RunCommandOutput("cat " + out), HasSubstr("exit=0"));
  // Once the load stopped, the counters are stable: the pod's totals are the workers' sum.
  auto stats = Rows(admin, "SHOW STATS");
  ASSERT_EQ(stats.size(), 1u);
  auto workers = Rows(admin, "SHOW WORKERS");
  int64_t transactions = 0, queries = 0;
  for (auto& w : workers) {
    EXPECT_GT(Int(w, "xact_count"), 0) << "worker " << w["worker"] << " served nothing";
    transactions += Int(w, "xact_count");
    queries += Int(w, "query_count");
  }
  EXPECT_EQ(Int(stats[0], "total_xact_count"), transactions);
  EXPECT_EQ(Int(stats[0], "total_query_count"), queries);
  auto totals = Rows(admin, "SHOW STATS_TOTALS");
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(Int(totals[0], "xact_count"), transactions);
  EXPECT_GT(Int(totals[0], "bytes_received"), 0);
  // Servers: SHOW SERVERS lists what SHOW POOLS counts.
  auto pools = Rows(admin, "SHOW POOLS");
  auto servers = Rows(admin, "SHOW SERVERS");
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(servers.size()),
            Int(pools[0], "sv_active") + Int(pools[0], "sv_idle") + Int(pools[0], "sv_used") +
                Int(pools[0], "sv_tested") + Int(pools[0], "sv_login"));
  std::set<std::string> server_workers;
  for (auto& s : servers) server_workers.insert(s["worker"]);
  EXPECT_EQ(server_workers.size(), 2u);
  // The other SHOW commands answer too.
  for (const char* show : {"SHOW STATS_AVERAGES", "SHOW DATABASES", "SHOW USERS", "SHOW CONFIG",
                           "SHOW LISTS", "SHOW MEM", "SHOW VERSION", "SHOW PEERS", "SHOW FLEET"}) {
    EXPECT_FALSE(Rows(admin, show).empty()) << show;
  }
  auto lists = Rows(admin, "SHOW LISTS");
  for (auto& l : lists) {
    if (l["list"] == "used_clients") {
      EXPECT_EQ(Int(l, "items"), 24 + 1);
    }
  }
}

TEST_F(AdminTest, PauseDrainsAndResumeContinuesPgbench) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(AdminConfig(2, 8));
  const std::string out = fleet.dir() + "/pgbench.out";
  ConnPtr admin = Admin(fleet);
  // The port accepts as soon as one worker serves: until both answer, PAUSE and SHOW reach only
  // the first, and the second's transactions would show up in the totals later.
  ASSERT_EQ(WaitFor([&] { return Rows(admin, "SHOW WORKERS").size(); },
                    [](size_t n) { return n >= 2; }, std::chrono::seconds(5)),
            2u);
  std::thread bench([&] {
    RunCommand(absl::StrCat("pgbench -n -c 8 -j 2 -T 7 -h 127.0.0.1 -p ", fleet.port(),
                            " -U postgres postgres > ", out, " 2>&1; echo exit=$? >> ", out));
  });
  // Until pgbench is running transactions through the pod.
  WaitFor([&] {
    auto totals = Rows(admin, "SHOW STATS_TOTALS");
    return totals.size() == 1 && Int(totals[0], "xact_count") > 0;
  });
  // PAUSE answers once no server is linked to a client on any worker.
  ResultPtr paused = Exec(admin, "PAUSE");
  ASSERT_EQ(PQresultStatus(paused.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  EXPECT_STREQ(PQcmdStatus(paused.get()), "PAUSE");
  auto pools = Rows(admin, "SHOW POOLS");
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(Int(pools[0], "sv_active"), 0);
  auto databases = Rows(admin, "SHOW DATABASES");
  ASSERT_FALSE(databases.empty());
  EXPECT_EQ(databases[0]["paused"], "1");
  // Nothing runs while paused.
  const int64_t before = Int(Rows(admin, "SHOW STATS_TOTALS")[0], "xact_count");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Int(Rows(admin, "SHOW STATS_TOTALS")[0], "xact_count"), before);
  EXPECT_GT(Int(Rows(admin, "SHOW POOLS")[0], "cl_waiting"), 0);
  ResultPtr resumed = Exec(admin, "RESUME");
  ASSERT_EQ(PQresultStatus(resumed.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  bench.join();
  const std::string result = RunCommandOutput("cat " + out);
  EXPECT_THAT(result, HasSubstr("exit=0")) << result;
  EXPECT_THAT(result, HasSubstr("number of failed transactions: 0 (0.000%)")) << result;
  EXPECT_THAT(result, ::testing::Not(HasSubstr("aborted"))) << result;
  EXPECT_GT(Int(Rows(admin, "SHOW STATS_TOTALS")[0], "xact_count"), before);
}

// PAUSE is the pod's: a worker that crashes while it is in force comes back paused, so no client
// of the restarted worker reaches PostgreSQL during a maintenance pause.
TEST_F(AdminTest, PauseSurvivesAWorkerRestart) {
  PgfleetProcess fleet(AdminConfig(2, 8));
  ConnPtr admin = Admin(fleet);
  ASSERT_EQ(WaitFor([&] { return Rows(admin, "SHOW WORKERS").size(); },
                    [](size_t n) { return n >= 2; }, std::chrono::seconds(5)),
            2u);
  ResultPtr paused = Exec(admin, "PAUSE");
  ASSERT_EQ(PQresultStatus(paused.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  const std::vector<pid_t> before = WorkerPids(fleet.pid());
  ASSERT_EQ(before.size(), 2u);
  kill(before[1], SIGKILL);
  // The supervisor starts another in its place.
  ASSERT_TRUE(WaitFor([&] {
    const std::vector<pid_t> now = WorkerPids(fleet.pid());
    return now.size() == 2 && now != before;
  }));
  EXPECT_TRUE(WaitFor([&] {
    return fleet.Log().find("event=admin_paused_at_start") != std::string::npos;
  })) << fleet.Log().substr(0, 4000);
  admin = Admin(fleet);
  ASSERT_EQ(WaitFor([&] { return Rows(admin, "SHOW WORKERS").size(); },
                    [](size_t n) { return n >= 2; }, std::chrono::seconds(5)),
            2u);
  // Clients spread over both workers (balance_clients): none gets an answer while paused (a
  // client waits at its login or at its query, whichever needs a server first).
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&] {
      ConnPtr c = Connect(fleet.ConnString());
      if (Ok(c) && Value(c, "SELECT 1") == "1") ++answered;
    });
  }
  // Until every client waits in the pod (SHOW POOLS has no row before a pool exists), or one was
  // answered: a client of a worker that forgot the PAUSE runs at once, and all six never wait.
  // (EXPECT, not ASSERT: the client threads must be released and joined below either way.)
  EXPECT_TRUE(WaitFor([&] {
    auto pools = Rows(admin, "SHOW POOLS");
    return answered.load() > 0 || (!pools.empty() && Int(pools[0], "cl_waiting") == 6);
  })) << "the clients never waited";
  EXPECT_EQ(answered.load(), 0) << "a query ran while the pod was paused";
  ResultPtr resumed = Exec(admin, "RESUME");
  ASSERT_EQ(PQresultStatus(resumed.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  for (auto& t : clients) t.join();
  EXPECT_EQ(answered.load(), 6);
}

// pgbouncer_exporter and PgBouncer runbooks connect to the database "pgbouncer" (issue 35): the
// console answers there too, unless the config has a database of that name.
TEST_F(AdminTest, TheConsoleAnswersAsPgbouncerToo) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr c = Connect(fleet.ConnString("admin", "pgbouncer"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  EXPECT_EQ(Value(c, "SHOW VERSION").rfind("pgfleet ", 0), 0u);
  // Both workers, once the second has started too (the port opens with the first).
  EXPECT_TRUE(WaitFor([&] { return Rows(c, "SHOW WORKERS").size() == 2u; }));
  ConnPtr refused = Connect(fleet.ConnString("otheruser", "pgbouncer"));
  EXPECT_FALSE(Ok(refused));
  EXPECT_THAT(ErrorOf(refused), HasSubstr("not allowed to connect to the admin console"));

  // A database named pgbouncer in the config is that database.
  PgfleetProcess named(absl::StrCat(
      "workers: 1\ndatabases:\n  pgbouncer: {host: 127.0.0.1, port: ", PgServer::Shared().port(),
      ", dbname: postgres}\npool:\n  pool_mode: transaction\n  default_pool_size: 2\n",
      "admin:\n  users: [admin]\n"));
  ConnPtr db = Connect(named.ConnString("postgres", "pgbouncer"));
  ASSERT_TRUE(Ok(db)) << ErrorOf(db);
  EXPECT_EQ(Value(db, "SELECT current_database()"), "postgres");
}

TEST_F(AdminTest, NonAdminUserIsRefused) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr c = Connect(fleet.ConnString("otheruser", "pgfleet"));
  EXPECT_FALSE(Ok(c));
  EXPECT_THAT(ErrorOf(c), HasSubstr("not allowed to connect to the admin console"));
}

TEST_F(AdminTest, StatsUserMayOnlyShow) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr stats = Admin(fleet, "stats");
  Rows(stats, "SHOW POOLS");  // fails the test on an error
  ResultPtr r = Exec(stats, "PAUSE");
  EXPECT_EQ(PQresultStatus(r.get()), PGRES_FATAL_ERROR);
  EXPECT_EQ(SqlState(r), "42501");
  EXPECT_THAT(PQerrorMessage(stats.get()), HasSubstr("admin access needed"));
  // The session goes on.
  EXPECT_EQ(Value(stats, "SHOW VERSION").rfind("pgfleet ", 0), 0u);
}

TEST_F(AdminTest, UnknownCommandIsAnErrorAndTheSessionGoesOn) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr admin = Admin(fleet);
  for (const char* bad : {"SHOW NOPE", "SELECT 1", "PAUSE a b", "KILL a b"}) {
    ResultPtr r = Exec(admin, bad);
    EXPECT_EQ(PQresultStatus(r.get()), PGRES_FATAL_ERROR) << bad;
    EXPECT_EQ(SqlState(r), "42601") << bad;
    EXPECT_THAT(PQerrorMessage(admin.get()), HasSubstr("invalid command")) << bad;
  }
  ResultPtr r = Exec(admin, "PAUSE nosuchdb");
  EXPECT_EQ(SqlState(r), "3D000");
  EXPECT_EQ(Value(admin, "show version;").rfind("pgfleet ", 0), 0u);
}

TEST_F(AdminTest, ReloadReachesEveryWorker) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr admin = Admin(fleet);
  // The port accepts as soon as one worker serves; wait (bounded) until both answer.
  auto before = WaitFor([&] { return Rows(admin, "SHOW WORKERS"); },
                        [](const std::vector<Row>& rows) { return rows.size() >= 2; },
                        std::chrono::seconds(5));
  ASSERT_EQ(before.size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // timestamps have 1 s steps
  fleet.RewriteConfig(AdminConfig(2, 6));
  ResultPtr r = Exec(admin, "RELOAD");
  ASSERT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  auto after = Rows(admin, "SHOW WORKERS");
  ASSERT_EQ(after.size(), 2u);
  std::map<std::string, std::string> loaded;
  for (auto& w : before) loaded[w["peer_id"]] = w["config_loaded_at"];
  for (auto& w : after) EXPECT_NE(w["config_loaded_at"], loaded[w["peer_id"]]) << w["peer_id"];
  for (auto& row : Rows(admin, "SHOW CONFIG")) {
    if (row["key"] == "default_pool_size") {
      EXPECT_EQ(row["value"], "6");
    }
  }
}

TEST_F(AdminTest, SiblingsAnswerWhenPeeringNeedsAToken) {
  char token_path[] = "/tmp/pgfleet-admin-token-XXXXXX";
  const int fd = mkstemp(token_path);
  ASSERT_GE(fd, 0);
  const std::string token = "admin-test-token-0123456789abcdef\n";
  ASSERT_EQ(write(fd, token.data(), token.size()), static_cast<ssize_t>(token.size()));
  close(fd);
  PgfleetProcess fleet(
      absl::StrCat(AdminConfig(2, 2), "peering:\n  token_file: ", token_path, "\n"));
  ConnPtr admin = Admin(fleet);
  auto workers = WaitFor([&] { return Rows(admin, "SHOW WORKERS"); },
                         [](const std::vector<Row>& rows) { return rows.size() >= 2; },
                         std::chrono::seconds(5));
  ASSERT_EQ(workers.size(), 2u);
  for (auto& w : workers) EXPECT_EQ(w["state"], "ready");
  ResultPtr r = Exec(admin, "RECONNECT");
  EXPECT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  unlink(token_path);
}

TEST_F(AdminTest, AnOpenConsoleDoesNotHoldUpShutdown) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr admin = Admin(fleet);
  ASSERT_EQ(Value(admin, "SHOW VERSION").rfind("pgfleet ", 0), 0u);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(fleet.Stop(20), 0);
  // Well under shutdown_timeout (30 s): console sessions are closed when the drain starts.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(Value(admin, "SHOW VERSION").rfind("pgfleet ", 0), 0u);
}

TEST_F(AdminTest, KillDropsTheDatabaseUntilResume) {
  PgfleetProcess fleet(AdminConfig(2, 2));
  ConnPtr client = Connect(fleet.ConnString());
  ASSERT_EQ(Value(client, "SELECT 1"), "1");
  ConnPtr admin = Admin(fleet);
  ResultPtr r = Exec(admin, "KILL postgres");
  ASSERT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK) << PQerrorMessage(admin.get());
  EXPECT_NE(Value(client, "SELECT 1"), "1");  // its connection was dropped
  EXPECT_EQ(Rows(admin, "SHOW SERVERS").size(), 0u);
  ASSERT_EQ(PQresultStatus(Exec(admin, "RESUME postgres").get()), PGRES_COMMAND_OK);
  ConnPtr again = Connect(fleet.ConnString());
  EXPECT_EQ(Value(again, "SELECT 1"), "1");
}

}  // namespace
}  // namespace pgfleet::testing
