// The worker's peering gRPC service. Handlers run on gRPC threads and never touch loop state:
// they copy the request, Post() it to the loop, and finish when the loop answers
// (docs/architecture.md, "Peering"). When credentials carry a token, every call must present it
// (UNAUTHENTICATED otherwise), on the unix socket as on the TCP port.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "peering/credentials.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"
#include "pooler/cancel/cancel_registry.h"
#include "pooler/net/event_loop.h"

namespace grpc {
class Server;
}

namespace pgfleet::peering {

// Fills a WorkerStats on the loop thread.
using StatsProvider = std::function<void(const v1::GetWorkerStatsRequest&, v1::WorkerStats*)>;
// Runs an admin console command on the loop thread and calls `done` (on the loop thread, now or
// later) with the answer.
using AdminCommandHandler = std::function<void(
    const v1::AdminCommandRequest&, std::function<void(const v1::AdminCommandReply&)> done)>;

struct PeeringServiceOptions {
  // This worker's peer id, to tell its own keys from its siblings'.
  uint32_t own_peer_id = 0;
  // Checked on every call; null = no check.
  const PeerCredentials* credentials = nullptr;
  // On the loop: hands a key that reached the pod endpoint to the sibling that owns it (true when
  // one was found). Null = such keys are handled as any forwarded key.
  std::function<bool(const protocol::CancelKey&)> relay_to_sibling;
};

class PeeringService final : public v1::Peering::CallbackService {
 public:
  PeeringService(net::EventLoop& loop, pool::CancelTarget& cancels, StatsProvider stats,
                 PeeringServiceOptions options = {});

  // Replaces the options; only before the server starts.
  void set_options(PeeringServiceOptions options) { options_ = std::move(options); }

  grpc::ServerUnaryReactor* ForwardCancel(grpc::CallbackServerContext* context,
                                          const v1::ForwardCancelRequest* request,
                                          v1::ForwardCancelReply* reply) override;
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* context,
                                           const v1::GetWorkerStatsRequest* request,
                                           v1::WorkerStats* reply) override;
  grpc::ServerUnaryReactor* AdminCommand(grpc::CallbackServerContext* context,
                                         const v1::AdminCommandRequest* request,
                                         v1::AdminCommandReply* reply) override;

  // Set before the server starts (null = AdminCommand answers UNIMPLEMENTED).
  void set_admin_handler(AdminCommandHandler handler) { admin_ = std::move(handler); }

 private:
  bool Refuse(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor);

  net::EventLoop& loop_;
  pool::CancelTarget& cancels_;
  StatsProvider stats_;
  AdminCommandHandler admin_;
  PeeringServiceOptions options_;
};

// One listening port: "unix:/path" or "host:port", with its credentials.
struct ListenSpec {
  std::string address;
  std::shared_ptr<grpc::ServerCredentials> credentials;  // null = insecure
};

// A started gRPC server.
class PeeringServer {
 public:
  // Listens on `address` ("unix:/path" or "host:port") without TLS.
  static absl::StatusOr<std::unique_ptr<PeeringServer>> Start(const std::string& address,
                                                              PeeringService* service);
  // Listens on every port of `ports`. TCP ports are bound with SO_REUSEPORT, so all workers of a
  // pod share the pod's peering port.
  static absl::StatusOr<std::unique_ptr<PeeringServer>> Start(const std::vector<ListenSpec>& ports,
                                                              grpc::Service* service);
  ~PeeringServer();
  void Shutdown();

 private:
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace pgfleet::peering
