// Reads YAML into Config, section by section (yaml_section.h reads one mapping). With
// yaml_section.h the only file that includes yaml-cpp: its exceptions stop here and every problem
// becomes an Issue naming the key path and line.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "pooler/config/config.h"
#include "pooler/config/ini_file.h"
#include "pooler/config/validate.h"
#include "pooler/config/yaml_section.h"
#include "yaml-cpp/yaml.h"

namespace pgfleet::config {
namespace {

using internal::Issue;
using yaml_reading::JoinPath;
using yaml_reading::KindOf;
using yaml_reading::LineOf;
using yaml_reading::Loader;
using yaml_reading::Section;

// `peering:`. Its unknown keys are warnings, not errors: configs written for older versions (with
// peering.unix_socket_dir, say) still load.
void ReadPeering(Loader& loader, const YAML::Node& node, int line, PeeringConfig& peering,
                 std::vector<std::string>& warnings) {
  Section s(loader, node, "peering", line);
  s.String("runtime_dir", peering.runtime_dir);
  s.String("listen", peering.listen);
  s.String("advertise_address", peering.advertise_address);
  s.String("advertise_address_env", peering.advertise_address_env);
  s.String("token_file", peering.token_file);
  int tls_line = 0;
  if (const YAML::Node* tls_node = s.Child("tls", &tls_line)) {
    Section tls(loader, *tls_node, "peering.tls", tls_line);
    tls.String("cert_file", peering.tls.cert_file);
    tls.String("key_file", peering.tls.key_file);
    tls.String("ca_file", peering.tls.ca_file);
    tls.String("server_name", peering.tls.server_name);
    tls.FinishAsWarnings(warnings);
  }
  s.StringList("static_peers", peering.static_peers);
  s.String("discovery_dns", peering.discovery_dns);
  s.Duration("discovery_interval", peering.discovery_interval);
  s.Bool("forward_cancels", peering.forward_cancels);
  s.FinishAsWarnings(warnings);
}

void ReadController(Loader& loader, const YAML::Node& node, int line,
                    ControllerConfig& controller) {
  Section s(loader, node, "controller", line);
  s.String("address", controller.address);
  s.String("listen", controller.listen);
  s.Duration("lease_timeout", controller.lease_timeout);
  s.Duration("renew_interval", controller.renew_interval);
  s.Duration("forget_after", controller.forget_after);
  s.Duration("register_timeout", controller.register_timeout);
  s.Int("min_share", controller.min_share);
  s.String("monitor", controller.monitor);
  s.Duration("lost_room_hold", controller.lost_room_hold);
  s.Bool("terminate_lost_backends", controller.terminate_lost_backends);
  s.Finish();
}

void ReadPool(Section& s, PoolConfig& pool) {
  s.Mode("pool_mode", pool.pool_mode);
  s.Enum("session_state", pool.session_state, ParseSessionState, "one of track, refuse, pass");
  s.Int("max_pinned_servers", pool.max_pinned_servers);
  s.Int("default_pool_size", pool.default_pool_size);
  s.Int("min_pool_size", pool.min_pool_size);
  s.Int("reserve_pool_size", pool.reserve_pool_size);
  s.Duration("reserve_pool_timeout", pool.reserve_pool_timeout);
  s.Int("max_client_conn", pool.max_client_conn);
  s.Int("max_db_connections", pool.max_db_connections);
  s.Int("max_user_connections", pool.max_user_connections);
  s.Int("max_db_client_connections", pool.max_db_client_connections);
  s.Int("max_user_client_connections", pool.max_user_client_connections);
  s.Int("max_prepared_statements", pool.max_prepared_statements);
  s.String("server_reset_query", pool.server_reset_query);
  s.Bool("server_reset_query_always", pool.server_reset_query_always);
  s.String("server_check_query", pool.server_check_query);
  s.Duration("server_check_delay", pool.server_check_delay);
  s.Duration("server_lifetime", pool.server_lifetime);
  s.Duration("server_idle_timeout", pool.server_idle_timeout);
  s.Duration("server_connect_timeout", pool.server_connect_timeout);
  s.Duration("server_login_retry", pool.server_login_retry);
  s.Duration("client_idle_timeout", pool.client_idle_timeout);
  s.Duration("client_login_timeout", pool.client_login_timeout);
  s.Duration("query_timeout", pool.query_timeout);
  s.Duration("query_wait_timeout", pool.query_wait_timeout);
  s.Duration("query_wait_notify", pool.query_wait_notify);
  s.Duration("idle_transaction_timeout", pool.idle_transaction_timeout);
  s.Duration("transaction_timeout", pool.transaction_timeout);
  s.Duration("cancel_wait_timeout", pool.cancel_wait_timeout);
  s.Duration("server_connection_check_interval", pool.server_connection_check_interval);
  s.Duration("server_tcp_keepalive_idle", pool.server_tcp_keepalive_idle);
  s.Duration("server_tcp_keepalive_interval", pool.server_tcp_keepalive_interval);
  s.Int("server_tcp_keepalive_count", pool.server_tcp_keepalive_count);
  s.Duration("server_tcp_user_timeout", pool.server_tcp_user_timeout);
  s.Duration("shutdown_timeout", pool.shutdown_timeout);
  pool.track_extra_parameters_configured = s.Has("track_extra_parameters");
  s.StringList("track_extra_parameters", pool.track_extra_parameters);
  s.StringList("ignore_startup_parameters", pool.ignore_startup_parameters);
  s.Int("max_packet_size", pool.max_packet_size);
  s.Int("max_concurrent_logins", pool.max_concurrent_logins);
  s.Int("cancel_rate_limit", pool.cancel_rate_limit);
  s.Int("pkt_buf", pool.pkt_buf);
  s.Bool("tcp_keepalive", pool.tcp_keepalive);
  s.Duration("tcp_keepidle", pool.tcp_keepidle);
  s.Duration("tcp_keepintvl", pool.tcp_keepintvl);
  s.Int("tcp_keepcnt", pool.tcp_keepcnt);
  s.Duration("tcp_user_timeout", pool.tcp_user_timeout);
  s.Bool("server_round_robin", pool.server_round_robin);
  s.Bool("server_fast_close", pool.server_fast_close);
  s.Int("tcp_socket_buffer", pool.tcp_socket_buffer);
  s.Duration("dns_max_ttl", pool.dns_max_ttl);
  s.Duration("dns_nxdomain_ttl", pool.dns_nxdomain_ttl);
  s.Bool("application_name_add_host", pool.application_name_add_host);
  s.Bool("log_stats", pool.log_stats);
  s.Duration("stats_period", pool.stats_period);
}

void ReadTls(Section& s, TlsConfig& tls) {
  s.Ssl("client_tls_sslmode", tls.client_tls_sslmode);
  s.String("client_tls_cert_file", tls.client_tls_cert_file);
  s.String("client_tls_key_file", tls.client_tls_key_file);
  s.String("client_tls_ca_file", tls.client_tls_ca_file);
  s.String("client_tls_protocols", tls.client_tls_protocols);
  s.String("client_tls_ciphers", tls.client_tls_ciphers);
  s.Ssl("server_tls_sslmode", tls.server_tls_sslmode);
  s.String("server_tls_cert_file", tls.server_tls_cert_file);
  s.String("server_tls_key_file", tls.server_tls_key_file);
  s.String("server_tls_ca_file", tls.server_tls_ca_file);
  s.String("server_tls_protocols", tls.server_tls_protocols);
  s.String("server_tls_ciphers", tls.server_tls_ciphers);
}

// Reads `databases:`. max_db_connections falls back to the pool section's, so `pool` must be
// read first.
void ReadDatabases(Loader& loader, const YAML::Node& node, int line, const PoolConfig& pool,
                   std::map<std::string, DatabaseConfig>& out) {
  Section list(loader, node, "databases", line);
  if (!node.IsMap()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // `list` has reported non-string and duplicate names; skip them here.
    if (!it->first.IsScalar()) continue;
    const std::string& name = it->first.Scalar();
    int key_line = 0;
    const YAML::Node* value = list.Child(name, &key_line);
    if (value == nullptr || out.count(name) > 0) continue;
    DatabaseConfig db;
    db.name = name;
    db.max_db_connections = pool.max_db_connections;
    db.max_db_client_connections = pool.max_db_client_connections;
    Section s(loader, *value, JoinPath("databases", name), key_line);
    s.HostList("host", db.hosts);
    s.PortList("port", db.ports);
    s.Enum("target_session_attrs", db.target_session_attrs, ParseTargetSessionAttrs,
           "one of any, read-write, read-only, primary, standby, prefer-standby");
    s.Enum("load_balance_hosts", db.load_balance_hosts, ParseLoadBalanceHosts,
           "one of disable, random");
    s.String("dbname", db.dbname);
    s.String("user", db.user);
    s.String("password", db.password);
    s.Mode("pool_mode", db.overrides.pool_mode);
    s.OptionalEnum("session_state", db.overrides.session_state, ParseSessionState,
                   "one of track, refuse, pass");
    s.OptionalInt("pool_size", db.overrides.pool_size);
    s.OptionalInt("min_pool_size", db.overrides.min_pool_size);
    s.OptionalInt("reserve_pool_size", db.overrides.reserve_pool_size);
    s.Int("max_db_connections", db.max_db_connections);
    s.Int("max_db_client_connections", db.max_db_client_connections);
    s.String("application_name", db.application_name);
    s.String("connect_query", db.connect_query);
    for (const char* name : {"client_encoding", "datestyle", "timezone"}) {
      std::string value;
      s.String(name, value);
      if (!value.empty()) db.server_settings.emplace_back(name, value);
    }
    s.OptionalDuration("server_lifetime", db.server_lifetime);
    s.String("auth_user", db.auth_user);
    s.String("auth_query", db.auth_query);
    s.String("auth_dbname", db.auth_dbname);
    s.Finish();
    out.emplace(name, std::move(db));
  }
}

void ReadUsers(Loader& loader, const YAML::Node& node, int line, const PoolConfig& pool,
               std::map<std::string, UserConfig>& out) {
  Section list(loader, node, "users", line);
  if (!node.IsMap()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // `list` has reported non-string and duplicate names; skip them here.
    if (!it->first.IsScalar()) continue;
    const std::string& name = it->first.Scalar();
    int key_line = 0;
    const YAML::Node* value = list.Child(name, &key_line);
    if (value == nullptr || out.count(name) > 0) continue;
    UserConfig user;
    user.name = name;
    user.max_user_connections = pool.max_user_connections;
    user.max_user_client_connections = pool.max_user_client_connections;
    Section s(loader, *value, JoinPath("users", name), key_line);
    s.Mode("pool_mode", user.pool_mode);
    s.OptionalEnum("session_state", user.session_state, ParseSessionState,
                   "one of track, refuse, pass");
    s.Int("max_user_connections", user.max_user_connections);
    s.Int("max_user_client_connections", user.max_user_client_connections);
    s.OptionalInt("pool_size", user.pool_size);
    s.OptionalInt("reserve_pool_size", user.reserve_pool_size);
    s.OptionalDuration("query_timeout", user.query_timeout);
    s.OptionalDuration("query_wait_timeout", user.query_wait_timeout);
    s.OptionalDuration("idle_transaction_timeout", user.idle_transaction_timeout);
    s.OptionalDuration("transaction_timeout", user.transaction_timeout);
    s.OptionalDuration("client_idle_timeout", user.client_idle_timeout);
    s.Finish();
    out.emplace(name, std::move(user));
  }
}

// Returns false when the document is not a mapping at all, so that checking what it "configured"
// would only add noise.
bool ReadRoot(Loader& loader, const YAML::Node& root, Config& config) {
  if (!root.IsNull() && !root.IsMap()) {
    loader.Report("",
                  absl::StrCat("expected a mapping of sections (listen, databases, pool, ...) at "
                               "the top level, got ",
                               KindOf(root)),
                  LineOf(root.Mark()));
    return false;
  }
  Section s(loader, root, "", 0);
  int line = 0;

  if (const YAML::Node* node = s.Child("listen", &line)) {
    Section listen(loader, *node, "listen", line);
    listen.String("address", config.listen.address);
    listen.Int("port", config.listen.port);
    listen.String("unix_socket_dir", config.listen.unix_socket_dir);
    listen.FileMode("unix_socket_mode", config.listen.unix_socket_mode);
    listen.String("unix_socket_group", config.listen.unix_socket_group);
    listen.Int("backlog", config.listen.backlog);
    listen.Bool("balance_clients", config.listen.balance_clients);
    listen.Finish();
  }
  s.String("workers", config.workers);
  s.String("pidfile", config.pidfile);
  // Before databases and users, whose unset limits default to the pool section's.
  if (const YAML::Node* node = s.Child("pool", &line)) {
    Section pool(loader, *node, "pool", line);
    ReadPool(pool, config.pool);
    pool.Finish();
  }
  if (const YAML::Node* node = s.Child("databases", &line)) {
    ReadDatabases(loader, *node, line, config.pool, config.databases);
  }
  if (const YAML::Node* node = s.Child("users", &line)) {
    ReadUsers(loader, *node, line, config.pool, config.users);
  }
  if (const YAML::Node* node = s.Child("auth", &line)) {
    Section auth(loader, *node, "auth", line);
    auth.Auth("type", config.auth.type);
    auth.String("file", config.auth.file);
    auth.String("query", config.auth.query);
    auth.String("user", config.auth.user);
    auth.String("dbname", config.auth.dbname);
    auth.String("hba_file", config.auth.hba_file);
    auth.Finish();
  }
  if (const YAML::Node* node = s.Child("tls", &line)) {
    Section tls(loader, *node, "tls", line);
    ReadTls(tls, config.tls);
    tls.Finish();
  }
  if (const YAML::Node* node = s.Child("admin", &line)) {
    Section admin(loader, *node, "admin", line);
    admin.StringList("users", config.admin.users);
    admin.StringList("stats_users", config.admin.stats_users);
    admin.Finish();
  }
  if (const YAML::Node* node = s.Child("metrics", &line)) {
    Section metrics(loader, *node, "metrics", line);
    metrics.String("listen", config.metrics.listen);
    metrics.Finish();
  }
  if (const YAML::Node* node = s.Child("log", &line)) {
    Section log(loader, *node, "log", line);
    log.String("level", config.log.level);
    log.Bool("log_connections", config.log.log_connections);
    log.Bool("log_disconnections", config.log.log_disconnections);
    log.String("file", config.log.file);
    log.Finish();
  }
  if (const YAML::Node* node = s.Child("peering", &line)) {
    ReadPeering(loader, *node, line, config.peering, config.warnings);
  }
  if (const YAML::Node* node = s.Child("controller", &line)) {
    ReadController(loader, *node, line, config.controller);
  }
  s.Finish();
  return true;
}

}  // namespace

namespace {

// Lays `overlay`'s keys over `base`, mappings key by key. Every key the overlay set has its
// origin in the YAML file `source` (the merged tree's keys have no lines of their own).
void Overlay(YAML::Node base, const YAML::Node& overlay, const std::string& path,
             const std::string& source, yaml_reading::KeyOrigins& origins) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string child = JoinPath(path, key);
    const yaml_reading::KeyOrigin origin{source, child, LineOf(it->first.Mark())};
    YAML::Node below = base[key];
    if (below.IsMap() && it->second.IsMap()) {
      origins[child] = origin;
      Overlay(below, it->second, child, source, origins);
      continue;
    }
    base[key] = it->second;
    for (auto o = origins.lower_bound(child);
         o != origins.end() && (o->first == child || o->first.rfind(child + ".", 0) == 0);) {
      o = origins.erase(o);
    }
    origins[child] = origin;
  }
}

