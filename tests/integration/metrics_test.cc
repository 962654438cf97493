// The pod's /metrics, /healthz and /readyz (served by the supervisor from the workers' published
// snapshots), and a real Prometheus evaluating every query of the Grafana dashboard and of the
// alert rules against a pgfleet under load.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "pooler/metrics/names.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/http_client.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// The repository root, from this file's path (CMake compiles it by absolute path).
std::string RepoRoot() {
  std::string file = __FILE__;
  return file.substr(0, file.rfind("/tests/integration/"));
}

std::string MetricsConfig(int workers, const std::string& extra_pool = "",
                          const std::string& top = "") {
  return absl::StrCat("workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ",
                      PgServer::Shared().port(),
                      ", max_db_connections: 40}\npool:\n  pool_mode: transaction\n"
                      "  default_pool_size: 16\n",
                      extra_pool, "admin:\n  users: [admin]\n", top);
}

// Samples of a Prometheus text exposition: "name{labels}" -> value.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(space + 1), &v)) {
      out[std::string(line.substr(0, space))] = v;
    }
  }
  return out;
}

// Sum of every sample of metric `name` whose labels contain `label_filter`.
double Sum(const std::map<std::string, double>& samples, const std::string& name,
           const std::string& label_filter = "") {
  double sum = 0;
  for (const auto& [key, v] : samples) {
    const std::string base = key.substr(0, key.find('{'));
    if (base == name && key.find(label_filter) != std::string::npos) sum += v;
  }
  return sum;
}

bool HasMetric(const std::map<std::string, double>& samples, const std::string& name) {
  for (const auto& [key, v] : samples) {
    if (key.substr(0, key.find('{')) == name) return true;
  }
  return false;
}

std::map<std::string, double> Scrape(const PgfleetProcess& fleet) {
  std::string body;
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/metrics", &body), 200);
  return ParseSamples(body);
}

// Waits until /readyz answers `status` (bounded), returns the last status.
int WaitForReadyz(const PgfleetProcess& fleet, int status, std::string* body = nullptr) {
  return WaitFor([&] { return HttpGet(fleet.metrics_port(), "/readyz", body); },
                 [&](int got) { return got == status; });
}

class MetricsTest : public IntegrationTest {};

TEST_F(MetricsTest, HealthzAndReadyzReportThePod) {
  PgfleetProcess fleet(MetricsConfig(2));
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/healthz"), 200);
  // No client yet, so no server connection: readiness comes from probing PostgreSQL.
  EXPECT_EQ(WaitForReadyz(fleet, 200), 200);
  EXPECT_EQ(Sum(Scrape(fleet), std::string(metrics::names::kUp)), 1);
  EXPECT_EQ(Sum(Scrape(fleet), std::string(metrics::names::kWorkers)), 2);
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/nope"), 404);
}

