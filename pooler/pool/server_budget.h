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
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pooler/budget/pod_server_counts.h"
#include "pooler/pool/worker_context.h"

namespace pgfleet::pool {

class Pool;
class ServerConn;

using PoolMap = absl::flat_hash_map<std::pair<std::string, std::string>, std::unique_ptr<Pool>>;
using ServerMap = absl::flat_hash_map<uint64_t, ServerConn*>;

// The pod's count keys of one pool: its own, its database's and its server user's.
struct PodKeys {
  budget::PodServerCounts::Key pool = 0;
  budget::PodServerCounts::Key database = 0;
  budget::PodServerCounts::Key user = 0;
};

// What one open server holds: its room in the pod's counts and in this worker's.
struct ServerRoom {
  PodKeys keys;
  std::string database;     // this worker's count per database (caps, metrics)
  std::string server_user;  // ... and per server user
  bool reserve = false;     // opened with the reserve pool's room
};

class ServerBudget {
 public:
  // Why a server is opened: within the pool size, with the reserve pool's extra room (a client
  // waited reserve_pool_timeout), or ahead of demand up to min_pool_size.
  enum class Purpose { kPoolSize, kReserve, kMinPoolSize };

  // `pools` and `servers` are the worker's (PoolRegistry's); they outlive the budget.
  ServerBudget(const WorkerContext& context, const PoolMap& pools, const ServerMap& servers)
      : context_(context), pools_(pools), servers_(servers) {}

  // Counts in the pod's region (created by the supervisor) as worker `worker` (its local peer
  // id); until then this worker counts alone.
  [[nodiscard]] absl::Status AttachPod(int region_fd, uint32_t worker) {
    return pod_.AttachShared(region_fd, worker);
  }
  budget::PodServerCounts& pod() { return pod_; }
  // Interns `pool`'s keys in the pod's table (Pool::PodKeysOf keeps them); nullopt when the table
  // is full or a name too long (nothing may be opened).
  std::optional<PodKeys> InternKeys(const Pool* pool);

  // Takes room for one more server of `pool` for `purpose`, in the pod and in this worker, or
  // returns nullopt. The room goes back with Closed (also when the connect fails).
  std::optional<ServerRoom> TryOpen(const Pool* pool, Purpose purpose);
  void Closed(const ServerRoom& room);
  // A server moved to sibling `to` / arrived from a sibling: the pod's totals stay, this worker's
  // counts follow the server.
  void MovedOut(const ServerRoom& room, uint32_t to);
  void MovedIn(const ServerRoom& room);
  // A hand-off that could not be sent after MovedOut: the server stays here.
  void MoveFailed(const ServerRoom& room, uint32_t to);
  // A server arrived for a database this worker no longer knows: its room goes back to the pod.
  void ReleaseArrived(const std::string& database, const std::string& user);
  // Servers of `pool` open in the whole pod.
  int PodServers(const Pool* pool);
  // Why `pool` cannot open a server although its own size has room: its database's budget and/or
  // its server user's is full in the pod. Both false when the pool itself is full (or there is
  // room).
  struct FullBudgets {
    bool database = false;
    bool user = false;
  };
  FullBudgets BudgetsFullFor(const Pool* pool);

  int DatabaseServerCount(const std::string& db) const;
  int UserServerCount(const std::string& user) const;

  // Caps on server connections per database granted by the budget controller; until
  // EnableDatabaseCaps() the pod's max_db_connections applies alone.
  void EnableDatabaseCaps() { db_caps_enabled_ = true; }
  void SetDatabaseCap(const std::string& db, int cap) { db_caps_[db] = cap; }
  // The cap in force for `db`: nullopt while caps are off, 0 when none was granted.
  std::optional<int> DatabaseCap(const std::string& db) const;
  // Brings `db` toward its cap: closes idle servers over it and marks busy ones to close on
  // release (with `force`, closes busy ones too). Returns how many servers were closed now.
  int EnforceDatabaseCap(const std::string& db, bool force);

 private:
  // The controller's cap for `pool`'s database, when caps are on and the database is budgeted.
  bool CapAllows(const Pool* pool) const;
  std::optional<ServerRoom> Reserve(const Pool* pool, Purpose purpose);
  // Frees room for `pool` by closing an idle server of another pool of this worker that shares
  // the full database or user. True when one was closed.
  bool EvictIdleServerFor(const Pool* pool);
  void CountLocal(const ServerRoom& room, int delta);

  const WorkerContext& context_;
  const PoolMap& pools_;
  const ServerMap& servers_;
  budget::PodServerCounts pod_;
  absl::flat_hash_map<std::string, int> db_server_counts_;
  absl::flat_hash_map<std::string, int> user_server_counts_;
  bool db_caps_enabled_ = false;
  absl::flat_hash_map<std::string, int> db_caps_;
};

}  // namespace pgfleet::pool
