// Budget allocation: floors, demand-proportional shares, and lower-then-grant.
#include "peering/controller/budget_allocator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pgfleet::peering::controller {

std::vector<int> SplitProportionally(int total, const std::vector<int64_t>& weights) {
  std::vector<int> parts(weights.size(), 0);
  const int64_t sum = std::accumulate(weights.begin(), weights.end(), int64_t{0});
  if (sum <= 0 || total <= 0) return parts;
  std::vector<std::pair<int64_t, size_t>> remainders;  // (remainder, index)
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t scaled = int64_t{total} * std::max<int64_t>(weights[i], 0);
    parts[i] = static_cast<int>(scaled / sum);
    given += parts[i];
    remainders.emplace_back(scaled % sum, i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total && k < remainders.size(); ++k, ++given) {
    ++parts[remainders[k].second];
  }
  return parts;
}

BudgetAllocator::BudgetAllocator(AllocatorOptions options) : options_(options) {}

void BudgetAllocator::SetBudget(const std::string& database, int budget) {
  budgets_[database] = std::max(budget, 0);
  for (auto& [id, worker] : workers_) worker.dbs.try_emplace(database);
}

std::optional<int> BudgetAllocator::Budget(const std::string& database) const {
  auto it = budgets_.find(database);
  if (it == budgets_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> BudgetAllocator::Databases() const {
  std::vector<std::string> out;
  for (const auto& [name, budget] : budgets_) out.push_back(name);
  return out;
}

void BudgetAllocator::AddWorker(WorkerId id, const std::map<std::string, HeldShare>& held) {
  Worker& worker = workers_[id];  // keeps `seq` of an earlier record
  worker.live = true;
  worker.dbs.clear();
  for (const auto& [name, budget] : budgets_) {
    DbShare& share = worker.dbs[name];
    auto it = held.find(name);
    if (it == held.end()) continue;
    share.cap = std::max(it->second.cap, 0);
    share.floor = std::clamp(it->second.floor, 0, share.cap);
    share.held = std::max(share.cap, it->second.open);
    share.floor_held = share.floor;
  }
}

void BudgetAllocator::DetachWorker(WorkerId id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.live = false;
  for (auto& [name, share] : it->second.dbs) share.demand = 0;
}

void BudgetAllocator::ExpireWorker(WorkerId id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.live = false;
  for (auto& [name, share] : it->second.dbs) {
    // The worker falls back to min(cap, floor) on its own, but what it held stays counted: see
    // SetLostBackends.
    share.cap = std::min(share.cap, share.floor);
    share.demand = 0;
  }
}

void BudgetAllocator::SetLostBackends(WorkerId id, const std::string& database, int listed) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.live) return;
  auto db = it->second.dbs.find(database);
  if (db == it->second.dbs.end()) return;
  DbShare& share = db->second;
  share.held = std::min(share.held, std::max(share.floor_held, listed));
}

void BudgetAllocator::RemoveWorker(WorkerId id) { workers_.erase(id); }

bool BudgetAllocator::HasWorker(WorkerId id) const { return workers_.contains(id); }

bool BudgetAllocator::IsLive(WorkerId id) const {
  auto it = workers_.find(id);
  return it != workers_.end() && it->second.live;
}

double BudgetAllocator::DecayedDemand(const DbShare& share, absl::Time now) const {
  if (share.demand <= 0 || share.demand_at == absl::InfinitePast()) return 0;
  const double half_lives =
      absl::FDivDuration(std::max(now - share.demand_at, absl::ZeroDuration()),
                         std::max(options_.demand_half_life, absl::Milliseconds(1)));
  return share.demand * std::exp2(-half_lives);
}

void BudgetAllocator::SetDemand(WorkerId id, const std::string& database, int demand,
                                absl::Time now) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.live) return;
  auto db = it->second.dbs.find(database);
  if (db == it->second.dbs.end()) return;
  DbShare& share = db->second;
  share.demand = std::max(static_cast<double>(std::max(demand, 0)), DecayedDemand(share, now));
  share.demand_at = now;
}

void BudgetAllocator::Ack(WorkerId id, uint64_t seq) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.live || seq > it->second.seq) return;
  it->second.acked_seq = std::max(it->second.acked_seq, seq);
  for (auto& [name, share] : it->second.dbs) {
    if (seq >= share.lower_seq) {
      share.held = share.cap;
      share.floor_held = share.floor;
    }
  }
}

void BudgetAllocator::SetOpen(WorkerId id, const std::string& database, int open) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.live) return;
  auto db = it->second.dbs.find(database);
  if (db == it->second.dbs.end()) return;
  DbShare& share = db->second;
  if (share.lower_seq > it->second.acked_seq) return;  // it may still use the old, higher cap
  // Only ever frees room: what it holds was already counted, and counting more here could put
  // the committed total over the budget.
  share.held = std::min(share.held, std::max(share.cap, open));
}

std::vector<GrantOut> BudgetAllocator::Rebalance(absl::Time now) {
  std::map<WorkerId, GrantOut> out;
  for (const auto& [name, budget] : budgets_) RebalanceDatabase(name, budget, now, out);
  std::vector<GrantOut> grants;
  for (auto& [id, grant] : out) grants.push_back(std::move(grant));
  return grants;
}

