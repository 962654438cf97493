// Controller membership: joins, blocks, leases, expiry, forgetting and recovery, in caller's time.
#include "peering/controller/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering::controller {

Membership::Membership(MembershipOptions options)
    : options_(options), allocator_(AllocatorOptions{options.min_share, absl::Seconds(1)}) {
  allocator_.set_raises_allowed(false);
}

void Membership::Start(absl::Time now) {
  started_ = now;
  recovering_ = true;
}

const Membership::Member* Membership::Find(const std::string& key) const {
  auto it = members_.find(key);
  return it == members_.end() ? nullptr : &it->second;
}

uint32_t Membership::BlockFor(const std::string& pod_id, uint32_t claimed_block, absl::Time now,
                              std::string* conflict) {
  auto pod = pods_.find(pod_id);
  if (pod != pods_.end() && pod->second.block != 0) return pod->second.block;
  if (claimed_block != 0) {
    auto owner = blocks_.find(claimed_block);
    if (owner != blocks_.end() && owner->second != pod_id) {
      // Two live pods claim one block (possible only across a controller restart): keep both in
      // the directory; a cancel for the block goes to both and only its owner acts on it.
      *conflict = owner->second;
    } else {
      blocks_[claimed_block] = pod_id;
    }
    return claimed_block;
  }
  // A free block, the one freed longest ago first, never one a restarted controller heard of
  // from the workers' directories until forget_after has passed.
  const bool fresh_only = now < started_ + options_.forget_after;
  uint32_t best = 0;
  absl::Time best_freed = absl::InfiniteFuture();
  for (uint32_t block = 1; block <= protocol::kMaxPodBlock; ++block) {
    if (blocks_.contains(block)) continue;
    if (fresh_only && reported_blocks_.contains(block)) continue;
    auto freed = freed_blocks_.find(block);
    const absl::Time when = freed == freed_blocks_.end() ? absl::InfinitePast() : freed->second;
    if (when < best_freed) {
      best = block;
      best_freed = when;
    }
  }
  if (best != 0) blocks_[best] = pod_id;
  return best;
}

bool Membership::IsValid(const JoinRequest& hello) {
  const uint32_t local = hello.local_peer_id;
  if (hello.role == JoinRequest::Role::kPod) {
    return !hello.pod_id.empty() && local == 0 && hello.peer_id == 0;
  }
  return !hello.pod_id.empty() && local != 0 && local <= protocol::kMaxLocalPeerId &&
         (hello.peer_id == 0 || protocol::LocalPartOfPeerId(hello.peer_id) == local);
}

std::optional<Membership::Joined> Membership::Join(const JoinRequest& hello, absl::Time now) {
  if (!IsValid(hello)) return std::nullopt;
  const uint32_t local = hello.local_peer_id;
  const bool pod_lease = hello.role == JoinRequest::Role::kPod;
  Joined joined;
  joined.key =
      pod_lease ? absl::StrCat(hello.pod_id, "/pod") : absl::StrCat(hello.pod_id, "/", local);
  joined.reclaimed = hello.peer_id != 0;
  uint32_t peer_id = hello.peer_id;
  if (pod_lease) {
    // Not a cancel target: no id, no block.
  } else if (peer_id == 0) {
    peer_id = protocol::MakePeerId(BlockFor(hello.pod_id, 0, now, &joined.conflict_holder), local);
  } else if (protocol::PodBlockOfPeerId(peer_id) != 0) {
    BlockFor(hello.pod_id, protocol::PodBlockOfPeerId(peer_id), now, &joined.conflict_holder);
  }
  joined.peer_id = peer_id;
  joined.block = protocol::PodBlockOfPeerId(peer_id);

  Member& member = members_[joined.key];
  joined.rejoin = member.handle != 0;
  if (!joined.rejoin) member.handle = next_handle_++;
  member.key = joined.key;
  member.pod_id = hello.pod_id;
  member.local = local;
  member.peer_id = peer_id;
  member.address = hello.address;
  member.hostname = hello.hostname;
  member.pid = hello.pid;
  member.connected = true;
  member.last_heard = now;
  member.newest_report_seq = 0;
  member.expired = false;
  member.budget = hello.role != JoinRequest::Role::kWorkerOfPod;
  member.open.clear();
  member.sent_caps.clear();
  member.backends.clear();
  member.listed.clear();
  member.lost_settled = false;

  if (!pod_lease) {
    Pod& pod = pods_[hello.pod_id];
    if (pod.block == 0) pod.block = joined.block;
    if (!member.address.empty()) pod.address = member.address;
    pod.members.insert(joined.key);
  }

  if (member.budget) {
    std::map<std::string, HeldShare> held;
    for (const auto& db : hello.databases) {
      held[db.database] =
          HeldShare{std::max(db.cap, 0), std::max(db.floor, 0), std::max(db.open, 0)};
      member.sent_caps[db.database] = std::max(db.cap, 0);
    }
    Remember(member, hello.databases);
    allocator_.AddWorker(member.handle, held);
  }

  for (const auto& k : hello.known_members) {
    if (!members_.contains(k) && recovering_) awaited_.insert(k);
  }
  if (!hello.known_members.empty()) heard_membership_ = true;
  for (uint32_t b : hello.known_blocks) reported_blocks_.insert(b);
  awaited_.erase(joined.key);
  return joined;
}