TEST_F(MetricsTest, NotReadyWhilePostgresIsUnreachable) {
  const int dead_port = FreePort();
  PgfleetProcess fleet(absl::StrCat(
      "workers: 2\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", dead_port, "}\n"));
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/healthz"), 200);
  // Once the workers have reported, what keeps the pod unready is PostgreSQL.
  std::string body;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(HttpGet(fleet.metrics_port(), "/readyz", &body), 503);
    if (body.find("PostgreSQL") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(body, HasSubstr("PostgreSQL is not reachable"));
  EXPECT_EQ(Sum(Scrape(fleet), std::string(metrics::names::kUp)), 0);
}

TEST_F(MetricsTest, EveryMetricIsServedAndMatchesTheConsole) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(MetricsConfig(2));
  // One error (class 22, division by zero) for pgfleet_errors_total.
  ConnPtr c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  EXPECT_EQ(SqlState(Exec(c, "SELECT 1/0")), "22012");
  // A named prepared statement for pgfleet_prepared_statements_total.
  ResultPtr prepared(PQprepare(c.get(), "metrics_s1", "SELECT 1", 0, nullptr));
  ASSERT_EQ(PQresultStatus(prepared.get()), PGRES_COMMAND_OK) << PQerrorMessage(c.get());
  ResultPtr executed(PQexecPrepared(c.get(), "metrics_s1", 0, nullptr, nullptr, nullptr, 0));
  ASSERT_EQ(PQresultStatus(executed.get()), PGRES_TUPLES_OK) << PQerrorMessage(c.get());
  ASSERT_EQ(RunCommand(absl::StrCat("pgbench -n -S -c 4 -j 2 -t 300 -h 127.0.0.1 -p ", fleet.port(),
                                    " -U postgres postgres >/dev/null 2>&1")),
            0);
  namespace n = metrics::names;
  ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  // Workers publish every 500 ms: scrape until what they published has caught up with the
  // console's live totals (the load is over, so those no longer move).
  auto console_transactions = [&] {
    ResultPtr totals = Exec(admin, "SHOW STATS_TOTALS");
    if (PQntuples(totals.get()) != 1) return std::string("<none>");
    return std::string(PQgetvalue(totals.get(), 0, PQfnumber(totals.get(), "xact_count")));
  };
  const auto samples = WaitFor(
      [&] { return Scrape(fleet); },
      [&](const std::map<std::string, double>& s) {
        return std::to_string(static_cast<int64_t>(Sum(s, std::string(n::kStatsTransactions)))) ==
               console_transactions();
      });
  for (std::string_view name : {n::kBuildInfo,
                                n::kUp,
                                n::kWorkers,
                                n::kWorkerRestarts,
                                n::kMaxClientConn,
                                n::kBudgetMaxDbConnections,
                                n::kPoolsClientActive,
                                n::kPoolsClientWaiting,
                                n::kPoolsClientIdle,
                                n::kPoolsServerActive,
                                n::kPoolsServerIdle,
                                n::kPoolsServerUsed,
                                n::kPoolsServerTesting,
                                n::kPoolsServerLogin,
                                n::kPoolsClientMaxWait,
                                n::kStatsTransactions,
                                n::kStatsQueries,
                                n::kStatsReceivedBytes,
                                n::kStatsSentBytes,
                                n::kBudgetShare,
                                n::kCancelReceived,
                                n::kCancelForwarded,
                                n::kCancelDropped,
                                n::kCancelQueued,
                                n::kCancelAbandoned,
                                n::kCancelRepeated,
                                n::kClientConnections,
                                n::kClientsRejected,
                                n::kCancelRateLimited,
                                n::kErrors,
                                n::kPreparedStatements}) {
    EXPECT_TRUE(HasMetric(samples, std::string(name))) << name;
  }
  for (std::string_view h :
       {n::kStatsQueryDuration, n::kStatsTransactionDuration, n::kStatsWaitDuration}) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      EXPECT_TRUE(HasMetric(samples, std::string(h) + suffix)) << h << suffix;
    }
  }
  EXPECT_EQ(Sum(samples, std::string(n::kErrors), "class=\"22\""), 1);
  EXPECT_EQ(Sum(samples, std::string(n::kPreparedStatements), "event=\"prepared\""), 1);
  EXPECT_EQ(Sum(samples, std::string(n::kBudgetMaxDbConnections)), 40);
  EXPECT_EQ(Sum(samples, std::string(n::kBudgetShare)), 40);  // 20 + 20: the pod's split
  // Per-worker series add up to the console's pod totals.
  const double transactions = Sum(samples, std::string(n::kStatsTransactions));
  EXPECT_GE(transactions, 1200);
  ResultPtr totals = Exec(admin, "SHOW STATS_TOTALS");
  ASSERT_EQ(PQntuples(totals.get()), 1) << PQerrorMessage(admin.get());
  EXPECT_EQ(PQgetvalue(totals.get(), 0, PQfnumber(totals.get(), "xact_count")),
            std::to_string(static_cast<int64_t>(transactions)));
  EXPECT_EQ(Sum(samples, std::string(n::kStatsQueryDuration) + "_count"),
            Sum(samples, std::string(n::kStatsQueries)));
  EXPECT_EQ(Sum(samples, std::string(n::kStatsTransactionDuration) + "_bucket", "le=\"+Inf\""),
            transactions);
  EXPECT_GE(Sum(samples, std::string(n::kClientConnections)), 5);
  // Series carry the worker slot.
  EXPECT_TRUE(samples.count(std::string(n::kCancelReceived) + "{worker=\"0\"}"));
  EXPECT_TRUE(samples.count(std::string(n::kCancelReceived) + "{worker=\"1\"}"));
}

