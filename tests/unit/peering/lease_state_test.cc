// The worker's lease in simulated time: grants and acks, the fail-static thresholds (floors at
// 3/4 of a lease, busy servers never closed, nothing after forget_after), renewal and rejoin.
#include "peering/controller/lease_state.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/base/clock.h"

namespace pgfleet::peering::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr absl::Duration kLease = absl::Seconds(4);
constexpr absl::Duration kForget = absl::Seconds(10);

// One database "app" whose open servers the test sets; Enforce closes idle ones down to the cap.
class FakeTarget final : public CapTarget {
 public:
  std::vector<Usage> Usages() override { return {Usage{"app", 20, open, demand, {}}}; }
  void SetCap(const std::string& database, int cap, int) override { caps[database] = cap; }
  int Enforce(const std::string& database) override {
    ++enforced;
    const int cap = caps[database];
    const int closable = std::min(open - cap, idle);
    open -= closable;
    idle -= std::min(idle, closable);
    return closable;
  }

  int open = 0;
  int idle = 0;
  int demand = 0;
  std::map<std::string, int> caps;
  int enforced = 0;  // Enforce calls
};

class LeaseStateTest : public ::testing::Test {
 protected:
  LeaseStateTest() : lease_(kLease, kForget) { lease_.Attach(&target_); }

  // Hello sent now, Welcome read `delay` later.
  void Join(absl::Duration delay = absl::Milliseconds(5), uint32_t peer_id = 0x0101) {
    lease_.OnHelloSent(clock_.Now());
    clock_.Advance(delay);
    ASSERT_TRUE(lease_.OnWelcome({peer_id, absl::ZeroDuration(), absl::ZeroDuration()}, Now()));
  }
  void Grant(uint64_t seq, int cap, int floor, uint64_t report_seq = 0) {
    lease_.OnGrant(seq, report_seq, {ShareUpdate{"app", cap, floor}}, Now());
  }
  LeaseState::TickOutcome Tick() { return lease_.Tick(Now(), /*connected=*/true); }
  absl::Time Now() const { return clock_.Now(); }

  base::FakeClock clock_;
  FakeTarget target_;
  LeaseState lease_;
};

TEST_F(LeaseStateTest, NeverGrantedHoldsNothing) {
  target_.open = 2;
  target_.idle = 2;
  EXPECT_EQ(lease_.CapFor("app"), 0);
  EXPECT_FALSE(lease_.has_lease());
  auto outcome = Tick();
  EXPECT_EQ(target_.open, 0);
  EXPECT_FALSE(outcome.lease_lost);
  EXPECT_FALSE(outcome.ack.has_value());
  EXPECT_EQ(lease_.Databases(false)[0].cap, -1);
}

TEST_F(LeaseStateTest, GrantRaisesCapAndIsAcknowledged) {
  Join();
  EXPECT_TRUE(lease_.has_lease());
  Grant(1, 5, 1);
  EXPECT_EQ(lease_.CapFor("app"), 5);
  EXPECT_EQ(target_.caps["app"], 5);
  auto outcome = Tick();
  ASSERT_TRUE(outcome.ack.has_value());
  EXPECT_EQ(*outcome.ack, 1u);
  lease_.MarkAcked(1);
  EXPECT_FALSE(Tick().ack.has_value());
  EXPECT_FALSE(lease_.Tick(Now(), /*connected=*/false).ack.has_value());
}

TEST_F(LeaseStateTest, AckWaitsUntilUnderCapAndSettled) {
  Join();
  Grant(1, 5, 1);
  lease_.MarkAcked(*Tick().ack);
  target_.open = 5;
  target_.idle = 1;
  Grant(2, 3, 1);  // lower: one idle server closes now, one busy one later
  auto outcome = Tick();
  EXPECT_EQ(target_.open, 4);
  EXPECT_FALSE(outcome.ack.has_value());  // still over the cap
  clock_.Advance(absl::Milliseconds(100));
  target_.open = 3;                      // the busy one was released and closed
  EXPECT_FALSE(Tick().ack.has_value());  // closed just now: PostgreSQL may not have reaped it
  clock_.Advance(LeaseState::kSettle - absl::Milliseconds(1));
  EXPECT_FALSE(Tick().ack.has_value());
  clock_.Advance(absl::Milliseconds(1));
  outcome = Tick();
  ASSERT_TRUE(outcome.ack.has_value());
  EXPECT_EQ(*outcome.ack, 2u);
}

