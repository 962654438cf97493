// Semantic checks: ranges and required combinations, through ValidateConfig and through the loader.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/config/config.h"

namespace pgfleet::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Config Valid() {
  Config config;
  config.source_path = "/etc/pgfleet.yaml";
  DatabaseConfig app;
  app.name = "app";
  config.databases["app"] = app;
  return config;
}

std::string ErrorOf(const Config& config) {
  absl::Status status = ValidateConfig(config);
  EXPECT_FALSE(status.ok());
  return std::string(status.message());
}

std::string LoadError(const std::string& yaml) {
  auto config = LoadConfigText(yaml, "/etc/pgfleet.yaml");
  EXPECT_FALSE(config.ok()) << yaml;
  return config.ok() ? "" : std::string(config.status().message());
}

TEST(ValidateConfigTest, DefaultsWithOneDatabaseAreValid) {
  EXPECT_TRUE(ValidateConfig(Valid()).ok());
}

TEST(ValidateConfigTest, NoDatabasesIsAnError) {
  Config config = Valid();
  config.databases.clear();
  EXPECT_THAT(ErrorOf(config), HasSubstr("/etc/pgfleet.yaml: databases: at least one database"));
}

TEST(ValidateConfigTest, ListenChecks) {
  Config config = Valid();
  config.listen.address = "";
  config.listen.port = 65536;
  config.listen.backlog = 0;
  const std::string error = ErrorOf(config);
  EXPECT_THAT(error, HasSubstr("listen.address: must not be empty"));
  EXPECT_THAT(error, HasSubstr("listen.port: must be between 0 and 65535"));
  EXPECT_THAT(error, HasSubstr("listen.backlog: must be at least 1, got 0"));

  config = Valid();
  config.listen.port = 0;  // tests bind port 0
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfigTest, WorkersIsAutoOrPositive) {
  Config config = Valid();
  for (const char* ok : {"auto", "1", "64"}) {
    config.workers = ok;
    EXPECT_TRUE(ValidateConfig(config).ok()) << ok;
  }
  for (const char* bad : {"0", "-2", "Auto", "", "2.5", "lots"}) {
    config.workers = bad;
    EXPECT_THAT(ErrorOf(config), HasSubstr("workers: expected \"auto\" or a positive integer"))
        << bad;
  }
}

TEST(ValidateConfigTest, DatabaseChecks) {
  Config config = Valid();
  DatabaseConfig& app = config.databases["app"];
  app.hosts = {""};
  app.ports = {0};
  app.overrides.pool_size = -1;
  const std::string error = ErrorOf(config);
  EXPECT_THAT(error, HasSubstr("databases.app.host: must not be empty"));
  EXPECT_THAT(error, HasSubstr("databases.app.port: must be between 1 and 65535, got 0"));
  EXPECT_THAT(error, HasSubstr("databases.app.pool_size: must not be negative, got -1"));

  config = Valid();
  config.databases[""] = DatabaseConfig{};
  EXPECT_THAT(ErrorOf(config), HasSubstr("databases: a database name must not be empty"));
}

TEST(ValidateConfigTest, PoolSizes) {
  Config config = Valid();
  config.pool.default_pool_size = 0;
  EXPECT_THAT(ErrorOf(config), HasSubstr("pool.default_pool_size: must be at least 1, got 0"));

  config = Valid();
  config.pool.min_pool_size = 30;
  EXPECT_THAT(ErrorOf(config),
              HasSubstr("pool.min_pool_size: must not exceed pool.default_pool_size (20), got 30"));

  // A database may have pool_size 0 (no server connections) as long as min_pool_size fits.
  config = Valid();
  config.databases["app"].overrides.pool_size = 0;
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfigTest, MinPoolSizeMustFitTheDatabasesPoolSize) {
  EXPECT_THAT(
      LoadError("databases: {app: {pool_size: 5, min_pool_size: 10}}\n"),
      HasSubstr(
          "databases.app.min_pool_size: min_pool_size (10) must not exceed the pool size (5)"));
  // The database shrinks the pool below the pool section's min_pool_size: point at its pool_size.
  EXPECT_THAT(LoadError("pool: {min_pool_size: 4}\ndatabases:\n  app: {pool_size: 2}\n"),
              HasSubstr("databases.app.pool_size: min_pool_size (4) must not exceed the pool "
                        "size (2; min_pool_size is from pool.min_pool_size) (line 3)"));
}