void BudgetAllocator::RebalanceDatabase(const std::string& database, int budget, absl::Time now,
                                        std::map<WorkerId, GrantOut>& out) {
  struct Entry {
    WorkerId id;
    DbShare* share;
    int need;    // floor + demand-driven part: what lowering others may make room for
    int target;  // need + an even part of unwanted room: raised into only when it is free
    int old_cap;
    int old_floor;
  };
  std::vector<Entry> live;
  int fixed = reserved_;
  for (auto& [id, worker] : workers_) {
    auto it = worker.dbs.find(database);
    if (it == worker.dbs.end()) continue;
    if (worker.live) {
      live.push_back({id, &it->second, 0, 0, it->second.cap, it->second.floor});
    } else {
      fixed += it->second.held;
    }
  }
  if (live.empty()) return;
  const int n = static_cast<int>(live.size());
  const int usable = std::max(0, budget - fixed);
  const int floor_share = std::clamp(std::min(options_.min_share, usable / (2 * n)), 0, usable);
  const int above = usable - floor_share * n;

  std::vector<int64_t> wants(live.size());
  int64_t total_want = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    const int64_t demand = static_cast<int64_t>(std::ceil(DecayedDemand(*live[i].share, now)));
    wants[i] = std::max<int64_t>(0, demand - floor_share);
    total_want += wants[i];
  }
  if (total_want <= above) {
    const int slack = above - static_cast<int>(total_want);
    for (int i = 0; i < n; ++i) {
      live[i].need = floor_share + static_cast<int>(wants[i]);
      live[i].target = live[i].need + slack / n + (i < slack % n ? 1 : 0);
    }
  } else {
    const std::vector<int> parts = SplitProportionally(above, wants);
    for (int i = 0; i < n; ++i) live[i].need = live[i].target = floor_share + parts[i];
  }

  int committed = fixed;
  for (const Entry& e : live) committed += e.share->held;
  int available = budget - committed;

  // Raises, only into free room: first toward each worker's need (largest shortfall first),
  // then toward its target.
  auto raise_toward = [&](auto goal_of) {
    std::vector<Entry*> order;
    for (Entry& e : live) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(), [&](const Entry* a, const Entry* b) {
      return goal_of(*a) - a->share->cap > goal_of(*b) - b->share->cap;
    });
    for (Entry* e : order) {
      const int gap = goal_of(*e) - e->share->cap;
      if (gap <= 0 || available <= 0) continue;
      const int give = std::min(gap, available);
      e->share->cap += give;
      e->share->held = std::max(e->share->held, e->share->cap);
      available -= give;
    }
  };
  if (raises_allowed_) {
    raise_toward([](const Entry& e) { return e.need; });
    raise_toward([](const Entry& e) { return e.target; });
  }

  // Lowers: free what unmet needs (or an overcommitment) require, beyond what lowers already in
  // flight will free once acknowledged. Workers furthest above their need give first.
  int unmet = 0;
  int in_flight = 0;
  for (const Entry& e : live) {
    if (raises_allowed_) unmet += std::max(0, e.need - e.share->cap);
    in_flight += e.share->held - e.share->cap;
  }
  int must_free = std::max(0, unmet - (available + in_flight));
  auto lower_by = [&](auto room_of) {
    std::vector<Entry*> order;
    for (Entry& e : live) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(),
                     [&](const Entry* a, const Entry* b) { return room_of(*a) > room_of(*b); });
    for (Entry* e : order) {
      if (must_free <= 0) break;
      const int take = std::min(room_of(*e), must_free);
      if (take <= 0) continue;
      e->share->cap -= take;
      must_free -= take;
    }
  };
  lower_by([](const Entry& e) { return e.share->cap - e.need; });
  lower_by([](const Entry& e) { return e.share->cap; });  // a budget cut below the floors

  for (Entry& e : live) {
    DbShare& share = *e.share;
    const int floor = std::min(floor_share, share.cap);
    if (floor < share.floor || raises_allowed_) share.floor = floor;
    share.floor = std::min(share.floor, share.cap);
    share.floor_held = std::max(share.floor_held, share.floor);
    if (share.cap == e.old_cap && share.floor == e.old_floor) continue;
    GrantOut& grant = out[e.id];
    if (grant.seq == 0) {
      grant.worker = e.id;
      grant.seq = ++workers_[e.id].seq;
    }
    if (share.cap < e.old_cap || share.floor < e.old_floor) share.lower_seq = grant.seq;
    grant.shares.push_back({database, share.cap, share.floor});
  }
}

std::optional<BudgetAllocator::ShareView> BudgetAllocator::Share(
    WorkerId id, const std::string& database) const {
  auto it = workers_.find(id);
  if (it == workers_.end()) return std::nullopt;
  auto db = it->second.dbs.find(database);
  if (db == it->second.dbs.end()) return std::nullopt;
  return ShareView{db->second.cap, db->second.floor, db->second.held, db->second.demand};
}

int BudgetAllocator::Committed(const std::string& database) const {
  int committed = reserved_;
  for (const auto& [id, worker] : workers_) {
    auto it = worker.dbs.find(database);
    if (it != worker.dbs.end()) committed += it->second.held;
  }
  return committed;
}

}  // namespace pgfleet::peering::controller
