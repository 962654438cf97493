// The one place that decides whether this worker may open another server connection
// (docs/architecture.md, "Connection budget" and "One pool per pod"). The pod's workers are one
// pooler: a pool's size, max_db_connections and max_user_connections hold for the whole pod,
// counted in shared memory (budget::PodServerCounts), and any worker may use the pod's room. With
// the budget controller, the database caps it grants this worker apply on top. When the database
// or the user is full, an idle server of another pool of this worker may be evicted to make room.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "pooler/budget/pod_server_counts.h"
#include "pooler/conn/pool_events.h"
#include "pooler/conn/server_room.h"
#include "pooler/conn/worker_context.h"

namespace pgfleet::pool {

class ServerConn;

using ServerMap = absl::flat_hash_map<uint64_t, ServerConn*>;

// A pool as the budget sees it (Pool implements it): who it is (PoolEvents), its keys in the
// pod's counts, and the servers it uses or wants. The budget never includes pool.h: the pool asks
// the budget for room, and the budget reaches pools only through this.
class BudgetedPool : public PoolEvents {
 public:
  // This pool's keys in the pod's counts, interned once (again after a reload); nullopt when the
  // pod's table is full.
  virtual const std::optional<PodKeys>& PodKeysOf() const = 0;
  virtual size_t waiting_count() const = 0;
  // Servers in use (linked, logging in, testing, listening) plus those its clients wait for:
  // the demand the pod's lease reports for it.
  virtual int ServersInUseOrWanted() const = 0;
  // An idle server of this pool to give up so another pool of the same database may open one.
  virtual bool EvictOneIdleServer() = 0;

 protected:
  using PoolEvents::PoolEvents;
  ~BudgetedPool() = default;
};

// The worker's pools, for the budget's sweeps (PoolRegistry implements it).
class BudgetedPools {
 public:
  virtual void ForEachBudgetedPool(absl::FunctionRef<void(BudgetedPool&)> fn) = 0;

 protected:
  ~BudgetedPools() = default;
};

class ServerBudget {
 public:
  // Why a server is opened: within the pool size, with the reserve pool's extra room (a client
  // waited reserve_pool_timeout), or ahead of demand up to min_pool_size.
  enum class Purpose { kPoolSize, kReserve, kMinPoolSize };

  // `pools` and `servers` are the worker's (PoolRegistry's); they outlive the budget.
  ServerBudget(const WorkerContext& context, BudgetedPools& pools, const ServerMap& servers)
      : context_(context), pools_(pools), servers_(servers) {}

  // Counts in the pod's region (created by the supervisor) as worker `worker` (its local peer
  // id); until then this worker counts alone.
  [[nodiscard]] absl::Status AttachPod(int region_fd, uint32_t worker) {
    return pod_.AttachShared(region_fd, worker);
  }
  budget::PodServerCounts& pod() { return pod_; }
  // Interns `pool`'s keys in the pod's table (Pool::PodKeysOf keeps them); nullopt when the table
  // is full or a name too long (nothing may be opened).
  std::optional<PodKeys> InternKeys(const BudgetedPool& pool);

  // Takes room for one more server of `pool` for `purpose`, in the pod and in this worker, or
  // returns nullopt. The room goes back with Closed (also when the connect fails).
  std::optional<ServerRoom> TryOpen(const BudgetedPool& pool, Purpose purpose);
  void Closed(const ServerRoom& room);
  // A server moved to sibling `to` / arrived from a sibling: the pod's totals stay, this worker's
  // counts follow the server.
  void MovedOut(const ServerRoom& room, uint32_t to);
  // `room.backend_slot` gets the record of `backend_pid`, which the sibling moved to us.
  void MovedIn(ServerRoom& room, uint32_t backend_pid);
  // The server's login told its backend pid: listed in the pod's counts for the pod's lease.
  void RecordBackend(ServerRoom& room, uint32_t backend_pid);
  // A hand-off that could not be sent after MovedOut: the server stays here.
  void MoveFailed(const ServerRoom& room, uint32_t to);
  // A server arrived for a database this worker no longer knows: its room goes back to the pod.
  void ReleaseArrived(const std::string& database, const std::string& user);
  // Servers of `pool` open in the whole pod.
  int PodServers(const BudgetedPool& pool);
  // Why `pool` cannot open a server although its own size has room: its database's budget and/or
  // its server user's is full in the pod. Both false when the pool itself is full (or there is
  // room).
  struct FullBudgets {
    bool database = false;
    bool user = false;
  };
  FullBudgets BudgetsFullFor(const BudgetedPool& pool);

  int DatabaseServerCount(const std::string& db) const;
  int UserServerCount(const std::string& user) const;

  // With pgfleet-controller, the pod's share of each budgeted database (written into the pod's
  // counts by the pod's lease, peering/pod_lease.h) caps the pod's servers of that database on
  // top of max_db_connections; until EnableDatabaseCaps() the config's budget applies alone.
  void EnableDatabaseCaps() { db_caps_enabled_ = true; }
  // The pod's cap in force for `db`: nullopt while caps are off, 0 when none was granted.
  std::optional<int> DatabaseCap(const std::string& db);
  // Every few milliseconds while caps are on: publishes this worker's demand per budgeted
  // database for the pod's lease, and brings the pod under its shares: this worker closes its
  // idle servers of a database over its share (claimed with its siblings, so that together they
  // close no more than the excess), and its busy ones as they are released. Returns how many
  // servers were closed now.
  int EnforcePodShares();
  // A server of `pool` was released: closes it (true) if its database is over the pod's share
  // and no sibling closes one in its place.
  bool ShedOnRelease(ServerConn* server);

 private:
  // The limit on the pod's servers of `pool`'s database for TryReserve: its max_db_connections,
  // or with caps on the pod's share (negative: nothing may be opened).
  int DatabaseLimit(const BudgetedPool& pool, budget::PodServerCounts::Key database);
  // Closes `server` if the pod's claim on its database's excess allows it.
  bool ShedServer(ServerConn* server, budget::PodServerCounts::Key database, int cap,
                  std::string_view reason);
  std::optional<ServerRoom> Reserve(const BudgetedPool& pool, Purpose purpose);
  // Frees room for `pool` by closing an idle server of another pool of this worker that shares
  // the full database or user. True when one was closed.
  bool EvictIdleServerFor(const BudgetedPool& pool);
  void CountLocal(const ServerRoom& room, int delta);

  const WorkerContext& context_;
  BudgetedPools& pools_;
  const ServerMap& servers_;
  budget::PodServerCounts pod_;
  absl::flat_hash_map<std::string, int> db_server_counts_;
  absl::flat_hash_map<std::string, int> user_server_counts_;
  bool db_caps_enabled_ = false;
  // Databases over the pod's share at the last EnforcePodShares, with their keys and caps:
  // released servers of these close (ShedOnRelease). Empty in the common case.
  struct OverShare {
    budget::PodServerCounts::Key key = 0;
    int cap = 0;
  };
  absl::flat_hash_map<std::string, OverShare> over_share_;
};

}  // namespace pgfleet::pool
