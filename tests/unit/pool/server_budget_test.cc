// The server budget decides alone whether a pool may open a server: per-database and per-user
// limits, the controller's caps, and this worker's zero share. Driven through a real registry
// (no sockets are opened: servers are only counted).
#include "pooler/pool/server_budget.h"

#include <gtest/gtest.h>

#include <memory>

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

TEST_F(ServerBudgetTest, ADatabaseLimitCountsEveryUsersServers) {
  Start(/*max_user_connections=*/0);
  Pool* alice = PoolOf("app", "alice");
  Pool* bob = PoolOf("app", "bob");
  EXPECT_TRUE(budget().MayOpen(alice));
  budget().Count(alice, +1);
  budget().Count(bob, +1);
  EXPECT_EQ(budget().DatabaseServerCount("app"), 2);
  // Full, and no idle server of another pool to evict.
  EXPECT_FALSE(budget().MayOpen(alice));
  EXPECT_FALSE(budget().MayOpen(bob));
  // Another database is not limited by app's budget.
  EXPECT_TRUE(budget().MayOpen(PoolOf("reports", "alice")));
  budget().Count(bob, -1);
  EXPECT_TRUE(budget().MayOpen(alice));
}

TEST_F(ServerBudgetTest, AUserLimitCountsAcrossDatabases) {
  Start(/*max_user_connections=*/1);
  Pool* app = PoolOf("app", "alice");
  Pool* reports = PoolOf("reports", "alice");
  budget().Count(app, +1);
  EXPECT_EQ(budget().UserServerCount("alice"), 1);
  EXPECT_FALSE(budget().MayOpen(reports));
  EXPECT_TRUE(budget().MayOpen(PoolOf("reports", "bob")));
}

TEST_F(ServerBudgetTest, AZeroShareOpensNothing) {
  Start(0);
  EXPECT_FALSE(budget().MayOpen(PoolOf("none", "alice")));
}

TEST_F(ServerBudgetTest, ControllerCapsReplaceTheStaticShareOnceEnabled) {
  Start(0);
  Pool* app = PoolOf("app", "alice");
  EXPECT_EQ(budget().DatabaseCap("app"), std::nullopt);
  budget().EnableDatabaseCaps();
  // Budgeted and no cap granted yet: nothing may be opened.
  EXPECT_EQ(budget().DatabaseCap("app"), 0);
  EXPECT_FALSE(budget().MayOpen(app));
  budget().SetDatabaseCap("app", 1);
  EXPECT_TRUE(budget().MayOpen(app));
  budget().Count(app, +1);
  EXPECT_FALSE(budget().MayOpen(app));
  // An unbudgeted database ignores caps.
  EXPECT_TRUE(budget().MayOpen(PoolOf("reports", "alice")));
  // Nothing over the cap: nothing to close.
  EXPECT_EQ(budget().EnforceDatabaseCap("app", /*force=*/true), 0);
}

}  // namespace
}  // namespace pgfleet::pool