TEST_F(LeaseStateTest, FailStaticKeepsCapsUntilThreeQuartersOfLeaseThenFloors) {
  Join(absl::ZeroDuration());
  const absl::Time hello = Now();
  Grant(1, 6, 2);
  clock_.Set(hello + kLease * 3 / 4 - absl::Milliseconds(1));
  auto outcome = Tick();
  EXPECT_FALSE(outcome.lease_lost);
  EXPECT_TRUE(lease_.has_lease());
  EXPECT_EQ(lease_.CapFor("app"), 6);
  clock_.Set(hello + kLease * 3 / 4);
  outcome = Tick();
  EXPECT_TRUE(outcome.lease_lost);
  EXPECT_FALSE(lease_.has_lease());
  EXPECT_EQ(lease_.CapFor("app"), 2);
  EXPECT_EQ(target_.caps["app"], 2);
  EXPECT_FALSE(Tick().lease_lost);  // said once
}

// A lost lease never closes a server under a running transaction (issue 34): busy servers stay
// until they are released, however long the lease has been gone; idle ones go at once.
TEST_F(LeaseStateTest, ALostLeaseNeverClosesBusyServers) {
  Join(absl::ZeroDuration());
  const absl::Time hello = Now();
  Grant(1, 6, 2);
  target_.open = 6;
  target_.idle = 1;
  clock_.Set(hello + kLease * 3 / 4);
  Tick();
  EXPECT_EQ(target_.enforced, 1);
  EXPECT_EQ(target_.open, 5);
  clock_.Set(hello + kLease * 2);
  Tick();
  EXPECT_EQ(target_.enforced, 2);
  EXPECT_EQ(target_.open, 5);
}

TEST_F(LeaseStateTest, HoldsNothingOnceTheControllerHasForgottenIt) {
  Join(absl::ZeroDuration());
  const absl::Time hello = Now();
  Grant(1, 6, 2);
  clock_.Set(hello + kForget - kLease - absl::Milliseconds(1));
  EXPECT_THAT(Tick().forgotten, IsEmpty());
  EXPECT_EQ(lease_.CapFor("app"), 2);
  clock_.Set(hello + kForget - kLease);
  EXPECT_THAT(Tick().forgotten, ElementsAre("app"));
  EXPECT_EQ(lease_.CapFor("app"), 0);
  EXPECT_EQ(lease_.FloorFor("app"), 0);
  EXPECT_THAT(Tick().forgotten, IsEmpty());  // said once
}

TEST_F(LeaseStateTest, RenewalCountsFromWhenTheReportWasSent) {
  Join(absl::ZeroDuration());
  Grant(1, 6, 2);
  clock_.Advance(absl::Seconds(1));
  auto report = lease_.NextReport(Now());
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->seq, 1u);
  const absl::Time sent = Now();
  clock_.Advance(absl::Seconds(1));  // the renewal takes a second to come back
  lease_.OnRenewed(report->seq, Now());
  EXPECT_EQ(lease_.lease_start(), sent);
  clock_.Set(sent + kLease * 3 / 4 - absl::Milliseconds(1));
  EXPECT_FALSE(Tick().lease_lost);
  clock_.Set(sent + kLease * 3 / 4);
  EXPECT_TRUE(Tick().lease_lost);
}

TEST_F(LeaseStateTest, WithoutLeaseOnlyLowersAreTakenAndNothingIsAcked) {
  Join(absl::ZeroDuration());
  Grant(1, 6, 2);
  lease_.MarkAcked(*Tick().ack);
  clock_.Advance(kLease);
  ASSERT_TRUE(Tick().lease_lost);
  Grant(2, 9, 2);  // a raise from a controller that still thinks we hold a lease
  EXPECT_EQ(lease_.CapFor("app"), 2);
  Grant(3, 1, 1);
  EXPECT_EQ(lease_.CapFor("app"), 1);
  EXPECT_FALSE(Tick().ack.has_value());
}

TEST_F(LeaseStateTest, LateRenewalOfAnOldReportRegainsNothing) {
  Join(absl::ZeroDuration());
  auto first = lease_.NextReport(Now());
  clock_.Advance(kLease + absl::Milliseconds(1));
  ASSERT_TRUE(Tick().lease_lost);
  auto second = lease_.NextReport(Now());  // drops the first: too old to extend a lease
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_FALSE(lease_.OnRenewed(first->seq, Now()));
  EXPECT_FALSE(lease_.has_lease());
  EXPECT_TRUE(lease_.OnRenewed(second->seq, Now()));
  EXPECT_TRUE(lease_.has_lease());
}

