// pgfleet: the pod's PostgreSQL pooler. `--config FILE` serves, `--check-config FILE` validates,
// `--version` prints the version.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/config/config.h"
#include "pooler/worker/worker.h"

ABSL_FLAG(std::string, config, "", "Path to pgfleet.yaml; runs the pooler.");
ABSL_FLAG(std::string, check_config, "", "Validate this config file and exit (0 = valid).");
ABSL_FLAG(bool, version, false, "Print the version and exit.");

#ifndef PGFLEET_VERSION
#define PGFLEET_VERSION "dev"
#endif

namespace {

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
  std::printf("%s: configuration is valid\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("pgfleet --config FILE | --check-config FILE | --version");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_version)) {
    std::printf("pgfleet %s\n", PGFLEET_VERSION);
    return 0;
  }
  if (!absl::GetFlag(FLAGS_check_config).empty()) {
    return CheckConfig(absl::GetFlag(FLAGS_check_config));
  }
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) {
    std::fprintf(stderr, "usage: pgfleet --config FILE | --check-config FILE | --version\n");
    return 2;
  }
  pgfleet::worker::WorkerOptions options;
  options.config_path = config_path;
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
