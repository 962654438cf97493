// pgbouncer.ini with PgBouncer's meaning (issue 35): the ini syntax, each key's translation,
// PgBouncer's defaults, errors that name the ini key, file and line, and --print-config's YAML.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/config/config.h"
#include "pooler/config/ini_file.h"

namespace pgfleet::config {
namespace pgbouncer_ini_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kIni[] = "/etc/pgbouncer/pgbouncer.ini";

std::string ErrorOf(const std::string& text) {
  auto config = LoadConfigText(text, kIni);
  EXPECT_FALSE(config.ok()) << text;
  return config.ok() ? "" : std::string(config.status().message());
}

TEST(IniFileTest, ReadsSectionsKeysCommentsAndQuotedKeys) {
  auto entries = internal::ReadIniText(
      "; comment\n# another\n[databases]\n  app = host=a  # not a comment\n\"my db\" = "
      "host=b\n'x.y' =\n[pgbouncer]\npool_mode=session\n",
      "f.ini");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].section, "databases");
  EXPECT_EQ((*entries)[0].key, "app");
  EXPECT_EQ((*entries)[0].value, "host=a  # not a comment");
  EXPECT_EQ((*entries)[0].line, 4);
  EXPECT_EQ((*entries)[1].key, "my db");
  EXPECT_EQ((*entries)[2].key, "x.y");
  EXPECT_EQ((*entries)[2].value, "");
  EXPECT_EQ((*entries)[3].section, "pgbouncer");
  EXPECT_EQ((*entries)[3].value, "session");
}

TEST(IniFileTest, SyntaxErrorsNameFileAndLine) {
  auto no_equals = internal::ReadIniText("[pgbouncer]\npool_mode session\n", "f.ini");
  ASSERT_FALSE(no_equals.ok());
  EXPECT_THAT(no_equals.status().message(), HasSubstr("f.ini: expected key = value"));
  EXPECT_THAT(no_equals.status().message(), HasSubstr("(line 2)"));
  EXPECT_FALSE(internal::ReadIniText("[pgbouncer\n", "f.ini").ok());
  auto missing = internal::ReadIniText("%include /nonexistent/x.ini\n", "f.ini");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("%include"));
}

TEST(IniFileTest, IniIsToldFromYamlByItsFirstLine) {
  EXPECT_TRUE(internal::LooksLikeIni("; c\n\n[pgbouncer]\n"));
  EXPECT_TRUE(internal::LooksLikeIni("%include base.ini\n"));
  EXPECT_FALSE(internal::LooksLikeIni("# c\nlisten:\n  port: 1\n"));
}

