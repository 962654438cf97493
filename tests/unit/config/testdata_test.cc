// Every sample under tests/testdata/config/good loads; every one under bad/ fails, naming itself.
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/config/config.h"

namespace pgfleet::config {
namespace {

using ::testing::StartsWith;

std::vector<std::string> YamlFilesIn(const std::string& subdir) {
  std::vector<std::string> files;
  const std::filesystem::path dir = std::filesystem::path(PGFLEET_CONFIG_TESTDATA_DIR) / subdir;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") {
      files.push_back(entry.path().string());
    }
  }
  return files;
}

TEST(ConfigTestdataTest, EveryGoodFileLoads) {
  const std::vector<std::string> files = YamlFilesIn("good");
  ASSERT_GE(files.size(), 3u);
  for (const std::string& file : files) {
    auto config = LoadConfigFile(file);
    EXPECT_TRUE(config.ok()) << file << ": " << config.status();
  }
}

TEST(ConfigTestdataTest, EveryBadFileFailsWithItsNameInTheError) {
  const std::vector<std::string> files = YamlFilesIn("bad");
  ASSERT_GE(files.size(), 10u);
  for (const std::string& file : files) {
    auto config = LoadConfigFile(file);
    ASSERT_FALSE(config.ok()) << file << " loaded but should not";
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(std::string(config.status().message()), StartsWith(file + ": ")) << config.status();
  }
}

// full.yaml sets every key to a non-default value; check the ones the inline tests don't.
TEST(ConfigTestdataTest, FullFileSetsEveryField) {
  const std::string path = std::string(PGFLEET_CONFIG_TESTDATA_DIR) + "/good/full.yaml";
  auto loaded = LoadConfigFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Config& c = *loaded;
  EXPECT_EQ(c.listen.address, "*");
  EXPECT_EQ(c.listen.port, 0);
  EXPECT_EQ(c.listen.unix_socket_dir, "/var/run/pgfleet");
  EXPECT_EQ(c.listen.backlog, 4096);
  EXPECT_EQ(c.workers, "8");
  const DatabaseConfig& app = c.databases.at("app");
  EXPECT_EQ(app.hosts, std::vector<std::string>{"db.internal"});
  EXPECT_EQ(app.ports, std::vector<int>{5433});
  EXPECT_EQ(app.dbname, "app_production");
  EXPECT_EQ(app.user, "app_owner");
  EXPECT_EQ(app.password, "s3cret");
  EXPECT_EQ(app.overrides.pool_mode, PoolMode::kSession);
  EXPECT_EQ(app.overrides.pool_size, 30);
  EXPECT_EQ(app.overrides.min_pool_size, 5);
  EXPECT_EQ(app.overrides.reserve_pool_size, 3);
  EXPECT_EQ(app.max_db_connections, 90);
  EXPECT_EQ(app.application_name, "pgfleet-app");
  EXPECT_EQ(c.databases.at("reports").hosts, std::vector<std::string>{"/var/run/postgresql"});
  EXPECT_EQ(c.databases.at("reports").max_db_connections, 100);
  EXPECT_EQ(c.users.at("batch").pool_mode, PoolMode::kStatement);
  EXPECT_EQ(c.users.at("batch").max_user_connections, 7);
  EXPECT_EQ(c.users.at("web").max_user_connections, 40);

  const PoolConfig& p = c.pool;
  EXPECT_EQ(p.pool_mode, PoolMode::kSession);
  EXPECT_EQ(p.default_pool_size, 25);
  EXPECT_EQ(p.min_pool_size, 2);
  EXPECT_EQ(p.reserve_pool_size, 4);
  EXPECT_EQ(p.reserve_pool_timeout, absl::Milliseconds(2500));
  EXPECT_EQ(p.max_client_conn, 500);
  EXPECT_EQ(p.max_db_connections, 100);
  EXPECT_EQ(p.max_user_connections, 40);
  EXPECT_EQ(p.max_prepared_statements, 0);
  EXPECT_EQ(p.server_reset_query, "RESET ALL");
  EXPECT_TRUE(p.server_reset_query_always);
  EXPECT_EQ(p.server_check_query, "SELECT 1");
  EXPECT_EQ(p.server_check_delay, absl::Seconds(10));
  EXPECT_EQ(p.server_lifetime, absl::Hours(1));
  EXPECT_EQ(p.server_idle_timeout, absl::Minutes(5));
  EXPECT_EQ(p.server_connect_timeout, absl::Seconds(3));
  EXPECT_EQ(p.server_login_retry, absl::Seconds(1));
  EXPECT_EQ(p.client_idle_timeout, absl::Hours(48));
  EXPECT_EQ(p.client_login_timeout, absl::Seconds(30));
  EXPECT_EQ(p.query_timeout, absl::Seconds(90));
  EXPECT_EQ(p.query_wait_timeout, absl::Minutes(1));
  EXPECT_EQ(p.idle_transaction_timeout, absl::Seconds(45));
  EXPECT_EQ(p.cancel_wait_timeout, absl::Milliseconds(500));
  EXPECT_THAT(p.track_extra_parameters, ::testing::ElementsAre("IntervalStyle", "search_path"));
  EXPECT_THAT(p.ignore_startup_parameters, ::testing::ElementsAre("extra_float_digits", "options"));
  EXPECT_EQ(p.max_packet_size, 1048576);
  EXPECT_EQ(p.pkt_buf, 8192);
  EXPECT_FALSE(p.tcp_keepalive);

  EXPECT_EQ(c.auth.type, AuthType::kMd5);
  EXPECT_EQ(c.auth.file, std::string(PGFLEET_CONFIG_TESTDATA_DIR) + "/good/userlist.txt");
  EXPECT_EQ(c.auth.dbname, "postgres");
  EXPECT_THAT(c.admin.users, ::testing::ElementsAre("admin", "ops"));
  EXPECT_EQ(c.metrics.listen, "0.0.0.0:9187");
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_FALSE(c.log.log_connections);
  EXPECT_FALSE(c.log.log_disconnections);
  EXPECT_THAT(c.peering.static_peers, ::testing::ElementsAre("10.0.0.2:7000", "10.0.0.3:7000"));
  EXPECT_EQ(c.peering.tls.cert_file, "/etc/tls/tls.crt");
  EXPECT_EQ(c.controller.address, "pgfleet-controller:7001");
  // Written for an older version: loads, with a warning that names the key.
  EXPECT_THAT(c.warnings, ::testing::ElementsAre("peering.unix_socket_dir: unknown key, ignored"));
}

}  // namespace
}  // namespace pgfleet::config
