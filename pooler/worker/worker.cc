// Worker wiring.
#include "pooler/worker/worker.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_join.h"
#include "pooler/base/log.h"
#include "pooler/base/status_macros.h"
#include "pooler/budget/pod_server_counts.h"
#include "pooler/net/socket.h"
#include "pooler/pool/pause_state.h"

namespace pgfleet::worker {

absl::StatusOr<auth::Userlist> LoadUserlistFor(const config::Config& config) {
  if (config.auth.file.empty()) return auth::Userlist();
  return auth::LoadUserlistFile(config.auth.file);
}

absl::StatusOr<std::shared_ptr<const auth::HbaRules>> LoadHbaFor(const config::Config& config) {
  if (config.auth.hba_file.empty()) return std::shared_ptr<const auth::HbaRules>();
  ASSIGN_OR_RETURN(auth::HbaRules rules, auth::LoadHbaFile(config.auth.hba_file));
  return std::make_shared<const auth::HbaRules>(std::move(rules));
}

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {}

Worker::~Worker() {
  // The forwarder goes before the registry, whose connections may still settle a schema change
  // as they close.
  if (registry_ != nullptr) registry_->context().statements().set_on_schema_change(nullptr);
}

absl::Status Worker::Init() {
  RETURN_IF_ERROR(loop_.Init());
  ASSIGN_OR_RETURN(config::Config fleet_config, config::LoadConfigFile(options_.config_path));
  ASSIGN_OR_RETURN(auth::Userlist userlist, LoadUserlistFor(fleet_config));
  ASSIGN_OR_RETURN(std::shared_ptr<const auth::HbaRules> hba, LoadHbaFor(fleet_config));
  ASSIGN_OR_RETURN(pool::TlsContexts tls, pool::LoadTlsContexts(fleet_config));
  // With pgfleet-controller the fleet-wide peer id comes from it (peering/controller/
  // controller_service.h); the supervisor's id stays the slot of the shared client budget.
  ASSIGN_OR_RETURN(fleet_, peering::WorkerFleet::Create(loop_, fleet_config, options_.peer_id,
                                                        options_.runtime_dir));
  const uint32_t local_peer_id = options_.peer_id;
  local_peer_id_ = local_peer_id;
  options_.peer_id = fleet_->RegisterPeerId();
  config_ = std::make_shared<const config::Config>(fleet_config);
  base::SetLogPrefix(base::StrCat("worker=", options_.slot, " peer_id=", options_.peer_id));
  if (config_->log.level == "debug") base::SetLogLevel(base::LogLevel::kDebug);
  if (config_->log.level == "warning") base::SetLogLevel(base::LogLevel::kWarning);
  if (config_->log.level == "error") base::SetLogLevel(base::LogLevel::kError);
  base::SetLogFile(config_->log.file);
  registry_ = std::make_unique<pool::PoolRegistry>(loop_, config_, std::move(userlist),
                                                   options_.peer_id, base::SystemRandom());
  registry_->context().set_hba(std::move(hba));
  registry_->context().set_tls(std::move(tls));
  if (fleet_->budget_caps()) registry_->budget().EnableDatabaseCaps();
  StartStats(fleet_config);
  loop_.RunEvery(absl::Seconds(1), [this] { LogStats(); });
  if (options_.client_budget_fd >= 0) {
    RETURN_IF_ERROR(
        registry_->client_budget().AttachShared(options_.client_budget_fd, local_peer_id));
  }
  if (options_.pod_servers_fd >= 0) {
    RETURN_IF_ERROR(registry_->budget().AttachPod(options_.pod_servers_fd, local_peer_id));
    // A worker (re)started while PAUSE or KILL is in force starts paused, as its siblings are,
    // and records what it is told from now on for the next one.
    budget::PodServerCounts& pod = registry_->budget().pod();
    pool::PauseState& pause = registry_->pause_state();
    const budget::PodServerCounts::Paused recorded = pod.RecordedPauses();
    if (recorded.all) pause.Pause("");
    for (const std::string& database : recorded.databases) pause.Pause(database);
    if (recorded.all || !recorded.databases.empty()) {
      PGFLEET_LOG(kInfo, "admin_paused_at_start",
                  "db=", recorded.all ? std::string("*") : absl::StrJoin(recorded.databases, ","));
    }
    pause.set_recorder(
        [&pod](const std::string& database, bool paused) { pod.RecordPause(database, paused); });
  }
  // DDL that any worker of the pod sees makes every worker's next Parse analysed afresh.
  registry_->context().statements().set_shared_epoch(registry_->budget().pod().statement_epoch());
  fleet_->Start(&registry_->budget().pod(), /*lone_worker=*/options_.pod_servers_fd < 0);
  if (fleet_->budget_caps()) {
    // As often as a lease client ticks: a lowered share is reached within a few tens of ms.
    pod_share_timer_ =
        loop_.RunEvery(absl::Milliseconds(25), [this] { registry_->budget().EnforcePodShares(); });
  }

  auto on_accept = [this](int fd, std::string peer) {
    if (shutting_down_) {
      close(fd);
      return;
    }
    if (PassClientToSibling(fd, peer)) return;
    registry_->AcceptClient(fd, std::move(peer));
  };
  std::vector<int> fds = options_.inherited_listen_fds;
  if (fds.empty()) {
    const auto& listen = config_->listen;
    int port = listen.port;
    for (const std::string& address : listen.Addresses()) {
      ASSIGN_OR_RETURN(int tcp_fd, net::ListenTcp(address, port, listen.backlog));
      fds.push_back(tcp_fd);
      port = net::BoundPort(tcp_fd);
      PGFLEET_LOG(kInfo, "listening", "address=", address, " port=", port);
    }
    if (!listen.unix_socket_dir.empty()) {
      ASSIGN_OR_RETURN(int unix_fd,
                       net::ListenUnix(listen.unix_socket_dir, port, listen.backlog,
                                       net::UnixSocketAccess{listen.unix_socket_mode,
                                                             listen.unix_socket_group}));
      fds.push_back(unix_fd);
      PGFLEET_LOG(kInfo, "listening", "unix_socket_dir=", listen.unix_socket_dir, " port=", port);
    }
  }
  for (int fd : fds) {
    auto listener = std::make_unique<net::Listener>(loop_, fd, on_accept);
    RETURN_IF_ERROR(listener->Start());
    listeners_.push_back(std::move(listener));
  }
  signals_ = std::make_unique<net::SignalWatcher>(
      loop_, std::vector<int>{SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2},
      [this](int signo) {
        if (signo == SIGHUP) {
          Reload();
        } else if (signo == SIGUSR1 || signo == SIGUSR2) {
          ApplySignalledCommand(signo);
        } else if (signo == SIGQUIT) {
          // PgBouncer's immediate shutdown: clients are told, every socket closes with the
          // process, and nothing waits for PostgreSQL (which ends the backends of closed
          // connections within client_connection_check_interval).
          PGFLEET_LOG(kInfo, "shutdown_immediate", "signal=", signo);
          registry_->CloseAll("server shutting down");
          std::fflush(nullptr);
          std::_Exit(0);
        } else if (shutting_down_) {
          PGFLEET_LOG(kInfo, "shutdown_immediate", "signal=", signo);
          registry_->CloseAll("server shutting down");
          loop_.Stop();
        } else {
          BeginShutdown();
        }
      });
  RETURN_IF_ERROR(signals_->Start());
  RETURN_IF_ERROR(StartPeering());
  UpdateTakesClients();
  RETURN_IF_ERROR(StartAdmin());
  RETURN_IF_ERROR(StartMetrics());
  if (options_.ready_fd >= 0) {
    const char ready = 'R';
    ssize_t ignored = write(options_.ready_fd, &ready, 1);
    (void)ignored;
    close(options_.ready_fd);
    options_.ready_fd = -1;
  }
  return absl::OkStatus();
}

absl::Status Worker::StartPeering() {
  if (options_.runtime_dir.empty()) return absl::OkStatus();
  if (options_.pod_servers_fd >= 0) {
    // The pod's workers share their pools: idle servers move to where clients wait.
    handoff_ = std::make_unique<HandoffChannel>(loop_, options_.runtime_dir, local_peer_id_,
                                                [this](pool::HandoffMessage message, int fd) {
                                                  registry_->OnHandoff(std::move(message), fd);
                                                });
    RETURN_IF_ERROR(handoff_->Start());
    registry_->set_server_mover(handoff_.get());
  }
  peers_ = std::make_unique<peering::PeerDirectory>(options_.runtime_dir);
  peering_service_ = std::make_unique<peering::PeeringService>(
      loop_, registry_->cancels(),
      [this](const peering::v1::GetWorkerStatsRequest& request, peering::v1::WorkerStats* stats) {
        stats_->Fill(request, stats);
      });
  peering_service_->set_admin_handler(
      [this](const peering::v1::AdminCommandRequest& request, auto done) {
        admin_actions_->Apply(request, std::move(done));
      });
  peering::PeeringServiceOptions service_options = fleet_->ServiceOptions(options_.peer_id);
  service_options.relay_to_sibling = [this](const protocol::CancelKey& key) {
    return forwarder_ != nullptr && forwarder_->ForwardToSibling(key);
  };
  peering_service_->set_options(std::move(service_options));
  const std::string path = peers_->SocketPathFor(options_.peer_id);
  unlink(path.c_str());
  ASSIGN_OR_RETURN(
      peering_server_,
      peering::PeeringServer::Start(fleet_->ListenPorts("unix:" + path), peering_service_.get()));
  // A test-only switch shows what a fleet without forwarding does to cancels.
  if (fleet_->options().peering.forward_cancels) {
    forwarder_ = std::make_unique<peering::GrpcCancelForwarder>(
        *peers_, options_.peer_id, config_->pool.cancel_wait_timeout, fleet_->directory(),
        fleet_->credentials());
    registry_->cancels().set_forwarder(forwarder_.get());
    // ... and, over peering, every other pod's.
    registry_->context().statements().set_on_schema_change(
        [this] { forwarder_->NotifySchemaChanged(loop_); });
  }
  return absl::OkStatus();
}

absl::Status Worker::Run() {
  PGFLEET_LOG(kInfo, "worker_serving", "pid=", getpid());
  absl::Status status = loop_.Run();
  if (fleet_ != nullptr) fleet_->Leave();  // every server is closed: the share is free at once
  OnShutdownStarted();                     // publishes the final counters for the supervisor
  if (peering_server_ != nullptr) {
    peering_server_->Shutdown();
    unlink(peers_->SocketPathFor(options_.peer_id).c_str());
  }
  return status;
}

void Worker::Reload() {
  // The file wins over the console's SETs, as a PgBouncer RELOAD re-reads it.
  settings_.clear();
  if (absl::Status status = ApplyConfigFile(); !status.ok()) {
    PGFLEET_LOG(kError, "reload_failed", "error=", base::LogQuote(base::Sv(status.message())));
  }
}

absl::Status Worker::ApplySetting(const std::string& setting, const std::string& value) {
  settings_.emplace_back(setting, value);
  absl::Status status = ApplyConfigFile();
  if (!status.ok()) settings_.pop_back();
  return status;
}

absl::Status Worker::ApplyConfigFile() {
  ASSIGN_OR_RETURN(config::Config config,
                   config::LoadConfigFileWithSettings(options_.config_path, settings_));
  ASSIGN_OR_RETURN(auth::Userlist userlist, LoadUserlistFor(config));
  auto hba = LoadHbaFor(config);
  if (!hba.ok()) return hba.status();
  // Certificates rotate by reload: a new context for new connections, the old one stays with
  // the connections that use it.
  auto tls = pool::LoadTlsContexts(config);
  if (!tls.ok()) return tls.status();
  config_ = std::make_shared<const config::Config>(config);
  base::SetLogFile(config.log.file);  // reopened: log rotation
  registry_->Reload(config_, std::move(userlist));
  registry_->context().set_hba(*std::move(hba));
  registry_->context().set_tls(*std::move(tls));
  SetFleetConfig(config);
  fleet_->UpdateConfig(config);
  UpdateTakesClients();
  PGFLEET_LOG(kInfo, "reloaded", "config=", options_.config_path);
  return absl::OkStatus();
}

void Worker::UpdateTakesClients() {
  registry_->client_budget().SetTakesClients(handoff_ != nullptr && !shutting_down_ &&
                                             !stopped_accepting_ &&
                                             config_->listen.balance_clients);
}

bool Worker::PassClientToSibling(int fd, const std::string& peer) {
  if (handoff_ == nullptr || !config_->listen.balance_clients) return false;
  // The kernel hashes a port's connections over its SO_REUSEPORT sockets, so a few clients can
  // land twice as thick on one worker as on another; nothing has been read from this one yet,
  // so a sibling serves it as if it had accepted it.
  pool::ClientBudget& budget = registry_->client_budget();
  const std::optional<uint32_t> sibling = budget.SiblingWithFewerClients();
  if (!sibling.has_value() || !budget.TryAcquireFor(*sibling)) return false;
  pool::HandoffMessage message;
  message.kind = pool::HandoffMessage::Kind::kClient;
  message.from = local_peer_id_;
  message.peer_address = peer;
  if (!handoff_->Send(*sibling, message, fd)) {
    budget.ReleaseFor(*sibling);
    return false;  // served here after all
  }
  close(fd);
  ++registry_->context().counters().clients_balanced;
  return true;
}

void Worker::ApplySignalledCommand(int signo) {
  // PgBouncer's SIGUSR1 and SIGUSR2: PAUSE and RESUME of every database, as from the console.
  if (admin_actions_ == nullptr) return;
  peering::v1::AdminCommandRequest request;
  request.set_command(signo == SIGUSR1 ? peering::v1::AdminCommandRequest::COMMAND_PAUSE
                                       : peering::v1::AdminCommandRequest::COMMAND_RESUME);
  const char* name = signo == SIGUSR1 ? "SIGUSR1" : "SIGUSR2";
  admin_actions_->Apply(request, [name](const peering::v1::AdminCommandReply& reply) {
    if (!reply.ok()) {
      PGFLEET_LOG(kWarning, "signal_command_failed", "signal=", name,
                  " error=", base::LogQuote(reply.error()));
    }
  });
}

void Worker::BeginShutdown() {
  PGFLEET_LOG(kInfo, "shutdown_started",
              "timeout_s=", absl::ToInt64Seconds(config_->pool.shutdown_timeout));
  shutting_down_ = true;
  UpdateTakesClients();
  OnShutdownStarted();
  shutdown_deadline_ = loop_.now() + config_->pool.shutdown_timeout;
  // Stop accepting and close this process's copies of the listening sockets. Under a supervisor
  // that only drops a reference: in a rolling restart the supervisor and the replacement still
  // hold the slot's socket, so its backlog goes to the replacement; in a full shutdown the
  // supervisor has closed its copies too, the socket closes, and new clients are refused at once
  // instead of waiting in a backlog that nobody will accept from.
  for (auto& listener : listeners_) listener->Stop(/*close_socket=*/true);
  CheckShutdown();
  loop_.RunEvery(absl::Milliseconds(50), [this] { CheckShutdown(); });
}

void Worker::CheckShutdown() {
  bool done = true;
  for (const auto& [key, pool] : registry_->pools()) {
    if (!pool->CloseIdleClients("server shutting down", loop_.now())) done = false;
  }
  if (registry_->client_count() > 0) done = false;
  if (!closed_all_ && (done || loop_.now() > shutdown_deadline_)) {
    registry_->CloseAll("server shutting down");
    closed_all_ = true;
    PGFLEET_LOG(kInfo, "shutdown_complete", "forced=", done ? "false" : "true");
  }
  // Servers whose clients were closed mid-query stay until PostgreSQL has cancelled what they ran
  // (at most server_connect_timeout, the janitor's limit): leaving sooner would leave those
  // queries running, on room the pod no longer counts.
  if (closed_all_ && registry_->draining_server_count() == 0) loop_.Stop();
}

}  // namespace pgfleet::worker