TEST(PgBouncerIniTest, KeysTakePgBouncersMeaningAndDefaults) {
  auto config = LoadConfigText(R"ini(
[databases]
app = host=db1,db2 port=5433 dbname=appdb pool_size=5 reserve_pool=2 max_db_connections=9 connect_query='SET a = 1' server_lifetime=0
short = host=db1 server_lifetime=5 client_encoding=SQL_ASCII timezone=UTC
"my db" = host=127.0.0.1 user=postgres password='s3 cr\'et' pool_mode=transaction
local =
* = host=10.0.0.1 load_balance_hosts=round-robin

[users]
report = pool_mode=statement max_user_connections=4 max_user_client_connections=7 pool_size=2 reserve_pool_size=1 query_timeout=30 client_idle_timeout=0.5

[pgbouncer]
listen_addr = 127.0.0.1, ::1
unix_socket_mode = 0770
unix_socket_group = postgres
max_db_client_connections = 50
max_user_client_connections = 60
server_round_robin = 1
application_name_add_host = 1
stats_period = 30
tcp_socket_buffer = 4096
listen_port = 6543
auth_file = /etc/pgbouncer/userlist.txt
admin_users = postgres, admin
server_lifetime = 0
server_check_query =
query_wait_timeout = 2.5
server_reset_query_always = 1
logfile =
so_reuseport = 1
dns_max_ttl = 15

[pgfleet]
workers = 3
metrics.listen = 127.0.0.1:9999
peering.static_peers = [a:1, b:2]
)ini",
                               kIni);
  ASSERT_TRUE(config.ok()) << config.status();
  // PgBouncer's defaults where pgfleet's differ.
  EXPECT_EQ(config->pool.pool_mode, PoolMode::kSession);
  EXPECT_EQ(config->pool.max_client_conn, 100);
  EXPECT_EQ(config->auth.type, AuthType::kMd5);
  EXPECT_EQ(config->tls.server_tls_sslmode, SslMode::kPrefer);
  EXPECT_EQ(config->listen.unix_socket_dir, "/tmp");
  EXPECT_EQ(config->listen.backlog, 128);
  // The keys as written.
  EXPECT_EQ(config->listen.address, "127.0.0.1,::1");
  EXPECT_THAT(config->listen.Addresses(), ElementsAre("127.0.0.1", "::1"));
  EXPECT_EQ(config->listen.unix_socket_mode, 0770);
  EXPECT_EQ(config->listen.unix_socket_group, "postgres");
  EXPECT_EQ(config->pool.max_db_client_connections, 50);
  EXPECT_EQ(config->pool.max_user_client_connections, 60);
  EXPECT_TRUE(config->pool.server_round_robin);
  EXPECT_TRUE(config->pool.application_name_add_host);
  EXPECT_TRUE(config->pool.log_stats);  // PgBouncer's default
  EXPECT_EQ(config->pool.stats_period, absl::Seconds(30));
  EXPECT_EQ(config->pool.tcp_socket_buffer, 4096);
  EXPECT_EQ(config->pool.query_wait_notify, absl::Seconds(5));  // PgBouncer's default
  EXPECT_EQ(config->listen.port, 6543);
  EXPECT_THAT(config->admin.users, ElementsAre("postgres", "admin"));
  EXPECT_EQ(config->pool.server_lifetime, absl::Microseconds(1));  // PgBouncer's "use once"
  EXPECT_EQ(config->pool.server_check_query, "-");                 // PgBouncer's "no check"
  EXPECT_EQ(config->pool.query_wait_timeout, absl::Milliseconds(2500));
  EXPECT_TRUE(config->pool.server_reset_query_always);
  const DatabaseConfig& app = config->databases.at("app");
  EXPECT_THAT(app.hosts, ElementsAre("db1", "db2"));
  EXPECT_THAT(app.ports, ElementsAre(5433));
  EXPECT_EQ(app.dbname, "appdb");
  EXPECT_EQ(app.overrides.pool_size, 5);
  EXPECT_EQ(app.overrides.reserve_pool_size, 2);
  EXPECT_EQ(app.max_db_connections, 9);
  EXPECT_EQ(app.connect_query, "SET a = 1");
  // A database's server_lifetime 0 is the [pgbouncer] value, as in PgBouncer.
  EXPECT_FALSE(app.server_lifetime.has_value());
  EXPECT_EQ(config->databases.at("short").server_lifetime, absl::Seconds(5));
  EXPECT_THAT(config->databases.at("short").server_settings,
              ElementsAre(std::pair<std::string, std::string>("client_encoding", "SQL_ASCII"),
                          std::pair<std::string, std::string>("timezone", "UTC")));
  EXPECT_EQ(config->EffectiveServerLifetime(config->databases.at("short")), absl::Seconds(5));
  const DatabaseConfig& quoted = config->databases.at("my db");
  EXPECT_EQ(quoted.password, "s3 cr'et");
  EXPECT_EQ(quoted.overrides.pool_mode, PoolMode::kTransaction);
  // No host: PostgreSQL's unix socket in unix_socket_dir, as PgBouncer connects.
  EXPECT_THAT(config->databases.at("local").hosts, ElementsAre("/tmp"));
  EXPECT_EQ(config->databases.at("*").load_balance_hosts, LoadBalanceHosts::kRandom);
  EXPECT_EQ(config->users.at("report").pool_mode, PoolMode::kStatement);
  const UserConfig& report = config->users.at("report");
  EXPECT_EQ(report.max_user_connections, 4);
  EXPECT_EQ(report.max_user_client_connections, 7);
  EXPECT_EQ(report.pool_size, 2);
  EXPECT_EQ(report.reserve_pool_size, 1);
  EXPECT_EQ(config->EffectivePoolSize(app, "report"), 2);  // the user's over the database's
  EXPECT_EQ(config->EffectivePoolSize(app, "other"), 5);
  EXPECT_EQ(config->EffectiveReservePoolSize(app, "report"), 1);
  EXPECT_EQ(config->EffectiveClientTimeouts("report").query_timeout, absl::Seconds(30));
  EXPECT_EQ(config->EffectiveClientTimeouts("report").client_idle_timeout, absl::Milliseconds(500));
  EXPECT_EQ(config->EffectiveClientTimeouts("report").query_wait_timeout,
            absl::Milliseconds(2500));  // the [pgbouncer] value where the user sets none
  EXPECT_EQ(config->EffectiveMaxUserClientConnections("report"), 7);
  EXPECT_EQ(config->EffectiveMaxUserClientConnections("other"), 60);
  EXPECT_EQ(app.max_db_client_connections, 50);
  EXPECT_EQ(config->workers, "3");
  EXPECT_EQ(config->metrics.listen, "127.0.0.1:9999");
  EXPECT_THAT(config->peering.static_peers, ElementsAre("a:1", "b:2"));
}

