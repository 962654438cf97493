// pgbouncer.ini with PgBouncer's meaning (issue 35): each key of its [pgbouncer] section and each
// database's and user's connection string becomes the YAML key pgfleet reads, with PgBouncer's
// defaults where pgfleet's differ, and the tree goes through the YAML loader, so that every check
// is the one a YAML file gets and each problem still names the ini key, file and line.
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "pooler/config/config.h"
#include "pooler/config/ini_file.h"
#include "pooler/config/validate.h"
#include "pooler/config/yaml_section.h"
#include "yaml-cpp/yaml.h"

namespace pgfleet::config {
namespace {

using internal::IniEntry;
using internal::Issue;
using yaml_reading::KeyOrigin;
using yaml_reading::KeyOrigins;

// How an ini value becomes the YAML value: as it is, seconds (PgBouncer's bare numbers are
// seconds, pgfleet's durations take units), or a comma list.
enum class Form { kText, kSeconds, kMilliseconds, kList };

struct Mapping {
  absl::string_view ini;
  absl::string_view yaml;  // dotted path
  Form form = Form::kText;
};

// [pgbouncer] keys pgfleet implements with PgBouncer's meaning.
constexpr Mapping kSettings[] = {
    {"listen_port", "listen.port"},
    {"unix_socket_dir", "listen.unix_socket_dir"},
    {"unix_socket_mode", "listen.unix_socket_mode"},
    {"unix_socket_group", "listen.unix_socket_group"},
    {"listen_backlog", "listen.backlog"},
    {"pool_mode", "pool.pool_mode"},
    {"max_client_conn", "pool.max_client_conn"},
    {"default_pool_size", "pool.default_pool_size"},
    {"min_pool_size", "pool.min_pool_size"},
    {"reserve_pool_size", "pool.reserve_pool_size"},
    {"reserve_pool_timeout", "pool.reserve_pool_timeout", Form::kSeconds},
    {"max_db_connections", "pool.max_db_connections"},
    {"max_user_connections", "pool.max_user_connections"},
    {"max_db_client_connections", "pool.max_db_client_connections"},
    {"max_user_client_connections", "pool.max_user_client_connections"},
    {"server_round_robin", "pool.server_round_robin"},
    {"server_fast_close", "pool.server_fast_close"},
    {"dns_max_ttl", "pool.dns_max_ttl", Form::kSeconds},
    {"tcp_socket_buffer", "pool.tcp_socket_buffer"},
    {"dns_nxdomain_ttl", "pool.dns_nxdomain_ttl", Form::kSeconds},
    {"application_name_add_host", "pool.application_name_add_host"},
    {"log_stats", "pool.log_stats"},
    {"stats_period", "pool.stats_period", Form::kSeconds},
    {"query_wait_notify", "pool.query_wait_notify", Form::kSeconds},
    {"track_extra_parameters", "pool.track_extra_parameters", Form::kList},
    {"ignore_startup_parameters", "pool.ignore_startup_parameters", Form::kList},
    {"max_prepared_statements", "pool.max_prepared_statements"},
    {"auth_hba_file", "auth.hba_file"},
    {"auth_file", "auth.file"},
    {"auth_user", "auth.user"},
    {"auth_query", "auth.query"},
    {"auth_dbname", "auth.dbname"},
    {"log_connections", "log.log_connections"},
    {"logfile", "log.file"},
    {"pidfile", "pidfile"},
    {"log_disconnections", "log.log_disconnections"},
    {"admin_users", "admin.users", Form::kList},
    {"stats_users", "admin.stats_users", Form::kList},
    {"server_reset_query", "pool.server_reset_query"},
    {"server_reset_query_always", "pool.server_reset_query_always"},
    {"server_check_delay", "pool.server_check_delay", Form::kSeconds},
    {"server_idle_timeout", "pool.server_idle_timeout", Form::kSeconds},
    {"server_connect_timeout", "pool.server_connect_timeout", Form::kSeconds},
    {"server_login_retry", "pool.server_login_retry", Form::kSeconds},
    {"client_login_timeout", "pool.client_login_timeout", Form::kSeconds},
    {"query_timeout", "pool.query_timeout", Form::kSeconds},
    {"query_wait_timeout", "pool.query_wait_timeout", Form::kSeconds},
    {"cancel_wait_timeout", "pool.cancel_wait_timeout", Form::kSeconds},
    {"client_idle_timeout", "pool.client_idle_timeout", Form::kSeconds},
    {"idle_transaction_timeout", "pool.idle_transaction_timeout", Form::kSeconds},
    {"transaction_timeout", "pool.transaction_timeout", Form::kSeconds},
    {"pkt_buf", "pool.pkt_buf"},
    {"max_packet_size", "pool.max_packet_size"},
    {"tcp_keepalive", "pool.tcp_keepalive"},
    {"tcp_keepidle", "pool.tcp_keepidle", Form::kSeconds},
    {"tcp_keepintvl", "pool.tcp_keepintvl", Form::kSeconds},
    {"tcp_keepcnt", "pool.tcp_keepcnt"},
    {"tcp_user_timeout", "pool.tcp_user_timeout", Form::kMilliseconds},
    {"client_tls_sslmode", "tls.client_tls_sslmode"},
    {"client_tls_key_file", "tls.client_tls_key_file"},
    {"client_tls_cert_file", "tls.client_tls_cert_file"},
    {"client_tls_ca_file", "tls.client_tls_ca_file"},
    {"client_tls_protocols", "tls.client_tls_protocols"},
    {"client_tls_ciphers", "tls.client_tls_ciphers"},
    {"server_tls_sslmode", "tls.server_tls_sslmode"},
    {"server_tls_key_file", "tls.server_tls_key_file"},
    {"server_tls_cert_file", "tls.server_tls_cert_file"},
    {"server_tls_ca_file", "tls.server_tls_ca_file"},
    {"server_tls_protocols", "tls.server_tls_protocols"},
    {"server_tls_ciphers", "tls.server_tls_ciphers"},
};

// Keys pgfleet does not implement: accepted only with a value under which PgBouncer does what
// pgfleet does (`neutral`, '|' between several), an error otherwise.
struct Unimplemented {
  absl::string_view ini;
  absl::string_view neutral;
  absl::string_view why;  // what to do instead
};

constexpr Unimplemented kUnimplemented[] = {
    {"user", "", "start pgfleet as the user it should run as"},
    {"peer_id", "0",
     "pgfleet forwards cancels between its processes and pods itself (peering, README)"},
    {"disable_pqexec", "0", ""},
    {"scram_iterations", "4096", ""},
    {"auth_ident_file", "", ""},
    {"auth_ldap_options", "", ""},
    {"syslog", "0", "pgfleet logs to stderr"},
    {"syslog_ident", "pgbouncer", "pgfleet logs to stderr"},
    {"syslog_facility", "daemon", "pgfleet logs to stderr"},
    {"log_pooler_errors", "1", "pgfleet always sends its errors to the client"},
    {"autodb_idle_timeout", "3600", ""},
    {"pool_idle_timeout", "0", ""},
    {"dns_zone_check_period", "0", ""},
    {"resolv_conf", "", "pgfleet uses the system's resolver"},
    {"login_notify_message", "", ""},
    {"client_tls13_ciphers", "", ""},
    {"client_tls_ecdhcurve", "auto", ""},
    {"client_tls_dheparams", "auto", ""},
    {"server_tls13_ciphers", "", ""},
    {"suspend_timeout", "10", "pgfleet has no SUSPEND"},
    {"sbuf_loopcnt", "5|0", "pgfleet's relay yields to other connections by itself"},
    // Their meaning is pgfleet's way of working anyway.
    {"so_reuseport", "0|1", ""},
    {"tcp_defer_accept", "0|1", ""},
    {"conffile", "*", ""},
    {"service_name", "*", ""},
    {"job_name", "*", ""},
};

// A database's connection string keys, and a user's.
constexpr Mapping kDatabaseKeys[] = {
    {"host", "host"},
    {"port", "port"},
    {"dbname", "dbname"},
    {"user", "user"},
    {"password", "password"},
    {"pool_size", "pool_size"},
    {"min_pool_size", "min_pool_size"},
    {"reserve_pool_size", "reserve_pool_size"},
    {"pool_mode", "pool_mode"},
    {"max_db_connections", "max_db_connections"},
    {"max_db_client_connections", "max_db_client_connections"},
    {"application_name", "application_name"},
    {"connect_query", "connect_query"},
    {"client_encoding", "client_encoding"},
    {"datestyle", "datestyle"},
    {"timezone", "timezone"},
    {"server_lifetime", "server_lifetime", Form::kSeconds},
    {"reserve_pool", "reserve_pool_size"},  // PgBouncer's older spelling
    {"auth_user", "auth_user"},
    {"auth_query", "auth_query"},
    {"auth_dbname", "auth_dbname"},
    // pgfleet's own, beyond PgBouncer's.
    {"target_session_attrs", "target_session_attrs"},
    {"session_state", "session_state"},
};
constexpr Unimplemented kDatabaseUnimplemented[] = {
    {"query_wait_timeout", "", ""},
};
constexpr Mapping kUserKeys[] = {
    {"pool_mode", "pool_mode"},
    {"max_user_connections", "max_user_connections"},
    {"max_user_client_connections", "max_user_client_connections"},
    {"pool_size", "pool_size"},
    {"reserve_pool_size", "reserve_pool_size"},
    {"query_timeout", "query_timeout", Form::kSeconds},
    {"query_wait_timeout", "query_wait_timeout", Form::kSeconds},
    {"idle_transaction_timeout", "idle_transaction_timeout", Form::kSeconds},
    {"transaction_timeout", "transaction_timeout", Form::kSeconds},
    {"client_idle_timeout", "client_idle_timeout", Form::kSeconds},
    {"session_state", "session_state"},
};
// Every key PgBouncer takes in [users] is implemented.
constexpr std::span<const Unimplemented> kUserUnimplemented;

// PgBouncer's auth_query, used when auth_user is set without one.
constexpr absl::string_view kPgBouncerAuthQuery =
    "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM "
    "pg_authid WHERE rolname=$1 AND rolcanlogin";

template <typename T>
const T* Find(std::span<const T> table, absl::string_view key) {
  for (const T& row : table) {
    if (row.ini == key) return &row;
  }
  return nullptr;
}
template <typename T, size_t N>
const T* Find(const T (&table)[N], absl::string_view key) {
  return Find(std::span<const T>(table), key);
}

bool IsNeutral(const Unimplemented& key, absl::string_view value) {
  if (key.neutral == "*") return true;
  for (absl::string_view accepted : absl::StrSplit(key.neutral, '|')) {
    if (absl::EqualsIgnoreCase(accepted, value)) return true;
  }
  return false;
}

std::string NotSupported(const Unimplemented& key, absl::string_view value) {
  return absl::StrCat("not supported by pgfleet with \"", value, "\"", key.why.empty() ? "" : "; ",
                      key.why);
}

std::string Seconds(absl::string_view value) {
  double seconds = 0;
  // PgBouncer's time settings are seconds; pgfleet's durations say their unit.
  return absl::SimpleAtod(value, &seconds) ? absl::StrCat(value, "s") : std::string(value);
}

// A libpq-style connection string as PgBouncer reads [databases] and [users] values:
// key=value pairs, a value in single quotes may hold spaces (\' and \\ inside).
bool SplitPairs(absl::string_view text, std::vector<std::pair<std::string, std::string>>* out,
                std::string* error) {
  size_t i = 0;
  const auto skip_space = [&] {
    while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  while (true) {
    skip_space();
    if (i == text.size()) return true;
    const size_t key_start = i;
    while (i < text.size() && text[i] != '=' &&
           !absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
    }
    std::string key(text.substr(key_start, i - key_start));
    skip_space();
    if (i == text.size() || text[i] != '=' || key.empty()) {
      *error = absl::StrCat("expected key=value in the connection string, at \"",
                            text.substr(key_start), "\"");
      return false;
    }
    ++i;
    skip_space();
    std::string value;
    if (i < text.size() && text[i] == '\'') {
      ++i;
      while (i < text.size() && text[i] != '\'') {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        value.push_back(text[i++]);
      }
      if (i == text.size()) {
        *error = absl::StrCat("unterminated quoted value for ", key);
        return false;
      }
      ++i;
    } else {
      while (i < text.size() && !absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
        value.push_back(text[i++]);
      }
    }
    out->emplace_back(absl::AsciiStrToLower(key), std::move(value));
  }
}

class Translator {
 public:
  explicit Translator(std::string source) : source_(std::move(source)) {}

  // SET key = value: [pgbouncer] keys only, none that needs a restart, no defaults added.
  void ReadSettings(const std::vector<IniEntry>& entries) {
    for (const IniEntry& e : entries) {
      const std::string key = absl::AsciiStrToLower(e.key);
      if (absl::StartsWith(key, "listen_") || absl::StartsWith(key, "unix_socket_") ||
          key == "logfile" || key == "pidfile") {
        Report(e, key, "not changeable at run time (edit the file, then RELOAD or restart)");
        continue;
      }
      ReadSetting(e);
    }
  }

  void Read(const std::vector<IniEntry>& all) {
    // A key set again wins, as in PgBouncer (an %include, or a file laid over another), and a
    // database or user defined again is replaced whole.
    std::map<std::pair<std::string, std::string>, const IniEntry*> last;
    for (const IniEntry& e : all) {
      const std::string section = absl::AsciiStrToLower(e.section);
      last[{section, section == "pgbouncer" ? absl::AsciiStrToLower(e.key) : e.key}] = &e;
    }
    std::vector<const IniEntry*> entries;
    for (const IniEntry& e : all) {
      const std::string section = absl::AsciiStrToLower(e.section);
      if (last[{section, section == "pgbouncer" ? absl::AsciiStrToLower(e.key) : e.key}] == &e) {
        entries.push_back(&e);
      }
    }
    // [pgbouncer] first: a database without a host uses its unix_socket_dir.
    for (const IniEntry* e : entries) {
      if (absl::AsciiStrToLower(e->section) == "pgbouncer") ReadSetting(*e);
    }
    for (const IniEntry* entry : entries) {
      const IniEntry& e = *entry;
      const std::string section = absl::AsciiStrToLower(e.section);
      if (section == "pgbouncer") continue;
      if (section == "databases") {
        ReadDatabase(e);
      } else if (section == "users") {
        ReadUser(e);
      } else if (section == "pgfleet") {
        ReadPgfleet(e);
      } else if (section == "peers") {
        Report(e, e.key,
               "the [peers] section is not used: pgfleet forwards cancels between its processes "
               "and pods itself (peering in [pgfleet], README \"Across pods\")");
      } else {
        Report(e, e.key,
               absl::StrCat("unknown section [", e.section,
                            "] (expected [pgbouncer], [databases], [users] or [pgfleet])"));
      }
    }
    ApplyPgBouncerDefaults();
  }

  const std::vector<Issue>& issues() const { return issues_; }
  const YAML::Node& root() const { return root_; }
  const KeyOrigins& origins() const { return origins_; }

 private:
  void Report(const IniEntry& e, absl::string_view key, absl::string_view message) {
    issues_.push_back(Issue{absl::StrCat(e.file, ": ", key), std::string(message), e.line, 0});
  }

  // Sets the YAML value at `path` and remembers where it came from.
  void Put(const std::vector<std::string>& path, const YAML::Node& value, const IniEntry* from,
           absl::string_view ini_key) {
    // Node::reset rebinds; operator= would write into the node it holds.
    YAML::Node node = root_;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      YAML::Node child = node[path[i]];
      node.reset(child);
    }
    node[path.back()] = value;
    if (from != nullptr) {
      origins_[absl::StrJoin(path, ".")] = KeyOrigin{from->file, std::string(ini_key), from->line};
    }
    set_.insert(absl::StrJoin(path, "."));
  }
  void PutText(absl::string_view dotted, absl::string_view value, const IniEntry* from,
               absl::string_view ini_key) {
    Put(absl::StrSplit(dotted, '.'), YAML::Node(std::string(value)), from, ini_key);
  }
  bool IsSet(absl::string_view dotted) const { return set_.contains(std::string(dotted)); }

  YAML::Node Convert(Form form, const std::string& value) {
    switch (form) {
      case Form::kText:
        return YAML::Node(value);
      case Form::kSeconds:
        return YAML::Node(Seconds(value));
      case Form::kMilliseconds: {
        double ms = 0;
        return YAML::Node(absl::SimpleAtod(value, &ms) ? absl::StrCat(value, "ms") : value);
      }
      case Form::kList: {
        YAML::Node list(YAML::NodeType::Sequence);
        for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
          list.push_back(std::string(absl::StripAsciiWhitespace(item)));
        }
        return list;
      }
    }
    return YAML::Node(value);
  }

