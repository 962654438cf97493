// Which of a database's hosts a new server connects to (libpq's host list, target_session_attrs
// and load_balance_hosts), and what pgfleet knows of each host: its role as the last login or a
// later ParameterStatus told it, and whether it is down. Socket-free: a pool asks Pick() before it
// connects and reports every outcome; unit tests drive it with made-up times. One per database in
// a worker (PoolRegistry::HostsFor), shared by that database's pools, so what one pool learns (a
// promotion, a host gone) steers the others at once.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "pooler/base/random.h"
#include "pooler/config/config.h"

namespace pgfleet::pool {

enum class HostRole : uint8_t { kUnknown, kPrimary, kStandby };
std::string_view HostRoleName(HostRole role);

// What a login's ParameterStatus messages say of the host, as libpq reads them for
// target_session_attrs (PostgreSQL 14+ reports both).
struct HostFacts {
  bool in_hot_standby = false;
  bool default_transaction_read_only = false;
  // Nullopt when the server reported no in_hot_standby (before PostgreSQL 14).
  static std::optional<HostFacts> FromParams(
      const std::vector<std::pair<std::string, std::string>>& params);
};

struct HostStatus {
  config::HostAddress address;
  HostRole role = HostRole::kUnknown;
  bool read_only = false;                        // default_transaction_read_only at its last login
  absl::Time checked_at = absl::InfinitePast();  // its last login or role report
  absl::Time down_until = absl::InfinitePast();  // after failed connects: not tried before
  int failures = 0;                              // connects or logins failed in a row
  std::string last_error;
};

class HostSelector {
 public:
  // A host whose known role does not fit is tried again after this: a standby promoted meanwhile
  // is found within it (the failover goal is a few seconds).
  static constexpr absl::Duration kRoleRecheck = absl::Seconds(1);

  HostSelector(const config::DatabaseConfig& db, base::RandomSource& random);

  // A reloaded database entry: hosts that stay keep what is known of them.
  void Reconfigure(const config::DatabaseConfig& db);

  // The host the next server should connect to; nullopt when none may be tried now (each is down
  // or known not to fit, until its back-off or recheck time).
  std::optional<size_t> Pick(absl::Time now);

  // Whether Pick(now) would find a host.
  bool AnyToTry(absl::Time now) const;

  // A login finished on `host`: records its role, and says whether the session fits
  // target_session_attrs (if not, the server closes and Pick goes on to another host).
  bool OnLogin(size_t host, const std::optional<HostFacts>& facts, absl::Time now);
  // Connecting failed or timed out, or the login failed for the host's sake (shutting down, too
  // many connections): the host is not tried for a back-off that doubles up to `cap`.
  void OnConnectFailed(size_t host, absl::Time now, absl::Duration cap, std::string_view error);
  // A logged-in server of `host` reported in_hot_standby (a promotion). True when the host's
  // servers no longer fit target_session_attrs and must leave the pool.
  bool OnHotStandbyReport(size_t host, bool in_hot_standby, absl::Time now);
  // A server of `host` was lost, or failed a write as read-only (25006, which a client's own
  // SET TRANSACTION READ ONLY also causes): the role is checked again at the next login.
  void Forget(size_t host);

  // Whether `host`'s known role fits target_session_attrs (an unknown role does not).
  bool Fits(size_t host) const;
  // Up, and known to fit (any host fits target_session_attrs any and prefer-standby): where no
  // host serves, clients wait until one does (the alert's condition).
  bool Serves(size_t host, absl::Time now) const;
  config::TargetSessionAttrs target_session_attrs() const { return attrs_; }

  size_t size() const { return hosts_.size(); }
  const HostStatus& status(size_t host) const { return hosts_[host]; }
  std::optional<size_t> IndexOf(const config::HostAddress& address) const;

 private:
  bool FitsRole(HostRole role, bool read_only) const;
  bool Up(size_t host, absl::Time now) const { return now >= hosts_[host].down_until; }
  // Not known to be wrong: an unknown role, one that fits, or one due for a recheck.
  bool WorthTrying(size_t host, absl::Time now) const;
  // prefer-standby: a host that may be a standby and can be tried now.
  bool MayBeStandby(size_t host, absl::Time now) const;
  std::vector<size_t> Order();

  std::vector<HostStatus> hosts_;
  config::TargetSessionAttrs attrs_;
  config::LoadBalanceHosts balance_;
  base::RandomSource& random_;
};

}  // namespace pgfleet::pool
