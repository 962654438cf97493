// Forwards a cancel key to the worker that owns it, over gRPC, once and without blocking the
// event loop: the call completes on a gRPC thread and touches no loop state.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "peering/peer_directory.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"
#include "pooler/pool/cancel_registry.h"

namespace pgfleet::peering {

class GrpcCancelForwarder final : public pool::CancelForwarder {
 public:
  GrpcCancelForwarder(const PeerDirectory& directory, uint32_t own_peer_id,
                      absl::Duration deadline);
  bool ForwardCancel(const protocol::CancelKey& key) override;

 private:
  v1::Peering::Stub* StubFor(uint32_t peer_id, const std::string& target);

  const PeerDirectory& directory_;
  uint32_t own_peer_id_;
  absl::Duration deadline_;
  // Channels are reused per peer; only the loop thread touches this map.
  absl::flat_hash_map<uint32_t, std::unique_ptr<v1::Peering::Stub>> stubs_;
};

}  // namespace pgfleet::peering
