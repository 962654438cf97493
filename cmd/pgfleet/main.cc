// pgfleet: the pod's PostgreSQL pooler. `--config FILE` serves, `--check-config FILE` validates,
// `--version` prints the version.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "peering/fleet_options.h"
#include "peering/pod_lease.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/config/config.h"
#include "pooler/conn/tls_policy.h"
#include "pooler/supervisor/supervisor.h"
#include "pooler/worker/worker.h"

ABSL_FLAG(std::string, config, "", "Path to pgfleet.yaml; runs the pooler.");
ABSL_FLAG(std::string, check_config, "", "Validate this config file and exit (0 = valid).");
ABSL_FLAG(bool, print_config, false,
          "With --config (YAML or pgbouncer.ini): print it as the YAML pgfleet reads, and exit.");
ABSL_FLAG(bool, version, false, "Print the version and exit.");
// Set by the supervisor when it execs a worker; not for people.
ABSL_FLAG(int, worker_slot, -1, "internal: worker slot index (worker mode)");
ABSL_FLAG(bool, pod_lease, false, "internal: hold the pod's budget lease (lease mode)");
ABSL_FLAG(int, worker_count, 1, "internal: number of workers in the pod");
ABSL_FLAG(uint32_t, peer_id, 1, "internal: this worker's fleet-wide peer id");
ABSL_FLAG(std::string, runtime_dir, "", "internal: directory of the workers' peering sockets");
ABSL_FLAG(std::vector<std::string>, listen_fds, {}, "internal: inherited listening sockets");
ABSL_FLAG(int, client_budget_fd, -1, "internal: shared max_client_conn region");
ABSL_FLAG(int, pod_servers_fd, -1, "internal: shared region of the pod's server counts");
ABSL_FLAG(int, ready_fd, -1, "internal: pipe to report readiness on");
ABSL_FLAG(int, metrics_fd, -1, "internal: shared metrics snapshot region");
ABSL_FLAG(uint32_t, metrics_slot, 0, "internal: this worker's slot in the metrics region");

#ifndef PGFLEET_VERSION
#define PGFLEET_VERSION "dev"
#endif

namespace {

int PrintConfig(const std::string& path) {
  auto yaml = pgfleet::config::ConfigFileAsYaml(path);
  if (!yaml.ok()) {
    std::fprintf(stderr, "%s\n", std::string(yaml.status().message()).c_str());
    return 1;
  }
  std::fputs(yaml->c_str(), stdout);
  return 0;
}

int CheckConfig(const std::string& path) {
  auto config = pgfleet::config::LoadConfigFile(path);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  auto userlist = pgfleet::worker::LoadUserlistFor(*config);
  if (!userlist.ok()) {
    std::fprintf(stderr, "%s\n", std::string(userlist.status().message()).c_str());
    return 1;
  }
  auto hba = pgfleet::worker::LoadHbaFor(*config);
  if (!hba.ok()) {
    std::fprintf(stderr, "%s\n", std::string(hba.status().message()).c_str());
    return 1;
  }
  if (auto tls = pgfleet::pool::LoadTlsContexts(*config); !tls.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tls.status().message()).c_str());
    return 1;
  }
  auto fleet = pgfleet::peering::ParseFleetOptions(*config);
  if (!fleet.ok()) {
    std::fprintf(stderr, "%s\n", std::string(fleet.status().message()).c_str());
    return 1;
  }
  for (const auto& warning : fleet->warnings) {
    std::fprintf(stderr, "%s: warning: %s\n", path.c_str(), warning.c_str());
  }
  std::printf("%s: configuration is valid\n", path.c_str());
  return 0;
}

// Each client is a descriptor: raise the soft RLIMIT_NOFILE to the hard limit (often 1024 soft
// vs. 1M hard in containers), so max_client_conn is not capped by a default nobody chose. Workers
// inherit it. Best effort: a failure leaves the limit as it was.
void RaiseFileLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  (void)setrlimit(RLIMIT_NOFILE, &limit);
}

