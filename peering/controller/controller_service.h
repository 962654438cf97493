// pgfleet-controller's service: fleet membership, fleet-unique peer ids, the pod directory and
// the budget shares, over one lease stream per worker (proto/pgfleet/controller/v1).
//
// Peer ids (DESIGN.md "Cancel keys and peering"). A cancel key carries 16 bits of peer id; a
// worker must know its id before it mints its first key, and the supervisor, which forks, holds
// no gRPC. So: the supervisor gives each worker a pod-local id 1..255 (never reused while a
// holder lives); each worker, before it accepts its first client, opens its lease and sends
// Hello with its pod id (random per supervisor run) and local id; the controller gives every pod
// one block 1..255, the same for all its workers, and answers peer id = block << 8 | local. Two
// live workers can then share an id only if two live pods share a block, and the controller never
// hands out a block that a live or remembered pod holds. After a controller restart the pods
// reclaim their blocks in their Hellos (the id they already mint with); blocks reported by no one
// are only reused after forget_after. A worker that cannot reach the controller within
// controller.register_timeout starts with block 0 (its local id): its keys then name no pod and
// are sent to every other pod, where only the owner finds them.
//
// Budget (DESIGN.md "Connection budget"): BudgetAllocator does the arithmetic; this class times
// it. A worker's lease ends lease_timeout after its last report; it is then counted at its floor
// (the worker itself fell back to the floor at 3/4 of that, timed from when it sent the report,
// so it is always first), and forgotten after forget_after. A controller that starts knows no
// one: it raises nothing until every member named in the workers' Hellos (each worker reports
// the member list of the last Directory it saw) has rejoined or lease_timeout has passed, and it
// holds back min_share per absent member until forget_after. Nothing is persisted.
//
// Threading: reactors run on gRPC threads and only copy messages and Post() them to the loop;
// all state below belongs to the loop thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "peering/controller/budget_allocator.h"
#include "peering/credentials.h"
#include "peering/fleet_options.h"
#include "pgfleet/controller/v1/controller.grpc.pb.h"
#include "pooler/config/config.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering::controller {

namespace v1 = ::pgfleet::controller::v1;

// Counters and gauges for /metrics, read on the loop thread.
struct ControllerStats {
  uint64_t joins = 0;
  uint64_t rejoins = 0;
  uint64_t leaves = 0;
  uint64_t lease_expiries = 0;
  uint64_t forgotten = 0;
  uint64_t grants = 0;  // grant messages sent
  uint64_t raises = 0;  // shares raised
  uint64_t lowers = 0;  // shares lowered
  uint64_t acks = 0;
  uint64_t refused_calls = 0;  // bad token
};

class ControllerService final : public v1::Controller::CallbackService {
 public:
  ControllerService(net::EventLoop& loop, const config::Config& config,
                    const ControllerOptions& options, const PeerCredentials& credentials);
  ~ControllerService() override;

  // Starts the expiry and rebalance timers (loop thread).
  void Start();
  // New budgets after SIGHUP (loop thread).
  void ApplyConfig(const config::Config& config);
  // Ends every stream (before the gRPC server shuts down).
  void CloseAll();

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::ControllerMessage>* Lease(
      grpc::CallbackServerContext* context) override;

  // --- introspection (loop thread) ---
  struct MemberView {
    std::string key;  // "<pod_id>/<local>"
    uint32_t peer_id = 0;
    std::string state;  // live | detached | expired
    std::string address;
  };
  std::vector<MemberView> Members() const;
  size_t pod_count() const { return pods_.size(); }
  bool recovering() const { return recovering_; }
  const BudgetAllocator& allocator() const { return allocator_; }
  // Sum of the open server connections workers last reported, per database.
  std::map<std::string, int> ReportedOpen() const;
  // (database, peer id) -> cap, floor, demand of each member.
  struct ShareRow {
    std::string database;
    std::string member;  // member key
    uint32_t peer_id;
    int cap;
    int floor;
    int open;
    double demand;
  };
  std::vector<ShareRow> Shares() const;
  const ControllerStats& stats() const { return stats_; }

  class Session;

 private:
  class Reactor;
  struct Member {
    uint32_t handle = 0;  // the allocator's id
    std::string key;
    std::string pod_id;
    uint32_t local = 0;
    uint32_t peer_id = 0;
    std::string address;
    std::string hostname;
    uint32_t pid = 0;
    std::shared_ptr<Session> session;  // null while disconnected
    absl::Time last_heard;
    uint64_t newest_report_seq = 0;
    bool expired = false;
    std::map<std::string, int> open;       // last reported, per database
    std::map<std::string, int> sent_caps;  // last cap granted, per database
  };
  struct Pod {
    uint32_t block = 0;
    std::string address;
    std::set<std::string> members;  // member keys
  };

  // Loop-thread handlers.
  void OnMessage(const std::shared_ptr<Session>& session, const v1::WorkerMessage& message);
  void OnSessionClosed(const std::shared_ptr<Session>& session);
  void OnHello(const std::shared_ptr<Session>& session, const v1::Hello& hello);
  void OnReport(Member& member, const v1::Report& report);
  void OnLeave(Member& member, const v1::Leave& leave);
  void Tick();
  void Rebalance();
  void BroadcastDirectory();
  v1::Directory BuildDirectory();
  void RemoveMember(const std::string& key);
  // The pod's block: its current one, else a free one (0 when none is left).
  uint32_t BlockFor(const std::string& pod_id, uint32_t claimed_block);
  void EnsureBudget(const std::string& database, int reported_budget);
  Member* MemberOf(const std::shared_ptr<Session>& session);

  net::EventLoop& loop_;
  ControllerOptions options_;
  const PeerCredentials& credentials_;
  config::Config config_;
  std::string instance_;
  BudgetAllocator allocator_;
  std::map<std::string, Member> members_;        // by member key
  std::map<std::string, Pod> pods_;              // by pod id
  std::map<uint32_t, std::string> blocks_;       // block -> pod id
  std::map<uint32_t, absl::Time> freed_blocks_;  // block -> when it was freed (reused last)
  std::set<uint32_t> reported_blocks_;           // blocks named in Hellos' member lists (recovery)
  uint32_t next_handle_ = 1;
  uint64_t directory_epoch_ = 0;
  absl::Time started_;
  bool recovering_ = true;
  std::set<std::string> awaited_;  // members named by others that have not rejoined
  bool heard_membership_ = false;  // some Hello named the previous members
  net::EventLoop::TimerId tick_timer_ = 0;
  ControllerStats stats_;
};

}  // namespace pgfleet::peering::controller
