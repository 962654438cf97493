// pgfleet-controller: splits each database's max_db_connections across every worker of every pod
// by demand, assigns fleet-unique peer ids and tells pods where the others' peering endpoints
// are. `--config FILE` (pgfleet.yaml: controller.listen, databases, peering credentials,
// metrics.listen); `--version`.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "peering/controller/controller_server.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"

ABSL_FLAG(std::string, config, "", "Path to pgfleet.yaml; runs the controller.");
ABSL_FLAG(bool, version, false, "Print the version and exit.");

#ifndef PGFLEET_VERSION
#define PGFLEET_VERSION "dev"
#endif

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("pgfleet-controller --config FILE | --version");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_version)) {
    std::printf("pgfleet-controller %s\n", PGFLEET_VERSION);
    return 0;
  }
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) {
    std::fprintf(stderr, "usage: pgfleet-controller --config FILE | --version\n");
    return 2;
  }
  pgfleet::base::SetLogPrefix("controller");
  auto server = pgfleet::peering::controller::ControllerServer::Create(config_path);
  if (!server.ok()) {
    PGFLEET_LOG(kError, "startup_failed",
                "error=", pgfleet::base::LogQuote(pgfleet::base::Sv(server.status().message())));
    return 1;
  }
  if (auto status = (*server)->Run(); !status.ok()) {
    PGFLEET_LOG(kError, "controller_failed",
                "error=", pgfleet::base::LogQuote(pgfleet::base::Sv(status.message())));
    return 1;
  }
  PGFLEET_LOG(kInfo, "controller_exited", "");
  return 0;
}
