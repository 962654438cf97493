// One pooler process: its event loop, listeners, pools and signal handling, wired together.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pooler/config/config.h"
#include "pooler/net/event_loop.h"
#include "pooler/net/listener.h"
#include "pooler/pool/pool_registry.h"

namespace pgfleet::worker {

struct WorkerOptions {
  std::string config_path;
  // This worker's fleet-wide peer id (DESIGN.md cancel keys); 1 for a lone worker.
  uint32_t peer_id = 1;
  // Listening sockets created by a supervisor; empty = bind our own from the config.
  std::vector<int> inherited_listen_fds;
  // How long graceful shutdown waits for transactions to finish.
  absl::Duration shutdown_timeout = absl::Seconds(30);
};

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();

  // Loads the config and the auth file, binds listeners. Errors name the file and key.
  [[nodiscard]] absl::Status Init();
  // Serves until shutdown. SIGHUP reloads, SIGTERM/SIGINT drain then exit, a second one exits.
  [[nodiscard]] absl::Status Run();

  net::EventLoop& loop() { return loop_; }
  pool::PoolRegistry& registry() { return *registry_; }

 private:
  class SignalHandler;
  void Reload();
  void BeginShutdown();
  void CheckShutdown();

  WorkerOptions options_;
  net::EventLoop loop_;
  std::shared_ptr<const config::Config> config_;
  std::unique_ptr<pool::PoolRegistry> registry_;
  std::vector<std::unique_ptr<net::Listener>> listeners_;
  std::unique_ptr<SignalHandler> signals_;
  bool shutting_down_ = false;
  absl::Time shutdown_deadline_;
};

// Loads the auth file named by `config` (empty list when none).
absl::StatusOr<auth::Userlist> LoadUserlistFor(const config::Config& config);

}  // namespace pgfleet::worker