TEST_F(MetricsTest, CountersSurviveAWorkerRestart) {
  PgfleetProcess fleet(MetricsConfig(2));
  std::vector<ConnPtr> conns;
  for (int i = 0; i < 16; ++i) {
    conns.push_back(Connect(fleet.ConnString()));
    ASSERT_EQ(Value(conns.back(), "SELECT 1"), "1");
  }
  conns.clear();
  // Workers publish every 500 ms.
  const auto before =
      WaitFor([&] { return Scrape(fleet); },
              [](const std::map<std::string, double>& s) {
                return Sum(s, std::string(metrics::names::kClientConnections)) >= 16;
              });
  const double accepted = Sum(before, std::string(metrics::names::kClientConnections));
  EXPECT_GE(accepted, 16);
  const std::vector<pid_t> workers = WaitFor(
      [&] {
        std::vector<pid_t> pids;
        for (auto line :
             absl::StrSplit(RunCommandOutput(absl::StrCat("pgrep -P ", fleet.pid())), '\n')) {
          int pid = 0;
          if (absl::SimpleAtoi(line, &pid)) pids.push_back(pid);
        }
        return pids;
      },
      [](const std::vector<pid_t>& pids) { return pids.size() >= 2; }, std::chrono::seconds(5));
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[0], SIGKILL);
  EXPECT_EQ(WaitForReadyz(fleet, 200), 200);  // the replacement reports ready
  const auto after = WaitFor([&] { return Scrape(fleet); },
                             [](const std::map<std::string, double>& s) {
                               return Sum(s, std::string(metrics::names::kWorkerRestarts)) >= 1;
                             },
                             std::chrono::seconds(5));
  EXPECT_EQ(Sum(after, std::string(metrics::names::kWorkerRestarts)), 1);
  // The dead worker's counters stay with its slot: pod totals never go backwards.
  EXPECT_GE(Sum(after, std::string(metrics::names::kClientConnections)), accepted);
  EXPECT_GE(Sum(after, std::string(metrics::names::kStatsTransactions)),
            Sum(before, std::string(metrics::names::kStatsTransactions)));
}

TEST_F(MetricsTest, EmptyListenTurnsMetricsOff) {
  PgfleetProcess fleet(MetricsConfig(2, "", "metrics:\n  listen: \"\"\n"));
  ConnPtr c = Connect(fleet.ConnString());
  EXPECT_EQ(Value(c, "SELECT 1"), "1");
  EXPECT_EQ(HttpGet(fleet.metrics_port(), "/healthz"), -1);
  EXPECT_THAT(fleet.Log(), HasSubstr("event=metrics_disabled"));
}

TEST_F(MetricsTest, PrometheusEvaluatesEveryDashboardAndAlertQuery) {
  const std::string prometheus = RunCommandOutput("command -v prometheus");
  ASSERT_FALSE(prometheus.empty()) << "install Debian's prometheus (scripts/install-deps.sh)";
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(MetricsConfig(2));
  // Prometheus scraping pgfleet every second, with the target labels Kubernetes discovery would
  // add (the dashboard and the alerts group by namespace and pod).
  const int prom_port = FreePort();
  const std::string dir = fleet.dir() + "/prometheus";
  ASSERT_EQ(RunCommand("mkdir -p " + dir + "/data"), 0);
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: pgfleet\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << fleet.metrics_port() << "']\n"
      << "        labels: {namespace: test, pod: pgfleet-0}\n";
  const pid_t prom = fork();
  if (prom == 0) {
    const std::string log = dir + "/prometheus.log";
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const std::string config = "--config.file=" + dir + "/prometheus.yml";
    const std::string data = "--storage.tsdb.path=" + dir + "/data";
    const std::string listen = absl::StrCat("--web.listen-address=127.0.0.1:", prom_port);
    execlp("prometheus", "prometheus", config.c_str(), data.c_str(), listen.c_str(),
           "--storage.tsdb.retention.time=1h", nullptr);
    _exit(127);
  }
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  } reaper{prom};
  const bool ready =
      WaitFor([&] { return HttpGet(prom_port, "/-/ready") == 200; }, std::chrono::seconds(15));
  ASSERT_TRUE(ready) << RunCommandOutput("cat " + dir + "/prometheus.log");
  // Load, an error (errors_total by class) and a cancel, then let Prometheus scrape a while.
  ConnPtr c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  EXPECT_EQ(SqlState(Exec(c, "SELECT 1/0")), "22012");
  std::thread bench([&] {
    RunCommand(absl::StrCat("pgbench -n -S -c 4 -j 2 -T 12 -h 127.0.0.1 -p ", fleet.port(),
                            " -U postgres postgres >/dev/null 2>&1"));
  });
  std::this_thread::sleep_for(std::chrono::seconds(9));
  const std::string out = RunCommandOutput(absl::StrCat(
      "python3 ", RepoRoot(), "/tests/integration/promql_check.py --prometheus http://127.0.0.1:",
      prom_port, " --dashboard ", RepoRoot(), "/deploy/grafana/pgfleet.json --alerts ", RepoRoot(),
      "/deploy/prometheus/alerts.yaml --var namespace=test --var pod=pgfleet-0 "
      "--var database=postgres --rate-interval 10s 2>&1; echo exit=$?"));
  bench.join();
  EXPECT_THAT(out, HasSubstr("exit=0")) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("FAIL"))) << out;
}

}  // namespace
}  // namespace pgfleet::testing
