// HostSelector (host_selector.h): libpq's multi-host rules, kept per host for a pool's lifetime.
#include "pooler/pool/host_selector.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "absl/strings/match.h"

namespace pgfleet::pool {
namespace {

using config::TargetSessionAttrs;

// The first failure waits this long; each one after doubles it, up to the caller's cap.
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);

bool IsOn(const std::string& value) { return absl::EqualsIgnoreCase(value, "on"); }

}  // namespace

std::string_view HostRoleName(HostRole role) {
  switch (role) {
    case HostRole::kUnknown:
      return "unknown";
    case HostRole::kPrimary:
      return "primary";
    case HostRole::kStandby:
      return "standby";
  }
  return "unknown";
}

std::optional<HostFacts> HostFacts::FromParams(
    const std::vector<std::pair<std::string, std::string>>& params) {
  HostFacts facts;
  bool reported = false;
  for (const auto& [name, value] : params) {
    if (name == "in_hot_standby") {
      facts.in_hot_standby = IsOn(value);
      reported = true;
    } else if (name == "default_transaction_read_only") {
      facts.default_transaction_read_only = IsOn(value);
    }
  }
  if (!reported) return std::nullopt;
  return facts;
}

HostSelector::HostSelector(const config::DatabaseConfig& db, base::RandomSource& random)
    : random_(random) {
  Reconfigure(db);
}

void HostSelector::Reconfigure(const config::DatabaseConfig& db) {
  std::vector<HostStatus> hosts;
  for (const config::HostAddress& address : db.Addresses()) {
    auto kept = IndexOf(address);
    HostStatus fresh;
    fresh.address = address;
    hosts.push_back(kept.has_value() ? hosts_[*kept] : std::move(fresh));
  }
  hosts_ = std::move(hosts);
  attrs_ = db.target_session_attrs;
  balance_ = db.load_balance_hosts;
}

std::optional<size_t> HostSelector::IndexOf(const config::HostAddress& address) const {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i].address == address) return i;
  }
  return std::nullopt;
}

bool HostSelector::FitsRole(HostRole role, bool read_only) const {
  switch (attrs_) {
    case TargetSessionAttrs::kAny:
    case TargetSessionAttrs::kPreferStandby:  // a standby first, else anything (Pick, OnLogin)
      return true;
    case TargetSessionAttrs::kReadWrite:
      return role == HostRole::kPrimary && !read_only;
    case TargetSessionAttrs::kReadOnly:
      return role == HostRole::kStandby || (role == HostRole::kPrimary && read_only);
    case TargetSessionAttrs::kPrimary:
      return role == HostRole::kPrimary;
    case TargetSessionAttrs::kStandby:
      return role == HostRole::kStandby;
  }
  return false;
}

bool HostSelector::Fits(size_t host) const {
  const HostStatus& h = hosts_[host];
  return h.role != HostRole::kUnknown && FitsRole(h.role, h.read_only);
}

bool HostSelector::WorthTrying(size_t host, absl::Time now) const {
  const HostStatus& h = hosts_[host];
  return h.role == HostRole::kUnknown || FitsRole(h.role, h.read_only) ||
         now >= h.checked_at + kRoleRecheck;
}

bool HostSelector::MayBeStandby(size_t host, absl::Time now) const {
  return Up(host, now) && hosts_[host].role != HostRole::kPrimary;
}

std::vector<size_t> HostSelector::Order() {
  std::vector<size_t> order(hosts_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (balance_ == config::LoadBalanceHosts::kRandom && order.size() > 1) {
    // Fisher-Yates: each new server starts from a random host, as each libpq connection does.
    for (size_t i = order.size() - 1; i > 0; --i) {
      uint32_t r = 0;
      random_.Fill(std::span(reinterpret_cast<uint8_t*>(&r), sizeof(r)));
      std::swap(order[i], order[r % (i + 1)]);
    }
  }
  return order;
}

std::optional<size_t> HostSelector::Pick(absl::Time now) {
  const std::vector<size_t> order = Order();
  if (attrs_ == TargetSessionAttrs::kPreferStandby) {
    // A host that may be a standby first; a known primary only when no such host is up.
    for (size_t host : order) {
      if (MayBeStandby(host, now)) return host;
    }
  }
  for (size_t host : order) {
    if (Up(host, now) && WorthTrying(host, now)) return host;
  }
  return std::nullopt;
}

bool HostSelector::AnyToTry(absl::Time now) const {
  for (size_t host = 0; host < hosts_.size(); ++host) {
    if (Up(host, now) && WorthTrying(host, now)) return true;
  }
  return false;
}

bool HostSelector::OnLogin(size_t host, const std::optional<HostFacts>& facts, absl::Time now) {
  HostStatus& h = hosts_[host];
  // A server that does not report in_hot_standby (before PostgreSQL 14) is taken for a primary,
  // read-only when default_transaction_read_only says so.
  h.role = facts.has_value() && facts->in_hot_standby ? HostRole::kStandby : HostRole::kPrimary;
  h.read_only = facts.has_value() && facts->default_transaction_read_only;
  h.checked_at = now;
  h.failures = 0;
  h.down_until = absl::InfinitePast();
  h.last_error.clear();
  if (attrs_ == TargetSessionAttrs::kPreferStandby && h.role == HostRole::kPrimary) {
    // libpq's prefer-standby: a primary only when no host can be a standby.
    for (size_t other = 0; other < hosts_.size(); ++other) {
      if (other != host && MayBeStandby(other, now)) return false;
    }
    return true;
  }
  return FitsRole(h.role, h.read_only);
}

void HostSelector::OnConnectFailed(size_t host, absl::Time now, absl::Duration cap,
                                   std::string_view error) {
  HostStatus& h = hosts_[host];
  // Several servers fail together when a host goes away: one back-off step for all of them.
  if (now < h.down_until) return;
  ++h.failures;
  h.role = HostRole::kUnknown;  // what comes back may be another server (a rebuilt standby)
  h.down_until = now + std::min(kFirstBackoff * (1 << std::min(h.failures, 8)), cap);
  h.last_error = std::string(error);
}

bool HostSelector::OnHotStandbyReport(size_t host, bool in_hot_standby, absl::Time now) {
  HostStatus& h = hosts_[host];
  const HostRole role = in_hot_standby ? HostRole::kStandby : HostRole::kPrimary;
  h.checked_at = now;
  if (role == h.role) return false;
  h.role = role;
  return !FitsRole(h.role, h.read_only);
}

void HostSelector::Forget(size_t host) { hosts_[host].role = HostRole::kUnknown; }

bool HostSelector::Serves(size_t host, absl::Time now) const {
  if (!Up(host, now)) return false;
  return attrs_ == TargetSessionAttrs::kAny || attrs_ == TargetSessionAttrs::kPreferStandby ||
         Fits(host);
}

}  // namespace pgfleet::pool
