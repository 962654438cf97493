// Static budget split.
#include "pooler/config/worker_share.h"

namespace pgfleet::config {

int StrictShare(int total, int index, int count) {
  if (total <= 0 || count <= 1) return total;
  int share = total / count + (index < total % count ? 1 : 0);
  return share == 0 ? kNoConnections : share;
}

int SoftShare(int total, int index, int count) {
  if (total <= 0 || count <= 1) return total;
  int share = total / count + (index < total % count ? 1 : 0);
  return share == 0 ? 1 : share;
}

Config ShareForWorker(const Config& fleet, int index, int count) {
  Config out = fleet;
  auto& pool = out.pool;
  pool.default_pool_size = SoftShare(pool.default_pool_size, index, count);
  if (pool.min_pool_size > 0) pool.min_pool_size = SoftShare(pool.min_pool_size, index, count);
  if (pool.reserve_pool_size > 0) {
    pool.reserve_pool_size = SoftShare(pool.reserve_pool_size, index, count);
  }
  pool.max_db_connections = StrictShare(pool.max_db_connections, index, count);
  pool.max_user_connections = StrictShare(pool.max_user_connections, index, count);
  for (auto& [name, db] : out.databases) {
    db.max_db_connections = StrictShare(db.max_db_connections, index, count);
    auto& o = db.overrides;
    if (o.pool_size.has_value()) o.pool_size = SoftShare(*o.pool_size, index, count);
    if (o.min_pool_size.has_value() && *o.min_pool_size > 0) {
      o.min_pool_size = SoftShare(*o.min_pool_size, index, count);
    }
    if (o.reserve_pool_size.has_value() && *o.reserve_pool_size > 0) {
      o.reserve_pool_size = SoftShare(*o.reserve_pool_size, index, count);
    }
  }
  for (auto& [name, user] : out.users) {
    user.max_user_connections = StrictShare(user.max_user_connections, index, count);
  }
  return out;
}

}  // namespace pgfleet::config