TEST(PgBouncerIniTest, AuthUserBringsPgBouncersAuthQuery) {
  auto config = LoadConfigText("[databases]\na = host=x\n[pgbouncer]\nauth_user = pgb\n", kIni);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->auth.query, HasSubstr("FROM pg_authid WHERE rolname=$1"));
}

TEST(PgBouncerIniTest, WhatPgfleetDoesNotImplementIsAnErrorNamingKeyFileAndLine) {
  const std::string error = ErrorOf(R"ini([databases]
app = host=127.0.0.1 query_wait_timeout=5 bogus=1
[pgbouncer]
auth_file = u.txt
dns_zone_check_period = 60
disable_pqexec = 0
no_such_key = 1
auth_type = pam
server_fast_close = 0
[peers]
1 = host=x
)ini");
  EXPECT_THAT(error, HasSubstr("pgbouncer.ini: databases.app: query_wait_timeout: not supported "
                               "by pgfleet with \"5\" (line 2)"));
  EXPECT_THAT(error, HasSubstr("databases.app: bogus: unknown key in a databases entry (line 2)"));
  EXPECT_THAT(error, HasSubstr("dns_zone_check_period: not supported by pgfleet with \"60\""));
  EXPECT_THAT(error, HasSubstr("no_such_key: unknown key in [pgbouncer] (line 7)"));
  EXPECT_THAT(error, HasSubstr("auth_type: \"pam\" is not supported"));
  EXPECT_THAT(error, HasSubstr("the [peers] section is not used"));
  // Set to the value under which PgBouncer does nothing different: accepted.
  EXPECT_THAT(error, Not(HasSubstr("server_fast_close")));
}

TEST(PgBouncerIniTest, ValueErrorsFromTheCommonChecksNameTheIniKey) {
  const std::string error = ErrorOf(
      "[pgbouncer]\nauth_type = trust\ndefault_pool_size = abc\nserver_connect_timeout = soon\n"
      "unix_socket_mode = 0800\n[databases]\napp = port=99999\n");
  EXPECT_THAT(error, HasSubstr("pgbouncer.ini: default_pool_size: expected a non-negative "
                               "integer, got \"abc\" (line 3)"));
  EXPECT_THAT(error, HasSubstr("pgbouncer.ini: server_connect_timeout: expected a duration"));
  EXPECT_THAT(error, HasSubstr("pgbouncer.ini: unix_socket_mode: expected a file mode in octal"));
  EXPECT_THAT(error, HasSubstr("pgbouncer.ini: databases.app: port: must be between 1 and 65535"));
  // A default the file did not set says so.
  EXPECT_THAT(ErrorOf("[databases]\na = host=x\n"),
              HasSubstr("auth_type (not set: PgBouncer's default): \"md5\" needs auth.file"));
}