bool Membership::Report(const std::string& key, uint64_t report_seq,
                        const std::vector<DatabaseReport>& databases, absl::Time now) {
  auto it = members_.find(key);
  if (it == members_.end()) return false;
  Member& member = it->second;
  // Its lease ran out here, so it has fallen back to its floor: it must rejoin with a Hello that
  // says what it holds.
  if (member.expired) return false;
  member.last_heard = now;
  member.newest_report_seq = std::max(member.newest_report_seq, report_seq);
  if (!member.budget) return true;
  for (const auto& db : databases) {
    allocator_.SetDemand(member.handle, db.database, db.demand, now);
    allocator_.SetOpen(member.handle, db.database, db.open);
  }
  Remember(member, databases);
  return true;
}

bool Membership::Ack(const std::string& key, uint64_t grant_seq,
                     const std::vector<DatabaseReport>& databases) {
  auto it = members_.find(key);
  if (it == members_.end() || it->second.expired) return false;
  Member& member = it->second;
  if (!member.budget) return true;
  Remember(member, databases);
  allocator_.Ack(member.handle, grant_seq);
  return true;
}

bool Membership::Leave(const std::string& key, const std::vector<DatabaseReport>& databases,
                       absl::Time now) {
  auto it = members_.find(key);
  if (it == members_.end()) return false;
  bool closed = true;
  for (const auto& db : databases) closed = closed && db.open == 0;
  if (closed) {
    Remove(key, now);
    return true;
  }
  Remember(it->second, databases);
  Lose(it->second, now);
  return false;
}

void Membership::Remember(Member& member, const std::vector<DatabaseReport>& databases) {
  for (const auto& db : databases) {
    member.open[db.database] = db.open;
    member.backends[db.database] = db.backend_pids;
  }
}

bool Membership::AwaitsBackends(const Member& member) {
  return member.expired && member.budget && !member.lost_settled;
}

void Membership::Lose(Member& member, absl::Time now) {
  member.expired = true;
  if (!member.budget) return;
  allocator_.ExpireWorker(member.handle);
  member.expired_at = now;
  member.listed.clear();
  for (const auto& [db, pids] : member.backends) member.listed[db] = static_cast<int>(pids.size());
  member.held_at_loss.clear();
  for (const auto& db : allocator_.Databases()) {
    if (auto share = allocator_.Share(member.handle, db)) member.held_at_loss[db] = share->held;
  }
  member.lost_settled = false;
  UpdateLost(member, now);
}

void Membership::UpdateLost(Member& member, absl::Time now) {
  if (!AwaitsBackends(member)) return;
  const bool hold_over = now >= member.expired_at + options_.lost_room_hold;
  bool settled = true;
  for (const auto& [db, held] : member.held_at_loss) {
    auto pids = member.backends.find(db);
    const int reported = pids == member.backends.end() ? 0 : static_cast<int>(pids->second.size());
    const int unknown = hold_over ? 0 : std::max(0, held - reported);
    int listed = 0;
    if (options_.backends_checked) {
      auto it = member.listed.find(db);
      listed = it == member.listed.end() ? 0 : it->second;
    } else if (!hold_over) {
      listed = reported;
    }
    allocator_.SetLostBackends(member.handle, db, listed + unknown);
    if (listed + unknown > 0) settled = false;
  }
  member.lost_settled = settled;
}

