// Config's lookups: the "*" fallback and the per-database / per-user overrides of `pool:`.
#include "pooler/config/config.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace pgfleet::config {

std::string_view PoolModeName(PoolMode mode) {
  switch (mode) {
    case PoolMode::kSession:
      return "session";
    case PoolMode::kTransaction:
      return "transaction";
    case PoolMode::kStatement:
      return "statement";
  }
  return "unknown";
}

std::string_view AuthTypeName(AuthType type) {
  switch (type) {
    case AuthType::kTrust:
      return "trust";
    case AuthType::kMd5:
      return "md5";
    case AuthType::kScramSha256:
      return "scram-sha-256";
    case AuthType::kCert:
      return "cert";
    case AuthType::kPeer:
      return "peer";
    case AuthType::kPlain:
      return "plain";
    case AuthType::kAny:
      return "any";
  }
  return "unknown";
}

std::optional<PoolMode> ParsePoolMode(std::string_view name) {
  for (PoolMode mode : {PoolMode::kSession, PoolMode::kTransaction, PoolMode::kStatement}) {
    if (name == PoolModeName(mode)) return mode;
  }
  return std::nullopt;
}

std::string_view SessionStateName(SessionState mode) {
  switch (mode) {
    case SessionState::kTrack:
      return "track";
    case SessionState::kRefuse:
      return "refuse";
    case SessionState::kPass:
      return "pass";
  }
  return "unknown";
}

std::optional<SessionState> ParseSessionState(std::string_view name) {
  for (SessionState mode : {SessionState::kTrack, SessionState::kRefuse, SessionState::kPass}) {
    if (name == SessionStateName(mode)) return mode;
  }
  return std::nullopt;
}

std::optional<AuthType> ParseAuthType(std::string_view name) {
  // Not peer: it is for hba `local` lines only.
  for (AuthType type : {AuthType::kTrust, AuthType::kMd5, AuthType::kScramSha256, AuthType::kCert,
                        AuthType::kPlain, AuthType::kAny}) {
    if (name == AuthTypeName(type)) return type;
  }
  return std::nullopt;
}

std::string_view SslModeName(SslMode mode) {
  switch (mode) {
    case SslMode::kDisable:
      return "disable";
    case SslMode::kAllow:
      return "allow";
    case SslMode::kPrefer:
      return "prefer";
    case SslMode::kRequire:
      return "require";
    case SslMode::kVerifyCa:
      return "verify-ca";
    case SslMode::kVerifyFull:
      return "verify-full";
  }
  return "unknown";
}

std::optional<SslMode> ParseSslMode(std::string_view name) {
  for (SslMode mode : {SslMode::kDisable, SslMode::kAllow, SslMode::kPrefer, SslMode::kRequire,
                       SslMode::kVerifyCa, SslMode::kVerifyFull}) {
    if (name == SslModeName(mode)) return mode;
  }
  return std::nullopt;
}

std::string_view TargetSessionAttrsName(TargetSessionAttrs attrs) {
  switch (attrs) {
    case TargetSessionAttrs::kAny:
      return "any";
    case TargetSessionAttrs::kReadWrite:
      return "read-write";
    case TargetSessionAttrs::kReadOnly:
      return "read-only";
    case TargetSessionAttrs::kPrimary:
      return "primary";
    case TargetSessionAttrs::kStandby:
      return "standby";
    case TargetSessionAttrs::kPreferStandby:
      return "prefer-standby";
  }
  return "unknown";
}

std::optional<TargetSessionAttrs> ParseTargetSessionAttrs(std::string_view name) {
  for (TargetSessionAttrs attrs :
       {TargetSessionAttrs::kAny, TargetSessionAttrs::kReadWrite, TargetSessionAttrs::kReadOnly,
        TargetSessionAttrs::kPrimary, TargetSessionAttrs::kStandby,
        TargetSessionAttrs::kPreferStandby}) {
    if (name == TargetSessionAttrsName(attrs)) return attrs;
  }
  return std::nullopt;
}

std::string_view LoadBalanceHostsName(LoadBalanceHosts mode) {
  return mode == LoadBalanceHosts::kRandom ? "random" : "disable";
}

std::optional<LoadBalanceHosts> ParseLoadBalanceHosts(std::string_view name) {
  if (name == "disable") return LoadBalanceHosts::kDisable;
  if (name == "random") return LoadBalanceHosts::kRandom;
  return std::nullopt;
}

std::vector<HostAddress> DatabaseConfig::Addresses() const {
  std::vector<HostAddress> out;
  out.reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    const int port = ports.empty() ? 5432 : ports[std::min(i, ports.size() - 1)];
    out.push_back(HostAddress{hosts[i], port});
  }
  return out;
}

