// The server budget decides alone whether a pool may open a server: the pod's pool size,
// per-database and per-user limits, the controller's caps. Driven through a real registry (no
// sockets are opened: servers are only counted).
#include "pooler/pool/server_budget.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "pooler/base/random.h"
#include "pooler/config/worker_share.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/pool_registry.h"

namespace pgfleet::pool {
namespace {

config::DatabaseConfig Database(const std::string& name, int max_db_connections) {
  config::DatabaseConfig db;
  db.name = name;
  db.max_db_connections = max_db_connections;
  return db;
}

class ServerBudgetTest : public ::testing::Test {
 protected:
  void Start(int max_user_connections) {
    auto config = std::make_shared<config::Config>();
    config->pool.max_user_connections = max_user_connections;
    config->databases["app"] = Database("app", 2);
    config->databases["reports"] = Database("reports", 0);
    config->databases["none"] = Database("none", config::kNoConnections);
    registry_ =
        std::make_unique<PoolRegistry>(loop_, config, auth::Userlist{}, 1, base::SystemRandom());
  }
  Pool* PoolOf(const std::string& db, const std::string& user) {
    return registry_->GetOrCreatePool(*registry_->config().FindDatabase(db), user);
  }
  ServerBudget& budget() { return registry_->budget(); }

  net::EventLoop loop_;
  std::unique_ptr<PoolRegistry> registry_;
};

bool Opens(ServerBudget& budget, Pool* pool, std::vector<ServerRoom>* rooms = nullptr) {
  auto room = budget.TryOpen(*pool, ServerBudget::Purpose::kPoolSize);
  if (room.has_value() && rooms != nullptr) rooms->push_back(*room);
  return room.has_value();
}

TEST_F(ServerBudgetTest, ADatabaseLimitCountsEveryUsersServers) {
  Start(/*max_user_connections=*/0);
  Pool* alice = PoolOf("app", "alice");
  Pool* bob = PoolOf("app", "bob");
  std::vector<ServerRoom> rooms;
  EXPECT_TRUE(Opens(budget(), alice, &rooms));
  EXPECT_TRUE(Opens(budget(), bob, &rooms));
  EXPECT_EQ(budget().DatabaseServerCount("app"), 2);
  // Full, and no idle server of another pool to evict.
  EXPECT_FALSE(Opens(budget(), alice));
  EXPECT_FALSE(Opens(budget(), bob));
  // Another database is not limited by app's budget.
  EXPECT_TRUE(Opens(budget(), PoolOf("reports", "alice")));
  budget().Closed(rooms[1]);
  EXPECT_EQ(budget().DatabaseServerCount("app"), 1);
  EXPECT_TRUE(Opens(budget(), alice));
}

TEST_F(ServerBudgetTest, AUserLimitCountsAcrossDatabases) {
  Start(/*max_user_connections=*/1);
  EXPECT_TRUE(Opens(budget(), PoolOf("app", "alice")));
  EXPECT_EQ(budget().UserServerCount("alice"), 1);
  EXPECT_FALSE(Opens(budget(), PoolOf("reports", "alice")));
  EXPECT_TRUE(Opens(budget(), PoolOf("reports", "bob")));
}

TEST_F(ServerBudgetTest, AZeroShareOpensNothing) {
  Start(0);
  EXPECT_FALSE(Opens(budget(), PoolOf("none", "alice")));
}

TEST_F(ServerBudgetTest, ThePoolSizeHoldsForThePodAndTheReserveAddsToIt) {
  Start(0);
  Pool* reports = PoolOf("reports", "alice");  // default_pool_size 20, no reserve configured
  const int size = registry_->config().EffectivePoolSize(reports->db());
  for (int i = 0; i < size; ++i) ASSERT_TRUE(Opens(budget(), reports)) << i;
  EXPECT_FALSE(Opens(budget(), reports));
  EXPECT_EQ(budget().PodServers(*reports), size);
  // min_pool_size (0 here) opens nothing ahead of demand.
  EXPECT_FALSE(budget().TryOpen(*reports, ServerBudget::Purpose::kMinPoolSize).has_value());
}

TEST_F(ServerBudgetTest, ThePodsShareFromTheControllerCapsADatabaseOnceEnabled) {
  Start(0);
  Pool* app = PoolOf("app", "alice");
  EXPECT_EQ(budget().DatabaseCap("app"), std::nullopt);
  budget().EnableDatabaseCaps();
  // Budgeted and no share granted yet: nothing may be opened.
  EXPECT_EQ(budget().DatabaseCap("app"), 0);
  EXPECT_FALSE(Opens(budget(), app));
  // The pod's lease writes its share into the pod's counts.
  const auto key = budget().pod().Intern(budget::PodServerCounts::DatabaseKeyText("app"));
  ASSERT_TRUE(key.has_value());
  budget().pod().PublishShare(*key, {.cap = 1, .floor = 0});
  EXPECT_EQ(budget().DatabaseCap("app"), 1);
  std::vector<ServerRoom> rooms;
  EXPECT_TRUE(Opens(budget(), app, &rooms));
  EXPECT_FALSE(Opens(budget(), app));
  EXPECT_TRUE(budget().BudgetsFullFor(*app).database);
  // A larger share never lifts the config's max_db_connections (2).
  budget().pod().PublishShare(*key, {.cap = 5, .floor = 0});
  EXPECT_TRUE(Opens(budget(), app, &rooms));
  EXPECT_FALSE(Opens(budget(), app));
  // An unbudgeted database ignores shares.
  EXPECT_TRUE(Opens(budget(), PoolOf("reports", "alice")));
}

TEST_F(ServerBudgetTest, WithoutRenewalsTheShareFallsToTheFloor) {
  Start(0);
  Pool* app = PoolOf("app", "alice");
  budget().EnableDatabaseCaps();
  const auto key = budget().pod().Intern(budget::PodServerCounts::DatabaseKeyText("app"));
  ASSERT_TRUE(key.has_value());
  budget().pod().PublishShare(*key, {.cap = 2, .floor = 1});
  // The lease was last renewed a lease_timeout ago: its holder is gone.
  const int64_t now = absl::ToUnixMicros(net::MonotonicNow());
  budget().pod().PublishLeaseTimes({now - 1'000'000, 1'000'000, 60'000'000});
  EXPECT_EQ(budget().DatabaseCap("app"), 1);
  EXPECT_TRUE(Opens(budget(), app));
  EXPECT_FALSE(Opens(budget(), app));
  // The worker publishes its demand for the pod's lease (no servers in use, none waiting).
  EXPECT_EQ(budget().EnforcePodShares(), 0);
  EXPECT_EQ(budget().pod().DemandTotal(*key), 0);
}

}  // namespace
}  // namespace pgfleet::pool