TEST(ValidateConfigTest, PasswordAuthNeedsAFileOrAQuery) {
  for (const char* type : {"md5", "scram-sha-256"}) {
    EXPECT_THAT(LoadError(std::string("databases: {app: {}}\nauth: {type: ") + type + "}\n"),
                HasSubstr("auth.type: \"" + std::string(type) +
                          "\" needs auth.file (a userlist.txt) or auth.query"));
  }
  EXPECT_TRUE(
      LoadConfigText("databases: {app: {}}\nauth: {type: md5, file: u.txt}\n", "x.yaml").ok());
  EXPECT_TRUE(LoadConfigText("databases: {app: {}}\nauth: {type: trust}\n", "x.yaml").ok());
}

TEST(ValidateConfigTest, AuthQueryNeedsAuthUser) {
  EXPECT_THAT(LoadError("databases: {app: {}}\nauth:\n  type: md5\n  query: SELECT 1\n"),
              HasSubstr("/etc/pgfleet.yaml: auth.query: needs auth.user, the role that runs the "
                        "query (line 4)"));
}

TEST(ValidateConfigTest, OtherSections) {
  Config config = Valid();
  config.metrics.listen = "9127";
  config.log.level = "verbose";
  config.admin.users = {"admin", ""};
  config.pool.query_timeout = -absl::Seconds(1);
  config.users["bob"].max_user_connections = -3;
  const std::string error = ErrorOf(config);
  EXPECT_THAT(error, HasSubstr("metrics.listen: expected host:port such as 127.0.0.1:9127, got "
                               "\"9127\""));
  EXPECT_THAT(error, HasSubstr("log.level: expected one of debug, info, warning, error, got "
                               "\"verbose\""));
  EXPECT_THAT(error, HasSubstr("admin.users: entries must not be empty"));
  EXPECT_THAT(error, HasSubstr("pool.query_timeout: must not be negative"));
  EXPECT_THAT(error, HasSubstr("users.bob.max_user_connections: must not be negative, got -3"));
}

// TCP and PostgreSQL count keepalive time in whole seconds: 1500ms would be sent as 1 or 2.
TEST(ValidateConfigTest, ServerKeepaliveIsWholeSeconds) {
  Config config = Valid();
  config.pool.server_tcp_keepalive_idle = absl::Milliseconds(1500);
  config.pool.server_tcp_keepalive_interval = absl::Seconds(2);
  config.pool.server_tcp_keepalive_count = -1;
  const std::string error = ErrorOf(config);
  EXPECT_THAT(error, HasSubstr("pool.server_tcp_keepalive_idle: must be whole seconds (or 0 for "
                               "the system's value), got 1.5s"));
  EXPECT_THAT(error, Not(HasSubstr("pool.server_tcp_keepalive_interval")));
  EXPECT_THAT(error, HasSubstr("pool.server_tcp_keepalive_count: must not be negative, got -1"));
}

TEST(ValidateConfigTest, MetricsListenAcceptsIpv6) {
  Config config = Valid();
  config.metrics.listen = "[::1]:9127";
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfigTest, NoSourcePathLeavesTheFilePrefixOut) {
  Config config = Valid();
  config.source_path = "";
  config.pool.default_pool_size = 0;
  EXPECT_EQ(ValidateConfig(config).message(), "pool.default_pool_size: must be at least 1, got 0");
}

}  // namespace
}  // namespace pgfleet::config
