// The controller's membership in simulated time: blocks per pod, lease expiry and forgetting,
// rejoin, leave, and the recovery of a restarted controller.
#include "peering/controller/membership.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/base/clock.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering::controller {
namespace membership_test {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr absl::Duration kLease = absl::Seconds(4);
constexpr absl::Duration kForget = absl::Seconds(20);

JoinRequest Hello(const std::string& pod, uint32_t local, uint32_t peer_id = 0) {
  JoinRequest hello;
  hello.pod_id = pod;
  hello.local_peer_id = local;
  hello.peer_id = peer_id;
  hello.address = pod + ":9128";
  return hello;
}

std::vector<std::string> Keys(const std::vector<Membership::Expired>& expired) {
  std::vector<std::string> out;
  for (const auto& e : expired) out.push_back(e.key);
  return out;
}

class MembershipTest : public ::testing::Test {
 protected:
  MembershipTest() : membership_(MembershipOptions{kLease, kForget, 1}) {
    membership_.allocator().SetBudget("app", 10);
    membership_.Start(clock_.Now());
  }

  Membership::Joined Join(const JoinRequest& hello) {
    auto joined = membership_.Join(hello, clock_.Now());
    EXPECT_TRUE(joined.has_value());
    return joined.value_or(Membership::Joined{});
  }
  bool Report(const std::string& key, uint64_t seq = 1) {
    return membership_.Report(key, seq, {DatabaseReport{"app", 10, 0, 0, 0, 1, {}}}, clock_.Now());
  }
  const Membership::Member& Get(const std::string& key) {
    const Membership::Member* member = membership_.Find(key);
    EXPECT_NE(member, nullptr) << key;
    static const Membership::Member kNone;
    return member != nullptr ? *member : kNone;
  }

