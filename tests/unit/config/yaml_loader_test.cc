// LoadConfigText / LoadConfigFile: the YAML shape, defaults, and errors that name file, key, line.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/config/config.h"

namespace pgfleet::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;
using ::testing::StartsWith;

constexpr char kFile[] = "/etc/pgfleet.yaml";

// Loads `text` and returns the error message; fails the test when it loads.
std::string ErrorOf(const std::string& text) {
  auto config = LoadConfigText(text, kFile);
  EXPECT_FALSE(config.ok()) << text;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

// The example in docs/architecture.md, "Configuration", verbatim.
constexpr char kDesignExample[] = R"yaml(
listen: {address: 127.0.0.1, port: 6432, unix_socket_dir: /tmp}
workers: auto                 # or a number
databases:
  app:                        # the name clients connect to
    host: 127.0.0.1
    port: 5432
    dbname: app               # default: the name above
    pool_mode: transaction    # optional per-database overrides of the pool section
    pool_size: 20
    max_db_connections: 50    # fleet-wide budget for this database
  "*": {host: 127.0.0.1, port: 5432}   # optional fallback: any database name
pool:
  pool_mode: transaction      # session | transaction | statement
  default_pool_size: 20
  max_client_conn: 10000      # fleet-wide
  max_prepared_statements: 200
  server_reset_query: DISCARD ALL
  query_wait_timeout: 120s    # durations as 500ms, 30s, 5m
auth:
  type: scram-sha-256         # trust | md5 | scram-sha-256
  file: /etc/pgfleet/userlist.txt     # PgBouncer userlist.txt format
  query: SELECT usename, passwd FROM pg_shadow WHERE usename = $1
  user: pgfleet_auth          # who runs auth_query
admin: {users: [admin], stats_users: [stats]}
metrics: {listen: 127.0.0.1:9127}
peering: {}                   # unix socket dir, pod address, credentials, static peers
controller: {}                # address of pgfleet-controller, lease timings
)yaml";

