// Reads YAML into Config. The only file that includes yaml-cpp: its exceptions stop here and
// every problem becomes an Issue naming the key path and line.
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
#include "pooler/config/validate.h"
#include "yaml-cpp/yaml.h"

namespace pgfleet::config {
namespace {

using internal::Issue;

int LineOf(const YAML::Mark& mark) { return mark.is_null() ? 0 : mark.line + 1; }

std::string KindOf(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return absl::StrCat("\"", node.Scalar(), "\"");
    case YAML::NodeType::Undefined:
      break;
  }
  return "an undefined value";
}

std::string JoinPath(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// Collects problems, and the line of every key seen so that the validator's problems, which only
// know key paths, can be pointed at a line too.
struct Loader {
  std::vector<Issue> issues;
  std::map<std::string, int> key_lines;

  void Report(std::string key, std::string message, int line) {
    issues.push_back(Issue{std::move(key), std::move(message), line, 0});
  }
};

// One YAML mapping being read into a struct. Each accessor consumes its key if present (leaving
// the default otherwise); Finish() reports every key no accessor asked for.
class Section {
 public:
  Section(Loader& loader, const YAML::Node& node, std::string path, int line)
      : loader_(loader), path_(std::move(path)) {
    if (node.IsNull()) return;  // `pool:` with nothing under it: all defaults
    if (!node.IsMap()) {
      loader_.Report(path_, absl::StrCat("expected a mapping, got ", KindOf(node)), line);
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const int key_line = LineOf(it->first.Mark());
      if (!it->first.IsScalar()) {
        loader_.Report(path_, absl::StrCat("keys must be plain strings, got ", KindOf(it->first)),
                       key_line);
        continue;
      }
      const std::string& key = it->first.Scalar();
      // yaml-cpp keeps both copies of a repeated key; silently using one would hide a mistake.
      if (!seen.insert(key).second) {
        loader_.Report(JoinPath(path_, key), "duplicate key", key_line);
        continue;
      }
      loader_.key_lines[JoinPath(path_, key)] = key_line;
      entries_.push_back(Entry{key, it->second, key_line, false});
    }
  }

  void String(absl::string_view key, std::string& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    // `server_check_query:` with nothing after it reads as the empty string.
    if (e->value.IsNull()) {
      out.clear();
    } else if (e->value.IsScalar()) {
      out = e->value.Scalar();
    } else {
      Bad(*e, "a string");
    }
  }

  // Every integer in the config is a count, size or port, so negatives are rejected here and
  // upper bounds are left to the validator.
  void Int(absl::string_view key, int& out) {
    std::optional<int> value;
    OptionalInt(key, value);
    if (value) out = *value;
  }

  void OptionalInt(absl::string_view key, std::optional<int>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    int64_t value = 0;
    if (!e->value.IsScalar() || !absl::SimpleAtoi(e->value.Scalar(), &value) || value < 0) {
      Bad(*e, "a non-negative integer");
    } else if (value > INT_MAX) {
      Bad(*e, absl::StrCat("a non-negative integer no larger than ", INT_MAX));
    } else {
      out = static_cast<int>(value);
    }
  }

  void Bool(absl::string_view key, bool& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    const std::string text = e->value.IsScalar() ? absl::AsciiStrToLower(e->value.Scalar()) : "";
    if (text == "true" || text == "yes" || text == "on" || text == "1") {
      out = true;
    } else if (text == "false" || text == "no" || text == "off" || text == "0") {
      out = false;
    } else {
      Bad(*e, "true or false");
    }
  }

  void Duration(absl::string_view key, absl::Duration& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    if (!e->value.IsScalar()) {
      Bad(*e, "a duration such as 500ms, 30s, 5m, 1h or 2d");
      return;
    }
    absl::StatusOr<absl::Duration> value = ParseDuration(e->value.Scalar());
    if (value.ok()) {
      out = *value;
    } else {
      loader_.Report(JoinPath(path_, key), std::string(value.status().message()), e->line);
    }
  }

  void Mode(absl::string_view key, std::optional<PoolMode>& out) {
    OptionalEnum(key, out, ParsePoolMode, "one of session, transaction, statement");
  }

  void Mode(absl::string_view key, PoolMode& out) {
    std::optional<PoolMode> mode;
    Mode(key, mode);
    if (mode) out = *mode;
  }

  // An enum spelled by name: `parse` maps the YAML text to a value, `expected` lists the names.
  template <typename T, typename Parser>
  void Enum(absl::string_view key, T& out, Parser parse, absl::string_view expected) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    std::optional<T> value;
    if (e->value.IsScalar()) value = parse(e->value.Scalar());
    if (value) {
      out = *value;
    } else {
      Bad(*e, expected);
    }
  }

  template <typename T, typename Parser>
  void OptionalEnum(absl::string_view key, std::optional<T>& out, Parser parse,
                    absl::string_view expected) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    std::optional<T> value;
    if (e->value.IsScalar()) value = parse(e->value.Scalar());
    if (value) {
      out = value;
    } else {
      Bad(*e, expected);
    }
  }