  base::FakeClock clock_;
  Membership membership_;
};

TEST_F(MembershipTest, WorkersOfOnePodShareABlockAndPodsGetTheirOwn) {
  auto a1 = Join(Hello("pod-a", 1));
  auto a2 = Join(Hello("pod-a", 2));
  auto b1 = Join(Hello("pod-b", 1));
  EXPECT_EQ(a1.key, "pod-a/1");
  EXPECT_FALSE(a1.rejoin);
  EXPECT_NE(a1.block, 0u);
  EXPECT_EQ(a2.block, a1.block);
  EXPECT_NE(b1.block, a1.block);
  EXPECT_EQ(a2.peer_id, protocol::MakePeerId(a1.block, 2));
  EXPECT_EQ(membership_.pods().size(), 2u);
  EXPECT_EQ(membership_.pods().at("pod-a").members.size(), 2u);
}

TEST_F(MembershipTest, APodsLeaseTakesTheBudgetAndItsWorkersOnlyTheirIds) {
  JoinRequest worker1 = Hello("pod-a", 1);
  worker1.role = JoinRequest::Role::kWorkerOfPod;
  JoinRequest worker2 = Hello("pod-a", 2);
  worker2.role = JoinRequest::Role::kWorkerOfPod;
  JoinRequest pod = Hello("pod-a", 0);
  pod.role = JoinRequest::Role::kPod;
  pod.address.clear();
  const auto w1 = Join(worker1);
  const auto w2 = Join(worker2);
  const auto lease = Join(pod);
  EXPECT_EQ(lease.key, "pod-a/pod");
  EXPECT_EQ(lease.peer_id, 0u);
  EXPECT_EQ(protocol::PodBlockOfPeerId(w1.peer_id), protocol::PodBlockOfPeerId(w2.peer_id));
  // The directory's pod lists the workers, the cancel targets, not the lease.
  EXPECT_EQ(membership_.pods().at("pod-a").members.size(), 2u);
  EXPECT_EQ(membership_.pods().at("pod-a").address, "pod-a:9128");
  clock_.Advance(kLease);
  EXPECT_TRUE(Report(lease.key));
  EXPECT_TRUE(Report(w1.key));
  EXPECT_TRUE(Report(w2.key));
  membership_.Tick(clock_.Now());  // recovery over: raises allowed
  ASSERT_FALSE(membership_.recovering());
  // Only the pod's lease is granted a share, all of the budget for the only demand there is.
  std::map<std::string, int> caps;
  for (const auto& grant : membership_.Rebalance(clock_.Now())) {
    for (const auto& share : grant.shares) caps[grant.key] = share.cap;
  }
  EXPECT_FALSE(caps.contains(w1.key));
  EXPECT_FALSE(caps.contains(w2.key));
  EXPECT_GT(caps[lease.key], 0);
  EXPECT_FALSE(membership_.allocator().Share(Get(w1.key).handle, "app").has_value());
  // The lease leaving does not take the pod's block away from its workers.
  EXPECT_TRUE(
      membership_.Leave(lease.key, {DatabaseReport{"app", 10, 0, 0, 0, 0, {}}}, clock_.Now()));
  EXPECT_EQ(membership_.pods().at("pod-a").block, protocol::PodBlockOfPeerId(w1.peer_id));
  // A pod's lease names no worker and no peer id.
  JoinRequest bad = Hello("pod-a", 3);
  bad.role = JoinRequest::Role::kPod;
  EXPECT_FALSE(Membership::IsValid(bad));
}

TEST_F(MembershipTest, MalformedHellosAreRefused) {
  EXPECT_FALSE(membership_.Join(Hello("", 1), clock_.Now()).has_value());
  EXPECT_FALSE(membership_.Join(Hello("pod", 0), clock_.Now()).has_value());
  EXPECT_FALSE(
      membership_.Join(Hello("pod", protocol::kMaxLocalPeerId + 1), clock_.Now()).has_value());
  EXPECT_FALSE(
      membership_.Join(Hello("pod", 2, protocol::MakePeerId(5, 3)), clock_.Now()).has_value());
  EXPECT_TRUE(membership_.members().empty());
  EXPECT_TRUE(Membership::IsValid(Hello("pod", 3, protocol::MakePeerId(5, 3))));
}

TEST_F(MembershipTest, LeaseExpiresAfterLeaseTimeoutOfSilence) {
  Join(Hello("pod-a", 1));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Report("pod-a/1"));
  clock_.Advance(kLease);  // exactly a lease of silence: still live
  EXPECT_THAT(membership_.Tick(clock_.Now()).expired, IsEmpty());
  EXPECT_FALSE(Get("pod-a/1").expired);
  clock_.Advance(absl::Milliseconds(1));
  auto outcome = membership_.Tick(clock_.Now());
  EXPECT_THAT(Keys(outcome.expired), ElementsAre("pod-a/1"));
  EXPECT_EQ(outcome.expired[0].silent, kLease + absl::Milliseconds(1));
  EXPECT_TRUE(Get("pod-a/1").expired);
  EXPECT_FALSE(membership_.allocator().IsLive(Get("pod-a/1").handle));
  EXPECT_THAT(membership_.Tick(clock_.Now()).expired, IsEmpty());  // said once
  // An expired member must rejoin: its reports and acks are refused.
  EXPECT_FALSE(Report("pod-a/1", 2));
  EXPECT_FALSE(membership_.Ack("pod-a/1", 1, {}));
}

TEST_F(MembershipTest, ExpiredMemberIsForgottenAndItsBlockReusedLast) {
  const uint32_t block = Join(Hello("pod-a", 1)).block;
  clock_.Advance(kForget);
  EXPECT_THAT(membership_.Tick(clock_.Now()).forgotten, IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  auto outcome = membership_.Tick(clock_.Now());
  EXPECT_THAT(outcome.forgotten, ElementsAre("pod-a/1"));
  EXPECT_EQ(membership_.Find("pod-a/1"), nullptr);
  EXPECT_TRUE(membership_.pods().empty());
  EXPECT_NE(Join(Hello("pod-b", 1)).block, block);  // a never-used block first
}

TEST_F(MembershipTest, RejoinAfterExpiryRenewsTheLease) {
  const auto first = Join(Hello("pod-a", 1));
  clock_.Advance(kLease + absl::Milliseconds(1));
  membership_.Tick(clock_.Now());
  ASSERT_TRUE(Get("pod-a/1").expired);
  membership_.Detach("pod-a/1");
  EXPECT_FALSE(Get("pod-a/1").connected);
  JoinRequest hello = Hello("pod-a", 1, first.peer_id);
  hello.databases.push_back(DatabaseReport{"app", 10, 1, 1, 1, 0, {}});
  auto again = Join(hello);
  EXPECT_TRUE(again.rejoin);
  EXPECT_TRUE(again.reclaimed);
  EXPECT_EQ(again.peer_id, first.peer_id);
  EXPECT_TRUE(Get("pod-a/1").connected);
  EXPECT_FALSE(Get("pod-a/1").expired);
  EXPECT_EQ(Get("pod-a/1").handle, 1u);  // the same allocator id
  EXPECT_TRUE(Report("pod-a/1"));
  EXPECT_EQ(membership_.allocator().Share(1, "app")->cap, 1);
}

TEST_F(MembershipTest, LeaveWithNothingOpenRemovesWithServersOpenExpires) {
  Join(Hello("pod-a", 1));
  Join(Hello("pod-a", 2));
  EXPECT_TRUE(
      membership_.Leave("pod-a/1", {DatabaseReport{"app", 10, 0, 0, 0, 0, {}}}, clock_.Now()));
  EXPECT_EQ(membership_.Find("pod-a/1"), nullptr);
  EXPECT_FALSE(
      membership_.Leave("pod-a/2", {DatabaseReport{"app", 10, 1, 1, 1, 0, {}}}, clock_.Now()));
  EXPECT_TRUE(Get("pod-a/2").expired);
  EXPECT_EQ(membership_.pods().size(), 1u);
}

TEST_F(MembershipTest, DetachedMembersAreNotGranted) {
  Join(Hello("pod-a", 1));
  Join(Hello("pod-b", 1));
  clock_.Advance(kLease);
  Report("pod-a/1");
  Report("pod-b/1");
  membership_.Tick(clock_.Now());  // recovery over: raises allowed
  ASSERT_FALSE(membership_.recovering());
  membership_.Detach("pod-b/1");
  auto grants = membership_.Rebalance(clock_.Now());
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].key, "pod-a/1");
  EXPECT_EQ(grants[0].report_seq, 1u);
  EXPECT_GT(grants[0].raises, 0);
  EXPECT_EQ(Get("pod-a/1").sent_caps.at("app"), grants[0].shares[0].cap);
}

