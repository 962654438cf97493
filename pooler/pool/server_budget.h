// The one place that decides whether this worker may open another server connection: the counts
// per database and per server user, max_db_connections / max_user_connections (or the caps the
// budget controller granted), and making room by evicting another pool's idle server
// (docs/architecture.md, "Connection budget").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "pooler/pool/worker_context.h"

namespace pgfleet::pool {

class Pool;
class ServerConn;

using PoolMap = absl::flat_hash_map<std::pair<std::string, std::string>, std::unique_ptr<Pool>>;
using ServerMap = absl::flat_hash_map<uint64_t, ServerConn*>;

class ServerBudget {
 public:
  // `pools` and `servers` are the worker's (PoolRegistry's); they outlive the budget.
  ServerBudget(const WorkerContext& context, const PoolMap& pools, const ServerMap& servers)
      : context_(context), pools_(pools), servers_(servers) {}

  // True when `pool` may open one more server: within its database's and its user's budgets,
  // after evicting an idle server of another pool that shares the full budget when needed.
  bool MayOpen(const Pool* pool);
  // An opened (+1) or closed (-1) server of `pool`.
  void Count(const Pool* pool, int delta);

  int DatabaseServerCount(const std::string& db) const;
  int UserServerCount(const std::string& user) const;

  // Caps on server connections per database granted by the budget controller; until
  // EnableDatabaseCaps() the static max_db_connections share applies.
  void EnableDatabaseCaps() { db_caps_enabled_ = true; }
  void SetDatabaseCap(const std::string& db, int cap) { db_caps_[db] = cap; }
  // The cap in force for `db`: nullopt while caps are off, 0 when none was granted.
  std::optional<int> DatabaseCap(const std::string& db) const;
  // Brings `db` toward its cap: closes idle servers over it and marks busy ones to close on
  // release (with `force`, closes busy ones too). Returns how many servers were closed now.
  int EnforceDatabaseCap(const std::string& db, bool force);

 private:
  bool DatabaseAllows(const Pool* pool) const;
  bool UserAllows(const Pool* pool) const;
  // Frees room for `pool` by closing an idle server of another pool that shares the full budget
  // (same database, same user, or both when both are full). True when one was closed.
  bool EvictIdleServerFor(const Pool* pool);

  const WorkerContext& context_;
  const PoolMap& pools_;
  const ServerMap& servers_;
  absl::flat_hash_map<std::string, int> db_server_counts_;
  absl::flat_hash_map<std::string, int> user_server_counts_;
  bool db_caps_enabled_ = false;
  absl::flat_hash_map<std::string, int> db_caps_;
};

}  // namespace pgfleet::pool
