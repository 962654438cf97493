// gRPC cancel forwarding.
#include "peering/cancel_forwarder.h"

#include <grpcpp/grpcpp.h>

#include "pooler/base/log.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering {

GrpcCancelForwarder::GrpcCancelForwarder(const PeerDirectory& directory, uint32_t own_peer_id,
                                         absl::Duration deadline)
    : directory_(directory), own_peer_id_(own_peer_id), deadline_(deadline) {}

v1::Peering::Stub* GrpcCancelForwarder::StubFor(uint32_t peer_id, const std::string& target) {
  auto it = stubs_.find(peer_id);
  if (it != stubs_.end()) return it->second.get();
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::Peering::NewStub(channel);
  auto* raw = stub.get();
  stubs_.emplace(peer_id, std::move(stub));
  return raw;
}

bool GrpcCancelForwarder::ForwardCancel(const protocol::CancelKey& key) {
  const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
  auto target = directory_.TargetFor(owner);
  if (!target.has_value()) {
    // The owner's socket is gone: it restarted or never existed. Stubs for it are stale.
    stubs_.erase(owner);
    return false;
  }
  struct Call {
    grpc::ClientContext context;
    v1::ForwardCancelRequest request;
    v1::ForwardCancelReply reply;
  };
  auto call = std::make_shared<Call>();
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  call->request.mutable_key()->set_pid(key.pid);
  call->request.mutable_key()->set_secret(std::string(key.secret.begin(), key.secret.end()));
  call->request.set_origin_peer_id(own_peer_id_);
  StubFor(owner, *target)
      ->async()
      ->ForwardCancel(&call->context, &call->request, &call->reply,
                      [call, owner](grpc::Status status) {
                        if (!status.ok()) {
                          PGFLEET_LOG(kWarning, "cancel_forward_failed", "owner=", owner,
                                      " error=", base::LogQuote(status.error_message()));
                        }
                      });
  return true;
}

}  // namespace pgfleet::peering