// A YAML file with `pgbouncer_ini: FILE`: the ini (its path relative to the YAML file) is the
// base, with PgBouncer's meaning, and the YAML's other keys are laid over it.
absl::StatusOr<yaml_reading::TranslatedIni> MergeOverIni(YAML::Node root,
                                                         const std::string& source_name) {
  const YAML::Node ini_key = root["pgbouncer_ini"];
  if (!ini_key.IsScalar() || ini_key.Scalar().empty()) {
    return internal::IssuesToStatus(source_name,
                                    {Issue{"pgbouncer_ini", "expected the path of a pgbouncer.ini",
                                           LineOf(ini_key.Mark()), 0}});
  }
  std::filesystem::path path = ini_key.Scalar();
  const std::filesystem::path dir = std::filesystem::path(source_name).parent_path();
  if (path.is_relative() && !dir.empty()) path = dir / path;
  auto ini = yaml_reading::ReadPgBouncerIniFile(path.string());
  if (!ini.ok()) return ini.status();
  root.remove("pgbouncer_ini");  // the overlay's nodes keep their lines for its problems
  Overlay(ini->root, root, "", source_name, ini->origins);
  return ini;
}

// The tree the loader reads from a config file's text: the YAML, a pgbouncer.ini translated, or
// YAML laid over the ini it names; `origins` holds where each key was written when an ini is in
// it (otherwise the YAML's own lines serve).
struct ConfigTree {
  YAML::Node root;
  yaml_reading::KeyOrigins origins;
  bool has_origins = false;
};