  // A path PgBouncer reads from its working directory; pgfleet's workers read it later from
  // theirs, so it is made absolute now.
  static std::string FromWorkingDirectory(const std::string& path) {
    if (path.empty() || path.front() == '/') return path;
    std::error_code error;
    const auto absolute = std::filesystem::absolute(path, error);
    return error ? path : absolute.string();
  }

  void ReadSetting(const IniEntry& e) {
    const std::string key = absl::AsciiStrToLower(e.key);
    if (const Mapping* m = Find(kSettings, key)) {
      std::string value = e.value;
      if (absl::EndsWith(key, "_file") || key == "logfile" || key == "pidfile") {
        value = FromWorkingDirectory(value);
      }
      Put(absl::StrSplit(m->yaml, '.'), Convert(m->form, value), &e, key);
      return;
    }
    if (key == "listen_addr") {
      std::vector<std::string> addresses = absl::StrSplit(e.value, ',', absl::SkipWhitespace());
      for (auto& address : addresses) address = std::string(absl::StripAsciiWhitespace(address));
      if (addresses.empty()) {
        Report(e, key, "empty (a unix socket only) is not supported: pgfleet needs a TCP address");
      } else {
        PutText("listen.address", absl::StrJoin(addresses, ","), &e, key);
      }
    } else if (key == "auth_type") {
      ReadAuthType(e);
    } else if (key == "verbose") {
      // PgBouncer's verbosity: any level above 0 is pgfleet's debug.
      PutText("log.level", e.value == "0" || e.value.empty() ? "info" : "debug", &e, key);
    } else if (key == "server_check_query") {
      // PgBouncer: an empty value turns the check off; pgfleet spells that "-".
      PutText("pool.server_check_query", e.value.empty() ? "-" : e.value, &e, key);
    } else if (key == "server_lifetime") {
      // PgBouncer: 0 uses a server once. pgfleet's 0 is "no limit"; one microsecond retires a
      // server as soon as it is released, which is PgBouncer's once.
      double seconds = -1;
      const bool once = absl::SimpleAtod(e.value, &seconds) && seconds == 0;
      const std::string value = once ? "1us" : Seconds(e.value);
      PutText("pool.server_lifetime", value, &e, key);
    } else if (const Unimplemented* u = Find(kUnimplemented, key)) {
      if (!IsNeutral(*u, e.value)) {
        Report(e, key, NotSupported(*u, e.value));
      }
    } else {
      Report(e, key, "unknown key in [pgbouncer]");
    }
  }