TEST(YamlLoaderTest, DesignExampleLoadsWithEveryValue) {
  auto loaded = LoadConfigText(kDesignExample, kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Config& c = *loaded;
  EXPECT_EQ(c.source_path, kFile);
  EXPECT_EQ(c.listen.address, "127.0.0.1");
  EXPECT_EQ(c.listen.port, 6432);
  EXPECT_EQ(c.listen.unix_socket_dir, "/tmp");
  EXPECT_EQ(c.workers, "auto");
  ASSERT_EQ(c.databases.size(), 2u);
  const DatabaseConfig& app = c.databases.at("app");
  EXPECT_EQ(app.name, "app");
  EXPECT_EQ(app.hosts, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(app.ports, std::vector<int>{5432});
  EXPECT_EQ(app.dbname, "app");
  EXPECT_EQ(app.overrides.pool_mode, PoolMode::kTransaction);
  EXPECT_EQ(app.overrides.pool_size, 20);
  EXPECT_EQ(app.overrides.min_pool_size, std::nullopt);
  EXPECT_EQ(app.max_db_connections, 50);
  const DatabaseConfig& star = c.databases.at("*");
  EXPECT_EQ(star.name, "*");
  EXPECT_EQ(star.hosts, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(star.ports, std::vector<int>{5432});
  EXPECT_EQ(star.dbname, "");
  EXPECT_EQ(c.pool.pool_mode, PoolMode::kTransaction);
  EXPECT_EQ(c.pool.default_pool_size, 20);
  EXPECT_EQ(c.pool.max_client_conn, 10000);
  EXPECT_EQ(c.pool.max_prepared_statements, 200);
  EXPECT_EQ(c.pool.server_reset_query, "DISCARD ALL");
  EXPECT_EQ(c.pool.query_wait_timeout, absl::Seconds(120));
  EXPECT_EQ(c.auth.type, AuthType::kScramSha256);
  EXPECT_EQ(c.auth.file, "/etc/pgfleet/userlist.txt");
  EXPECT_EQ(c.auth.query, "SELECT usename, passwd FROM pg_shadow WHERE usename = $1");
  EXPECT_EQ(c.auth.user, "pgfleet_auth");
  EXPECT_THAT(c.admin.users, ElementsAre("admin"));
  EXPECT_THAT(c.admin.stats_users, ElementsAre("stats"));
  EXPECT_EQ(c.metrics.listen, "127.0.0.1:9127");
  EXPECT_TRUE(c.peering.listen.empty());
  EXPECT_FALSE(c.controller.enabled());
  EXPECT_EQ(c.controller.lease_timeout, absl::Seconds(15));
  EXPECT_TRUE(c.warnings.empty());
}

TEST(YamlLoaderTest, OmittedKeysTakeDefaults) {
  auto loaded = LoadConfigText("databases: {app: {}}\n", kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Config& c = *loaded;
  const Config defaults;
  EXPECT_EQ(c.listen.address, "127.0.0.1");
  EXPECT_EQ(c.listen.port, 6432);
  EXPECT_EQ(c.listen.unix_socket_dir, "");
  EXPECT_EQ(c.listen.backlog, 1024);
  EXPECT_EQ(c.workers, "auto");
  const DatabaseConfig& app = c.databases.at("app");
  EXPECT_EQ(app.hosts, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(app.ports, std::vector<int>{5432});
  EXPECT_EQ(app.dbname, "");
  EXPECT_FALSE(app.overrides.pool_mode.has_value());
  EXPECT_FALSE(app.overrides.pool_size.has_value());
  EXPECT_EQ(app.max_db_connections, 0);
  EXPECT_TRUE(c.users.empty());
  EXPECT_EQ(c.pool.pool_mode, PoolMode::kTransaction);
  EXPECT_EQ(c.pool.default_pool_size, 20);
  EXPECT_EQ(c.pool.reserve_pool_timeout, absl::Seconds(5));
  EXPECT_EQ(c.pool.max_client_conn, 10000);
  EXPECT_EQ(c.pool.server_reset_query, "DISCARD ALL");
  EXPECT_EQ(c.pool.server_check_query, "");
  EXPECT_EQ(c.pool.server_lifetime, absl::Seconds(3600));
  EXPECT_EQ(c.pool.client_idle_timeout, absl::ZeroDuration());
  EXPECT_EQ(c.pool.query_wait_timeout, absl::Seconds(120));
  EXPECT_EQ(c.pool.cancel_wait_timeout, absl::Seconds(10));
  EXPECT_EQ(c.pool.track_extra_parameters, defaults.pool.track_extra_parameters);
  EXPECT_TRUE(c.pool.ignore_startup_parameters.empty());
  EXPECT_EQ(c.pool.max_packet_size, 2147483647);
  EXPECT_EQ(c.pool.pkt_buf, 4096);
  EXPECT_TRUE(c.pool.tcp_keepalive);
  EXPECT_EQ(c.auth.type, AuthType::kTrust);
  EXPECT_EQ(c.auth.file, "");
  EXPECT_TRUE(c.admin.users.empty());
  EXPECT_EQ(c.metrics.listen, "127.0.0.1:9127");
  EXPECT_EQ(c.log.level, "info");
  EXPECT_TRUE(c.log.log_connections);
  EXPECT_TRUE(c.log.log_disconnections);
}

TEST(YamlLoaderTest, EmptySectionsTakeDefaults) {
  auto loaded = LoadConfigText("listen:\npool:\ndatabases:\n  app:\nusers:\n  bob:\n", kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->listen.port, 6432);
  EXPECT_EQ(loaded->databases.at("app").hosts, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(loaded->users.at("bob").name, "bob");
}

TEST(YamlLoaderTest, DatabaseAndUserLimitsDefaultToPoolSection) {
  auto loaded = LoadConfigText(R"yaml(
pool: {max_db_connections: 40, max_user_connections: 8}
databases:
  inherits: {}
  unlimited: {max_db_connections: 0}
users:
  alice: {}
  bob: {max_user_connections: 0}
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->databases.at("inherits").max_db_connections, 40);
  EXPECT_EQ(loaded->databases.at("unlimited").max_db_connections, 0);
  EXPECT_EQ(loaded->EffectiveMaxUserConnections("alice"), 8);
  EXPECT_EQ(loaded->EffectiveMaxUserConnections("bob"), 0);
  EXPECT_EQ(loaded->EffectiveMaxUserConnections("carol"), 8);
}

TEST(YamlLoaderTest, PerDatabaseAndPerUserOverridesResolve) {
  auto loaded = LoadConfigText(R"yaml(
pool: {pool_mode: transaction, default_pool_size: 20, min_pool_size: 1, reserve_pool_size: 2}
databases:
  app: {pool_mode: session, pool_size: 5, min_pool_size: 3, reserve_pool_size: 0}
  other: {}
  "*": {host: 10.1.1.1}
users:
  batch: {pool_mode: statement}
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Config& c = *loaded;
  auto app = c.FindDatabase("app");
  auto other = c.FindDatabase("other");
  auto fallback = c.FindDatabase("reports");
  ASSERT_TRUE(app && other && fallback);
  EXPECT_EQ(c.EffectivePoolMode(*app, "web"), PoolMode::kSession);
  EXPECT_EQ(c.EffectivePoolMode(*app, "batch"), PoolMode::kStatement);
  EXPECT_EQ(c.EffectivePoolMode(*other, "web"), PoolMode::kTransaction);
  EXPECT_EQ(c.EffectivePoolSize(*app), 5);
  EXPECT_EQ(c.EffectivePoolSize(*other), 20);
  EXPECT_EQ(c.EffectiveMinPoolSize(*app), 3);
  EXPECT_EQ(c.EffectiveMinPoolSize(*other), 1);
  EXPECT_EQ(c.EffectiveReservePoolSize(*app), 0);
  EXPECT_EQ(c.EffectiveReservePoolSize(*other), 2);
  EXPECT_EQ(app->dbname, "app");
  EXPECT_EQ(fallback->dbname, "reports");
  EXPECT_EQ(fallback->hosts, std::vector<std::string>{"10.1.1.1"});
  EXPECT_TRUE(fallback->from_fallback);
}

TEST(YamlLoaderTest, ListsAcceptYamlSequencesOrCommaSeparatedText) {
  auto loaded = LoadConfigText(R"yaml(
databases: {app: {}}
pool:
  track_extra_parameters: [IntervalStyle, search_path]
  ignore_startup_parameters: "extra_float_digits, options"
admin: {users: "admin,ops", stats_users: []}
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->pool.track_extra_parameters, ElementsAre("IntervalStyle", "search_path"));
  EXPECT_THAT(loaded->pool.ignore_startup_parameters, ElementsAre("extra_float_digits", "options"));
  EXPECT_THAT(loaded->admin.users, ElementsAre("admin", "ops"));
  EXPECT_TRUE(loaded->admin.stats_users.empty());
}

// libpq's multi-host settings: host and port lists as text or YAML lists.
TEST(YamlLoaderTest, HostListsTargetSessionAttrsAndLoadBalancing) {
  auto loaded = LoadConfigText(R"yaml(
databases:
  rw: {host: "pg-0.pg, pg-1.pg", port: 5432, target_session_attrs: read-write}
  ro:
    host: [pg-0.pg, pg-1.pg]
    port: "5433,5434"
    target_session_attrs: prefer-standby
    load_balance_hosts: random
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const auto& rw = loaded->databases.at("rw");
  EXPECT_THAT(rw.hosts, ElementsAre("pg-0.pg", "pg-1.pg"));
  EXPECT_THAT(rw.ports, ElementsAre(5432));
  EXPECT_EQ(rw.target_session_attrs, TargetSessionAttrs::kReadWrite);
  EXPECT_EQ(rw.load_balance_hosts, LoadBalanceHosts::kDisable);
  const auto& ro = loaded->databases.at("ro");
  EXPECT_EQ(ro.Addresses(), (std::vector<HostAddress>{{"pg-0.pg", 5433}, {"pg-1.pg", 5434}}));
  EXPECT_EQ(ro.target_session_attrs, TargetSessionAttrs::kPreferStandby);
  EXPECT_EQ(ro.load_balance_hosts, LoadBalanceHosts::kRandom);

  EXPECT_THAT(ErrorOf("databases: {app: {host: 'a,b,c', port: '5432,5433'}}\n"),
              HasSubstr("databases.app.port: must be one port for every host or one per host "
                        "(3 hosts, 2 ports)"));
  EXPECT_THAT(ErrorOf("databases: {app: {host: 'a,,b'}}\n"),
              HasSubstr("databases.app.host: must not name an empty host"));
  EXPECT_THAT(ErrorOf("databases: {app: {port: '5432,x'}}\n"),
              HasSubstr("databases.app.port: expected a port or a list of ports"));
  EXPECT_THAT(ErrorOf("databases: {app: {target_session_attrs: primary-ish}}\n"),
              HasSubstr("databases.app.target_session_attrs: expected one of any, read-write, "
                        "read-only, primary, standby, prefer-standby"));
  EXPECT_THAT(ErrorOf("databases: {app: {load_balance_hosts: yes}}\n"),
              HasSubstr("databases.app.load_balance_hosts: expected one of disable, random"));
}

TEST(YamlLoaderTest, SessionStateAndPinnedServersAtEachLevel) {
  auto loaded = LoadConfigText(R"yaml(
databases:
  app: {host: 127.0.0.1, session_state: refuse}
  other: {host: 127.0.0.1, pool_size: 10}
users:
  batch: {session_state: pass}
pool:
  session_state: track
  max_pinned_servers: 3
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const auto& app = loaded->databases.at("app");
  const auto& other = loaded->databases.at("other");
  EXPECT_EQ(loaded->EffectiveSessionState(app, "alice"), SessionState::kRefuse);
  EXPECT_EQ(loaded->EffectiveSessionState(app, "batch"), SessionState::kPass);
  EXPECT_EQ(loaded->EffectiveSessionState(other, "alice"), SessionState::kTrack);
  EXPECT_EQ(loaded->EffectiveMaxPinnedServers(other), 3);
  loaded->pool.max_pinned_servers = 0;  // the default: half the pool, at least 1
  EXPECT_EQ(loaded->EffectiveMaxPinnedServers(other), 5);
  EXPECT_THAT(ErrorOf("pool: {session_state: pin}\n"),
              HasSubstr("pool.session_state: expected one of track, refuse, pass"));
  EXPECT_THAT(ErrorOf("databases: {app: {session_state: 1}}\n"),
              HasSubstr("databases.app.session_state: expected one of track, refuse, pass"));
}

TEST(YamlLoaderTest, PeeringAndControllerAreTypedAndUnknownPeeringKeysOnlyWarn) {
  auto loaded = LoadConfigText(R"yaml(
databases: {app: {}}
peering:
  unix_socket_dir: /run/pgfleet
  static_peers: [10.0.0.2:7000, 10.0.0.3:7000]
  tls: {cert_file: /etc/tls/tls.crt, key_file: /etc/tls/tls.key, ca_file: /etc/tls/ca.crt,
        anything_goes: {deep: 1}}
controller: {address: "ctl:7001"}
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->peering.static_peers, ElementsAre("10.0.0.2:7000", "10.0.0.3:7000"));
  EXPECT_EQ(loaded->peering.tls.cert_file, "/etc/tls/tls.crt");
  EXPECT_EQ(loaded->controller.address, "ctl:7001");
  EXPECT_THAT(loaded->warnings, ElementsAre("peering.tls.anything_goes: unknown key, ignored",
                                            "peering.unix_socket_dir: unknown key, ignored"));
}

TEST(YamlLoaderTest, BooleansAcceptYamlAndPgBouncerSpellings) {
  auto loaded = LoadConfigText(R"yaml(
databases: {app: {}}
pool: {server_reset_query_always: yes, tcp_keepalive: 0}
log: {log_connections: False, log_disconnections: on}
)yaml",
                               kFile);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->pool.server_reset_query_always);
  EXPECT_FALSE(loaded->pool.tcp_keepalive);
  EXPECT_FALSE(loaded->log.log_connections);
  EXPECT_TRUE(loaded->log.log_disconnections);
}

TEST(YamlLoaderTest, BadIntegerNamesFileKeyAndLine) {
  EXPECT_EQ(ErrorOf("databases: {app: {}}\npool:\n  default_pool_size: abc\n"),
            "/etc/pgfleet.yaml: pool.default_pool_size: expected a non-negative integer, got "
            "\"abc\" (line 3)");
}

TEST(YamlLoaderTest, NegativeAndHugeIntegersAreRejected) {
  EXPECT_THAT(ErrorOf("databases: {app: {port: -1}}\n"),
              HasSubstr("databases.app.port: expected a non-negative integer, got \"-1\""));
  EXPECT_THAT(ErrorOf("databases: {app: {}}\npool: {max_client_conn: 99999999999}\n"),
              HasSubstr("pool.max_client_conn: expected a non-negative integer no larger than"));
}

TEST(YamlLoaderTest, EachKindOfBadValueNamesFileAndKey) {
  struct Case {
    const char* yaml;
    const char* expected;
  };
  const Case cases[] = {
      {"databases: {app: {}}\nlog: {log_connections: maybe}\n",
       "log.log_connections: expected true or false, got \"maybe\""},
      {"databases: {app: {}}\npool: {query_wait_timeout: soon}\n",
       "pool.query_wait_timeout: expected a duration such as 500ms"},
      {"databases: {app: {}}\npool: {server_lifetime: -5m}\n",
       "pool.server_lifetime: a duration must not be negative, got \"-5m\""},
      {"databases: {app: {pool_mode: transactions}}\n",
       "databases.app.pool_mode: expected one of session, transaction, statement, got "
       "\"transactions\""},
      {"databases: {app: {}}\nusers: {bob: {pool_mode: [session]}}\n",
       "users.bob.pool_mode: expected one of session, transaction, statement, got a list"},
      {"databases: {app: {}}\nauth: {type: password}\n",
       "auth.type: expected one of trust, md5, scram-sha-256, cert, plain, any, got \"password\""},
      {"databases: {app: {host: {name: x}}}\n",
       "databases.app.host: expected a string, got a mapping"},
      {"databases: {app: {}}\npool: {track_extra_parameters: {a: b}}\n",
       "pool.track_extra_parameters: expected a list of names, got a mapping"},
      {"databases: {app: {}}\nadmin: {users: [admin, [nested]]}\n",
       "admin.users[1]: expected a string, got a list"},
      {"databases: {app: {}}\npool: 5\n", "pool: expected a mapping, got \"5\""},
      {"databases: [app]\n", "databases: expected a mapping, got a list"},
      {"databases: {app: postgres://x}\n",
       "databases.app: expected a mapping, got \"postgres://x\""},
      {"databases: {app: {}}\npeering: yes\n", "peering: expected a mapping, got \"yes\""},
      {"listen: {port: 70000}\ndatabases: {app: {}}\n",
       "listen.port: must be between 0 and 65535 (0 picks a free port), got 70000"},
      {"workers: many\ndatabases: {app: {}}\n",
       "workers: expected \"auto\" or a positive integer, got \"many\""},
  };
  for (const Case& c : cases) {
    const std::string error = ErrorOf(c.yaml);
    EXPECT_THAT(error, StartsWith(std::string(kFile) + ": ")) << c.yaml;
    EXPECT_THAT(error, HasSubstr(c.expected)) << c.yaml;
  }
}

TEST(YamlLoaderTest, UnknownKeyNamesPathAndSuggestsTheClosestKey) {
  EXPECT_EQ(ErrorOf("databases: {app: {}}\npool:\n  defualt_pool_size: 10\n"),
            "/etc/pgfleet.yaml: unknown key \"pool.defualt_pool_size\", did you mean "
            "\"pool.default_pool_size\"? (line 3)");
  EXPECT_EQ(ErrorOf("databases: {app: {prot: 5432}}\n"),
            "/etc/pgfleet.yaml: unknown key \"databases.app.prot\", did you mean "
            "\"databases.app.port\"? (line 1)");
  EXPECT_EQ(ErrorOf("databases: {app: {}}\nlistne: {}\n"),
            "/etc/pgfleet.yaml: unknown key \"listne\", did you mean \"listen\"? (line 2)");
}

TEST(YamlLoaderTest, UnknownKeyFarFromAnyKnownKeyHasNoSuggestion) {
  const std::string error = ErrorOf("databases: {app: {}}\nfrobnicate: 1\n");
  EXPECT_EQ(error, "/etc/pgfleet.yaml: unknown key \"frobnicate\" (line 2)");
}

TEST(YamlLoaderTest, DuplicateKeyIsAnError) {
  EXPECT_THAT(ErrorOf("databases: {app: {}}\npool:\n  pkt_buf: 1\n  pkt_buf: 2\n"),
              HasSubstr("pool.pkt_buf: duplicate key (line 4)"));
}

TEST(YamlLoaderTest, MalformedYamlNamesFileAndLine) {
  const std::string error =
      ErrorOf("databases:\n  app: {host: 127.0.0.1, port: 5432\npool:\n  default_pool_size: 1\n");
  EXPECT_THAT(error, StartsWith("/etc/pgfleet.yaml: invalid YAML: "));
  EXPECT_THAT(error, HasSubstr("(line "));
  EXPECT_THAT(ErrorOf("databases: {app: {}}\npool:\n\tdefault_pool_size: 1\n"),
              HasSubstr("(line 3, column"));
}

TEST(YamlLoaderTest, TopLevelMustBeAMapping) {
  // Only the one problem: "no databases" would be noise on top of it.
  EXPECT_EQ(ErrorOf("- databases\n- pool\n"),
            "/etc/pgfleet.yaml: expected a mapping of sections (listen, databases, pool, ...) at "
            "the top level, got a list (line 1)");
}

TEST(YamlLoaderTest, EveryProblemIsReportedOnItsOwnLineInFileOrder) {
  const std::string error = ErrorOf(R"yaml(databases:
  app: {port: x}
pool:
  default_pool_size: 0
  bogus: 1
)yaml");
  EXPECT_EQ(error,
            "/etc/pgfleet.yaml: databases.app.port: expected a non-negative integer, got \"x\" "
            "(line 2)\n"
            "/etc/pgfleet.yaml: pool.default_pool_size: must be at least 1, got 0 (line 4)\n"
            "/etc/pgfleet.yaml: unknown key \"pool.bogus\" (line 5)");
}

TEST(YamlLoaderTest, MissingDatabasesIsAnError) {
  EXPECT_EQ(ErrorOf("listen: {port: 6432}\n"),
            "/etc/pgfleet.yaml: databases: at least one database must be configured (a \"*\" "
            "entry accepts any name)");
  EXPECT_THAT(ErrorOf(""), HasSubstr("databases: at least one database"));
}

TEST(YamlLoaderTest, RelativeAuthFileIsResolvedAgainstConfigDirectory) {
  const std::string text = "databases: {app: {}}\nauth: {type: md5, file: users/list.txt}\n";
  auto nested = LoadConfigText(text, "/etc/pgfleet/pgfleet.yaml");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->auth.file, "/etc/pgfleet/users/list.txt");

  auto bare = LoadConfigText(text, "pgfleet.yaml");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->auth.file, "users/list.txt");

  auto absolute = LoadConfigText(
      "databases: {app: {}}\nauth: {type: md5, file: /srv/userlist.txt}\n", "/etc/pgfleet.yaml");
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(absolute->auth.file, "/srv/userlist.txt");
}

TEST(YamlLoaderTest, RelativeHbaFileIsResolvedAgainstConfigDirectory) {
  auto relative = LoadConfigText("databases: {app: {}}\nauth: {hba_file: pg_hba.conf}\n",
                                 "/etc/pgfleet/pgfleet.yaml");
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_EQ(relative->auth.hba_file, "/etc/pgfleet/pg_hba.conf");
  auto absolute = LoadConfigText("databases: {app: {}}\nauth: {hba_file: /srv/hba.conf}\n",
                                 "/etc/pgfleet/pgfleet.yaml");
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(absolute->auth.hba_file, "/srv/hba.conf");
  auto none = LoadConfigText("databases: {app: {}}\n", "/etc/pgfleet/pgfleet.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->auth.hba_file, "");
}

TEST(YamlLoaderTest, AbuseLimitsHaveDefaultsAndRejectNegatives) {
  auto defaults = LoadConfigText("databases: {app: {}}\n", "/etc/pgfleet.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->pool.max_concurrent_logins, 0);
  EXPECT_EQ(defaults->pool.cancel_rate_limit, 100);
  auto set = LoadConfigText(
      "databases: {app: {}}\npool: {max_concurrent_logins: 50, cancel_rate_limit: 0}\n",
      "/etc/pgfleet.yaml");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->pool.max_concurrent_logins, 50);
  EXPECT_EQ(set->pool.cancel_rate_limit, 0);
  EXPECT_THAT(ErrorOf("databases: {app: {}}\npool: {max_concurrent_logins: -1}\n"),
              HasSubstr("pool.max_concurrent_logins"));
  EXPECT_THAT(ErrorOf("databases: {app: {}}\npool: {cancel_rate_limit: -5}\n"),
              HasSubstr("pool.cancel_rate_limit"));
}

TEST(YamlLoaderTest, AliasBombUnderPeeringIsNotExpanded) {
  // Nine levels of ten aliases each: 10^9 values from a few hundred bytes. The typed section reads
  // only its own keys, so the unknown ones are warnings and nothing walks the tree (this used to
  // hang --check-config and SIGHUP reload while peering: was stored flattened).
  std::string text = "databases: {app: {}}\npeering:\n  l0: &l0 [1,1,1,1,1,1,1,1,1,1]\n";
  for (int level = 1; level < 9; ++level) {
    absl::StrAppend(&text, "  l", level, ": &l", level, " [");
    for (int i = 0; i < 10; ++i) absl::StrAppend(&text, i == 0 ? "" : ",", "*l", level - 1);
    absl::StrAppend(&text, "]\n");
  }
  auto bomb = LoadConfigText(text, "/etc/pgfleet.yaml");
  ASSERT_TRUE(bomb.ok()) << bomb.status();
  EXPECT_EQ(bomb->warnings.size(), 9u);
  // A list of lists where a list of addresses belongs is reported, not expanded.
  EXPECT_THAT(ErrorOf(absl::StrCat(text, "  static_peers: *l8\n")),
              HasSubstr("peering.static_peers[0]: expected a string"));
  // Aliases that stay small are fine.
  auto small = LoadConfigText(
      "databases: {app: {}}\npeering: {static_peers: &a [\"h1:1\", \"h2:2\"]}\n"
      "controller: {x: *a}\n",
      "/etc/pgfleet.yaml");
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(std::string(small.status().message()), HasSubstr("unknown key \"controller.x\""));
}

TEST(YamlLoaderTest, LoadConfigFileReadsAndNamesTheFile) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "pgfleet_cfg";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "pgfleet.yaml").string();
  {
    std::ofstream out(path);
    out << "databases: {app: {}}\nauth: {type: md5, file: userlist.txt}\n";
  }
  auto loaded = LoadConfigFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->source_path, path);
  EXPECT_EQ(loaded->auth.file, (dir / "userlist.txt").string());

  {
    std::ofstream out(path);
    out << "databases: {app: {}}\npool: {pkt_buf: big}\n";
  }
  auto bad = LoadConfigFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), StartsWith(path + ": pool.pkt_buf: "));
  std::filesystem::remove_all(dir);
}

TEST(YamlLoaderTest, MissingFileIsNotFoundAndNamesThePath) {
  auto loaded = LoadConfigFile("/nonexistent/pgfleet.yaml");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("/nonexistent/pgfleet.yaml"));
  EXPECT_THAT(std::string(loaded.status().message()), Not(HasSubstr("(line")));
}

}  // namespace
}  // namespace pgfleet::config

