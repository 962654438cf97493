// The controller's arithmetic, pure (no I/O, no clock, no threads): every database's fleet-wide
// max_db_connections split into per-worker caps that follow demand above a floor, without the
// sum of what workers may hold ever exceeding the budget.
//
// The invariant, per database: sum over workers of `held` + reserved <= budget, where `held` is
// the most a worker may have open given every message it may have received:
//   - a raise counts the moment it is decided (the grant may already be on the wire);
//   - a lowered cap still counts at its old value until the worker acknowledges a grant at or
//     after the lowering (it acks once it is under the cap), and only then is the room free;
//   - a worker whose lease ran out keeps counting what it held: it may be frozen, dead with
//     backends PostgreSQL has not ended yet, or alive and closing busy servers only as their
//     transactions end. SetLostBackends brings it down to max(floor, the backends PostgreSQL
//     still lists), once the caller knows (docs/architecture.md, "Connection budget");
//   - `reserved` is room the caller holds back for workers it does not know (a restarted
//     controller waiting for the members its predecessor had).
// Rebalance() only raises into free room, so the invariant holds after every call, whatever the
// order of joins, leaves, expiries, acks and demand reports.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pgfleet::peering::controller {

// A worker is named by its fleet-wide peer id.
using WorkerId = uint32_t;

struct AllocatorOptions {
  // The floor each live worker is guaranteed (and falls back to when its lease runs out), before
  // demand is considered. Floors never take more than half of a budget: with many workers the
  // floor drops (to 0 when there are more than budget/2 workers) and demand decides.
  int min_share = 1;
  // Reported demand decays with this half-life, so a worker keeps its share through short lulls
  // and shares do not flap between reports.
  absl::Duration demand_half_life = absl::Seconds(1);
};

// One database's cap and floor for one worker.
struct ShareUpdate {
  std::string database;
  int cap = 0;
  int floor = 0;
};

// A message for one worker: its new shares (only the databases that changed), numbered so its
// acknowledgement can be matched.
struct GrantOut {
  WorkerId worker = 0;
  uint64_t seq = 0;
  std::vector<ShareUpdate> shares;
};

// What a worker holds for one database, as it reports it (a rejoining worker).
struct HeldShare {
  int cap = 0;
  int floor = 0;
  int open = 0;  // may still be above cap while busy servers close: counted until it acks, or
                 // reports them closed (SetOpen)
};

class BudgetAllocator {
 public:
  explicit BudgetAllocator(AllocatorOptions options = {});

  // Sets a database's fleet budget (> 0). A lower budget is reached by lowering shares, with acks,
  // like any other move.
  void SetBudget(const std::string& database, int budget);
  std::optional<int> Budget(const std::string& database) const;
  std::vector<std::string> Databases() const;

  // A worker joins (or rejoins after its lease ran out, or after a controller restart). `held`:
  // the caps it reports holding for databases with a budget; a new worker holds nothing.
  // Replaces any previous record of `worker` (its old grant numbers keep counting up).
  void AddWorker(WorkerId worker, const std::map<std::string, HeldShare>& held);
  // Its stream broke: it keeps what it holds (fail-static) and is neither raised nor lowered
  // (nothing would reach it) until AddWorker, or ExpireWorker when its lease runs out.
  void DetachWorker(WorkerId worker);
  // Its lease ran out: it is granted nothing until AddWorker, and counts what it held until
  // SetLostBackends.
  void ExpireWorker(WorkerId worker);
  // An expired worker has `listed` backends of `database` that PostgreSQL may still run: it now
  // counts max(floor, listed), never more than before.
  void SetLostBackends(WorkerId worker, const std::string& database, int listed);
  // It left with nothing open, or it was forgotten: it counts nothing.
  void RemoveWorker(WorkerId worker);
  bool HasWorker(WorkerId worker) const;
  bool IsLive(WorkerId worker) const;

  // The worker's demand for `database` (servers in use + clients waiting, at peak).
  void SetDemand(WorkerId worker, const std::string& database, int demand, absl::Time now);
  // The worker is under the caps and floors of grant `seq` (and so of every earlier one).
  void Ack(WorkerId worker, uint64_t seq);
  // The server connections the worker's latest report says it has open. With no lowered cap
  // awaiting its ack it cannot open more than its cap, so it holds max(cap, open). This is how a
  // worker that rejoined while busy servers above its cap were still closing frees that room:
  // it acks only grants, and none may come while its cap already fits its demand.
  void SetOpen(WorkerId worker, const std::string& database, int open);

  // Room held back for workers the caller does not know, in every database.
  void SetReserved(int reserved) { reserved_ = reserved; }
  // While false (a restarted controller still recovering), shares are never raised.
  void set_raises_allowed(bool allowed) { raises_allowed_ = allowed; }

  // Moves shares toward demand: raises into free room, and lowers workers above their demand
  // where others need the room. Returns the grants to send, at most one per worker.
  std::vector<GrantOut> Rebalance(absl::Time now);

  struct ShareView {
    int cap = 0;
    int floor = 0;
    int held = 0;
    double demand = 0;
  };
  std::optional<ShareView> Share(WorkerId worker, const std::string& database) const;
  // Sum of held room plus the reserve: never above the budget.
  int Committed(const std::string& database) const;

 private:
  struct DbShare {
    int cap = 0;
    int floor = 0;
    int held = 0;            // >= cap: includes lowered caps not yet acknowledged
    int floor_held = 0;      // >= floor: the same for floors
    uint64_t lower_seq = 0;  // the grant that last lowered cap or floor
    double demand = 0;
    absl::Time demand_at = absl::InfinitePast();
  };
  struct Worker {
    bool live = true;
    uint64_t seq = 0;
    uint64_t acked_seq = 0;
    std::map<std::string, DbShare> dbs;
  };

  double DecayedDemand(const DbShare& share, absl::Time now) const;
  void RebalanceDatabase(const std::string& database, int budget, absl::Time now,
                         std::map<WorkerId, GrantOut>& out);

  AllocatorOptions options_;
  std::map<std::string, int> budgets_;
  std::map<WorkerId, Worker> workers_;
  int reserved_ = 0;
  bool raises_allowed_ = true;
};

// Splits `total` among `weights` in proportion, rounding by largest remainder (ties to the lower
// index): the parts always add up to `total` when any weight is positive, else all are 0.
std::vector<int> SplitProportionally(int total, const std::vector<int64_t>& weights);

}  // namespace pgfleet::peering::controller
