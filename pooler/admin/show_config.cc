// SHOW CONFIG, DATABASES and USERS: the fleet-wide config, with live counts from the workers.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pooler/admin/show.h"

namespace pgfleet::admin {
namespace {

using Type = ResultSet::Type;

std::string Duration(absl::Duration d) {
  return d == absl::ZeroDuration() ? "0" : absl::FormatDuration(d);
}
std::string Bool(bool b) { return b ? "1" : "0"; }
std::string List(const std::vector<std::string>& v) { return absl::StrJoin(v, ","); }

}  // namespace

void ShowConfig(const config::Config& c, ResultSet* out) {
  const config::Config d;  // defaults
  out->AddColumn("key").AddColumn("value").AddColumn("default").AddColumn("changeable");
  auto row = [out](std::string key, std::string value, std::string def, bool changeable) {
    out->AddRow({std::move(key), std::move(value), std::move(def), changeable ? "yes" : "no"});
  };
  row("listen_addr", c.listen.address, d.listen.address, false);
  row("listen_port", std::to_string(c.listen.port), std::to_string(d.listen.port), false);
  row("unix_socket_dir", c.listen.unix_socket_dir, d.listen.unix_socket_dir, false);
  row("unix_socket_mode", absl::StrFormat("%04o", c.listen.unix_socket_mode),
      absl::StrFormat("%04o", d.listen.unix_socket_mode), false);
  row("unix_socket_group", c.listen.unix_socket_group, d.listen.unix_socket_group, false);
  row("listen_backlog", std::to_string(c.listen.backlog), std::to_string(d.listen.backlog), false);
  row("workers", c.workers, d.workers, false);
  const auto& p = c.pool;
  const auto& dp = d.pool;
  row("pool_mode", std::string(config::PoolModeName(p.pool_mode)),
      std::string(config::PoolModeName(dp.pool_mode)), true);
  row("session_state", std::string(config::SessionStateName(p.session_state)),
      std::string(config::SessionStateName(dp.session_state)), true);
  row("max_pinned_servers", std::to_string(p.max_pinned_servers),
      std::to_string(dp.max_pinned_servers), true);
  row("default_pool_size", std::to_string(p.default_pool_size),
      std::to_string(dp.default_pool_size), true);
  row("min_pool_size", std::to_string(p.min_pool_size), std::to_string(dp.min_pool_size), true);
  row("reserve_pool_size", std::to_string(p.reserve_pool_size),
      std::to_string(dp.reserve_pool_size), true);
  row("reserve_pool_timeout", Duration(p.reserve_pool_timeout), Duration(dp.reserve_pool_timeout),
      true);
  row("max_client_conn", std::to_string(p.max_client_conn), std::to_string(dp.max_client_conn),
      true);
  row("max_db_connections", std::to_string(p.max_db_connections),
      std::to_string(dp.max_db_connections), true);
  row("max_user_connections", std::to_string(p.max_user_connections),
      std::to_string(dp.max_user_connections), true);
  row("max_db_client_connections", std::to_string(p.max_db_client_connections),
      std::to_string(dp.max_db_client_connections), true);
  row("max_user_client_connections", std::to_string(p.max_user_client_connections),
      std::to_string(dp.max_user_client_connections), true);
  row("server_round_robin", Bool(p.server_round_robin), Bool(dp.server_round_robin), true);
  row("server_fast_close", Bool(p.server_fast_close), Bool(dp.server_fast_close), true);
  row("tcp_socket_buffer", std::to_string(p.tcp_socket_buffer),
      std::to_string(dp.tcp_socket_buffer), true);
  row("dns_max_ttl", Duration(p.dns_max_ttl), Duration(dp.dns_max_ttl), true);
  row("dns_nxdomain_ttl", Duration(p.dns_nxdomain_ttl), Duration(dp.dns_nxdomain_ttl), true);
  row("application_name_add_host", Bool(p.application_name_add_host),
      Bool(dp.application_name_add_host), true);
  row("log_stats", Bool(p.log_stats), Bool(dp.log_stats), true);
  row("stats_period", Duration(p.stats_period), Duration(dp.stats_period), true);
  row("query_wait_notify", Duration(p.query_wait_notify), Duration(dp.query_wait_notify), true);
  row("transaction_timeout", Duration(p.transaction_timeout), Duration(dp.transaction_timeout),
      true);
  row("max_prepared_statements", std::to_string(p.max_prepared_statements),
      std::to_string(dp.max_prepared_statements), true);
  row("server_reset_query", p.server_reset_query, dp.server_reset_query, true);
  row("server_reset_query_always", Bool(p.server_reset_query_always),
      Bool(dp.server_reset_query_always), true);
  row("server_check_query", p.server_check_query, dp.server_check_query, true);
  row("server_check_delay", Duration(p.server_check_delay), Duration(dp.server_check_delay), true);
  row("server_connection_check_interval", Duration(p.server_connection_check_interval),
      Duration(dp.server_connection_check_interval), true);
  row("server_tcp_keepalive_idle", Duration(p.server_tcp_keepalive_idle),
      Duration(dp.server_tcp_keepalive_idle), true);
  row("server_tcp_keepalive_interval", Duration(p.server_tcp_keepalive_interval),
      Duration(dp.server_tcp_keepalive_interval), true);
  row("server_tcp_keepalive_count", std::to_string(p.server_tcp_keepalive_count),
      std::to_string(dp.server_tcp_keepalive_count), true);
  row("server_tcp_user_timeout", Duration(p.server_tcp_user_timeout),
      Duration(dp.server_tcp_user_timeout), true);
  row("server_lifetime", Duration(p.server_lifetime), Duration(dp.server_lifetime), true);
  row("server_idle_timeout", Duration(p.server_idle_timeout), Duration(dp.server_idle_timeout),
      true);
  row("server_connect_timeout", Duration(p.server_connect_timeout),
      Duration(dp.server_connect_timeout), true);
  row("server_login_retry", Duration(p.server_login_retry), Duration(dp.server_login_retry), true);
  row("client_idle_timeout", Duration(p.client_idle_timeout), Duration(dp.client_idle_timeout),
      true);
  row("client_login_timeout", Duration(p.client_login_timeout), Duration(dp.client_login_timeout),
      true);
  row("query_timeout", Duration(p.query_timeout), Duration(dp.query_timeout), true);
  row("query_wait_timeout", Duration(p.query_wait_timeout), Duration(dp.query_wait_timeout), true);
  row("idle_transaction_timeout", Duration(p.idle_transaction_timeout),
      Duration(dp.idle_transaction_timeout), true);
  row("cancel_wait_timeout", Duration(p.cancel_wait_timeout), Duration(dp.cancel_wait_timeout),
      true);
  row("shutdown_timeout", Duration(p.shutdown_timeout), Duration(dp.shutdown_timeout), true);
  row("track_extra_parameters", List(p.track_extra_parameters), List(dp.track_extra_parameters),
      true);
  row("ignore_startup_parameters", List(p.ignore_startup_parameters),
      List(dp.ignore_startup_parameters), true);
  row("max_packet_size", std::to_string(p.max_packet_size), std::to_string(dp.max_packet_size),
      true);
  row("pkt_buf", std::to_string(p.pkt_buf), std::to_string(dp.pkt_buf), false);
  row("tcp_keepalive", Bool(p.tcp_keepalive), Bool(dp.tcp_keepalive), true);
  row("auth_type", std::string(config::AuthTypeName(c.auth.type)),
      std::string(config::AuthTypeName(d.auth.type)), true);
  row("auth_file", c.auth.file, d.auth.file, true);
  row("auth_query", c.auth.query, d.auth.query, true);
  row("auth_user", c.auth.user, d.auth.user, true);
  row("auth_dbname", c.auth.dbname, d.auth.dbname, true);
  row("admin_users", List(c.admin.users), List(d.admin.users), true);
  row("stats_users", List(c.admin.stats_users), List(d.admin.stats_users), true);
  row("metrics_listen", c.metrics.listen, d.metrics.listen, false);
  row("log_level", c.log.level, d.log.level, true);
}

namespace {

uint64_t ClientCount(const peering::v1::PoolStats& p) {
  return p.client_active() + p.client_waiting() + p.client_idle() + p.client_welcome();
}

}  // namespace

std::map<HostKey, peering::v1::HostStatus> LatestHosts(const ShowInput& in) {
  std::map<HostKey, peering::v1::HostStatus> latest;
  for (const auto& w : in.workers) {
    for (const auto& h : w.hosts()) {
      auto [it, inserted] = latest.try_emplace(HostKey(h.database(), h.host(), h.port()), h);
      if (!inserted && h.checked_at_ms() > it->second.checked_at_ms()) it->second = h;
    }
  }
  return latest;
}

std::string DescribeHost(const peering::v1::HostStatus& host) {
  return absl::StrCat(host.role(), host.up() ? "" : " down",
                      host.last_error().empty() || host.up() ? "" : " (" + host.last_error() + ")");
}

void ShowDatabases(const ShowInput& in, ResultSet* out) {
  out->AddColumn("name").AddColumn("host").AddColumn("port", Type::kInt).AddColumn("database");
  out->AddColumn("force_user").AddColumn("pool_size", Type::kInt);
  out->AddColumn("min_pool_size", Type::kInt).AddColumn("reserve_pool", Type::kInt);
  out->AddColumn("server_lifetime", Type::kInt).AddColumn("pool_mode");
  out->AddColumn("load_balance_hosts");
  out->AddColumn("max_connections", Type::kInt).AddColumn("current_connections", Type::kInt);
  out->AddColumn("max_client_connections", Type::kInt);
  out->AddColumn("current_client_connections", Type::kInt);
  out->AddColumn("paused", Type::kInt).AddColumn("disabled", Type::kInt);
  // pgfleet's own: libpq's multi-host settings, and each host as the workers last saw it
  // ("127.0.0.1:5432 primary, 127.0.0.1:5433 standby down").
  out->AddColumn("target_session_attrs").AddColumn("hosts");
  const config::Config& fleet = *in.fleet;
  const auto hosts = LatestHosts(in);
  // Configured databases, plus those a "*" entry created on demand.
  std::set<std::string> names;
  for (const auto& [name, db] : fleet.databases) {
    if (name != "*") names.insert(name);
  }
  std::map<std::string, uint64_t> current;
  std::map<std::string, uint64_t> clients;
  std::map<std::string, bool> paused;
  std::set<std::string> disabled;
  for (const auto& w : in.workers) {
    for (const auto& b : w.budgets()) current[b.database()] += b.current();
    for (const auto& p : w.pools()) {
      names.insert(p.database());
      paused[p.database()] = paused[p.database()] || p.paused();
      clients[p.database()] += ClientCount(p);
    }
    disabled.insert(w.disabled_databases().begin(), w.disabled_databases().end());
  }
  for (const auto& name : names) {
    auto db = fleet.FindDatabase(name);
    if (!db.has_value()) continue;
    const auto mode = db->overrides.pool_mode.value_or(fleet.pool.pool_mode);
    std::vector<std::string> states;
    for (const config::HostAddress& address : db->Addresses()) {
      auto h = hosts.find(HostKey(name, address.host, static_cast<uint32_t>(address.port)));
      states.push_back(absl::StrCat(address.host, ":", address.port, " ",
                                    h == hosts.end() ? "unknown" : DescribeHost(h->second)));
    }
    out->AddRow({name, absl::StrJoin(db->hosts, ","), std::to_string(db->ports.front()), db->dbname,
                 db->user, std::to_string(fleet.EffectivePoolSize(*db)),
                 std::to_string(fleet.EffectiveMinPoolSize(*db)),
                 std::to_string(fleet.EffectiveReservePoolSize(*db)),
                 std::to_string(absl::ToInt64Seconds(fleet.pool.server_lifetime)),
                 std::string(config::PoolModeName(mode)),
                 std::string(config::LoadBalanceHostsName(db->load_balance_hosts)),
                 std::to_string(db->max_db_connections), std::to_string(current[name]),
                 std::to_string(db->max_db_client_connections), std::to_string(clients[name]),
                 paused[name] ? "1" : "0", disabled.contains(name) ? "1" : "0",
                 std::string(config::TargetSessionAttrsName(db->target_session_attrs)),
                 absl::StrJoin(states, ", ")});
  }
}

void ShowUsers(const ShowInput& in, ResultSet* out) {
  // PgBouncer 1.25's columns; pool_size and reserve_pool_size are per user there (NULL: none).
  out->AddColumn("name")
      .AddColumn("pool_size", Type::kInt)
      .AddColumn("reserve_pool_size", Type::kInt);
  out->AddColumn("pool_mode");
  out->AddColumn("max_user_connections", Type::kInt);
  out->AddColumn("current_connections", Type::kInt);
  out->AddColumn("max_user_client_connections", Type::kInt);
  out->AddColumn("current_client_connections", Type::kInt);
  const config::Config& fleet = *in.fleet;
  std::map<std::string, std::pair<uint64_t, uint64_t>> current;  // servers, clients
  for (const auto& [name, user] : fleet.users) current[name];
  for (const auto& w : in.workers) {
    for (const auto& p : w.pools()) {
      auto& [servers, clients] = current[p.user()];
      servers += p.server_active() + p.server_idle() + p.server_used() + p.server_tested() +
                 p.server_login();
      clients += ClientCount(p);
    }
  }
  for (const auto& [name, n] : current) {
    auto it = fleet.users.find(name);
    std::string mode;
    std::string pool_size;  // NULL ("") where the user sets none, as PgBouncer shows it
    std::string reserve_pool_size;
    if (it != fleet.users.end()) {
      const config::UserConfig& user = it->second;
      if (user.pool_mode.has_value()) mode = std::string(config::PoolModeName(*user.pool_mode));
      if (user.pool_size.has_value()) pool_size = std::to_string(*user.pool_size);
      if (user.reserve_pool_size.has_value()) {
        reserve_pool_size = std::to_string(*user.reserve_pool_size);
      }
    }
    out->AddRow({name, pool_size, reserve_pool_size, mode,
                 std::to_string(fleet.EffectiveMaxUserConnections(name)), std::to_string(n.first),
                 std::to_string(fleet.EffectiveMaxUserClientConnections(name)),
                 std::to_string(n.second)});
  }
}

}  // namespace pgfleet::admin