namespace pgfleet::config {
namespace {

TEST(TlsSectionTest, ReadsPgBouncerKeysAndResolvesFilesNextToTheConfig) {
  auto config = LoadConfigText(
      "databases: {app: {}}\n"
      "tls:\n"
      "  client_tls_sslmode: verify-full\n"
      "  client_tls_cert_file: certs/server.crt\n"
      "  client_tls_key_file: /secret/server.key\n"
      "  client_tls_ca_file: ca.crt\n"
      "  client_tls_protocols: tlsv1.3\n"
      "  server_tls_sslmode: prefer\n",
      "/etc/pgfleet/pgfleet.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls.client_tls_sslmode, SslMode::kVerifyFull);
  EXPECT_EQ(config->tls.client_tls_cert_file, "/etc/pgfleet/certs/server.crt");
  EXPECT_EQ(config->tls.client_tls_key_file, "/secret/server.key");
  EXPECT_EQ(config->tls.client_tls_ca_file, "/etc/pgfleet/ca.crt");
  EXPECT_EQ(config->tls.client_tls_protocols, "tlsv1.3");
  EXPECT_EQ(config->tls.server_tls_sslmode, SslMode::kPrefer);
  EXPECT_EQ(config->tls.server_tls_protocols, "secure");
}

TEST(TlsSectionTest, ErrorsNameTheKey) {
  EXPECT_THAT(ErrorOf("databases: {app: {}}\ntls: {client_tls_sslmode: always}\n"),
              HasSubstr("/etc/pgfleet.yaml: tls.client_tls_sslmode: expected one of disable, "
                        "allow, prefer, require, verify-ca, verify-full"));
  EXPECT_THAT(ErrorOf("databases: {app: {}}\ntls: {client_tls_sslmode: require}\n"),
              HasSubstr("tls.client_tls_cert_file: client_tls_sslmode require needs"));
  EXPECT_THAT(ErrorOf("databases: {app: {}}\ntls: {server_tls_sslmode: verify-full}\n"),
              HasSubstr("tls.server_tls_ca_file"));
  EXPECT_THAT(ErrorOf("databases: {app: {}}\ntls: {client_tls_sslmod: require}\n"),
              HasSubstr("did you mean \"tls.client_tls_sslmode\""));
}

}  // namespace
}  // namespace pgfleet::config