TEST(PgBouncerIniTest, IncludesReadFromTheWorkingDirectoryAndPrintAsYaml) {
  const auto dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pgfleet-ini-", ::getpid());
  std::filesystem::create_directories(dir);
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  std::ofstream("extra.ini") << "default_pool_size = 7\n";
  std::ofstream("userlist.txt") << "\"u\" \"p\"\n";
  std::ofstream("pgbouncer.ini")
      << "[databases]\napp = host=127.0.0.1\n[pgbouncer]\nauth_file = userlist.txt\n"
         "%include extra.ini\npool_mode = transaction\n";
  auto config = LoadConfigFile("pgbouncer.ini");
  auto yaml = ConfigFileAsYaml("pgbouncer.ini");
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pool.default_pool_size, 7);
  EXPECT_EQ(config->pool.pool_mode, PoolMode::kTransaction);
  EXPECT_EQ(config->auth.file, (dir / "userlist.txt").string());
  // --print-config: YAML that loads to the same configuration.
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("default_pool_size: 7"));
  auto again = LoadConfigText(*yaml, (dir / "printed.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << *yaml;
  EXPECT_EQ(again->pool.default_pool_size, 7);
  EXPECT_EQ(again->pool.max_client_conn, 100);
  EXPECT_EQ(again->auth.type, AuthType::kMd5);
  EXPECT_EQ(again->auth.file, config->auth.file);
  std::filesystem::remove_all(dir);
}

// pgfleet's own keys in YAML beside the ini: `pgbouncer_ini:` is the base (PgBouncer's meaning),
// the YAML's keys win, and a problem names the file and line it came from.
TEST(PgBouncerIniTest, YamlBesideTheIniLaysItsKeysOverIt) {
  const auto dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pgfleet-ini-overlay-", ::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "userlist.txt") << "\"u\" \"p\"\n";
  std::ofstream(dir / "pgbouncer.ini")
      << "[databases]\napp = host=127.0.0.1 pool_size=3\n[pgbouncer]\nauth_file = "
      << (dir / "userlist.txt").string() << "\ndefault_pool_size = 4\nlisten_port = 6000\n";
  std::ofstream(dir / "pgfleet.yaml")
      << "pgbouncer_ini: pgbouncer.ini\nworkers: 2\nlisten:\n  port: 7000\n"
         "metrics:\n  listen: 127.0.0.1:9300\n";
  auto config = LoadConfigFile((dir / "pgfleet.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen.port, 7000);                   // the YAML's
  EXPECT_EQ(config->pool.default_pool_size, 4);           // the ini's
  EXPECT_EQ(config->pool.pool_mode, PoolMode::kSession);  // PgBouncer's default
  EXPECT_EQ(config->databases.at("app").overrides.pool_size, 3);
  EXPECT_EQ(config->workers, "2");
  auto yaml = ConfigFileAsYaml((dir / "pgfleet.yaml").string());
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("port: 7000"));
  EXPECT_THAT(*yaml, HasSubstr("default_pool_size: 4"));

  std::ofstream(dir / "bad.yaml") << "pgbouncer_ini: pgbouncer.ini\npool:\n  max_client_conn: x\n";
  auto bad = LoadConfigFile((dir / "bad.yaml").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("bad.yaml: pool.max_client_conn: expected a non-negative integer, got "
                        "\"x\" (line 3)"));
  std::ofstream(dir / "missing.yaml") << "pgbouncer_ini: nowhere.ini\n";
  auto missing = LoadConfigFile((dir / "missing.yaml").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("nowhere.ini"));
  std::filesystem::remove_all(dir);
}

// A key set twice, or a database defined twice: the last wins, as in PgBouncer.
TEST(PgBouncerIniTest, TheLastDefinitionWins) {
  auto config = LoadConfigText(
      "[databases]\napp = host=a pool_size=3\napp = host=b\n[pgbouncer]\nauth_type = trust\n"
      "logfile = /var/log/pgbouncer.log\nlogfile =\ndefault_pool_size = 4\n"
      "default_pool_size = 5\n",
      kIni);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->databases.at("app").hosts, ElementsAre("b"));
  EXPECT_FALSE(config->databases.at("app").overrides.pool_size.has_value());
  EXPECT_EQ(config->pool.default_pool_size, 5);
}

}  // namespace pgbouncer_ini_test
}  // namespace pgfleet::config
