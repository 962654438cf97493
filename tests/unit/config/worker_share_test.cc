// The static split of fleet budgets among a pod's workers.
#include "pooler/config/worker_share.h"

#include "gtest/gtest.h"

namespace pgfleet::config {
namespace {

TEST(WorkerShareTest, StrictSharesAddUpToTheTotal) {
  for (int total : {1, 3, 7, 8, 50, 101}) {
    for (int count : {1, 2, 3, 4, 16}) {
      int sum = 0;
      for (int i = 0; i < count; ++i) {
        int share = StrictShare(total, i, count);
        if (share != kNoConnections) sum += share;
        EXPECT_NE(share, 0) << "0 would mean unlimited";
      }
      EXPECT_EQ(sum, total) << total << " over " << count;
    }
  }
}

TEST(WorkerShareTest, RemainderGoesToTheFirstWorkers) {
  EXPECT_EQ(StrictShare(10, 0, 4), 3);
  EXPECT_EQ(StrictShare(10, 1, 4), 3);
  EXPECT_EQ(StrictShare(10, 2, 4), 2);
  EXPECT_EQ(StrictShare(10, 3, 4), 2);
}

TEST(WorkerShareTest, BudgetBelowWorkerCountLeavesSomeWorkersNone) {
  EXPECT_EQ(StrictShare(2, 0, 4), 1);
  EXPECT_EQ(StrictShare(2, 1, 4), 1);
  EXPECT_EQ(StrictShare(2, 2, 4), kNoConnections);
}

TEST(WorkerShareTest, UnlimitedStaysUnlimited) {
  EXPECT_EQ(StrictShare(0, 3, 4), 0);
  EXPECT_EQ(SoftShare(0, 3, 4), 0);
}

TEST(WorkerShareTest, PoolSizesGetAtLeastOne) {
  EXPECT_EQ(SoftShare(2, 3, 4), 1);
  EXPECT_EQ(SoftShare(20, 3, 4), 5);
}

TEST(WorkerShareTest, ShareForWorkerSplitsEveryBudget) {
  Config fleet;
  fleet.pool.default_pool_size = 20;
  fleet.pool.max_db_connections = 10;
  fleet.pool.max_user_connections = 6;
  fleet.pool.max_client_conn = 100;
  DatabaseConfig db;
  db.name = "app";
  db.max_db_connections = 9;
  db.overrides.pool_size = 8;
  fleet.databases["app"] = db;
  UserConfig user;
  user.name = "u";
  user.max_user_connections = 5;
  fleet.users["u"] = user;
  Config share = ShareForWorker(fleet, 0, 4);
  EXPECT_EQ(share.pool.default_pool_size, 5);
  EXPECT_EQ(share.pool.max_db_connections, 3);
  EXPECT_EQ(share.pool.max_user_connections, 2);
  EXPECT_EQ(share.pool.max_client_conn, 100) << "enforced pod-wide through shared memory";
  EXPECT_EQ(share.databases["app"].max_db_connections, 3);
  EXPECT_EQ(*share.databases["app"].overrides.pool_size, 2);
  EXPECT_EQ(share.users["u"].max_user_connections, 2);
  Config last = ShareForWorker(fleet, 3, 4);
  EXPECT_EQ(last.databases["app"].max_db_connections, 2);
  EXPECT_EQ(last.users["u"].max_user_connections, 1);
}

}  // namespace
}  // namespace pgfleet::config