  void ReadAuthType(const IniEntry& e) {
    const std::string type = absl::AsciiStrToLower(e.value);
    if (type == "trust" || type == "md5" || type == "scram-sha-256" || type == "cert" ||
        type == "plain" || type == "any") {
      PutText("auth.type", type, &e, "auth_type");
    } else if (type == "hba") {
      // The rules of auth_hba_file choose each client's method; pgfleet reads them whenever
      // auth.hba_file is set.
      hba_entry_ = e;
      PutText("auth.type", "md5", &e, "auth_type");
    } else {
      Report(
          e, "auth_type",
          absl::StrCat(
              "\"", e.value,
              "\" is not supported by pgfleet (trust, md5, scram-sha-256, cert, plain, any and hba "
              "are)"));
    }
  }

  // name = connection string, in [databases] or [users].
  void ReadEntry(const IniEntry& e, absl::string_view section, std::span<const Mapping> keys,
                 std::span<const Unimplemented> unimplemented) {
    std::vector<std::pair<std::string, std::string>> pairs;
    std::string error;
    if (!SplitPairs(e.value, &pairs, &error)) {
      Report(e, absl::StrCat(section, ".", e.key), error);
      return;
    }
    // The key alone makes the entry (`db =` is a database with every default).
    Put({std::string(section), e.key}, YAML::Node(YAML::NodeType::Map), &e, e.key);
    for (const auto& [key, value] : pairs) {
      const std::string where = absl::StrCat(section, ".", e.key, ": ", key);
      double seconds = 0;
      if (section == "databases" && key == "server_lifetime" && absl::SimpleAtod(value, &seconds) &&
          seconds == 0) {
        continue;  // PgBouncer: a database's 0 is the [pgbouncer] value
      }
      if (const Mapping* m = Find(keys, key)) {
        Put({std::string(section), e.key, std::string(m->yaml)}, Convert(m->form, value), &e,
            where);
      } else if (section == "databases" && key == "load_balance_hosts") {
        ReadLoadBalanceHosts(e, where, value);
      } else if (const Unimplemented* u = Find(unimplemented, key)) {
        if (!IsNeutral(*u, value)) Report(e, where, NotSupported(*u, value));
      } else {
        Report(e, where, absl::StrCat("unknown key in a ", section, " entry"));
      }
    }
    if (section == "databases" && !IsSet(absl::StrCat("databases.", e.key, ".host"))) {
      // PgBouncer: no host is PostgreSQL's unix socket in unix_socket_dir.
      databases_without_host_.push_back(e.key);
    }
  }

