// The worker's side of pgfleet-controller: its peer id, its lease, and its budget shares.
//
// Fail-static (DESIGN.md "Connection budget"): a worker that loses the controller keeps its caps
// and never raises them; when its lease has run 3/4 of lease_timeout past the newest report the
// controller acknowledged (timed from when the worker *sent* it, so the worker is always earlier
// than the controller), it falls back to its floors, closing idle servers at once and busy ones
// when released; at 9/10 it closes whatever is still over the floor. After forget_after it holds
// nothing, because the controller has forgotten it and reassigned its floor. It reconnects on
// its own and rejoins with what it holds. A worker that never reached the controller holds
// nothing in budgeted databases.
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
#include "peering/credentials.h"
#include "peering/fleet_options.h"
#include "pgfleet/controller/v1/controller.grpc.pb.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering::controller {

namespace v1 = ::pgfleet::controller::v1;

// What the lease client needs from the worker's pools (PoolRegistry in production).
class CapTarget {
 public:
  virtual ~CapTarget() = default;
  struct Usage {
    std::string database;
    int budget = 0;  // the fleet budget from the config
    int open = 0;    // server connections open or opening now
    int demand = 0;  // servers in use + clients waiting now, at most what the pools could use
  };
  // Every database with a fleet budget that this worker knows of.
  virtual std::vector<Usage> Usages() = 0;
  virtual void SetCap(const std::string& database, int cap) = 0;
  // Brings the database toward its cap (see PoolRegistry::EnforceDatabaseCap); returns how many
  // servers were closed now.
  virtual int Enforce(const std::string& database, bool force) = 0;
};

struct LeaseIdentity {
  std::string pod_id;
  uint32_t local_peer_id = 0;
  std::string peering_address;  // empty = other pods cannot reach this pod
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
  // Both must outlive the client. Loop thread (or before the loop runs).
  void Attach(CapTarget* target, std::function<void(const v1::Directory&)> on_directory);
  // After the loop stopped and every server connection is closed: tells the controller this
  // worker is gone, so its share is free at once. Waits at most `timeout`.
  void Leave(absl::Duration timeout);

  uint32_t peer_id() const { return peer_id_; }
  bool has_lease() const { return has_lease_; }
  // The cap in force per database (absent = none granted yet, i.e. 0).
  int CapFor(const std::string& database) const;

 private:
  class Stream;
  struct Share {
    int cap = -1;  // -1 = never granted (enforced as 0)
    int floor = 0;
  };

  void Connect();
  void ScheduleReconnect();
  void OnMessage(uint64_t generation, const v1::ControllerMessage& message);
  void OnStreamDone(uint64_t generation, const std::string& error);
  void OnGrant(const v1::Grant& grant);
  void RenewFrom(uint64_t report_seq);
  void Tick();
  void SendReport();
  void SetShare(const std::string& database, int cap, int floor);
  void FallBackToFloors(const char* why);
  // The controller still counts us live: 3/4 of a lease since the newest renewed report.
  bool LeaseValid(absl::Time now) const;
  v1::WorkerMessage BuildHello();
  void FillDatabases(google::protobuf::RepeatedPtrField<v1::DatabaseState>* out, bool with_demand);

  net::EventLoop& loop_;
  ControllerOptions options_;
  const PeerCredentials& credentials_;
  LeaseIdentity identity_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  CapTarget* target_ = nullptr;
  std::function<void(const v1::Directory&)> on_directory_;

  // The stream in use; its generation tells its messages from a replaced stream's.
  std::shared_ptr<Stream> stream_;
  // Earlier streams whose reactions may still be running; detached on destruction too.
  std::vector<std::weak_ptr<Stream>> retired_streams_;
  uint64_t generation_ = 0;
  bool welcomed_ = false;  // the current stream got its Welcome
  absl::Time hello_sent_at_;
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

  uint32_t peer_id_ = 0;
  bool has_lease_ = false;
  absl::Time lease_start_ = absl::InfinitePast();  // send time of the newest renewed report
  uint64_t report_seq_ = 0;
  std::map<uint64_t, absl::Time> report_sent_at_;
  std::map<std::string, Share> shares_;
  std::map<std::string, int> peak_demand_;
  std::map<std::string, int> last_open_;
  uint64_t pending_ack_ = 0;
  uint64_t acked_ = 0;
  absl::Time last_close_ = absl::InfinitePast();
  v1::Directory directory_;
  net::EventLoop::TimerId tick_timer_ = 0;
  net::EventLoop::TimerId report_timer_ = 0;
  absl::Duration report_interval_;
};

}  // namespace pgfleet::peering::controller