absl::StatusOr<ConfigTree> ParseConfigTree(const std::string& text, const std::string& source) {
  if (internal::LooksLikeIni(text)) {
    auto ini = yaml_reading::ReadPgBouncerIniText(text, source);
    if (!ini.ok()) return ini.status();
    return ConfigTree{ini->root, std::move(ini->origins), true};
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return internal::IssuesToStatus(
        source, {Issue{"", absl::StrCat("invalid YAML: ", e.msg), LineOf(e.mark),
                       e.mark.is_null() ? 0 : e.mark.column + 1}});
  }
  if (!root.IsMap() || !root["pgbouncer_ini"]) return ConfigTree{root, {}, false};
  auto merged = MergeOverIni(root, source);
  if (!merged.ok()) return merged.status();
  return ConfigTree{merged->root, std::move(merged->origins), true};
}

absl::StatusOr<Config> LoadTree(const ConfigTree& tree, const std::string& source) {
  return yaml_reading::LoadConfigNode(tree.root, source,
                                      tree.has_origins ? &tree.origins : nullptr);
}

}  // namespace

absl::StatusOr<Config> LoadConfigText(const std::string& text, const std::string& source_name) {
  auto tree = ParseConfigTree(text, source_name);
  if (!tree.ok()) return tree.status();
  return LoadTree(*tree, source_name);
}

