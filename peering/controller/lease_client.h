// The worker's side of pgfleet-controller: its peer id, its lease, and its budget shares, over one
// gRPC stream at a time. What the lease decides (caps, floors, fail-static fallback, acks,
// reports) is LeaseState's; this class connects, reconnects, times and sends.
//
// It reconnects on its own and rejoins with what it holds.
//
// Everything runs on the worker's loop thread, except the gRPC stream's reactions, which copy
// messages and Post() them there. Register() is the one blocking call, made before the loop runs.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "peering/controller/lease_state.h"
#include "peering/credentials.h"
#include "peering/fleet_options.h"
#include "pgfleet/controller/v1/controller.grpc.pb.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering::controller {

namespace v1 = ::pgfleet::controller::v1;

struct LeaseIdentity {
  std::string pod_id;
  uint32_t local_peer_id = 0;   // 0 for the pod's lease
  std::string peering_address;  // empty = other pods cannot reach this pod
  // A worker (a peer id and the directory, no budget of its own) or the pod's budget lease.
  v1::LeaseRole role = v1::LEASE_ROLE_WORKER_OF_POD;
};

class LeaseClient {
 public:
  LeaseClient(net::EventLoop& loop, const ControllerOptions& options,
              const PeerCredentials& credentials, LeaseIdentity identity);
  ~LeaseClient();

  // Blocks (before the loop runs) until the controller assigns this worker's fleet-wide peer id,
  // at most controller.register_timeout. Returns it, or the local id (block 0) when the
  // controller did not answer in time; the client keeps trying in the background either way.
  uint32_t Register();
  // Starts enforcing shares on `target` and reporting. `on_directory` receives every Directory.
  // Both must outlive the client. Loop thread (or before the loop runs). A worker of a pod
  // passes no target: it reports no databases and is granted nothing.
  void Attach(CapTarget* target, std::function<void(const v1::Directory&)> on_directory);
  // Before Attach: see LeaseState::Restore.
  void Restore(const std::map<std::string, ShareUpdate>& shares, absl::Time lease_start) {
    state_.Restore(shares, lease_start);
  }
  const LeaseState& state() const { return state_; }
  // After the loop stopped and every server connection is closed: tells the controller this
  // worker is gone, so its share is free at once. Waits at most `timeout`.
  void Leave(absl::Duration timeout);

  // Reports now, not at the next renew interval: the pod's lease calls it when its servers'
  // backend pids changed, so the controller hears of a new backend within 25 ms.
  void ReportNow() { SendReport(); }

  uint32_t peer_id() const { return state_.peer_id(); }
  bool has_lease() const { return state_.has_lease(); }
  // The cap in force per database (absent = none granted yet, i.e. 0).
  int CapFor(const std::string& database) const { return state_.CapFor(database); }

 private:
  class Stream;

  void Connect();
  void ScheduleReconnect();
  void OnMessage(uint64_t generation, const v1::ControllerMessage& message);
  void OnStreamDone(uint64_t generation, const std::string& error);
  void OnGrant(const v1::Grant& grant);
  void OnRenewed(uint64_t report_seq);
  void Tick();
  void SendReport();
  v1::WorkerMessage BuildHello();

  net::EventLoop& loop_;
  ControllerOptions options_;
  const PeerCredentials& credentials_;
  LeaseIdentity identity_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  // A worker of a pod reports this: no databases.
  class NoDatabases final : public CapTarget {
   public:
    std::vector<Usage> Usages() override { return {}; }
    void SetCap(const std::string&, int, int) override {}
    int Enforce(const std::string&) override { return 0; }
  };
  NoDatabases no_databases_;
  CapTarget* target_ = nullptr;
  std::function<void(const v1::Directory&)> on_directory_;

  // The stream in use; its generation tells its messages from a replaced stream's.
  std::shared_ptr<Stream> stream_;
  // Earlier streams whose reactions may still be running; detached on destruction too.
  std::vector<std::weak_ptr<Stream>> retired_streams_;
  uint64_t generation_ = 0;
  absl::Duration backoff_ = absl::Milliseconds(100);
  bool reconnect_scheduled_ = false;
  bool leaving_ = false;

  // Register() waits on this; the stream's reactor fills it on a gRPC thread.
  struct Registration {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t welcomed_generation = 0;
    uint32_t peer_id = 0;
    uint64_t failed_generation = 0;
  };
  std::shared_ptr<Registration> registration_ = std::make_shared<Registration>();

  LeaseState state_;
  v1::Directory directory_;
  net::EventLoop::TimerId tick_timer_ = 0;
  net::EventLoop::TimerId report_timer_ = 0;
  absl::Duration report_interval_;
};

}  // namespace pgfleet::peering::controller
