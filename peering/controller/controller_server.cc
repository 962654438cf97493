// The controller process.
#include "peering/controller/controller_server.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/status_macros.h"
#include "pooler/net/signal_watcher.h"

namespace pgfleet::peering::controller {

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Create(
    const std::string& config_path) {
  auto server = std::unique_ptr<ControllerServer>(new ControllerServer());
  server->config_path_ = config_path;
  RETURN_IF_ERROR(server->loop_.Init());
  // Signals first, so that none arriving during start-up kills the process.
  ControllerServer* self = server.get();
  server->signals_ = std::make_unique<net::SignalWatcher>(
      server->loop_, std::vector<int>{SIGHUP, SIGTERM, SIGINT}, [self](int signo) {
        if (signo == SIGHUP) {
          self->Reload();
        } else {
          PGFLEET_LOG(kInfo, "shutdown_requested", "signal=", signo);
          self->loop_.Stop();
        }
      });
  RETURN_IF_ERROR(server->signals_->Start());
  ASSIGN_OR_RETURN(config::Config config, config::LoadConfigFile(config_path));
  if (config.log.level == "debug") base::SetLogLevel(base::LogLevel::kDebug);
  ASSIGN_OR_RETURN(FleetOptions options, ParseFleetOptions(config));
  if (options.controller.listen.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": controller.listen: required to run pgfleet-controller"));
  }
  if (!options.peering.tls.enabled() && options.peering.token_file.empty()) {
    PGFLEET_LOG(kWarning, "controller_unauthenticated",
                "effect=\"anyone who reaches controller.listen can join the fleet\"");
  }
  ASSIGN_OR_RETURN(server->credentials_, PeerCredentials::Load(options.peering));
  server->service_ = std::make_unique<ControllerService>(server->loop_, config, options.controller,
                                                         server->credentials_);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.controller.listen, server->credentials_.TcpServerCredentials(),
                           &port);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("controller.listen: cannot listen on ", options.controller.listen));
  }
  PGFLEET_LOG(kInfo, "listening", "controller=", options.controller.listen, " port=", port);
  if (!config.metrics.listen.empty()) {
    ASSIGN_OR_RETURN(server->metrics_, ControllerMetrics::Start(config.metrics.listen));
    PGFLEET_LOG(kInfo, "listening", "metrics=", config.metrics.listen);
  }
  return server;
}

ControllerServer::~ControllerServer() {
  if (service_ != nullptr) service_->CloseAll();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  }
}

void ControllerServer::Reload() {
  auto config = config::LoadConfigFile(config_path_);
  if (!config.ok()) {
    PGFLEET_LOG(kError, "reload_failed",
                "error=", base::LogQuote(base::Sv(config.status().message())));
    return;
  }
  service_->ApplyConfig(*config);
  PGFLEET_LOG(kInfo, "reloaded", "config=", config_path_);
}

absl::Status ControllerServer::Run() {
  service_->Start();
  if (metrics_ != nullptr) {
    metrics_->Update(*service_);
    loop_.RunEvery(absl::Milliseconds(250), [this] { metrics_->Update(*service_); });
  }
  return loop_.Run();
}

}  // namespace pgfleet::peering::controller