  void ReadLoadBalanceHosts(const IniEntry& e, const std::string& where, const std::string& value) {
    const std::string mode = absl::AsciiStrToLower(value);
    if (mode == "disable") {
      Put({"databases", e.key, "load_balance_hosts"}, YAML::Node("disable"), &e, where);
    } else if (mode == "round-robin") {
      // PgBouncer's default; pgfleet spreads new server connections over the hosts at random,
      // which balances the same way over many connections.
      Put({"databases", e.key, "load_balance_hosts"}, YAML::Node("random"), &e, where);
    } else {
      Report(e, where, "expected round-robin or disable");
    }
  }

  void ReadDatabase(const IniEntry& e) {
    if (e.key == "pgbouncer") {
      Report(e, "databases.pgbouncer", "the name pgbouncer is the admin console's");
      return;
    }
    ReadEntry(e, "databases", kDatabaseKeys, kDatabaseUnimplemented);
  }
  void ReadUser(const IniEntry& e) { ReadEntry(e, "users", kUserKeys, kUserUnimplemented); }

  // [pgfleet]: a dotted YAML path and a YAML value ("[a, b]" is a list).
  void ReadPgfleet(const IniEntry& e) {
    YAML::Node value;
    try {
      value = YAML::Load(e.value.empty() ? "\"\"" : e.value);
    } catch (const YAML::Exception& error) {
      Report(e, e.key, absl::StrCat("invalid value: ", error.msg));
      return;
    }
    if (!value.IsScalar() && !value.IsSequence()) value = YAML::Node(e.value);
    Put(absl::StrSplit(e.key, '.'), value, &e, e.key);
  }

