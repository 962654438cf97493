// Server connection budgets: the pod's counts and this worker's.
#include "pooler/pool/server_budget.h"

#include <algorithm>
#include <vector>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/server_conn.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::pool {

using budget::PodServerCounts;

namespace {
// The lease's times in the pod's counts are monotonic microseconds, the same in every process.
int64_t NowMicros() { return absl::ToUnixMicros(net::MonotonicNow()); }
}  // namespace

std::optional<PodKeys> ServerBudget::InternKeys(const BudgetedPool& pool) {
  auto pool_key = pod_.Intern(PodServerCounts::PoolKeyText(pool.db().name, pool.user()));
  auto db_key = pod_.Intern(PodServerCounts::DatabaseKeyText(pool.db().name));
  auto user_key = pod_.Intern(PodServerCounts::UserKeyText(pool.server_user()));
  if (!pool_key || !db_key || !user_key) {
    PGFLEET_LOG(kError, "pod_counts_full", "db=", base::LogQuote(pool.db().name),
                " user=", base::LogQuote(pool.user()),
                " note=", base::LogQuote("too many pools in the pod, or names too long"));
    return std::nullopt;
  }
  return PodKeys{*pool_key, *db_key, *user_key};
}

int ServerBudget::DatabaseLimit(const BudgetedPool& pool, PodServerCounts::Key database) {
  const int configured = pool.db().max_db_connections;
  if (configured < 0) return -1;
  if (!db_caps_enabled_ || configured == 0) return configured;
  const int cap = pod_.EnforcedShare(database, NowMicros()).cap;
  return cap <= 0 ? -1 : std::min(cap, configured);
}

std::optional<ServerRoom> ServerBudget::Reserve(const BudgetedPool& pool, Purpose purpose) {
  const auto& keys = pool.PodKeysOf();
  if (!keys.has_value()) return std::nullopt;
  const config::Config& config = context_.config();
  int pool_limit = config.EffectivePoolSize(pool.db(), pool.user());
  if (purpose == Purpose::kReserve)
    pool_limit += config.EffectiveReservePoolSize(pool.db(), pool.user());
  if (purpose == Purpose::kMinPoolSize) pool_limit = config.EffectiveMinPoolSize(pool.db());
  if (pool_limit <= 0) return std::nullopt;
  const int db_limit = DatabaseLimit(pool, keys->database);
  const int user_limit = config.EffectiveMaxUserConnections(pool.server_user());
  if (!pod_.TryReserve({{keys->pool, pool_limit},
                        {keys->database, db_limit},
                        {keys->user, user_limit < 0 ? -1 : user_limit}})) {
    return std::nullopt;
  }
  ServerRoom room{*keys, pool.db().name, pool.server_user(), purpose == Purpose::kReserve};
  CountLocal(room, +1);
  return room;
}

std::optional<ServerRoom> ServerBudget::TryOpen(const BudgetedPool& pool, Purpose purpose) {
  const auto& keys = pool.PodKeysOf();
  if (!keys.has_value()) return std::nullopt;
  if (auto room = Reserve(pool, purpose)) return room;
  // Evicting another pool's idle server frees its database's and its user's room, never this
  // pool's: when the pool itself is at its size in the pod, nothing to evict for.
  const config::Config& config = context_.config();
  const int pool_size =
      config.EffectivePoolSize(pool.db(), pool.user()) +
      (purpose == Purpose::kReserve ? config.EffectiveReservePoolSize(pool.db(), pool.user()) : 0);
  if (purpose == Purpose::kMinPoolSize || pod_.Total(keys->pool) >= pool_size) return std::nullopt;
  if (!EvictIdleServerFor(pool)) return std::nullopt;
  return Reserve(pool, purpose);
}

void ServerBudget::Closed(const ServerRoom& room) {
  pod_.ForgetBackend(room.backend_slot);
  pod_.Release({room.keys.pool, room.keys.database, room.keys.user});
  CountLocal(room, -1);
}

void ServerBudget::MovedOut(const ServerRoom& room, uint32_t to) {
  pod_.MoveBackend(room.backend_slot, to);
  pod_.Transfer({room.keys.pool, room.keys.database, room.keys.user}, pod_.worker(), to);
  CountLocal(room, -1);
}

void ServerBudget::MoveFailed(const ServerRoom& room, uint32_t to) {
  pod_.MoveBackend(room.backend_slot, pod_.worker());
  pod_.Transfer({room.keys.pool, room.keys.database, room.keys.user}, to, pod_.worker());
  CountLocal(room, +1);
}

void ServerBudget::MovedIn(ServerRoom& room, uint32_t backend_pid) {
  room.backend_slot = pod_.FindBackend(backend_pid);
  CountLocal(room, +1);
}

void ServerBudget::RecordBackend(ServerRoom& room, uint32_t backend_pid) {
  if (room.backend_slot >= 0 || backend_pid == 0) return;
  room.backend_slot = pod_.RecordBackend(room.keys.database, backend_pid);
}

void ServerBudget::ReleaseArrived(const std::string& database, const std::string& user) {
  auto pool_key = pod_.Intern(PodServerCounts::PoolKeyText(database, user));
  auto db_key = pod_.Intern(PodServerCounts::DatabaseKeyText(database));
  auto user_key = pod_.Intern(PodServerCounts::UserKeyText(user));
  if (pool_key && db_key && user_key) pod_.Release({*pool_key, *db_key, *user_key});
}