TEST_F(MembershipTest, RecoveryWaitsForTheMembersOthersNamedOrALease) {
  JoinRequest hello = Hello("pod-a", 1);
  hello.known_members = {"pod-a/1", "pod-b/1"};
  Join(hello);
  EXPECT_EQ(membership_.awaited(), 1u);
  auto outcome = membership_.Tick(clock_.Now());
  EXPECT_FALSE(outcome.recovery_done);
  EXPECT_TRUE(membership_.recovering());
  EXPECT_EQ(membership_.allocator().Committed("app"), 1);       // min_share held back for pod-b/1
  EXPECT_THAT(membership_.Rebalance(clock_.Now()), IsEmpty());  // nothing raised yet
  Join(Hello("pod-b", 1));
  outcome = membership_.Tick(clock_.Now());
  EXPECT_TRUE(outcome.recovery_done);
  EXPECT_FALSE(membership_.recovering());
  EXPECT_EQ(membership_.awaited(), 0u);
  EXPECT_FALSE(membership_.Rebalance(clock_.Now()).empty());
}

TEST_F(MembershipTest, RecoveryEndsAfterALeaseWhenSomeoneNeverReturns) {
  JoinRequest hello = Hello("pod-a", 1);
  hello.known_members = {"pod-a/1", "pod-gone/1"};
  Join(hello);
  clock_.Advance(kLease - absl::Milliseconds(1));
  Report("pod-a/1");
  EXPECT_FALSE(membership_.Tick(clock_.Now()).recovery_done);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(membership_.Tick(clock_.Now()).recovery_done);
  EXPECT_EQ(membership_.awaited(), 1u);  // its floor stays reserved until forget_after
  clock_.Set(membership_.started() + kForget);
  Report("pod-a/1");
  membership_.Tick(clock_.Now());
  EXPECT_EQ(membership_.awaited(), 0u);
}

TEST_F(MembershipTest, RestartedControllerKeepsReportedBlocksUntilForgetAfter) {
  JoinRequest hello = Hello("pod-a", 1, protocol::MakePeerId(1, 1));
  hello.known_blocks = {1, 2};
  EXPECT_EQ(Join(hello).block, 1u);
  EXPECT_EQ(Join(Hello("pod-c", 1)).block, 3u);  // block 2 may still be pod-b's
  clock_.Set(membership_.started() + kForget);
  Report("pod-a/1");
  Report("pod-c/1");
  EXPECT_EQ(Join(Hello("pod-d", 1)).block, 2u);
}

TEST_F(MembershipTest, TwoPodsClaimingOneBlockAreBothKept) {
  Join(Hello("pod-a", 1, protocol::MakePeerId(4, 1)));
  auto b = Join(Hello("pod-b", 1, protocol::MakePeerId(4, 1)));
  EXPECT_EQ(b.block, 4u);
  EXPECT_EQ(b.conflict_holder, "pod-a");
  EXPECT_EQ(membership_.pods().size(), 2u);
}

