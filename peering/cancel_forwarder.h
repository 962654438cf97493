// Forwards a cancel key to the worker that owns it, over gRPC, once and without blocking the
// event loop: the call completes on a gRPC thread and touches no loop state.
//
// Routing by the key's peer id (block << 8 | local, protocol/cancel_key.h):
//   - a sibling in this pod (same block, or block 0): its unix socket;
//   - another pod's block: that pod's TCP peering endpoint from the FleetDirectory, marked
//     via_pod_endpoint; whichever worker of that pod answers hands it to the owner over its own
//     unix socket (ForwardToSibling), and nothing goes further;
//   - block 0 (minted without a controller): the local sibling and every other known pod; only
//     the worker that finds the key acts on it (keys have 47 random bits).
#pragma once

#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "peering/credentials.h"
#include "peering/fleet_directory.h"
#include "peering/peer_directory.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"
#include "pooler/cancel/cancel_registry.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering {

class GrpcCancelForwarder final : public pool::CancelForwarder {
 public:
  // `fleet` and `credentials` may be null (no cross-pod peering; siblings need no token). Both,
  // when given, must outlive the forwarder.
  GrpcCancelForwarder(const PeerDirectory& directory, uint32_t own_peer_id, absl::Duration deadline,
                      const FleetDirectory* fleet = nullptr,
                      const PeerCredentials* credentials = nullptr);
  bool ForwardCancel(const protocol::CancelKey& key) override;
  // The last hop of a cross-pod cancel: to the sibling that owns `key`, over its unix socket.
  // False when no such sibling lives (the key is dropped).
  bool ForwardToSibling(const protocol::CancelKey& key);

  uint64_t sent_to_pods() const { return sent_to_pods_; }

  // Tells every other pod that the schema changed (DDL seen here, or a stale-plan error), so that
  // their Parses from now on are analysed afresh too (pool::StatementRegistry). Calls within
  // kSchemaNoticeDelay of each other go out as one, after it: a migration of many statements,
  // or many clients meeting one stale statement, sends one notice. Loop thread only.
  void NotifySchemaChanged(net::EventLoop& loop);
  static constexpr absl::Duration kSchemaNoticeDelay = absl::Milliseconds(20);

 private:
  bool SendToSibling(const protocol::CancelKey& key, uint32_t owner);
  void SendToPod(const protocol::CancelKey& key, const std::string& address);
  // One asynchronous call's state, alive until its callback runs; NewCall sets its deadline and
  // credentials.
  template <typename Request, typename Reply>
  struct Call {
    grpc::ClientContext context;
    Request request;
    Reply reply;
  };
  template <typename Request, typename Reply>
  std::shared_ptr<Call<Request, Reply>> NewCall() const;
  // The channel to another pod's peering endpoint, made on first use and kept.
  v1::Peering::Stub* PodStub(const std::string& address);
  void Send(v1::Peering::Stub* stub, const protocol::CancelKey& key, bool via_pod_endpoint,
            std::string to);

  const PeerDirectory& directory_;
  uint32_t own_peer_id_;
  absl::Duration deadline_;
  const FleetDirectory* fleet_;
  const PeerCredentials* credentials_;
  // Channels are reused per peer and per pod; only the loop thread touches these maps.
  absl::flat_hash_map<uint32_t, std::unique_ptr<v1::Peering::Stub>> stubs_;
  absl::flat_hash_map<std::string, std::unique_ptr<v1::Peering::Stub>> pod_stubs_;
  uint64_t sent_to_pods_ = 0;
  bool schema_notice_due_ = false;
};

}  // namespace pgfleet::peering
