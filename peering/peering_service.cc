// Peering service handlers.
#include "peering/peering_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pooler/base/log.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering {

PeeringService::PeeringService(net::EventLoop& loop, pool::CancelTarget& cancels,
                               StatsProvider stats, PeeringServiceOptions options)
    : loop_(loop), cancels_(cancels), stats_(std::move(stats)), options_(std::move(options)) {}

bool PeeringService::Refuse(grpc::CallbackServerContext* context,
                            grpc::ServerUnaryReactor* reactor) {
  if (options_.credentials == nullptr || options_.credentials->Check(*context)) return false;
  PGFLEET_LOG(kWarning, "peering_call_refused", "peer=", base::LogQuote(context->peer()),
              " reason=bad_token");
  reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid peering token"));
  return true;
}

grpc::ServerUnaryReactor* PeeringService::ForwardCancel(grpc::CallbackServerContext* context,
                                                        const v1::ForwardCancelRequest* request,
                                                        v1::ForwardCancelReply* reply) {
  auto* reactor = context->DefaultReactor();
  if (Refuse(context, reactor)) return reactor;
  const auto& secret = request->key().secret();
  // The whole key, whatever the client's protocol: 4 bytes on 3.0, 32 on 3.2 (at most 256).
  if (secret.size() < protocol::kCancelSecretSize ||
      secret.size() > protocol::kMaxCancelSecretSize) {
    reply->set_outcome(v1::ForwardCancelReply::OUTCOME_DROPPED);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  protocol::CancelKey key;
  key.pid = request->key().pid();
  key.secret.assign(secret.begin(), secret.end());
  const bool via_pod = request->via_pod_endpoint();
  loop_.Post([this, key, via_pod, reply, reactor] {
    const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
    if (via_pod && owner != options_.own_peer_id && options_.relay_to_sibling) {
      // Any worker of the pod may have answered the pod's port: pass the key to its owner.
      const bool relayed = options_.relay_to_sibling(key);
      reply->set_outcome(relayed ? v1::ForwardCancelReply::OUTCOME_RELAYED
                                 : v1::ForwardCancelReply::OUTCOME_DROPPED);
    } else {
      auto outcome = cancels_.HandleCancel(key, /*forwarded=*/true);
      reply->set_outcome(outcome == pool::CancelOutcome::kSent
                             ? v1::ForwardCancelReply::OUTCOME_SENT
                             : v1::ForwardCancelReply::OUTCOME_DROPPED);
    }
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PeeringService::GetWorkerStats(grpc::CallbackServerContext* context,
                                                         const v1::GetWorkerStatsRequest* request,
                                                         v1::WorkerStats* reply) {
  auto* reactor = context->DefaultReactor();
  if (Refuse(context, reactor)) return reactor;
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
  if (Refuse(context, reactor)) return reactor;
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
  return Start(std::vector<ListenSpec>{{address, nullptr}}, service);
}

absl::StatusOr<std::unique_ptr<PeeringServer>> PeeringServer::Start(
    const std::vector<ListenSpec>& ports, grpc::Service* service) {
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 1);
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<int>> bound;
  for (const auto& port : ports) {
    bound.push_back(std::make_unique<int>(0));
    builder.AddListeningPort(
        port.address, port.credentials ? port.credentials : grpc::InsecureServerCredentials(),
        bound.back().get());
    addresses.push_back(port.address);
  }
  builder.RegisterService(service);
  auto server = std::make_unique<PeeringServer>();
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot start peering server on ", absl::StrJoin(addresses, ", ")));
  }
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i].address.rfind("unix:", 0) != 0 && *bound[i] == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", addresses[i]));
    }
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
