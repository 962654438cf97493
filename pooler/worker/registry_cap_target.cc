// The lease's view of the pools.
#include "pooler/worker/registry_cap_target.h"

#include <algorithm>
#include <map>

namespace pgfleet::worker {

void RegistryCapTarget::EnableCaps() { registry_->budget().EnableDatabaseCaps(); }

std::vector<RegistryCapTarget::Usage> RegistryCapTarget::Usages() {
  std::map<std::string, Usage> usages;
  std::map<std::string, int> capacity;
  for (const auto& [name, db] : fleet_.databases) {
    if (name != "*" && db.max_db_connections > 0) {
      usages[name] = Usage{name, db.max_db_connections, 0, 0};
    }
  }
  const auto& config = registry_->config();
  for (const auto& [key, pool] : registry_->pools()) {
    const std::string& name = pool->db().name;
    auto it = usages.find(name);
    if (it == usages.end()) {
      auto db = fleet_.FindDatabase(name);
      if (!db.has_value() || db->max_db_connections <= 0) continue;
      it = usages.emplace(name, Usage{name, db->max_db_connections, 0, 0}).first;
    }
    it->second.demand += static_cast<int>(pool->active_server_count() + pool->login_server_count() +
                                          pool->testing_server_count() + pool->waiting_count());
    capacity[name] +=
        config.EffectivePoolSize(pool->db()) + config.EffectiveReservePoolSize(pool->db());
  }
  std::vector<Usage> out;
  for (auto& [name, usage] : usages) {
    usage.open = registry_->budget().DatabaseServerCount(name);
    usage.demand = std::min(usage.demand, capacity[name]);
    out.push_back(usage);
  }
  return out;
}

void RegistryCapTarget::SetCap(const std::string& database, int cap) {
  registry_->budget().SetDatabaseCap(database, cap);
}

int RegistryCapTarget::Enforce(const std::string& database, bool force) {
  return registry_->budget().EnforceDatabaseCap(database, force);
}

}  // namespace pgfleet::worker
