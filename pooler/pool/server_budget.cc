// Server connection budgets of one worker.
#include "pooler/pool/server_budget.h"

#include <vector>

#include "pooler/config/worker_share.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/server_conn.h"

namespace pgfleet::pool {

bool ServerBudget::MayOpen(const Pool* pool) {
  if (DatabaseAllows(pool) && UserAllows(pool)) return true;
  // Make room by closing an idle server another pool of this database or user does not need.
  return EvictIdleServerFor(pool) && DatabaseAllows(pool) && UserAllows(pool);
}

void ServerBudget::Count(const Pool* pool, int delta) {
  db_server_counts_[pool->db().name] += delta;
  user_server_counts_[pool->server_user()] += delta;
}

int ServerBudget::DatabaseServerCount(const std::string& db) const {
  auto it = db_server_counts_.find(db);
  return it == db_server_counts_.end() ? 0 : it->second;
}

int ServerBudget::UserServerCount(const std::string& user) const {
  auto it = user_server_counts_.find(user);
  return it == user_server_counts_.end() ? 0 : it->second;
}

bool ServerBudget::DatabaseAllows(const Pool* pool) const {
  // 0 = unlimited; config::kNoConnections (negative) = this worker's share is zero.
  int db_limit = pool->db().max_db_connections;
  if (db_caps_enabled_ && db_limit != 0) {
    auto cap = db_caps_.find(pool->db().name);
    db_limit = cap == db_caps_.end() || cap->second == 0 ? config::kNoConnections : cap->second;
  }
  return !(db_limit < 0 || (db_limit > 0 && DatabaseServerCount(pool->db().name) >= db_limit));
}

bool ServerBudget::UserAllows(const Pool* pool) const {
  const int user_limit = context_.config().EffectiveMaxUserConnections(pool->server_user());
  return !(user_limit < 0 ||
           (user_limit > 0 && UserServerCount(pool->server_user()) >= user_limit));
}

bool ServerBudget::EvictIdleServerFor(const Pool* pool) {
  const bool database_full = !DatabaseAllows(pool);
  const bool user_full = !UserAllows(pool);
  for (auto& [key, other] : pools_) {
    if (other.get() == pool || other->waiting_count() > 0) continue;
    // Closing one of `other`'s servers frees room only in the budgets the two pools share.
    if (database_full && other->db().name != pool->db().name) continue;
    if (user_full && other->server_user() != pool->server_user()) continue;
    if (other->EvictOneIdleServer()) return true;
  }
  return false;
}

std::optional<int> ServerBudget::DatabaseCap(const std::string& db) const {
  if (!db_caps_enabled_) return std::nullopt;
  auto it = db_caps_.find(db);
  return it == db_caps_.end() ? 0 : it->second;
}

int ServerBudget::EnforceDatabaseCap(const std::string& db, bool force) {
  const std::optional<int> cap = DatabaseCap(db);
  if (!cap.has_value()) return 0;
  int excess = DatabaseServerCount(db) - *cap;
  if (excess <= 0) return 0;
  std::vector<ServerConn*> idle, marked, busy;
  for (const auto& [id, server] : servers_) {
    if (server->pool()->db().name != db || server->state() == ServerState::kClosed) continue;
    if (server->state() == ServerState::kIdle) {
      idle.push_back(server);
    } else if (server->close_on_release()) {
      marked.push_back(server);
    } else {
      busy.push_back(server);
    }
  }
  // Servers already marked close by themselves when released.
  if (!force) excess -= static_cast<int>(marked.size());
  int closed = 0;
  for (ServerConn* server : idle) {
    if (excess <= 0) break;
    server->Close("over the budget share");
    ++closed;
    --excess;
  }
  if (force) busy.insert(busy.begin(), marked.begin(), marked.end());
  for (ServerConn* server : busy) {
    if (excess <= 0) break;
    if (force) {
      server->Close("budget share lost with the controller");
      ++closed;
    } else {
      server->MarkCloseOnRelease();
    }
    --excess;
  }
  return closed;
}

}  // namespace pgfleet::pool