  void Auth(absl::string_view key, AuthType& out) {
    Enum(key, out, ParseAuthType, "one of trust, md5, scram-sha-256");
  }

  void Ssl(absl::string_view key, SslMode& out) {
    Enum(key, out, ParseSslMode, "one of disable, allow, prefer, require, verify-ca, verify-full");
  }

  // A YAML list of names, or PgBouncer's comma-separated string ("extra_float_digits, options").
  void StringList(absl::string_view key, std::vector<std::string>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    if (e->value.IsNull()) {
      out.clear();
    } else if (e->value.IsScalar()) {
      out = absl::StrSplit(e->value.Scalar(), ',', absl::SkipWhitespace());
      for (std::string& item : out) absl::StripAsciiWhitespace(&item);
    } else if (e->value.IsSequence()) {
      out.clear();
      for (size_t i = 0; i < e->value.size(); ++i) {
        const YAML::Node item = e->value[i];
        if (item.IsScalar()) {
          out.push_back(item.Scalar());
        } else {
          loader_.Report(absl::StrCat(JoinPath(path_, key), "[", i, "]"),
                         absl::StrCat("expected a string, got ", KindOf(item)),
                         LineOf(item.Mark()) > 0 ? LineOf(item.Mark()) : e->line);
        }
      }
    } else {
      Bad(*e, "a list of names");
    }
  }

  // libpq's host list: one host, "a,b", or a YAML list of strings. An empty name stays in the
  // list for the validator to name.
  void HostList(absl::string_view key, std::vector<std::string>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    if (e->value.IsNull() || e->value.IsScalar()) {
      const std::string text = e->value.IsNull() ? "" : e->value.Scalar();
      out = absl::StrSplit(text, ',');
      for (std::string& host : out) absl::StripAsciiWhitespace(&host);
    } else if (e->value.IsSequence() && e->value.size() > 0) {
      out.clear();
      for (size_t i = 0; i < e->value.size(); ++i) {
        const YAML::Node item = e->value[i];
        if (item.IsScalar()) {
          out.push_back(item.Scalar());
        } else {
          loader_.Report(absl::StrCat(JoinPath(path_, key), "[", i, "]"),
                         absl::StrCat("expected a string, got ", KindOf(item)),
                         LineOf(item.Mark()) > 0 ? LineOf(item.Mark()) : e->line);
        }
      }
    } else {
      Bad(*e, "a string");
    }
  }

  // libpq's port list: one port for every host, "5432,5433", or a YAML list, one per host.
  void PortList(absl::string_view key, std::vector<int>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    std::vector<std::string> texts;
    if (e->value.IsScalar()) {
      texts = absl::StrSplit(e->value.Scalar(), ',');
    } else if (e->value.IsSequence() && e->value.size() > 0) {
      for (size_t i = 0; i < e->value.size(); ++i) {
        texts.push_back(e->value[i].IsScalar() ? e->value[i].Scalar() : std::string("?"));
      }
    }
    std::vector<int> ports;
    for (std::string& text : texts) {
      absl::StripAsciiWhitespace(&text);
      int64_t value = 0;
      if (!absl::SimpleAtoi(text, &value) || value < 0 || value > INT_MAX) break;
      ports.push_back(static_cast<int>(value));
    }
    if (texts.empty() || ports.size() != texts.size()) {
      Bad(*e, texts.size() > 1 ? "a port or a list of ports" : "a non-negative integer");
      return;
    }
    out = std::move(ports);
  }