std::optional<DatabaseConfig> Config::FindDatabase(const std::string& client_dbname) const {
  // An empty name is never a database (the caller substitutes the user name first, as
  // PostgreSQL does), and must not quietly match "*".
  if (client_dbname.empty()) return std::nullopt;
  if (auto it = databases.find(client_dbname); it != databases.end()) {
    DatabaseConfig db = it->second;
    if (db.dbname.empty()) db.dbname = db.name;
    return db;
  }
  auto it = databases.find("*");
  if (it == databases.end()) return std::nullopt;
  DatabaseConfig db = it->second;
  db.name = client_dbname;
  // An explicit dbname on "*" wins, as in PgBouncer's auto-database connstr.
  if (db.dbname.empty()) db.dbname = client_dbname;
  db.from_fallback = true;
  return db;
}

PoolMode Config::EffectivePoolMode(const DatabaseConfig& db, const std::string& user) const {
  if (auto it = users.find(user); it != users.end() && it->second.pool_mode.has_value()) {
    return *it->second.pool_mode;
  }
  return db.overrides.pool_mode.value_or(pool.pool_mode);
}

SessionState Config::EffectiveSessionState(const DatabaseConfig& db,
                                           const std::string& user) const {
  if (auto it = users.find(user); it != users.end() && it->second.session_state.has_value()) {
    return *it->second.session_state;
  }
  return db.overrides.session_state.value_or(pool.session_state);
}

int Config::EffectiveMaxPinnedServers(const DatabaseConfig& db) const {
  if (pool.max_pinned_servers > 0) return pool.max_pinned_servers;
  return std::max(1, EffectivePoolSize(db) / 2);
}

std::vector<std::string> ListenConfig::Addresses() const {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(address, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

int Config::EffectivePoolSize(const DatabaseConfig& db) const {
  return db.overrides.pool_size.value_or(pool.default_pool_size);
}

int Config::EffectivePoolSize(const DatabaseConfig& db, const std::string& user) const {
  if (auto it = users.find(user); it != users.end() && it->second.pool_size.has_value()) {
    return *it->second.pool_size;
  }
  return EffectivePoolSize(db);
}

int Config::EffectiveMinPoolSize(const DatabaseConfig& db) const {
  return db.overrides.min_pool_size.value_or(pool.min_pool_size);
}

int Config::EffectiveReservePoolSize(const DatabaseConfig& db) const {
  return db.overrides.reserve_pool_size.value_or(pool.reserve_pool_size);
}

int Config::EffectiveReservePoolSize(const DatabaseConfig& db, const std::string& user) const {
  if (auto it = users.find(user); it != users.end() && it->second.reserve_pool_size.has_value()) {
    return *it->second.reserve_pool_size;
  }
  return EffectiveReservePoolSize(db);
}

AuthConfig Config::EffectiveAuth(const DatabaseConfig& db) const {
  AuthConfig effective = auth;
  if (!db.auth_user.empty()) effective.user = db.auth_user;
  if (!db.auth_query.empty()) effective.query = db.auth_query;
  if (!db.auth_dbname.empty()) effective.dbname = db.auth_dbname;
  return effective;
}

int Config::EffectiveMaxUserConnections(const std::string& user) const {
  if (auto it = users.find(user); it != users.end()) return it->second.max_user_connections;
  return pool.max_user_connections;
}

int Config::EffectiveMaxUserClientConnections(const std::string& user) const {
  if (auto it = users.find(user); it != users.end()) return it->second.max_user_client_connections;
  return pool.max_user_client_connections;
}

ClientTimeouts Config::EffectiveClientTimeouts(const std::string& user) const {
  ClientTimeouts timeouts{
      .query_timeout = pool.query_timeout,
      .query_wait_timeout = pool.query_wait_timeout,
      .idle_transaction_timeout = pool.idle_transaction_timeout,
      .transaction_timeout = pool.transaction_timeout,
      .client_idle_timeout = pool.client_idle_timeout,
  };
  auto it = users.find(user);
  if (it == users.end()) return timeouts;
  const UserConfig& u = it->second;
  timeouts.query_timeout = u.query_timeout.value_or(timeouts.query_timeout);
  timeouts.query_wait_timeout = u.query_wait_timeout.value_or(timeouts.query_wait_timeout);
  timeouts.idle_transaction_timeout =
      u.idle_transaction_timeout.value_or(timeouts.idle_transaction_timeout);
  timeouts.transaction_timeout = u.transaction_timeout.value_or(timeouts.transaction_timeout);
  timeouts.client_idle_timeout = u.client_idle_timeout.value_or(timeouts.client_idle_timeout);
  return timeouts;
}

}  // namespace pgfleet::config
