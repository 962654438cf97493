// max_client_conn's shared count and the even client balance: workers mapping one region admit
// no more than the limit together, a dead worker's clients come back, a new connection goes to
// the sibling with the fewest clients (only one that takes them), and a region made by an older
// binary, without the balance's fields, still counts but never balances.
#include "pooler/budget/client_budget.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace pgfleet::budget {
namespace {

class ClientBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fd = ClientBudget::CreateSharedRegion();
    ASSERT_TRUE(fd.ok()) << fd.status();
    fd_ = *fd;
    ASSERT_TRUE(a_.AttachShared(fd_, 1).ok());
    ASSERT_TRUE(b_.AttachShared(fd_, 2).ok());
    ASSERT_TRUE(c_.AttachShared(fd_, 3).ok());
  }
  void TearDown() override { close(fd_); }

  static void Acquire(ClientBudget& budget, int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(budget.TryAcquire());
  }

  int fd_ = -1;
  ClientBudget a_{4}, b_{4}, c_{4};
};

TEST_F(ClientBudgetTest, TheLimitIsThePods) {
  Acquire(a_, 3);
  Acquire(b_, 1);
  EXPECT_FALSE(c_.TryAcquire());
  EXPECT_EQ(c_.pod_total(), 4);
  b_.Release();
  EXPECT_TRUE(c_.TryAcquire());
}

TEST_F(ClientBudgetTest, ADeadWorkersClientsComeBack) {
  Acquire(a_, 2);
  Acquire(b_, 2);
  ClientBudget::ReleaseSlot(fd_, 1);
  EXPECT_EQ(b_.pod_total(), 2);
  EXPECT_TRUE(c_.TryAcquire());
}

TEST_F(ClientBudgetTest, ANewClientGoesToTheSiblingWithTheFewest) {
  for (ClientBudget* budget : {&a_, &b_, &c_}) {
    budget->set_limit(0);
    budget->SetTakesClients(true);
  }
  // Equal counts: the worker the kernel chose keeps it.
  EXPECT_EQ(a_.SiblingWithFewerClients(), std::nullopt);
  Acquire(a_, 3);
  Acquire(b_, 1);
  Acquire(c_, 2);
  EXPECT_EQ(a_.SiblingWithFewerClients(), 2u);
  EXPECT_EQ(c_.SiblingWithFewerClients(), 2u);
  EXPECT_EQ(b_.SiblingWithFewerClients(), std::nullopt);  // it holds the fewest itself
  // Even again: nothing moves.
  Acquire(b_, 1);
  EXPECT_EQ(c_.SiblingWithFewerClients(), std::nullopt);
  EXPECT_EQ(a_.SiblingWithFewerClients(), 2u);  // b and c hold 2; the lower slot
}

TEST_F(ClientBudgetTest, APassedClientCountsForItsSiblingAtOnce) {
  for (ClientBudget* budget : {&a_, &b_, &c_}) budget->SetTakesClients(true);
  Acquire(a_, 2);
  Acquire(c_, 1);
  // a passes a connection to b: b counts it before it arrives, so c, choosing at the same
  // moment, no longer sees b as holding fewer than itself.
  ASSERT_EQ(a_.SiblingWithFewerClients(), 2u);
  ASSERT_TRUE(a_.TryAcquireFor(2));
  EXPECT_EQ(c_.SiblingWithFewerClients(), std::nullopt);
  // The limit (4) is the pod's: the fourth client fills it, and nothing more is passed.
  EXPECT_EQ(a_.pod_total(), 4);
  EXPECT_FALSE(a_.TryAcquireFor(3));
  // A pass that could not be sent gives its count back.
  a_.ReleaseFor(2);
  EXPECT_EQ(a_.pod_total(), 3);
  EXPECT_EQ(c_.SiblingWithFewerClients(), 2u);
}

TEST_F(ClientBudgetTest, OnlySiblingsThatTakeClientsGetThem) {
  a_.set_limit(0);
  a_.SetTakesClients(true);
  b_.SetTakesClients(true);
  Acquire(a_, 2);
  // c holds none but does not take clients (balance off there, or it is shutting down).
  EXPECT_EQ(a_.SiblingWithFewerClients(), 2u);
  b_.SetTakesClients(false);
  EXPECT_EQ(a_.SiblingWithFewerClients(), std::nullopt);
  c_.SetTakesClients(true);
  EXPECT_EQ(a_.SiblingWithFewerClients(), 3u);
  // A dead worker's slot stops taking clients until a worker attaches to it again.
  ClientBudget::ReleaseSlot(fd_, 3);
  EXPECT_EQ(a_.SiblingWithFewerClients(), std::nullopt);
}

TEST(ClientBudgetRegionTest, ARegionWithoutTheBalanceStillCounts) {
  // What an older supervisor made: the total and the per-slot counts, nothing after them.
  const int fd = memfd_create("old-clients", 0);
  ASSERT_GE(fd, 0);
  constexpr size_t kOldSize = sizeof(int64_t) * (1 + ClientBudget::kSlots);
  ASSERT_EQ(ftruncate(fd, kOldSize), 0);
  ClientBudget a(2), b(2);
  ASSERT_TRUE(a.AttachShared(fd, 1).ok());
  ASSERT_TRUE(b.AttachShared(fd, 2).ok());
  a.SetTakesClients(true);  // no room for it: ignored, and nothing past the end is touched
  b.SetTakesClients(true);
  ASSERT_TRUE(a.TryAcquire());
  ASSERT_TRUE(a.TryAcquire());
  EXPECT_FALSE(b.TryAcquire());
  EXPECT_EQ(a.SiblingWithFewerClients(), std::nullopt);
  ClientBudget::ReleaseSlot(fd, 1);
  EXPECT_TRUE(b.TryAcquire());
  close(fd);
}

TEST(ClientBudgetRegionTest, SomethingElseIsRefused) {
  const int fd = memfd_create("not-clients", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 64), 0);
  ClientBudget a(2);
  EXPECT_FALSE(a.AttachShared(fd, 1).ok());
  close(fd);
}

}  // namespace
}  // namespace pgfleet::budget
