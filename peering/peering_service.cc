// Peering service handlers.
#include "peering/peering_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering {

PeeringService::PeeringService(net::EventLoop& loop, pool::CancelTarget& cancels,
                               StatsProvider stats)
    : loop_(loop), cancels_(cancels), stats_(std::move(stats)) {}

grpc::ServerUnaryReactor* PeeringService::ForwardCancel(grpc::CallbackServerContext* context,
                                                        const v1::ForwardCancelRequest* request,
                                                        v1::ForwardCancelReply* reply) {
  auto* reactor = context->DefaultReactor();
  const auto& secret = request->key().secret();
  if (secret.size() != protocol::kCancelSecretSize) {
    reply->set_outcome(v1::ForwardCancelReply::OUTCOME_DROPPED);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  protocol::CancelKey key;
  key.pid = request->key().pid();
  std::copy(secret.begin(), secret.end(), key.secret.begin());
  loop_.Post([this, key, reply, reactor] {
    auto outcome = cancels_.HandleCancel(key, /*forwarded=*/true);
    reply->set_outcome(outcome == pool::CancelOutcome::kSent
                           ? v1::ForwardCancelReply::OUTCOME_SENT
                           : v1::ForwardCancelReply::OUTCOME_DROPPED);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PeeringService::GetWorkerStats(grpc::CallbackServerContext* context,
                                                         const v1::GetWorkerStatsRequest* request,
                                                         v1::WorkerStats* reply) {
  auto* reactor = context->DefaultReactor();
  loop_.Post([this, request, reply, reactor] {
    stats_(*request, reply);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PeeringService::AdminCommand(grpc::CallbackServerContext* context,
                                                       const v1::AdminCommandRequest* request,
                                                       v1::AdminCommandReply* reply) {
  auto* reactor = context->DefaultReactor();
  if (!admin_) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no admin console"));
    return reactor;
  }
  // The request and reply live until Finish(); the loop answers, now or once the command is done
  // (PAUSE waits for linked transactions to finish).
  loop_.Post([this, request, reply, reactor] {
    admin_(*request, [reply, reactor](const v1::AdminCommandReply& answer) {
      *reply = answer;
      reactor->Finish(grpc::Status::OK);
    });
  });
  return reactor;
}

absl::StatusOr<std::unique_ptr<PeeringServer>> PeeringServer::Start(const std::string& address,
                                                                    PeeringService* service) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  auto server = std::make_unique<PeeringServer>();
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot start peering server on ", address));
  }
  return server;
}

PeeringServer::~PeeringServer() { Shutdown(); }

void PeeringServer::Shutdown() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_.reset();
  }
}

}  // namespace pgfleet::peering
