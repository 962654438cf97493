// Asks every worker of the pod at once: this worker answers from its own state on the loop, its
// siblings over their peering unix sockets (<runtime_dir>/worker-<peer_id>.sock) with gRPC's async
// callback API. Answers are Post()ed back to the loop and `done` runs there once every worker has
// answered or failed, so callers never touch worker state from a gRPC thread
// (docs/architecture.md, "Threads and the event loop").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "peering/peer_directory.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"
#include "pooler/net/event_loop.h"

namespace grpc {
class ClientContext;
}

namespace pgfleet::admin {

// What this worker answers for itself (loop thread).
struct LocalWorker {
  std::function<void(const peering::v1::GetWorkerStatsRequest&, peering::v1::WorkerStats*)> stats;
  std::function<void(const peering::v1::AdminCommandRequest&,
                     std::function<void(const peering::v1::AdminCommandReply&)>)>
      command;
};

// One worker's answer.
template <typename Reply>
struct PeerAnswer {
  uint32_t peer_id = 0;
  bool ok = false;
  std::string error;  // when !ok
  Reply reply;
};

class PodFanout {
 public:
  using StatsAnswers = std::vector<PeerAnswer<peering::v1::WorkerStats>>;
  using CommandAnswers = std::vector<PeerAnswer<peering::v1::AdminCommandReply>>;

  // `peers` null = a worker without siblings (no supervisor): only the local worker answers.
  PodFanout(net::EventLoop& loop, const peering::PeerDirectory* peers, uint32_t own_peer_id,
            LocalWorker local);
  // Cancels calls in flight and waits for their callbacks; their `done` never runs.
  ~PodFanout();

  // Adds credentials (the peering token) to each outgoing call.
  void set_authorizer(std::function<void(grpc::ClientContext*)> authorize) {
    authorize_ = std::move(authorize);
  }

  // Every worker's stats, own first, then siblings by peer id.
  void GatherStats(const peering::v1::GetWorkerStatsRequest& request, absl::Duration deadline,
                   std::function<void(StatsAnswers)> done);
  // Runs `request` on every worker; `done` gets every answer.
  void Broadcast(const peering::v1::AdminCommandRequest& request, absl::Duration deadline,
                 std::function<void(CommandAnswers)> done);

 private:
  // Shared with gRPC callbacks: they Post() only while the fanout is alive.
  struct Shared {
    std::mutex mu;
    std::condition_variable idle;
    bool closed = false;
    int in_flight = 0;
    std::vector<std::shared_ptr<grpc::ClientContext>> contexts;  // calls in flight
  };
  template <typename Reply>
  struct Gather;

  peering::v1::Peering::Stub* StubFor(uint32_t peer_id);
  std::vector<uint32_t> Siblings();

  net::EventLoop& loop_;
  const peering::PeerDirectory* peers_;
  uint32_t own_peer_id_;
  LocalWorker local_;
  std::function<void(grpc::ClientContext*)> authorize_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<bool> alive_;  // posted answers check it before touching the fanout
  absl::flat_hash_map<uint32_t, std::unique_ptr<peering::v1::Peering::Stub>> stubs_;
};

}  // namespace pgfleet::admin