int RunSupervisor(const std::string& config_path) {
  pgfleet::supervisor::SupervisorOptions options;
  options.config_path = config_path;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "cannot resolve /proc/self/exe\n");
    return 1;
  }
  // The path, not the inode: a binary replaced on disk is what the next worker runs.
  options.binary_path = std::string(self, static_cast<size_t>(n));
  const std::string deleted = " (deleted)";
  if (options.binary_path.size() > deleted.size() &&
      options.binary_path.compare(options.binary_path.size() - deleted.size(), deleted.size(),
                                  deleted) == 0) {
    options.binary_path.resize(options.binary_path.size() - deleted.size());
  }
  pgfleet::base::SetLogPrefix("supervisor");
  pgfleet::supervisor::Supervisor supervisor(options);
  if (auto status = supervisor.Init(); !status.ok()) {
    PGFLEET_LOG(kError, "startup_failed",
                "error=", pgfleet::base::LogQuote(pgfleet::base::Sv(status.message())));
    return 1;
  }
  if (auto status = supervisor.Run(); !status.ok()) {
    PGFLEET_LOG(kError, "supervisor_failed",
                "error=", pgfleet::base::LogQuote(pgfleet::base::Sv(status.message())));
    return 1;
  }
  // Every worker is gone. Exit without running destructors: stopping the embedded HTTP server
  // (civetweb) waits out its poll timeouts, about 2 s, which every pod shutdown would pay.
  supervisor.ReleaseRuntimeFiles();
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pgfleet --config FILE [--print-config] | --check-config FILE | --version");
  // The command-line contract (docs/architecture.md, "Configuration") is --check-config; absl
  // spells flags with underscores, so accept both.
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> normalized;
  for (auto& arg : args) {
    if (arg.rfind("--", 0) == 0) {
      size_t end = arg.find('=');
      std::replace(arg.begin() + 2, end == std::string::npos ? arg.end() : arg.begin() + end, '-',
                   '_');
    }
    normalized.push_back(arg.data());
  }
  absl::ParseCommandLine(static_cast<int>(normalized.size()), normalized.data());
  if (absl::GetFlag(FLAGS_version)) {
    std::printf("pgfleet %s\n", PGFLEET_VERSION);
    return 0;
  }
  if (!absl::GetFlag(FLAGS_check_config).empty()) {
    return CheckConfig(absl::GetFlag(FLAGS_check_config));
  }
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) {
    std::fprintf(stderr,
                 "usage: pgfleet --config FILE [--print-config] | --check-config FILE | "
                 "--version\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_print_config)) return PrintConfig(config_path);
  RaiseFileLimit();
  if (absl::GetFlag(FLAGS_pod_lease)) {
    return pgfleet::peering::RunPodLeaseProcess(config_path, absl::GetFlag(FLAGS_runtime_dir),
                                                absl::GetFlag(FLAGS_pod_servers_fd));
  }
  if (absl::GetFlag(FLAGS_worker_slot) < 0) return RunSupervisor(config_path);
  pgfleet::worker::WorkerOptions options;
  options.config_path = config_path;
  options.slot = absl::GetFlag(FLAGS_worker_slot);
  options.worker_count = absl::GetFlag(FLAGS_worker_count);
  options.peer_id = absl::GetFlag(FLAGS_peer_id);
  options.runtime_dir = absl::GetFlag(FLAGS_runtime_dir);
  options.client_budget_fd = absl::GetFlag(FLAGS_client_budget_fd);
  options.pod_servers_fd = absl::GetFlag(FLAGS_pod_servers_fd);
  options.ready_fd = absl::GetFlag(FLAGS_ready_fd);
  options.metrics_fd = absl::GetFlag(FLAGS_metrics_fd);
  options.metrics_slot = absl::GetFlag(FLAGS_metrics_slot);
  for (const auto& fd : absl::GetFlag(FLAGS_listen_fds)) {
    options.inherited_listen_fds.push_back(std::stoi(fd));
  }
  pgfleet::worker::Worker worker(options);
  if (auto status = worker.Init(); !status.ok()) {
    PGFLEET_LOG(kError, "startup_failed",
                "error=", pgfleet::base::LogQuote(pgfleet::base::Sv(status.message())));
    return 1;
  }
  if (auto status = worker.Run(); !status.ok()) {
    PGFLEET_LOG(kError, "worker_failed",
                "error=", pgfleet::base::LogQuote(pgfleet::base::Sv(status.message())));
    return 1;
  }
  return 0;
}
