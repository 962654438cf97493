// The worker's LeaseState against the controller's Membership in one simulated timeline: when
// the controller is cut off, the worker is at its floor before the controller counts it there,
// whatever the message delay, and it rejoins with what it holds.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "peering/controller/lease_state.h"
#include "peering/controller/membership.h"
#include "pooler/base/clock.h"

namespace pgfleet::peering::controller {
namespace lease_timeline_test {

constexpr absl::Duration kLease = absl::Seconds(4);
constexpr absl::Duration kForget = absl::Seconds(20);
constexpr absl::Duration kRenew = absl::Seconds(1);
constexpr absl::Duration kTick = absl::Milliseconds(25);
constexpr absl::Duration kLostRoomHold = absl::Seconds(10);

// Holds whatever its cap allows: every server idle, so enforcing is immediate.
class IdleTarget final : public CapTarget {
 public:
  std::vector<Usage> Usages() override { return {Usage{"app", 12, open, 3, {}}}; }
  void SetCap(const std::string&, int new_cap, int) override { cap = new_cap; }
  int Enforce(const std::string&) override {
    const int closed = open - cap;
    open = cap;
    return closed;
  }
  int open = 0;
  int cap = 0;
};

class LeaseTimelineTest : public ::testing::TestWithParam<int> {
 protected:
  LeaseTimelineTest()
      : delay_(absl::Milliseconds(GetParam())),
        worker_(kLease, kForget),
        controller_(MembershipOptions{kLease, kForget, 1, kLostRoomHold}) {
    controller_.allocator().SetBudget("app", 12);
    controller_.Start(clock_.Now());
    worker_.Attach(&target_);
  }

  // The worker sends Hello; the controller reads it `delay_` later and welcomes it, and the
  // worker reads the Welcome `delay_` after that.
  void Join() {
    worker_.OnHelloSent(clock_.Now());
    clock_.Advance(delay_);
    JoinRequest hello;
    hello.pod_id = "pod-a";
    hello.local_peer_id = 1;
    hello.peer_id = worker_.peer_id();
    hello.databases = worker_.Databases(true);
    auto joined = controller_.Join(hello, clock_.Now());
    ASSERT_TRUE(joined.has_value());
    key_ = joined->key;
    clock_.Advance(delay_);
    ASSERT_TRUE(worker_.OnWelcome({joined->peer_id, kLease, kForget}, clock_.Now()));
  }

  // One renew interval of normal traffic: a report, its renewal, grants and acks.
  void Exchange() {
    auto report = worker_.NextReport(clock_.Now());
    ASSERT_TRUE(report.has_value());
    clock_.Advance(delay_);
    ASSERT_TRUE(controller_.Report(key_, report->seq, report->databases, clock_.Now()));
    controller_.Tick(clock_.Now());
    std::vector<Membership::Grant> grants = controller_.Rebalance(clock_.Now());
    clock_.Advance(delay_);
    worker_.OnRenewed(report->seq, clock_.Now());
    for (const auto& grant : grants) {
      worker_.OnGrant(grant.grant_seq, grant.report_seq, grant.shares, clock_.Now());
    }
    auto outcome = worker_.Tick(clock_.Now(), true);
    if (outcome.ack.has_value()) {
      worker_.MarkAcked(*outcome.ack);
      clock_.Advance(delay_);
      controller_.Ack(key_, *outcome.ack, worker_.Databases(false));
    }
  }

  const absl::Duration delay_;
  base::FakeClock clock_;
  IdleTarget target_;
  LeaseState worker_;
  Membership controller_;
  std::string key_;
};

TEST_P(LeaseTimelineTest, CutOffWorkerIsAtItsFloorBeforeTheControllerCountsItThere) {
  Join();
  // Lease_timeout passes with everyone reporting: recovery ends, the worker gets a share.
  for (int i = 0; i < 6; ++i) {
    Exchange();
    clock_.Advance(kRenew - 2 * delay_);
  }
  const int floor = controller_.allocator().Share(controller_.Find(key_)->handle, "app")->floor;
  ASSERT_GT(worker_.CapFor("app"), floor);
  target_.open = target_.cap;

  // Cut off: nothing more reaches either side. Both tick until the controller expires it.
  absl::Time worker_at_floor = absl::InfiniteFuture();
  absl::Time controller_expired = absl::InfiniteFuture();
  for (int i = 0; i < 1000 && controller_expired == absl::InfiniteFuture(); ++i) {
    clock_.Advance(kTick);
    if (worker_.Tick(clock_.Now(), false).lease_lost) worker_at_floor = clock_.Now();
    if (!controller_.Tick(clock_.Now()).expired.empty()) controller_expired = clock_.Now();
  }
  ASSERT_NE(controller_expired, absl::InfiniteFuture());
  ASSERT_LT(worker_at_floor, controller_expired);
  EXPECT_LE(target_.open, floor);
  // The controller cannot tell a worker at its floor from a frozen one: it counts the servers it
  // last heard of (this worker reports no backend pids) until lost_room_hold, then the floor.
  const uint32_t handle = controller_.Find(key_)->handle;
  EXPECT_GT(controller_.allocator().Share(handle, "app")->held, floor);
  clock_.Advance(kLostRoomHold);
  controller_.Tick(clock_.Now());
  EXPECT_EQ(controller_.allocator().Share(handle, "app")->held, floor);
  EXPECT_LE(controller_.allocator().Committed("app"), 12);

  // Back in touch: it rejoins with what it holds and is raised again.
  controller_.Detach(key_);
  worker_.OnStreamEnded();
  Join();
  EXPECT_TRUE(worker_.has_lease());
  for (int i = 0; i < 3; ++i) {
    Exchange();
    clock_.Advance(kRenew - 2 * delay_);
  }
  EXPECT_GT(worker_.CapFor("app"), floor);
}

INSTANTIATE_TEST_SUITE_P(MessageDelaysMs, LeaseTimelineTest, ::testing::Values(0, 5, 100, 400));

}  // namespace lease_timeline_test
}  // namespace pgfleet::peering::controller
