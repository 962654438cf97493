// Semantic checks on a typed Config, and the one place config problems become a Status.
#include "pooler/config/validate.h"

#include <grp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pooler/config/config.h"

namespace pgfleet::config::internal {
namespace {

void Add(std::vector<Issue>& issues, std::string key, std::string message) {
  issues.push_back(Issue{std::move(key), std::move(message), 0, 0});
}

void CheckAtLeast(std::vector<Issue>& issues, const std::string& key, int64_t value, int64_t min) {
  if (value < min) {
    Add(issues, key,
        min == 0 ? absl::StrCat("must not be negative, got ", value)
                 : absl::StrCat("must be at least ", min, ", got ", value));
  }
}

void CheckDuration(std::vector<Issue>& issues, const std::string& key, absl::Duration value) {
  if (value < absl::ZeroDuration()) {
    Add(issues, key, absl::StrCat("must not be negative, got ", absl::FormatDuration(value)));
  } else if (value == absl::InfiniteDuration()) {
    Add(issues, key, "must be finite (use 0 to disable a timeout)");
  }
}

void CheckNames(std::vector<Issue>& issues, const std::string& key,
                const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (name.empty()) Add(issues, key, "entries must not be empty");
  }
}

// "host:port" with a port PostgreSQL-style tools can bind; "[::1]:9127" works because the port
// is after the last colon.
bool IsHostPort(const std::string& value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = 0;
  return absl::SimpleAtoi(value.substr(colon + 1), &port) && port >= 0 && port <= 65535;
}

void CheckListen(const ListenConfig& listen, std::vector<Issue>& issues) {
  if (listen.Addresses().empty()) {
    Add(issues, "listen.address", "must not be empty (use \"*\" to listen on all addresses)");
  }
  if (listen.port < 0 || listen.port > 65535) {
    Add(issues, "listen.port",
        absl::StrCat("must be between 0 and 65535 (0 picks a free port), got ", listen.port));
  }
  CheckAtLeast(issues, "listen.backlog", listen.backlog, 1);
  if (!listen.unix_socket_group.empty() && getgrnam(listen.unix_socket_group.c_str()) == nullptr) {
    Add(issues, "listen.unix_socket_group",
        absl::StrCat("no such group: ", listen.unix_socket_group));
  }
}

void CheckWorkers(const std::string& workers, std::vector<Issue>& issues) {
  int count = 0;
  if (workers != "auto" && !(absl::SimpleAtoi(workers, &count) && count >= 1)) {
    Add(issues, "workers",
        absl::StrCat("expected \"auto\" or a positive integer, got \"", workers, "\""));
  }
}

void CheckPool(const PoolConfig& pool, std::vector<Issue>& issues) {
  CheckAtLeast(issues, "pool.default_pool_size", pool.default_pool_size, 1);
  CheckAtLeast(issues, "pool.min_pool_size", pool.min_pool_size, 0);
  if (pool.min_pool_size > pool.default_pool_size && pool.default_pool_size >= 1) {
    Add(issues, "pool.min_pool_size",
        absl::StrCat("must not exceed pool.default_pool_size (", pool.default_pool_size, "), got ",
                     pool.min_pool_size));
  }
  CheckAtLeast(issues, "pool.reserve_pool_size", pool.reserve_pool_size, 0);
  CheckAtLeast(issues, "pool.max_client_conn", pool.max_client_conn, 1);
  CheckAtLeast(issues, "pool.max_db_connections", pool.max_db_connections, 0);
  CheckAtLeast(issues, "pool.max_user_connections", pool.max_user_connections, 0);
  CheckAtLeast(issues, "pool.max_prepared_statements", pool.max_prepared_statements, 0);
  CheckAtLeast(issues, "pool.max_packet_size", pool.max_packet_size, 1);
  CheckAtLeast(issues, "pool.pkt_buf", pool.pkt_buf, 1);
  CheckAtLeast(issues, "pool.max_concurrent_logins", pool.max_concurrent_logins, 0);
  CheckAtLeast(issues, "pool.cancel_rate_limit", pool.cancel_rate_limit, 0);
  CheckAtLeast(issues, "pool.server_tcp_keepalive_count", pool.server_tcp_keepalive_count, 0);
  CheckAtLeast(issues, "pool.tcp_keepcnt", pool.tcp_keepcnt, 0);
  // TCP counts keepalive time in whole seconds, and so does PostgreSQL.
  for (const auto& [key, value] :
       {std::pair{"pool.server_tcp_keepalive_idle", pool.server_tcp_keepalive_idle},
        std::pair{"pool.server_tcp_keepalive_interval", pool.server_tcp_keepalive_interval},
        std::pair{"pool.tcp_keepidle", pool.tcp_keepidle},
        std::pair{"pool.tcp_keepintvl", pool.tcp_keepintvl}}) {
    if (value > absl::ZeroDuration() && value % absl::Seconds(1) != absl::ZeroDuration()) {
      Add(issues, key,
          absl::StrCat("must be whole seconds (or 0 for the system's value), got ",
                       absl::FormatDuration(value)));
    }
  }
  const std::pair<const char*, absl::Duration> durations[] = {
      {"pool.reserve_pool_timeout", pool.reserve_pool_timeout},
      {"pool.server_check_delay", pool.server_check_delay},
      {"pool.server_lifetime", pool.server_lifetime},
      {"pool.server_idle_timeout", pool.server_idle_timeout},
      {"pool.server_connect_timeout", pool.server_connect_timeout},
      {"pool.server_login_retry", pool.server_login_retry},
      {"pool.client_idle_timeout", pool.client_idle_timeout},
      {"pool.client_login_timeout", pool.client_login_timeout},
      {"pool.query_timeout", pool.query_timeout},
      {"pool.query_wait_timeout", pool.query_wait_timeout},
      {"pool.idle_transaction_timeout", pool.idle_transaction_timeout},
      {"pool.transaction_timeout", pool.transaction_timeout},
      {"pool.cancel_wait_timeout", pool.cancel_wait_timeout},
      {"pool.server_connection_check_interval", pool.server_connection_check_interval},
      {"pool.server_tcp_keepalive_idle", pool.server_tcp_keepalive_idle},
      {"pool.server_tcp_keepalive_interval", pool.server_tcp_keepalive_interval},
      {"pool.server_tcp_user_timeout", pool.server_tcp_user_timeout},
      {"pool.tcp_keepidle", pool.tcp_keepidle},
      {"pool.tcp_keepintvl", pool.tcp_keepintvl},
      {"pool.tcp_user_timeout", pool.tcp_user_timeout},
      {"pool.shutdown_timeout", pool.shutdown_timeout},
  };
  for (const auto& [key, value] : durations) CheckDuration(issues, key, value);
  CheckNames(issues, "pool.track_extra_parameters", pool.track_extra_parameters);
  CheckNames(issues, "pool.ignore_startup_parameters", pool.ignore_startup_parameters);
}

void CheckDatabase(const Config& config, const std::string& key, const DatabaseConfig& db,
                   std::vector<Issue>& issues) {
  const std::string prefix = absl::StrCat("databases.", key, ".");
  if (db.hosts.empty() || absl::c_any_of(db.hosts, [](const auto& h) { return h.empty(); })) {
    Add(issues, prefix + "host",
        db.hosts.size() > 1 ? "must not name an empty host" : "must not be empty");
  }
  for (int port : db.ports) {
    if (port < 1 || port > 65535) {
      Add(issues, prefix + "port", absl::StrCat("must be between 1 and 65535, got ", port));
      break;
    }
  }
  if (db.ports.empty() || (db.ports.size() > 1 && db.ports.size() != db.hosts.size())) {
    Add(issues, prefix + "port",
        absl::StrCat("must be one port for every host or one per host (", db.hosts.size(),
                     " hosts, ", db.ports.size(), " ports)"));
  }
  const PoolOverrides& o = db.overrides;
  if (o.pool_size) CheckAtLeast(issues, prefix + "pool_size", *o.pool_size, 0);
  if (o.min_pool_size) CheckAtLeast(issues, prefix + "min_pool_size", *o.min_pool_size, 0);
  if (o.reserve_pool_size) {
    CheckAtLeast(issues, prefix + "reserve_pool_size", *o.reserve_pool_size, 0);
  }
  CheckAtLeast(issues, prefix + "max_db_connections", db.max_db_connections, 0);
  // Only a database's own override can break this; the pool section is checked on its own.
  const int min_size = config.EffectiveMinPoolSize(db);
  const int size = config.EffectivePoolSize(db);
  if ((o.min_pool_size || o.pool_size) && min_size > size && size >= 0 && min_size >= 0) {
    Add(issues, prefix + (o.min_pool_size ? "min_pool_size" : "pool_size"),
        absl::StrCat("min_pool_size (", min_size, ") must not exceed the pool size (", size,
                     o.pool_size ? "" : ", from pool.default_pool_size",
                     o.min_pool_size ? "" : "; min_pool_size is from pool.min_pool_size", ")"));
  }
}

void CheckAuth(const Config& config, std::vector<Issue>& issues) {
  const AuthConfig& auth = config.auth;
  const TlsConfig& tls = config.tls;
  // A database's own auth_query finds its users' passwords too (PgBouncer's per-database
  // auth_user); each needs a role to run it.
  bool database_queries = false;
  for (const auto& [name, db] : config.databases) {
    if (db.auth_query.empty() && db.auth_user.empty() && db.auth_dbname.empty()) continue;
    const AuthConfig effective = config.EffectiveAuth(db);
    database_queries = database_queries || !effective.query.empty();
    if (!effective.query.empty() && effective.user.empty()) {
      Add(issues, absl::StrCat("databases.", name, ".auth_query"),
          "needs auth_user (the database's or auth.user), the role that runs the query");
    }
  }
  if (auth.type == AuthType::kCert && tls.client_tls_sslmode != SslMode::kVerifyCa &&
      tls.client_tls_sslmode != SslMode::kVerifyFull) {
    Add(issues, "auth.type",
        "\"cert\" needs tls.client_tls_sslmode verify-ca or verify-full: the client's certificate, "
        "checked against client_tls_ca_file, names the user");
  }
  if (auth.type == AuthType::kAny) {
    // PgBouncer's rule: the client's user name is not checked, so no pool may log in as it.
    for (const auto& [name, db] : config.databases) {
      if (db.user.empty()) {
        Add(issues, absl::StrCat("databases.", name, ".user"),
            "auth.type \"any\" needs every database to log in as its own user (the client's "
            "user name is not checked)");
      }
    }
  }
  const bool needs_password = auth.type == AuthType::kMd5 || auth.type == AuthType::kScramSha256 ||
                              auth.type == AuthType::kPlain;
  if (needs_password && auth.file.empty() && auth.query.empty() && !database_queries) {
    Add(issues, "auth.type",
        absl::StrCat("\"", std::string(AuthTypeName(auth.type)),
                     "\" needs auth.file (a userlist.txt) or auth.query to find passwords"));
  }
  if (!auth.query.empty() && auth.user.empty()) {
    Add(issues, "auth.query", "needs auth.user, the role that runs the query");
  }
}

void CheckTls(const TlsConfig& tls, std::vector<Issue>& issues) {
  if (tls.client_tls_sslmode != SslMode::kDisable) {
    const std::string mode(SslModeName(tls.client_tls_sslmode));
    if (tls.client_tls_cert_file.empty() || tls.client_tls_key_file.empty()) {
      Add(issues,
          tls.client_tls_cert_file.empty() ? "tls.client_tls_cert_file" : "tls.client_tls_key_file",
          absl::StrCat("client_tls_sslmode ", mode,
                       " needs client_tls_cert_file and client_tls_key_file (pgfleet's "
                       "certificate and key toward clients)"));
    }
    if ((tls.client_tls_sslmode == SslMode::kVerifyCa ||
         tls.client_tls_sslmode == SslMode::kVerifyFull) &&
        tls.client_tls_ca_file.empty()) {
      Add(issues, "tls.client_tls_ca_file",
          absl::StrCat("client_tls_sslmode ", mode,
                       " needs client_tls_ca_file, the CA that signs client certificates"));
    }
  }
  if ((tls.server_tls_sslmode == SslMode::kVerifyCa ||
       tls.server_tls_sslmode == SslMode::kVerifyFull) &&
      tls.server_tls_ca_file.empty()) {
    Add(issues, "tls.server_tls_ca_file",
        absl::StrCat("server_tls_sslmode ", std::string(SslModeName(tls.server_tls_sslmode)),
                     " needs server_tls_ca_file, the CA that signs PostgreSQL's certificate"));
  }
  if (tls.server_tls_cert_file.empty() != tls.server_tls_key_file.empty()) {
    Add(issues,
        tls.server_tls_cert_file.empty() ? "tls.server_tls_cert_file" : "tls.server_tls_key_file",
        "server_tls_cert_file and server_tls_key_file go together");
  }
}

void CheckHostPort(std::vector<Issue>& issues, const std::string& key, const std::string& value) {
  if (!value.empty() && !IsHostPort(value)) {
    Add(issues, key, absl::StrCat("expected host:port, got \"", value, "\""));
  }
}

void CheckPeering(const PeeringConfig& p, std::vector<Issue>& issues) {
  CheckHostPort(issues, "peering.listen", p.listen);
  CheckHostPort(issues, "peering.advertise_address", p.advertise_address);
  for (size_t i = 0; i < p.static_peers.size(); ++i) {
    CheckHostPort(issues, absl::StrCat("peering.static_peers[", i, "]"), p.static_peers[i]);
  }
  CheckDuration(issues, "peering.discovery_interval", p.discovery_interval);
  if (p.tls.enabled() && (p.tls.key_file.empty() || p.tls.ca_file.empty())) {
    Add(issues, "peering.tls", "cert_file needs key_file and ca_file (peers verify each other)");
  }
  if (!p.tls.enabled() && (!p.tls.key_file.empty() || !p.tls.ca_file.empty())) {
    Add(issues, "peering.tls", "key_file and ca_file need cert_file");
  }
  if (!p.listen.empty() && p.token_file.empty() && !p.tls.enabled()) {
    Add(issues, "peering.listen",
        "needs peering.token_file or peering.tls: an unauthenticated peering port would let "
        "anyone who reaches it cancel queries");
  }
  if (!p.discovery_dns.empty() && p.listen.empty()) {
    Add(issues, "peering.discovery_dns", "needs peering.listen (its port is the peers' port)");
  }
}

void CheckController(const ControllerConfig& c, std::vector<Issue>& issues) {
  CheckHostPort(issues, "controller.address", c.address);
  CheckHostPort(issues, "controller.listen", c.listen);
  CheckDuration(issues, "controller.register_timeout", c.register_timeout);
  if (c.renew_interval <= absl::ZeroDuration()) {
    Add(issues, "controller.renew_interval", "must be positive");
  }
  if (c.lease_timeout < 3 * c.renew_interval) {
    Add(issues, "controller.lease_timeout", "must be at least 3 x controller.renew_interval");
  }
  if (c.forget_after < 2 * c.lease_timeout) {
    Add(issues, "controller.forget_after", "must be at least 2 x controller.lease_timeout");
  }
  CheckAtLeast(issues, "controller.min_share", c.min_share, 0);
  CheckDuration(issues, "controller.lost_room_hold", c.lost_room_hold);
  if (c.terminate_lost_backends && c.monitor.empty()) {
    Add(issues, "controller.terminate_lost_backends", "needs controller.monitor");
  }
}

}  // namespace

