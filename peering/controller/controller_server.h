// pgfleet-controller as a process: its event loop, the ControllerService behind a gRPC server on
// controller.listen (token and/or mTLS from the peering section), /metrics on metrics.listen, and
// signals (SIGHUP reloads budgets, SIGTERM/SIGINT stop).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "peering/controller/controller_metrics.h"
#include "peering/controller/controller_service.h"
#include "peering/credentials.h"
#include "pooler/net/event_loop.h"
#include "pooler/net/signal_watcher.h"

namespace pgfleet::peering::controller {

class ControllerServer {
 public:
  // Loads the config, binds the ports. Errors name the file and the key.
  static absl::StatusOr<std::unique_ptr<ControllerServer>> Create(const std::string& config_path);
  ~ControllerServer();

  // Serves until SIGTERM or SIGINT.
  [[nodiscard]] absl::Status Run();

 private:
  ControllerServer() = default;
  void Reload();

  std::string config_path_;
  net::EventLoop loop_;
  PeerCredentials credentials_;
  std::unique_ptr<ControllerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ControllerMetrics> metrics_;
  std::unique_ptr<net::SignalWatcher> signals_;
};

}  // namespace pgfleet::peering::controller
