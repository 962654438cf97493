// One pooler process: its event loop, listeners, pools and signal handling, wired together.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "peering/cancel_forwarder.h"
#include "peering/peer_directory.h"
#include "peering/peering_service.h"
#include "peering/worker_fleet.h"
#include "pooler/admin/actions.h"
#include "pooler/admin/console.h"
#include "pooler/admin/fanout.h"
#include "pooler/config/config.h"
#include "pooler/metrics/snapshot.h"
#include "pooler/metrics/stats_log.h"
#include "pooler/net/event_loop.h"
#include "pooler/net/listener.h"
#include "pooler/net/signal_watcher.h"
#include "pooler/pool/pool_registry.h"
#include "pooler/worker/handoff_channel.h"

namespace pgfleet::worker {

struct WorkerOptions {
  std::string config_path;
  // This worker's fleet-wide peer id (docs/architecture.md, "Cancel keys"); 1 for a lone worker.
  uint32_t peer_id = 1;
  // Position among the pod's workers.
  int slot = 0;
  int worker_count = 1;
  // Listening sockets created by a supervisor; empty = bind our own from the config.
  std::vector<int> inherited_listen_fds;
  // Shared max_client_conn region from the supervisor (-1 = count locally).
  int client_budget_fd = -1;
  // Shared server counts of the pod's pools from the supervisor (-1 = count locally).
  int pod_servers_fd = -1;
  // Where sibling workers' peering sockets live (empty = no peering).
  std::string runtime_dir;
  // Written with one byte once the worker accepts connections (-1 = none).
  int ready_fd = -1;
  // The supervisor's metrics SnapshotRegion and this process's slot in it (-1 = no metrics).
  int metrics_fd = -1;
  uint32_t metrics_slot = 0;
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
  void Reload();
  // log_stats: a line of the period's rates every stats_period (stats_log.h).
  void LogStats();
  // SET key = value on the console: the config file with the SETs so far and this one laid
  // over it (PgBouncer's key names); an error leaves everything as it was.
  absl::Status ApplySetting(const std::string& setting, const std::string& value);
  // Loads the config file with settings_ and applies it (Reload's work); an error changes
  // nothing.
  absl::Status ApplyConfigFile();
  absl::Status StartPeering();
  // Stats, metrics publishing and the admin console (worker_admin.cc).
  void StartStats(const config::Config& fleet);
  absl::Status StartAdmin();
  absl::Status StartMetrics();
  void SetFleetConfig(const config::Config& fleet);
  void OnShutdownStarted();
  // Even client balance: passes a just-accepted connection to the sibling with the fewest
  // clients when that is fewer than this worker's. True when it went (the fd is closed here).
  bool PassClientToSibling(int fd, const std::string& peer);
  // Whether siblings may pass this worker clients: while it serves, when the config says so.
  void UpdateTakesClients();
  void BeginShutdown();
  // SIGUSR1 (PAUSE) or SIGUSR2 (RESUME), applied to every database of this worker.
  void ApplySignalledCommand(int signo);
  void CheckShutdown();

  WorkerOptions options_;
  net::EventLoop loop_;
  std::shared_ptr<const config::Config> config_;
  std::unique_ptr<pool::PoolRegistry> registry_;
  // One pool per pod: the sibling hand-off sockets (with a supervisor); goes before the registry.
  std::unique_ptr<HandoffChannel> handoff_;
  // With pgfleet-controller: the pod's shares enforced on this worker's servers.
  net::EventLoop::TimerId pod_share_timer_ = 0;
  uint32_t local_peer_id_ = 0;
  std::vector<std::unique_ptr<net::Listener>> listeners_;
  std::unique_ptr<net::SignalWatcher> signals_;
  std::unique_ptr<peering::WorkerFleet> fleet_;  // outlives the forwarder that uses it
  std::unique_ptr<peering::PeerDirectory> peers_;
  std::unique_ptr<peering::GrpcCancelForwarder> forwarder_;
  std::unique_ptr<peering::PeeringService> peering_service_;
  std::unique_ptr<peering::PeeringServer> peering_server_;
  std::shared_ptr<const config::Config> fleet_config_;  // before the per-worker split
  std::unique_ptr<metrics::WorkerStatsSource> stats_;
  metrics::StatsLog stats_log_;
  std::unique_ptr<metrics::SnapshotPublisher> publisher_;
  std::unique_ptr<admin::AdminActions> admin_actions_;
  std::unique_ptr<admin::PodFanout> admin_fanout_;
  std::unique_ptr<admin::Console> admin_console_;
  bool shutting_down_ = false;
  std::vector<std::pair<std::string, std::string>> settings_;  // the console's SETs
  bool stopped_accepting_ = false;  // SHUTDOWN WAIT_FOR_CLIENTS: no new clients, none closed
  absl::Time shutdown_deadline_;
  bool closed_all_ = false;  // shutdown closed every client; waiting for draining servers
};

// Loads the auth file named by `config` (empty list when none).
absl::StatusOr<auth::Userlist> LoadUserlistFor(const config::Config& config);
// Loads auth.hba_file (null when the config names none).
absl::StatusOr<std::shared_ptr<const auth::HbaRules>> LoadHbaFor(const config::Config& config);

}  // namespace pgfleet::worker