// A lost pod's room (issue 34): what it held stays counted; the backends it reported count until
// PostgreSQL no longer lists them, the rest of its room until lost_room_hold.
class LostRoomFixture {
 protected:
  static constexpr absl::Duration kHold = absl::Seconds(8);
  explicit LostRoomFixture(bool checked)
      : membership_(MembershipOptions{kLease, kForget, 1, kHold, checked}) {
    membership_.allocator().SetBudget("app", 10);
    membership_.Start(clock_.Now());
  }
  // pod-a holds a cap of 6 with two servers (pids 101, 102); pod-b asks for everything.
  void Lose() {
    JoinRequest a;
    a.pod_id = "pod-a";
    a.role = JoinRequest::Role::kPod;
    a.databases = {DatabaseReport{"app", 10, 6, 1, 2, 6, {101, 102}}};
    ASSERT_TRUE(membership_.Join(a, clock_.Now()).has_value());
    JoinRequest b = a;
    b.pod_id = "pod-b";
    b.databases = {DatabaseReport{"app", 10, 1, 1, 0, 20, {}}};
    ASSERT_TRUE(membership_.Join(b, clock_.Now()).has_value());
    clock_.Advance(kLease + absl::Milliseconds(1));
    ASSERT_TRUE(membership_.Report("pod-b/pod", 1, b.databases, clock_.Now()));
    ASSERT_THAT(Keys(membership_.Tick(clock_.Now()).expired), ElementsAre("pod-a/pod"));
  }
  std::vector<uint32_t> LostPids() const {
    std::vector<uint32_t> pids;
    for (const auto& backend : membership_.LostBackends()) pids.push_back(backend.pid);
    return pids;
  }
  int Held(const std::string& key) {
    return membership_.allocator().Share(membership_.Find(key)->handle, "app")->held;
  }

  base::FakeClock clock_;
  Membership membership_;
};

class LostRoomTest : public LostRoomFixture, public ::testing::TestWithParam<bool> {
 protected:
  LostRoomTest() : LostRoomFixture(GetParam()) {}
};

class CheckedLostRoomTest : public LostRoomFixture, public ::testing::Test {
 protected:
  CheckedLostRoomTest() : LostRoomFixture(true) {}
};

TEST_P(LostRoomTest, ALostPodsRoomComesBackAsItsBackendsGo) {
  Lose();
  EXPECT_EQ(Held("pod-a/pod"), 6);
  const bool checked = GetParam();
  const std::vector<uint32_t> asked = LostPids();
  EXPECT_THAT(asked, ElementsAre(101, 102));
  // PostgreSQL lists one of the two: with the check, the other's room comes back.
  membership_.BackendsListed(asked, {102}, clock_.Now());
  EXPECT_EQ(Held("pod-a/pod"), checked ? 5 : 6);
  clock_.Advance(kHold);
  membership_.Tick(clock_.Now());
  // The hold is over: the room no report accounted for is back; with the check, the backend
  // PostgreSQL still lists is not.
  EXPECT_EQ(Held("pod-a/pod"), 1);
  if (checked) {
    EXPECT_THAT(LostPids(), ElementsAre(101, 102));
    membership_.BackendsListed(asked, {}, clock_.Now());
  }
  EXPECT_EQ(Held("pod-a/pod"), 1);  // its floor, which it may open on its own
  EXPECT_THAT(LostPids(), IsEmpty());
}

// A member lost after the question went out: the answer does not cover its pids.
TEST_F(CheckedLostRoomTest, AnAnswerCountsOnlyForTheMembersItAskedAbout) {
  Lose();
  membership_.BackendsListed({101}, {}, clock_.Now());
  EXPECT_EQ(Held("pod-a/pod"), 6);
  membership_.BackendsListed({101, 102, 103}, {101}, clock_.Now());
  EXPECT_EQ(Held("pod-a/pod"), 5);
  // Never more again, even if a pid is listed once more (reused by another backend).
  membership_.BackendsListed({101, 102}, {101, 102}, clock_.Now());
  EXPECT_EQ(Held("pod-a/pod"), 5);
}

INSTANTIATE_TEST_SUITE_P(BackendsChecked, LostRoomTest, ::testing::Bool());

}  // namespace membership_test
}  // namespace pgfleet::peering::controller