int ServerBudget::PodServers(const BudgetedPool& pool) {
  const auto& keys = pool.PodKeysOf();
  return keys.has_value() ? pod_.Total(keys->pool) : 0;
}

void ServerBudget::CountLocal(const ServerRoom& room, int delta) {
  db_server_counts_[room.database] += delta;
  user_server_counts_[room.server_user] += delta;
}

int ServerBudget::DatabaseServerCount(const std::string& db) const {
  auto it = db_server_counts_.find(db);
  return it == db_server_counts_.end() ? 0 : it->second;
}

int ServerBudget::UserServerCount(const std::string& user) const {
  auto it = user_server_counts_.find(user);
  return it == user_server_counts_.end() ? 0 : it->second;
}

ServerBudget::FullBudgets ServerBudget::BudgetsFullFor(const BudgetedPool& pool) {
  const auto& keys = pool.PodKeysOf();
  if (!keys.has_value()) return {};
  const int pool_size = context_.config().EffectivePoolSize(pool.db(), pool.user());
  if (pod_.Total(keys->pool) >= pool_size) return {};
  const int db_limit = DatabaseLimit(pool, keys->database);
  const int user_limit = context_.config().EffectiveMaxUserConnections(pool.server_user());
  return {.database = db_limit < 0 || (db_limit > 0 && pod_.Total(keys->database) >= db_limit),
          .user = user_limit < 0 || (user_limit > 0 && pod_.Total(keys->user) >= user_limit)};
}

bool ServerBudget::EvictIdleServerFor(const BudgetedPool& pool) {
  const FullBudgets full = BudgetsFullFor(pool);
  const bool database_full = full.database;
  const bool user_full = full.user;
  if (!database_full && !user_full) return false;
  bool evicted = false;
  pools_.ForEachBudgetedPool([&](BudgetedPool& other) {
    if (evicted || &other == &pool || other.waiting_count() > 0) return;
    // Closing one of `other`'s servers frees room only in the budgets the two pools share.
    if (database_full && other.db().name != pool.db().name) return;
    if (user_full && other.server_user() != pool.server_user()) return;
    evicted = other.EvictOneIdleServer();
  });
  return evicted;
}

std::optional<int> ServerBudget::DatabaseCap(const std::string& db) {
  if (!db_caps_enabled_) return std::nullopt;
  auto key = pod_.Intern(PodServerCounts::DatabaseKeyText(db));
  if (!key.has_value()) return 0;
  return std::max(pod_.EnforcedShare(*key, NowMicros()).cap, 0);
}

bool ServerBudget::ShedServer(ServerConn* server, PodServerCounts::Key database, int cap,
                              std::string_view reason) {
  if (!pod_.ClaimShed(database, cap)) return false;
  server->Close(reason);  // gives the room back to the pod (Closed) before the claim ends
  pod_.EndShed(database);
  return true;
}

int ServerBudget::EnforcePodShares() {
  if (!db_caps_enabled_) return 0;
  const int64_t now_us = NowMicros();
  // This worker's demand per pool of a budgeted database, for the pod's lease: servers in use
  // and the servers its clients wait for (a first login waiting for the welcome counts too:
  // a pod whose share is 0 would otherwise never report it, and wait for other pods to leave).
  absl::flat_hash_map<std::string, PodServerCounts::Key> databases;
  pools_.ForEachBudgetedPool([&](BudgetedPool& pool) {
    if (pool.db().max_db_connections <= 0) return;
    const auto& keys = pool.PodKeysOf();
    if (!keys.has_value()) return;
    databases[pool.db().name] = keys->database;
    pod_.SetDemand(keys->pool, pool.ServersInUseOrWanted());
  });
  over_share_.clear();
  int closed = 0;
  for (const auto& [name, key] : databases) {
    const PodServerCounts::Enforced share = pod_.EnforcedShare(key, now_us);
    if (pod_.Total(key) <= share.cap) continue;
    over_share_[name] = OverShare{key, share.cap};
    std::vector<ServerConn*> idle, listening;
    for (const auto& [id, server] : servers_) {
      if (server->room().database != name) continue;
      if (server->state() == ServerState::kIdle) idle.push_back(server);
      if (server->state() == ServerState::kListening) listening.push_back(server);
    }
    // A LISTEN hub's server is never released, so it cannot wait for ShedOnRelease: it goes
    // after the idle ones. Its hub asks the pool for a server again (within the share), and
    // notifications in between are lost, as for a server that died.
    idle.insert(idle.end(), listening.begin(), listening.end());
    for (ServerConn* server : idle) {
      if (!ShedServer(server, key, share.cap, "over the pod's budget share")) break;
      ++closed;
    }
    // Busy servers close as they are released (ShedOnRelease), never under a running
    // transaction: the controller counts them until then.
  }
  return closed;
}

bool ServerBudget::ShedOnRelease(ServerConn* server) {
  if (over_share_.empty()) return false;
  auto it = over_share_.find(server->room().database);
  if (it == over_share_.end()) return false;
  return ShedServer(server, it->second.key, it->second.cap, "over the pod's budget share");
}

}  // namespace pgfleet::pool
