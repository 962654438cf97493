// The worker's peering gRPC service. Handlers run on gRPC threads and never touch loop state:
// they copy the request, Post() it to the loop, and finish when the loop answers (STYLE.md 12).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/cancel_registry.h"

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

class PeeringService final : public v1::Peering::CallbackService {
 public:
  PeeringService(net::EventLoop& loop, pool::CancelTarget& cancels, StatsProvider stats);

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
  net::EventLoop& loop_;
  pool::CancelTarget& cancels_;
  StatsProvider stats_;
  AdminCommandHandler admin_;
};

// A started gRPC server listening on `address` ("unix:/path" or "host:port").
class PeeringServer {
 public:
  static absl::StatusOr<std::unique_ptr<PeeringServer>> Start(const std::string& address,
                                                              PeeringService* service);
  ~PeeringServer();
  void Shutdown();

 private:
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace pgfleet::peering