namespace yaml_reading {

absl::StatusOr<Config> LoadConfigNode(const YAML::Node& root, const std::string& source_name,
                                      const KeyOrigins* origins) {
  Config config;
  config.source_path = source_name;
  Loader loader;
  bool is_mapping = false;
  try {
    is_mapping = ReadRoot(loader, root, config);
  } catch (const YAML::Exception& e) {
    // Anything yaml-cpp throws while we walk the tree: the file is unusable, so drop whatever
    // was read and report only this.
    loader.issues.clear();
    loader.issues.push_back(Issue{"", absl::StrCat("invalid YAML: ", e.msg), LineOf(e.mark),
                                  e.mark.is_null() ? 0 : e.mark.column + 1});
    return internal::IssuesToStatus(source_name, loader.issues);
  }

  // Type errors leave defaults in place, so the semantic checks still run and report the rest.
  std::vector<Issue> semantic;
  if (is_mapping) internal::CheckConfig(config, semantic);
  for (Issue& issue : semantic) {
    if (auto it = loader.key_lines.find(issue.key); it != loader.key_lines.end()) {
      issue.line = it->second;
    }
    loader.issues.push_back(std::move(issue));
  }
  // File order reads best; problems without a line (missing keys) go last.
  std::stable_sort(loader.issues.begin(), loader.issues.end(), [](const Issue& a, const Issue& b) {
    return (a.line == 0 ? INT_MAX : a.line) < (b.line == 0 ? INT_MAX : b.line);
  });
  if (!loader.issues.empty() && origins != nullptr) {
    // Each problem in the words of the file it came from.
    for (Issue& issue : loader.issues) {
      if (auto it = origins->find(issue.key); it != origins->end()) {
        issue.key = absl::StrCat(it->second.file, ": ", it->second.key);
        issue.line = it->second.line;
      } else {
        issue.key = issue.key.empty() ? source_name : absl::StrCat(source_name, ": ", issue.key);
      }
    }
    return internal::IssuesToStatus("", loader.issues);
  }
  if (!loader.issues.empty()) return internal::IssuesToStatus(source_name, loader.issues);

  // userlist.txt usually sits next to the config; a path relative to the process's working
  // directory would break as soon as the pooler is started from elsewhere.
  const std::filesystem::path dir = std::filesystem::path(source_name).parent_path();
  for (std::string* path :
       {&config.auth.file, &config.auth.hba_file, &config.log.file, &config.pidfile,
        &config.tls.client_tls_cert_file, &config.tls.client_tls_key_file,
        &config.tls.client_tls_ca_file, &config.tls.server_tls_cert_file,
        &config.tls.server_tls_key_file, &config.tls.server_tls_ca_file}) {
    if (!path->empty() && path->front() != '/' && !dir.empty()) *path = (dir / *path).string();
  }
  return config;
}

}  // namespace yaml_reading

absl::StatusOr<Config> LoadConfigFileWithSettings(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& settings) {
  auto text = internal::ReadWholeFile(path);
  if (!text.ok()) return text.status();
  auto tree = ParseConfigTree(*text, path);
  if (!tree.ok()) return tree.status();
  if (!settings.empty()) {
    auto set = yaml_reading::TranslateSettings(settings, "SET");
    if (!set.ok()) return set.status();
    Overlay(tree->root, set->root, "", "SET", tree->origins);
    for (const auto& [key, origin] : set->origins)
      tree->origins[key] = origin;  // PgBouncer's names
    tree->has_origins = true;
  }
  return LoadTree(*tree, path);
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  return LoadConfigFileWithSettings(path, {});
}

absl::StatusOr<std::string> ConfigFileAsYaml(const std::string& path) {
  auto text = internal::ReadWholeFile(path);
  if (!text.ok()) return text.status();
  auto tree = ParseConfigTree(*text, path);
  if (!tree.ok()) return tree.status();
  // Printed only once it loads: --print-config never shows a config that would not run.
  if (auto config = LoadTree(*tree, path); !config.ok()) return config.status();
  YAML::Emitter out;
  out << tree->root;
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace pgfleet::config