TEST_F(LeaseStateTest, RejoinRestoresTheLeaseAndRestartsGrantNumbers) {
  Join(absl::ZeroDuration());
  Grant(7, 6, 2);
  lease_.MarkAcked(*Tick().ack);
  lease_.OnStreamEnded();
  EXPECT_FALSE(lease_.NextReport(Now()).has_value());  // no reports until welcomed again
  clock_.Advance(kLease);
  ASSERT_TRUE(Tick().lease_lost);
  const auto hello = lease_.Databases(true);
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(hello[0].cap, 2);  // it rejoins with what it holds
  EXPECT_EQ(hello[0].floor, 2);
  Join();
  EXPECT_TRUE(lease_.has_lease());
  Grant(1, 5, 1);  // numbered from 1 again on the new stream
  EXPECT_EQ(lease_.CapFor("app"), 5);
  auto outcome = Tick();
  ASSERT_TRUE(outcome.ack.has_value());
  EXPECT_EQ(*outcome.ack, 1u);
}

TEST_F(LeaseStateTest, WelcomeNamingAnotherPeerIdIsRefused) {
  Join(absl::ZeroDuration(), 0x0203);
  lease_.OnStreamEnded();
  lease_.OnHelloSent(Now());
  EXPECT_FALSE(lease_.OnWelcome({0x0303, absl::ZeroDuration(), absl::ZeroDuration()}, Now()));
  EXPECT_FALSE(lease_.welcomed());
  EXPECT_EQ(lease_.peer_id(), 0x0203u);
}

TEST_F(LeaseStateTest, WelcomeTimingsReplaceTheConfiguredOnes) {
  lease_.OnHelloSent(Now());
  ASSERT_TRUE(lease_.OnWelcome({0x0101, absl::Seconds(40), absl::Seconds(100)}, Now()));
  Grant(1, 6, 2);
  clock_.Advance(absl::Seconds(29));  // 3/4 of 40 s
  EXPECT_FALSE(Tick().lease_lost);
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(Tick().lease_lost);
}

TEST_F(LeaseStateTest, WelcomeAfterAPausedHelloHasNoLeaseUntilRenewed) {
  Join(kLease);  // the Welcome came a whole lease after the Hello
  EXPECT_FALSE(lease_.has_lease());
  Grant(1, 6, 2);  // a raise without a lease is not taken ...
  EXPECT_EQ(lease_.CapFor("app"), 0);
  EXPECT_FALSE(Tick().ack.has_value());
  auto report = lease_.NextReport(Now());
  ASSERT_TRUE(report.has_value());
  EXPECT_TRUE(lease_.OnRenewed(report->seq, Now()));
  EXPECT_TRUE(lease_.has_lease());
  // ... until the controller renews the stream that carried it: it has counted the raise for us
  // since it sent it, and would never send it again.
  EXPECT_EQ(lease_.CapFor("app"), 6);
  auto outcome = Tick();
  ASSERT_TRUE(outcome.ack.has_value());
  EXPECT_EQ(*outcome.ack, 1u);
}

TEST_F(LeaseStateTest, AWaitingRaiseTakesTheNewestGrantAndDiesWithItsStream) {
  Join(kLease);
  Grant(1, 6, 2);
  Grant(2, 4, 1);  // the newer grant replaces the waiting raise
  auto report = lease_.NextReport(Now());
  ASSERT_TRUE(report.has_value());
  ASSERT_TRUE(lease_.OnRenewed(report->seq, Now()));
  EXPECT_EQ(lease_.CapFor("app"), 4);
  EXPECT_EQ(lease_.FloorFor("app"), 1);
  lease_.MarkAcked(*Tick().ack);

  // A raise left waiting on a stream that ended is never taken: the next stream starts afresh.
  lease_.OnStreamEnded();
  clock_.Advance(kLease);
  ASSERT_TRUE(Tick().lease_lost);
  ASSERT_EQ(lease_.CapFor("app"), 1);
  Join(kLease);
  Grant(1, 9, 2);
  lease_.OnStreamEnded();
  Join(kLease);
  report = lease_.NextReport(Now());
  ASSERT_TRUE(report.has_value());
  ASSERT_TRUE(lease_.OnRenewed(report->seq, Now()));
  EXPECT_EQ(lease_.CapFor("app"), 1);
}

TEST_F(LeaseStateTest, ReportsCarryPeakDemandSinceTheLastReport) {
  Join();
  target_.demand = 7;
  Tick();
  target_.demand = 2;
  auto report = lease_.NextReport(Now());
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->databases[0].demand, 7);
  report = lease_.NextReport(Now());
  EXPECT_EQ(report->databases[0].demand, 2);
  EXPECT_EQ(report->seq, 2u);
}

}  // namespace
}  // namespace pgfleet::peering::controller