  // PgBouncer's defaults where pgfleet's differ (README, "Coming from PgBouncer").
  void ApplyPgBouncerDefaults() {
    const auto default_to = [&](absl::string_view dotted, absl::string_view ini_key,
                                absl::string_view value) {
      if (IsSet(dotted)) return;
      PutText(dotted, value, nullptr, "");
      origins_[std::string(dotted)] =
          KeyOrigin{source_, absl::StrCat(ini_key, " (not set: PgBouncer's default)"), 0};
    };
    default_to("pool.pool_mode", "pool_mode", "session");
    default_to("pool.max_client_conn", "max_client_conn", "100");
    default_to("auth.type", "auth_type", "md5");
    default_to("tls.server_tls_sslmode", "server_tls_sslmode", "prefer");
    default_to("listen.unix_socket_dir", "unix_socket_dir", "/tmp");
    default_to("listen.backlog", "listen_backlog", "128");
    default_to("pool.query_wait_notify", "query_wait_notify", "5s");
    default_to("pool.log_stats", "log_stats", "true");
    if (IsSet("auth.user")) default_to("auth.query", "auth_query", kPgBouncerAuthQuery);
    // A database's auth_user without a query anywhere runs PgBouncer's default query.
    if (!IsSet("auth.query") && root_["databases"]) {
      for (auto it = root_["databases"].begin(); it != root_["databases"].end(); ++it) {
        if (it->second.IsMap() && it->second["auth_user"] && !it->second["auth_query"]) {
          it->second["auth_query"] = std::string(kPgBouncerAuthQuery);
        }
      }
    }
    const std::string socket_dir = root_["listen"]["unix_socket_dir"].as<std::string>();
    for (const std::string& db : databases_without_host_) {
      PutText(absl::StrCat("databases.", db, ".host"), socket_dir, nullptr, "");
    }
    if (hba_entry_.has_value() && !IsSet("auth.hba_file")) {
      Report(*hba_entry_, "auth_type", "hba needs auth_hba_file");
    }
  }

