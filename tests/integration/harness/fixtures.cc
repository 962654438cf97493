// Test roles and helpers.
#include "tests/integration/harness/fixtures.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pgfleet::testing {

void EnsureTestRoles() {
  static bool done = false;
  if (done) return;
  done = true;
  auto& pg = PgServer::Shared();
  pg.Exec(
      "SET password_encryption = 'md5'; CREATE ROLE md5user LOGIN PASSWORD 'md5pass';"
      " CREATE ROLE aqmd5 LOGIN PASSWORD 'aqmd5pass'");
  pg.Exec(
      "SET password_encryption = 'scram-sha-256';"
      " CREATE ROLE scramuser LOGIN PASSWORD 'scrampass';"
      " CREATE ROLE authuser LOGIN PASSWORD 'authpass';"
      " CREATE ROLE aqscram LOGIN PASSWORD 'aqscrampass';"
      " GRANT pg_read_all_data TO authuser;"
      " GRANT SELECT ON pg_authid TO authuser");
  pg.Exec("CREATE ROLE otheruser LOGIN SUPERUSER");
  pg.Exec("CREATE TABLE IF NOT EXISTS items (id bigint, payload text)");
  pg.Exec("GRANT ALL ON items TO PUBLIC");
}

void InitPgbench() {
  static bool done = false;
  if (done) return;
  ASSERT_EQ(
      RunCommand(absl::StrCat("pgbench -i -q -s 1 -h 127.0.0.1 -p ", PgServer::Shared().port(),
                              " -U postgres postgres >/dev/null 2>&1")),
      0);
  done = true;
}

int ServerConnectionsFor(const std::string& user, const std::string& since) {
  return std::stoi(PgServer::Shared().QueryValue(absl::StrCat(
      "SELECT count(*) FROM pg_stat_activity WHERE usename = '", user,
      "' AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND backend_start >= '",
      since, "' AND application_name <> '", PgServer::kProbeApplicationName, "'")));
}

namespace {

bool IsPodLease(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(std::string("--pod_lease\0", 12)) != std::string::npos;
}

std::vector<pid_t> ChildPids(pid_t parent) {
  std::vector<pid_t> pids;
  for (auto line : absl::StrSplit(RunCommandOutput(absl::StrCat("pgrep -P ", parent)), '\n')) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid)) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());  // comparable before and after a restart
  return pids;
}

}  // namespace

std::vector<pid_t> WorkerPids(pid_t supervisor) {
  std::vector<pid_t> pids = ChildPids(supervisor);
  std::erase_if(pids, IsPodLease);
  return pids;
}

pid_t PodLeasePid(pid_t supervisor) {
  for (pid_t pid : ChildPids(supervisor)) {
    if (IsPodLease(pid)) return pid;
  }
  return -1;
}

}  // namespace pgfleet::testing