void CheckFleetSections(const Config& config, std::vector<Issue>& issues) {
  CheckPeering(config.peering, issues);
  CheckController(config.controller, issues);
}

void CheckConfig(const Config& config, std::vector<Issue>& issues) {
  CheckListen(config.listen, issues);
  CheckWorkers(config.workers, issues);
  if (config.databases.empty()) {
    Add(issues, "databases",
        "at least one database must be configured (a \"*\" entry accepts any name)");
  }
  for (const auto& [key, db] : config.databases) {
    if (key.empty()) {
      Add(issues, "databases", "a database name must not be empty");
      continue;
    }
    CheckDatabase(config, key, db, issues);
  }
  for (const auto& [key, user] : config.users) {
    if (key.empty()) {
      Add(issues, "users", "a user name must not be empty");
      continue;
    }
    CheckAtLeast(issues, absl::StrCat("users.", key, ".max_user_connections"),
                 user.max_user_connections, 0);
  }
  CheckPool(config.pool, issues);
  CheckAuth(config, issues);
  CheckTls(config.tls, issues);
  CheckNames(issues, "admin.users", config.admin.users);
  CheckNames(issues, "admin.stats_users", config.admin.stats_users);
  // Empty turns the endpoint (and the workers' snapshots) off, e.g. to measure their cost.
  if (!config.metrics.listen.empty() && !IsHostPort(config.metrics.listen)) {
    Add(issues, "metrics.listen",
        absl::StrCat("expected host:port such as 127.0.0.1:9127, got \"", config.metrics.listen,
                     "\" (\"\" turns metrics off)"));
  }
  const std::string& level = config.log.level;
  if (level != "debug" && level != "info" && level != "warning" && level != "error") {
    Add(issues, "log.level",
        absl::StrCat("expected one of debug, info, warning, error, got \"", level, "\""));
  }
  CheckFleetSections(config, issues);
}