  std::string source_;
  YAML::Node root_{YAML::NodeType::Map};
  KeyOrigins origins_;
  std::set<std::string> set_;
  std::vector<Issue> issues_;
  std::vector<std::string> databases_without_host_;
  std::optional<IniEntry> hba_entry_;  // auth_type = hba
};

absl::StatusOr<yaml_reading::TranslatedIni> TranslateEntries(const std::vector<IniEntry>& entries,
                                                             const std::string& source_name) {
  Translator translator(source_name);
  translator.Read(entries);
  if (!translator.issues().empty()) return internal::IssuesToStatus("", translator.issues());
  return yaml_reading::TranslatedIni{translator.root(), translator.origins()};
}

}  // namespace

namespace yaml_reading {

absl::StatusOr<TranslatedIni> TranslateSettings(
    const std::vector<std::pair<std::string, std::string>>& settings, const std::string& source) {
  std::vector<IniEntry> entries;
  for (const auto& [key, value] : settings) {
    entries.push_back(IniEntry{"pgbouncer", key, value, source, 0});
  }
  Translator translator(source);
  translator.ReadSettings(entries);
  if (!translator.issues().empty()) return internal::IssuesToStatus("", translator.issues());
  return TranslatedIni{translator.root(), translator.origins()};
}

absl::StatusOr<TranslatedIni> ReadPgBouncerIniText(const std::string& text,
                                                   const std::string& source) {
  auto entries = internal::ReadIniText(text, source);
  if (!entries.ok()) return entries.status();
  return TranslateEntries(*entries, source);
}

absl::StatusOr<TranslatedIni> ReadPgBouncerIniFile(const std::string& path) {
  auto text = internal::ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ReadPgBouncerIniText(*text, path);
}

}  // namespace yaml_reading

}  // namespace pgfleet::config
