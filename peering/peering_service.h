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
using StatsProvider = std::function<void(v1::WorkerStats*)>;

class PeeringService final : public v1::Peering::CallbackService {
 public:
  PeeringService(net::EventLoop& loop, pool::CancelTarget& cancels, StatsProvider stats);

  grpc::ServerUnaryReactor* ForwardCancel(grpc::CallbackServerContext* context,
                                          const v1::ForwardCancelRequest* request,
                                          v1::ForwardCancelReply* reply) override;
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* context,
                                           const v1::GetWorkerStatsRequest* request,
                                           v1::WorkerStats* reply) override;

 private:
  net::EventLoop& loop_;
  pool::CancelTarget& cancels_;
  StatsProvider stats_;
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
