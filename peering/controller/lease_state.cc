// Worker lease decisions: shares, acks, reports and the fail-static fallback, in caller's time.
#include "peering/controller/lease_state.h"

#include <algorithm>
#include <iterator>

namespace pgfleet::peering::controller {

LeaseState::LeaseState(absl::Duration lease_timeout, absl::Duration forget_after)
    : lease_timeout_(lease_timeout), forget_after_(forget_after) {}

void LeaseState::Attach(CapTarget* target) {
  target_ = target;
  for (const auto& [db, share] : shares_) target_->SetCap(db, std::max(share.cap, 0), share.floor);
}

void LeaseState::Restore(const std::map<std::string, ShareUpdate>& shares, absl::Time lease_start) {
  for (const auto& [db, share] : shares) {
    shares_[db] = Share{share.cap, std::clamp(share.floor, 0, std::max(share.cap, 0))};
  }
  lease_start_ = lease_start;
  has_lease_ = false;
}

void LeaseState::OnHelloSent(absl::Time now) {
  welcomed_ = false;
  hello_sent_at_ = now;
  deferred_raises_.clear();  // grants of an earlier stream were numbered there
  deferred_grant_seq_ = 0;
}

void LeaseState::OnStreamEnded() {
  welcomed_ = false;
  deferred_raises_.clear();
  deferred_grant_seq_ = 0;
}

bool LeaseState::OnWelcome(const Welcome& welcome, absl::Time now) {
  if (peer_id_ != 0 && welcome.peer_id != peer_id_) return false;
  peer_id_ = welcome.peer_id;
  if (welcome.lease_timeout > absl::ZeroDuration()) lease_timeout_ = welcome.lease_timeout;
  if (welcome.forget_after > absl::ZeroDuration()) forget_after_ = welcome.forget_after;
  welcomed_ = true;
  // The controller's lease for us started when it read the Hello, which is no earlier than when
  // we sent it. A Hello that waited (a paused controller) may leave no lease at all: then we hold
  // what we have until the first report is renewed.
  lease_start_ = hello_sent_at_;
  has_lease_ = LeaseValid(now);
  pending_ack_ = acked_ = 0;  // grant numbers are per stream from here on
  return true;
}

bool LeaseState::OnRenewed(uint64_t report_seq, absl::Time now) {
  auto it = report_sent_at_.find(report_seq);
  if (it == report_sent_at_.end()) return false;
  lease_start_ = std::max(lease_start_, it->second);
  report_sent_at_.erase(report_sent_at_.begin(), std::next(it));
  if (!has_lease_ && LeaseValid(now)) {
    has_lease_ = true;
    // The controller renewed us on the stream that carried these raises, so it has counted them
    // for us ever since it sent them (it ends the stream when it expires a lease): take them now.
    // Left untaken, they stay committed there and unused here until the share changes again.
    for (const auto& [db, share] : deferred_raises_) {
      SetShare(db, share.cap, std::min(share.floor, share.cap));
    }
    if (!deferred_raises_.empty()) pending_ack_ = std::max(pending_ack_, deferred_grant_seq_);
    deferred_raises_.clear();
    return true;
  }
  return false;
}

bool LeaseState::LeaseValid(absl::Time now) const {
  return welcomed_ && now < lease_start_ + lease_timeout_ * 3 / 4;
}

bool LeaseState::OnGrant(uint64_t grant_seq, uint64_t report_seq,
                         const std::vector<ShareUpdate>& shares, absl::Time now) {
  const bool regained = OnRenewed(report_seq, now);
  // A raise counts at the controller from the moment it sent it, and it sent it while this
  // worker's lease held there; once the lease is gone here, only lowers are taken.
  const bool valid = has_lease_ && LeaseValid(now);
  for (const auto& share : shares) {
    const int cap_now = CapFor(share.database);
    if (!valid && share.cap > cap_now) {
      deferred_raises_[share.database] = share;
      deferred_grant_seq_ = grant_seq;
      continue;
    }
    deferred_raises_.erase(share.database);
    SetShare(share.database, share.cap, std::min(share.floor, share.cap));
  }
  if (valid) pending_ack_ = std::max(pending_ack_, grant_seq);
  return regained;
}

int LeaseState::CapFor(const std::string& database) const {
  return std::max(RawCapFor(database), 0);
}

int LeaseState::RawCapFor(const std::string& database) const {
  auto it = shares_.find(database);
  return it == shares_.end() ? -1 : it->second.cap;
}

int LeaseState::FloorFor(const std::string& database) const {
  auto it = shares_.find(database);
  return it == shares_.end() ? 0 : it->second.floor;
}

void LeaseState::SetShare(const std::string& database, int cap, int floor) {
  shares_[database] = Share{cap, std::max(floor, 0)};
  if (target_ != nullptr) target_->SetCap(database, std::max(cap, 0), std::max(floor, 0));
}

LeaseState::TickOutcome LeaseState::Tick(absl::Time now, bool connected) {
  TickOutcome outcome;
  if (target_ == nullptr) return outcome;
  if (has_lease_ && !LeaseValid(now)) {
    has_lease_ = false;
    for (auto& [db, share] : shares_) {
      SetShare(db, std::min(std::max(share.cap, 0), share.floor), share.floor);
    }
    outcome.lease_lost = true;
  }
  const bool lost = !has_lease_ && lease_start_ != absl::InfinitePast();
  if (lost && now >= lease_start_ + forget_after_ - lease_timeout_) {
    for (auto& [db, share] : shares_) {
      if (share.cap > 0 || share.floor > 0) {
        outcome.forgotten.push_back(db);
        SetShare(db, 0, 0);
      }
    }
  }
  bool under = true;
  for (const auto& usage : target_->Usages()) {
    int& peak = peak_demand_[usage.database];
    peak = std::max(peak, usage.demand);
    const int cap = CapFor(usage.database);
    int open = usage.open;
    if (open > cap) {
      const int closed = target_->Enforce(usage.database);
      if (closed > 0) last_close_ = now;
      open -= closed;
    }
    int& previous = last_open_[usage.database];
    if (open < previous) last_close_ = now;  // busy servers closed on release
    previous = open;
    if (open > cap) under = false;
  }
  if (welcomed_ && has_lease_ && connected && pending_ack_ > acked_ && under &&
      now - last_close_ >= kSettle) {
    outcome.ack = pending_ack_;
  }
  return outcome;
}

std::optional<LeaseState::Report> LeaseState::NextReport(absl::Time now) {
  if (!welcomed_ || target_ == nullptr) return std::nullopt;
  // Sends older than a lease can no longer extend it.
  while (!report_sent_at_.empty() && report_sent_at_.begin()->second < now - lease_timeout_) {
    report_sent_at_.erase(report_sent_at_.begin());
  }
  Report report;
  report.seq = ++report_seq_;
  report.databases = Databases(true);
  report_sent_at_[report.seq] = now;
  peak_demand_.clear();
  return report;
}

std::vector<DatabaseReport> LeaseState::Databases(bool with_demand) const {
  std::vector<DatabaseReport> out;
  if (target_ == nullptr) return out;
  for (const auto& usage : target_->Usages()) {
    DatabaseReport db;
    db.database = usage.database;
    db.budget = usage.budget;
    db.cap = RawCapFor(usage.database);
    db.floor = FloorFor(usage.database);
    db.open = usage.open;
    db.backend_pids = usage.backend_pids;
    if (with_demand) {
      auto peak = peak_demand_.find(usage.database);
      db.demand = std::max(usage.demand, peak == peak_demand_.end() ? 0 : peak->second);
    }
    out.push_back(std::move(db));
  }
  return out;
}

}  // namespace pgfleet::peering::controller