std::vector<Membership::LostBackend> Membership::LostBackends() const {
  std::vector<LostBackend> out;
  for (const auto& [key, member] : members_) {
    if (!AwaitsBackends(member)) continue;
    for (const auto& [db, pids] : member.backends) {
      for (uint32_t pid : pids) out.push_back(LostBackend{pid, member.last_heard});
    }
  }
  return out;
}

int Membership::BackendsListed(const std::vector<uint32_t>& asked, const std::set<uint32_t>& listed,
                               absl::Time now) {
  const std::set<uint32_t> asked_set(asked.begin(), asked.end());
  int gone = 0;
  for (auto& [key, member] : members_) {
    if (!AwaitsBackends(member)) continue;
    bool all_asked = true;
    for (const auto& [db, pids] : member.backends) {
      for (uint32_t pid : pids) all_asked = all_asked && asked_set.contains(pid);
    }
    if (!all_asked) continue;  // it was lost after the question was sent
    for (const auto& [db, pids] : member.backends) {
      int count = 0;
      for (uint32_t pid : pids) count += listed.contains(pid) ? 1 : 0;
      // Only ever fewer: a pid PostgreSQL reuses for a new backend is not the member's.
      auto& known = member.listed[db];
      if (count < known) gone += known - count;
      known = std::min(known, count);
    }
    UpdateLost(member, now);
  }
  return gone;
}

void Membership::Detach(const std::string& key) {
  auto it = members_.find(key);
  if (it == members_.end()) return;
  it->second.connected = false;
  if (!it->second.expired && it->second.budget) allocator_.DetachWorker(it->second.handle);
}

void Membership::Remove(const std::string& key, absl::Time now) {
  auto it = members_.find(key);
  if (it == members_.end()) return;
  if (it->second.budget) allocator_.RemoveWorker(it->second.handle);
  auto pod = pods_.find(it->second.pod_id);
  if (pod != pods_.end() && pod->second.members.contains(key)) {
    pod->second.members.erase(key);
    if (pod->second.members.empty()) {
      const uint32_t block = pod->second.block;
      auto owner = blocks_.find(block);
      if (owner != blocks_.end() && owner->second == pod->first) {
        blocks_.erase(owner);
        freed_blocks_[block] = now;
      }
      pods_.erase(pod);
    }
  }
  members_.erase(it);
}

Membership::TickOutcome Membership::Tick(absl::Time now) {
  TickOutcome outcome;
  for (auto& [key, member] : members_) {
    const absl::Duration silent = now - member.last_heard;
    if (!member.expired && silent > options_.lease_timeout) {
      Lose(member, now);
      outcome.expired.push_back(Expired{key, member.peer_id, silent});
    } else {
      UpdateLost(member, now);
    }
    if (member.expired && silent > options_.forget_after) outcome.forgotten.push_back(key);
  }
  for (const auto& key : outcome.forgotten) Remove(key, now);
  if (recovering_ &&
      (now >= started_ + options_.lease_timeout || (heard_membership_ && awaited_.empty()))) {
    recovering_ = false;
    outcome.recovery_done = true;
  }
  if (!awaited_.empty() && now >= started_ + options_.forget_after) awaited_.clear();
  allocator_.SetReserved(static_cast<int>(awaited_.size()) * options_.min_share);
  allocator_.set_raises_allowed(!recovering_);
  return outcome;
}

std::vector<Membership::Grant> Membership::Rebalance(absl::Time now) {
  std::map<uint32_t, Member*> by_handle;
  for (auto& [key, member] : members_) by_handle[member.handle] = &member;
  std::vector<Grant> out;
  for (auto& grant : allocator_.Rebalance(now)) {
    auto it = by_handle.find(grant.worker);
    if (it == by_handle.end() || !it->second->connected) continue;
    Member& member = *it->second;
    Grant g;
    g.key = member.key;
    g.grant_seq = grant.seq;
    g.report_seq = member.newest_report_seq;
    for (const auto& share : grant.shares) {
      auto sent = member.sent_caps.find(share.database);
      const int before = sent == member.sent_caps.end() ? 0 : sent->second;
      if (share.cap > before) ++g.raises;
      if (share.cap < before) ++g.lowers;
      member.sent_caps[share.database] = share.cap;
    }
    g.shares = std::move(grant.shares);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace pgfleet::peering::controller
