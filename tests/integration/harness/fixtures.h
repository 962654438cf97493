// Shared set-up for integration tests: the PostgreSQL server with its test users and tables, and
// config snippets for pgfleet pointing at it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/harness/http_client.h"
#include "tests/integration/harness/libpq_client.h"
#include "tests/integration/harness/pg_server.h"
#include "tests/integration/harness/pgfleet_process.h"
#include "tests/integration/harness/wait.h"

namespace pgfleet::testing {

// Creates (once per process) the roles the tests log in as:
//   md5user/md5pass (md5 hash), scramuser/scrampass (SCRAM), authuser/authpass (runs auth_query),
//   aqmd5/aqmd5pass and aqscram/aqscrampass (known only through auth_query).
void EnsureTestRoles();

// pgbench's tables (scale 1) in the shared server, created once per test binary. Call it as
// ASSERT_NO_FATAL_FAILURE(InitPgbench()).
void InitPgbench();

// The worker processes under a supervisor (its children as pgrep sees them now, but the pod's
// lease process), sorted.
std::vector<pid_t> WorkerPids(pid_t supervisor);
// The pod's lease process under a supervisor (`pgfleet --pod_lease`), or -1.
pid_t PodLeasePid(pid_t supervisor);

// How many times `event` ("event=worker_ready") appears in a log.
inline size_t CountInLog(const std::string& log, const std::string& event) {
  size_t n = 0;
  for (size_t at = log.find(event); at != std::string::npos; at = log.find(event, at + 1)) ++n;
  return n;
}

// The sum over a pod's workers of a metric in its /metrics (http_client.h).
inline double MetricSum(const PgfleetProcess& fleet, const std::string& name) {
  return MetricSum(fleet.metrics_port(), name);
}

// `databases:` + `pool:` YAML for a pool in front of the shared server.
inline std::string PoolConfig(const std::string& mode, int pool_size,
                              const std::string& extra_pool = "",
                              const std::string& extra_top = "") {
  auto& pg = PgServer::Shared();
  return absl::StrCat("workers: 1\n", "databases:\n  postgres: {host: 127.0.0.1, port: ", pg.port(),
                      "}\n", "pool:\n  pool_mode: ", mode, "\n  default_pool_size: ", pool_size,
                      "\n", extra_pool, extra_top);
}

// Client backends of `user` that started since `since` (a PostgreSQL timestamp), other than the
// one asking: the server connections pgfleet opened during the current test.
int ServerConnectionsFor(const std::string& user, const std::string& since);

class IntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EnsureTestRoles();
    test_start_ = PgServer::Shared().QueryValue("SELECT now()::text");
  }
  PgServer& pg() { return PgServer::Shared(); }
  int ServerConnections(const std::string& user = "postgres") {
    return ServerConnectionsFor(user, test_start_);
  }

  std::string test_start_;
};

}  // namespace pgfleet::testing
