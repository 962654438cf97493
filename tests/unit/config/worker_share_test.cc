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

TEST(WorkerShareTest, UnlimitedStaysUnlimited) { EXPECT_EQ(StrictShare(0, 3, 4), 0); }

}  // namespace
}  // namespace pgfleet::config
