// Config's lookups: enum names, the "*" fallback, and per-database / per-user overrides.
#include "pooler/config/config.h"

#include "gtest/gtest.h"

namespace pgfleet::config {
namespace {

TEST(EnumNameTest, RoundTrips) {
  for (PoolMode mode : {PoolMode::kSession, PoolMode::kTransaction, PoolMode::kStatement}) {
    EXPECT_EQ(ParsePoolMode(PoolModeName(mode)), mode);
  }
  for (AuthType type : {AuthType::kTrust, AuthType::kMd5, AuthType::kScramSha256}) {
    EXPECT_EQ(ParseAuthType(AuthTypeName(type)), type);
  }
  EXPECT_EQ(PoolModeName(PoolMode::kTransaction), "transaction");
  EXPECT_EQ(AuthTypeName(AuthType::kScramSha256), "scram-sha-256");
  EXPECT_EQ(ParsePoolMode("Session"), std::nullopt);
  EXPECT_EQ(ParseAuthType("scram"), std::nullopt);
}

Config WithDatabases() {
  Config config;
  DatabaseConfig app;
  app.name = "app";
  app.hosts = {"db1"};
  config.databases["app"] = app;
  DatabaseConfig renamed;
  renamed.name = "legacy";
  renamed.dbname = "legacy_v2";
  config.databases["legacy"] = renamed;
  return config;
}

TEST(FindDatabaseTest, ExactMatchFillsDbnameFromKey) {
  Config config = WithDatabases();
  auto db = config.FindDatabase("app");
  ASSERT_TRUE(db.has_value());
  EXPECT_EQ(db->name, "app");
  EXPECT_EQ(db->dbname, "app");
  EXPECT_EQ(db->hosts, std::vector<std::string>{"db1"});
  EXPECT_FALSE(db->from_fallback);
}

TEST(FindDatabaseTest, ExactMatchKeepsExplicitDbname) {
  Config config = WithDatabases();
  auto db = config.FindDatabase("legacy");
  ASSERT_TRUE(db.has_value());
  EXPECT_EQ(db->dbname, "legacy_v2");
}

TEST(FindDatabaseTest, UnknownNameWithoutFallbackIsNotFound) {
  Config config = WithDatabases();
  EXPECT_FALSE(config.FindDatabase("other").has_value());
  EXPECT_FALSE(config.FindDatabase("").has_value());
}

TEST(FindDatabaseTest, FallbackFillsClientNameAndExactMatchStillWins) {
  Config config = WithDatabases();
  DatabaseConfig star;
  star.name = "*";
  star.hosts = {"fallback-host"};
  config.databases["*"] = star;

  auto db = config.FindDatabase("analytics");
  ASSERT_TRUE(db.has_value());
  EXPECT_EQ(db->name, "analytics");
  EXPECT_EQ(db->dbname, "analytics");
  EXPECT_EQ(db->hosts, std::vector<std::string>{"fallback-host"});
  EXPECT_TRUE(db->from_fallback);

  auto app = config.FindDatabase("app");
  ASSERT_TRUE(app.has_value());
  EXPECT_EQ(app->hosts, std::vector<std::string>{"db1"});
  EXPECT_FALSE(app->from_fallback);
  EXPECT_FALSE(config.FindDatabase("").has_value());
}

TEST(FindDatabaseTest, FallbackWithExplicitDbnameKeepsIt) {
  Config config;
  DatabaseConfig star;
  star.name = "*";
  star.dbname = "shared";
  config.databases["*"] = star;
  auto db = config.FindDatabase("anything");
  ASSERT_TRUE(db.has_value());
  EXPECT_EQ(db->dbname, "shared");
  EXPECT_EQ(db->name, "anything");
}

TEST(EffectiveTest, PoolSectionAppliesWithoutOverrides) {
  Config config;
  config.pool.pool_mode = PoolMode::kSession;
  config.pool.default_pool_size = 11;
  config.pool.min_pool_size = 2;
  config.pool.reserve_pool_size = 3;
  config.pool.max_user_connections = 9;
  DatabaseConfig db;
  EXPECT_EQ(config.EffectivePoolMode(db, "anyone"), PoolMode::kSession);
  EXPECT_EQ(config.EffectivePoolSize(db), 11);
  EXPECT_EQ(config.EffectiveMinPoolSize(db), 2);
  EXPECT_EQ(config.EffectiveReservePoolSize(db), 3);
  EXPECT_EQ(config.EffectiveMaxUserConnections("anyone"), 9);
}

TEST(EffectiveTest, DatabaseOverridesPoolSection) {
  Config config;
  DatabaseConfig db;
  db.overrides.pool_mode = PoolMode::kStatement;
  db.overrides.pool_size = 4;
  db.overrides.min_pool_size = 1;
  db.overrides.reserve_pool_size = 0;
  config.pool.reserve_pool_size = 5;
  EXPECT_EQ(config.EffectivePoolMode(db, "anyone"), PoolMode::kStatement);
  EXPECT_EQ(config.EffectivePoolSize(db), 4);
  EXPECT_EQ(config.EffectiveMinPoolSize(db), 1);
  // An explicit 0 is an override, not "unset".
  EXPECT_EQ(config.EffectiveReservePoolSize(db), 0);
}

TEST(EffectiveTest, UserPoolModeWinsOverDatabase) {
  Config config;
  UserConfig batch;
  batch.name = "batch";
  batch.pool_mode = PoolMode::kSession;
  batch.max_user_connections = 3;
  config.users["batch"] = batch;
  UserConfig plain;
  plain.name = "plain";
  config.users["plain"] = plain;
  DatabaseConfig db;
  db.overrides.pool_mode = PoolMode::kStatement;

  EXPECT_EQ(config.EffectivePoolMode(db, "batch"), PoolMode::kSession);
  // A user entry without pool_mode leaves the database's choice alone.
  EXPECT_EQ(config.EffectivePoolMode(db, "plain"), PoolMode::kStatement);
  EXPECT_EQ(config.EffectiveMaxUserConnections("batch"), 3);
}

}  // namespace
}  // namespace pgfleet::config