absl::Status IssuesToStatus(absl::string_view source, const std::vector<Issue>& issues) {
  if (issues.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  lines.reserve(issues.size());
  for (const Issue& issue : issues) {
    std::string line;
    if (!source.empty()) absl::StrAppend(&line, source, ": ");
    if (!issue.key.empty()) absl::StrAppend(&line, issue.key, ": ");
    absl::StrAppend(&line, issue.message);
    if (issue.line > 0 && issue.column > 0) {
      absl::StrAppend(&line, " (line ", issue.line, ", column ", issue.column, ")");
    } else if (issue.line > 0) {
      absl::StrAppend(&line, " (line ", issue.line, ")");
    }
    lines.push_back(std::move(line));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

absl::string_view ClosestKey(absl::string_view key, const std::vector<absl::string_view>& known) {
  const std::string lower = absl::AsciiStrToLower(key);
  absl::string_view best;
  size_t best_distance = 3;  // more than 2 edits is a different word, not a typo
  for (absl::string_view candidate : known) {
    // Edit distance counting a swap of neighbours as one edit ("prot" -> "port"), the commonest
    // typo; keys are short, so the full table is cheap.
    const size_t n = lower.size();
    const size_t m = candidate.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (size_t i = 1; i <= n; ++i) {
      for (size_t j = 1; j <= m; ++j) {
        const size_t cost = lower[i - 1] == candidate[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && lower[i - 1] == candidate[j - 2] &&
            lower[i - 2] == candidate[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    const size_t distance = d[n][m];
    if (distance < best_distance && distance * 2 < std::max<size_t>(lower.size(), 2)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace pgfleet::config::internal

namespace pgfleet::config {

absl::Status ValidateConfig(const Config& config) {
  std::vector<internal::Issue> issues;
  internal::CheckConfig(config, issues);
  return internal::IssuesToStatus(config.source_path, issues);
}

absl::Status ValidateFleetSections(const Config& config) {
  std::vector<internal::Issue> issues;
  internal::CheckFleetSections(config, issues);
  return internal::IssuesToStatus(config.source_path, issues);
}

}  // namespace pgfleet::config
