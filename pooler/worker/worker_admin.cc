// Worker wiring for stats, metrics publishing and the admin console: the pieces of issue 5 kept
// out of worker.cc.
#include <signal.h>
#include <unistd.h>

#include <vector>

#include "peering/credentials.h"
#include "pooler/base/log.h"
#include "pooler/base/status_macros.h"
#include "pooler/conn/client_conn.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/worker/worker.h"

#ifndef PGFLEET_VERSION
#define PGFLEET_VERSION "dev"
#endif

namespace pgfleet::worker {

void Worker::LogStats() {
  const auto& pool_config = registry_->config().pool;
  if (!pool_config.log_stats) return;
  pool::PoolStats totals;
  for (const auto& [key, pool] : registry_->pools()) metrics::AddCounters(pool->stats(), totals);
  if (auto line = stats_log_.Sample(loop_.now(), pool_config.stats_period, totals)) {
    PGFLEET_LOG(kInfo, "stats", *line);
  }
}

void Worker::StartStats(const config::Config& fleet) {
  fleet_config_ = std::make_shared<const config::Config>(fleet);
  stats_ = std::make_unique<metrics::WorkerStatsSource>(*registry_, options_.peer_id, options_.slot,
                                                        options_.worker_count);
  stats_->SetFleetConfig(fleet_config_);
  stats_->Start();
  // RELOAD from the console: the SIGHUP path, after checking the file loads (errors go back to
  // the console instead of only the log).
  admin_actions_ = std::make_unique<admin::AdminActions>(*registry_, [this]() -> absl::Status {
    auto config = config::LoadConfigFile(options_.config_path);
    if (!config.ok()) return config.status();
    Reload();
    return absl::OkStatus();
  });
  admin_actions_->set_apply_setting([this](const std::string& setting, const std::string& value) {
    return ApplySetting(setting, value);
  });
  admin_actions_->set_stop_accepting([this] {
    // As a shutdown does, without closing anyone: this process's copies of the listening
    // sockets close, and no sibling hands it a client.
    for (auto& listener : listeners_) listener->Stop(/*close_socket=*/true);
    stopped_accepting_ = true;
    UpdateTakesClients();
  });
}

absl::Status Worker::StartAdmin() {
  admin::LocalWorker local;
  local.stats = [this](const peering::v1::GetWorkerStatsRequest& request,
                       peering::v1::WorkerStats* out) { stats_->Fill(request, out); };
  local.command = [this](const peering::v1::AdminCommandRequest& request,
                         admin::AdminActions::Done done) {
    admin_actions_->Apply(request, std::move(done));
  };
  admin_fanout_ =
      std::make_unique<admin::PodFanout>(loop_, peers_.get(), options_.peer_id, std::move(local));
  // Siblings check the peering token (when one is configured) on their unix sockets too.
  if (fleet_ != nullptr) {
    const peering::PeerCredentials* credentials = fleet_->credentials();
    admin_fanout_->set_authorizer(
        [credentials](grpc::ClientContext* context) { credentials->Authorize(context); });
  }
  admin::ConsoleOptions console;
  console.version = PGFLEET_VERSION;
  console.own_peer_id = options_.peer_id;
  console.fleet_config = [this] { return fleet_config_; };
  console.shutdown = [this] {
    // Under a supervisor the whole pod stops (it forwards SIGTERM to every worker).
    kill(options_.runtime_dir.empty() ? getpid() : getppid(), SIGTERM);
  };
  admin_console_ = std::make_unique<admin::Console>(*registry_, *admin_fanout_, std::move(console));
  registry_->set_admin_console(admin_console_.get());
  return absl::OkStatus();
}

absl::Status Worker::StartMetrics() {
  stats_->set_ready(true);  // listening, peering up: the supervisor may count us as ready
  if (options_.metrics_fd < 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<metrics::SnapshotRegion> region,
                   metrics::SnapshotRegion::Attach(options_.metrics_fd));
  publisher_ = std::make_unique<metrics::SnapshotPublisher>(loop_, std::move(region),
                                                            options_.metrics_slot, *stats_);
  publisher_->Start();
  return absl::OkStatus();
}

void Worker::SetFleetConfig(const config::Config& fleet) {
  fleet_config_ = std::make_shared<const config::Config>(fleet);
  if (stats_ != nullptr) stats_->SetFleetConfig(fleet_config_);
}

void Worker::OnShutdownStarted() {
  if (stats_ != nullptr) stats_->set_ready(false);
  if (publisher_ != nullptr) publisher_->PublishNow();
  // Console sessions hold no transaction: an open psql must not keep the drain waiting.
  if (registry_ != nullptr) {
    std::vector<pool::ClientConn*> consoles;
    for (auto* c = registry_->admin_clients().front(); c != nullptr;
         c = registry_->admin_clients().Next(c)) {
      consoles.push_back(c);
    }
    for (pool::ClientConn* c : consoles) {
      c->Fatal(protocol::sqlstate::kAdminShutdown, "server shutting down");
    }
  }
}

}  // namespace pgfleet::worker
