// pgfleet-controller's service: fleet membership, fleet-unique peer ids, the pod directory and
// the budget shares, over one lease stream per worker (proto/pgfleet/controller/v1).
//
// Peer ids (docs/architecture.md, "Cancel keys" and "Peering"). A cancel key carries 16 bits of
// peer id; a worker must know its id before it mints its first key, and the supervisor, which
// forks, holds no gRPC. So: the supervisor gives each worker a pod-local id 1..255 (never reused
// while a holder lives); each worker, before it accepts its first client, opens its lease and sends
// Hello with its pod id (random per supervisor run) and local id; the controller gives every pod
// one block 1..255, the same for all its workers, and answers peer id = block << 8 | local. Two
// live workers can then share an id only if two live pods share a block, and the controller never
// hands out a block that a live or remembered pod holds. After a controller restart the pods
// reclaim their blocks in their Hellos (the id they already mint with); blocks reported by no one
// are only reused after forget_after. A worker that cannot reach the controller within
// controller.register_timeout starts with block 0 (its local id): its keys then name no pod and
// are sent to every other pod, where only the owner finds them.
//
// Budget (docs/architecture.md, "Connection budget"): BudgetAllocator does the arithmetic and
// Membership the bookkeeping, both pure; this class is their plumbing (streams, messages, logs, the
// timer). A worker's lease ends lease_timeout after its last report; it is then counted at its
// floor (the worker itself fell back to the floor at 3/4 of that, timed from when it sent the
// report, so it is always first), and forgotten after forget_after. A controller that starts knows
// no one: it raises nothing until every member named in the workers' Hellos (each worker reports
// the member list of the last Directory it saw) has rejoined or lease_timeout has passed, and it
// holds back min_share per absent member until forget_after. Nothing is persisted.
//
// Threading: reactors run on gRPC threads and only copy messages and Post() them to the loop;
// all state below belongs to the loop thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "peering/controller/backend_monitor.h"
#include "peering/controller/budget_allocator.h"
#include "peering/controller/membership.h"
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
  size_t pod_count() const { return membership_.pods().size(); }
  bool recovering() const { return membership_.recovering(); }
  const BudgetAllocator& allocator() const { return membership_.allocator(); }
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
  // Loop-thread handlers.
  void OnMessage(const std::shared_ptr<Session>& session, const v1::WorkerMessage& message);
  void OnSessionClosed(const std::shared_ptr<Session>& session);
  void OnHello(const std::shared_ptr<Session>& session, const v1::Hello& hello);
  void OnReport(const std::shared_ptr<Session>& session, const v1::Report& report);
  void OnLeave(const std::shared_ptr<Session>& session, const v1::Leave& leave);
  void Tick();
  // Asks the monitor about lost members' backends (one question at a time), and takes its answer.
  void AskMonitor();
  void OnMonitorAnswer(const BackendMonitor::Answer& answer);
  void Rebalance();
  void BroadcastDirectory();
  v1::Directory BuildDirectory();
  void EnsureBudget(const std::string& database, int reported_budget);
  // The member the session is the current stream of, or null.
  const Membership::Member* MemberOf(const std::shared_ptr<Session>& session) const;

  net::EventLoop& loop_;
  ControllerOptions options_;
  const PeerCredentials& credentials_;
  config::Config config_;
  std::string instance_;
  Membership membership_;
  // The current stream of each connected member, by member key.
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  uint64_t directory_epoch_ = 0;
  net::EventLoop::TimerId tick_timer_ = 0;
  ControllerStats stats_;
  // Answers posted by the monitor's thread run only while this service lives.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool monitor_failing_ = false;  // the last answer was an error (logged once per failure)
  std::unique_ptr<BackendMonitor> monitor_;  // with controller.monitor; destroyed first
};

}  // namespace pgfleet::peering::controller