  // Whether the YAML gives `key` (for settings whose default behaves differently from the same
  // value written out).
  bool Has(absl::string_view key) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [&](const Entry& e) { return e.key == key; });
  }

  // Marks `key` known and returns its value for a nested reader; nullptr when absent.
  const YAML::Node* Child(absl::string_view key, int* line = nullptr) {
    Entry* e = Take(key);
    if (e == nullptr) return nullptr;
    if (line != nullptr) *line = e->line;
    return &e->value;
  }

  // Each key that no accessor consumed becomes a warning ("peering.x: unknown key, ignored").
  void FinishAsWarnings(std::vector<std::string>& warnings) {
    for (const Entry& e : entries_) {
      if (!e.used)
        warnings.push_back(absl::StrCat(JoinPath(path_, e.key), ": unknown key, ignored"));
    }
  }

  // Reports each key that no accessor consumed, suggesting the closest known one.
  void Finish() {
    for (const Entry& e : entries_) {
      if (e.used) continue;
      std::string message = absl::StrCat("unknown key \"", JoinPath(path_, e.key), "\"");
      const absl::string_view hint = internal::ClosestKey(e.key, known_);
      if (!hint.empty()) {
        absl::StrAppend(&message, ", did you mean \"", JoinPath(path_, hint), "\"?");
      }
      loader_.Report("", std::move(message), e.line);
    }
  }

 private:
  struct Entry {
    std::string key;
    YAML::Node value;
    int line;
    bool used;
  };

  Entry* Take(absl::string_view key) {
    known_.push_back(key);
    for (Entry& e : entries_) {
      if (e.key == key) {
        e.used = true;
        return &e;
      }
    }
    return nullptr;
  }

  void Bad(const Entry& e, absl::string_view expected) {
    loader_.Report(JoinPath(path_, e.key),
                   absl::StrCat("expected ", expected, ", got ", KindOf(e.value)), e.line);
  }

  Loader& loader_;
  std::string path_;
  std::vector<Entry> entries_;
  // Keys the accessors asked for, for "did you mean". Views of string literals or of names in the
  // YAML tree, both of which outlive this Section.
  std::vector<absl::string_view> known_;
};

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
  s.Duration("idle_transaction_timeout", pool.idle_transaction_timeout);
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
    s.String("application_name", db.application_name);
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
    Section s(loader, *value, JoinPath("users", name), key_line);
    s.Mode("pool_mode", user.pool_mode);
    s.OptionalEnum("session_state", user.session_state, ParseSessionState,
                   "one of track, refuse, pass");
    s.Int("max_user_connections", user.max_user_connections);
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
    listen.Int("backlog", config.listen.backlog);
    listen.Bool("balance_clients", config.listen.balance_clients);
    listen.Finish();
  }
  s.String("workers", config.workers);
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

absl::StatusOr<Config> LoadConfigText(const std::string& text, const std::string& source_name) {
  Config config;
  config.source_path = source_name;
  Loader loader;
  bool is_mapping = false;
  try {
    is_mapping = ReadRoot(loader, YAML::Load(text), config);
  } catch (const YAML::Exception& e) {
    // Syntax errors, and anything yaml-cpp throws while we walk the tree: the file is unusable,
    // so drop whatever was read and report only this.
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
  if (!loader.issues.empty()) return internal::IssuesToStatus(source_name, loader.issues);

  // userlist.txt usually sits next to the config; a path relative to the process's working
  // directory would break as soon as the pooler is started from elsewhere.
  const std::filesystem::path dir = std::filesystem::path(source_name).parent_path();
  for (std::string* path : {&config.auth.file, &config.auth.hba_file,
                            &config.tls.client_tls_cert_file, &config.tls.client_tls_key_file,
                            &config.tls.client_tls_ca_file, &config.tls.server_tls_cert_file,
                            &config.tls.server_tls_key_file, &config.tls.server_tls_ca_file}) {
    if (!path->empty() && path->front() != '/' && !dir.empty()) *path = (dir / *path).string();
  }
  return config;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open config file"));
  }
  std::string text;
  char buffer[8192];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int read_errno = errno;
  std::fclose(file);
  if (failed) {
    return absl::ErrnoToStatus(read_errno, absl::StrCat(path, ": cannot read config file"));
  }
  return LoadConfigText(text, path);
}

}  // namespace pgfleet::config
