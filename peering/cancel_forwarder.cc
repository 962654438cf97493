// gRPC cancel forwarding.
#include "peering/cancel_forwarder.h"

#include <grpcpp/grpcpp.h>

#include "peering/grpc_callback_threads.h"
#include "pooler/base/log.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering {

GrpcCancelForwarder::GrpcCancelForwarder(const PeerDirectory& directory, uint32_t own_peer_id,
                                         absl::Duration deadline, const FleetDirectory* fleet,
                                         const PeerCredentials* credentials)
    : directory_(directory),
      own_peer_id_(own_peer_id),
      deadline_(deadline),
      fleet_(fleet),
      credentials_(credentials) {
  PinGrpcCallbackThreads();
}

bool GrpcCancelForwarder::ForwardCancel(const protocol::CancelKey& key) {
  const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
  const uint32_t owner_block = protocol::PodBlockOfPeerId(owner);
  const uint32_t own_block = protocol::PodBlockOfPeerId(own_peer_id_);
  bool sent = false;
  if (owner != own_peer_id_ && (owner_block == own_block || owner_block == 0)) {
    sent = SendToSibling(key, owner);
  }
  if (fleet_ != nullptr && owner_block != own_block) {
    for (const auto& address : fleet_->EndpointsForBlock(owner_block)) {
      SendToPod(key, address);
      sent = true;
    }
  }
  if (fleet_ != nullptr && owner_block == 0) {
    for (const auto& address : fleet_->AllOtherPods()) {
      SendToPod(key, address);
      sent = true;
    }
  }
  return sent;
}

bool GrpcCancelForwarder::ForwardToSibling(const protocol::CancelKey& key) {
  const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
  if (owner == own_peer_id_) return false;
  return SendToSibling(key, owner);
}

bool GrpcCancelForwarder::SendToSibling(const protocol::CancelKey& key, uint32_t owner) {
  auto target = directory_.TargetFor(owner);
  if (!target.has_value()) {
    // The owner's socket is gone: it restarted or never existed. Stubs for it are stale.
    stubs_.erase(owner);
    return false;
  }
  auto it = stubs_.find(owner);
  if (it == stubs_.end()) {
    auto channel = grpc::CreateChannel(*target, grpc::InsecureChannelCredentials());
    it = stubs_.emplace(owner, v1::Peering::NewStub(channel)).first;
  }
  Send(it->second.get(), key, /*via_pod_endpoint=*/false, *target);
  return true;
}

void GrpcCancelForwarder::SendToPod(const protocol::CancelKey& key, const std::string& address) {
  ++sent_to_pods_;
  Send(PodStub(address), key, /*via_pod_endpoint=*/true, address);
}

template <typename Request, typename Reply>
std::shared_ptr<GrpcCancelForwarder::Call<Request, Reply>> GrpcCancelForwarder::NewCall() const {
  auto call = std::make_shared<Call<Request, Reply>>();
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  if (credentials_ != nullptr) credentials_->Authorize(&call->context);
  return call;
}

void GrpcCancelForwarder::NotifySchemaChanged(net::EventLoop& loop) {
  if (fleet_ == nullptr || schema_notice_due_) return;
  schema_notice_due_ = true;
  loop.RunAfter(kSchemaNoticeDelay, [this] {
    schema_notice_due_ = false;
    for (const auto& address : fleet_->AllOtherPods()) {
      auto call = NewCall<v1::AdminCommandRequest, v1::AdminCommandReply>();
      call->request.set_command(v1::AdminCommandRequest::COMMAND_SCHEMA_CHANGED);
      PodStub(address)->async()->AdminCommand(
          &call->context, &call->request, &call->reply, [call, address](grpc::Status status) {
            if (!status.ok() || !call->reply.ok()) {
              PGFLEET_LOG(
                  kWarning, "schema_notice_failed", "to=", address, " error=",
                  base::LogQuote(status.ok() ? call->reply.error() : status.error_message()));
            }
          });
    }
  });
}

v1::Peering::Stub* GrpcCancelForwarder::PodStub(const std::string& address) {
  auto it = pod_stubs_.find(address);
  if (it == pod_stubs_.end()) {
    auto channel = credentials_ != nullptr
                       ? credentials_->CreateTcpChannel(address)
                       : grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    it = pod_stubs_.emplace(address, v1::Peering::NewStub(channel)).first;
  }
  return it->second.get();
}

void GrpcCancelForwarder::Send(v1::Peering::Stub* stub, const protocol::CancelKey& key,
                               bool via_pod_endpoint, std::string to) {
  auto call = NewCall<v1::ForwardCancelRequest, v1::ForwardCancelReply>();
  call->request.mutable_key()->set_pid(key.pid);
  call->request.mutable_key()->set_secret(std::string(key.secret.begin(), key.secret.end()));
  call->request.set_origin_peer_id(own_peer_id_);
  call->request.set_via_pod_endpoint(via_pod_endpoint);
  const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
  stub->async()->ForwardCancel(&call->context, &call->request, &call->reply,
                               [call, owner, to = std::move(to)](grpc::Status status) {
                                 if (!status.ok()) {
                                   PGFLEET_LOG(kWarning, "cancel_forward_failed", "owner=", owner,
                                               " to=", to,
                                               " error=", base::LogQuote(status.error_message()));
                                 }
                               });
}

}  // namespace pgfleet::peering
