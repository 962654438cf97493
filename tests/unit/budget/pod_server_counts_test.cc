// The pod's server counts: two workers mapping one region must never hold more than a limit
// together, and a dead worker's servers come back.
#include "pooler/budget/pod_server_counts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace pgfleet::budget {
namespace {

class PodServerCountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fd = PodServerCounts::CreateSharedRegion();
    ASSERT_TRUE(fd.ok()) << fd.status();
    fd_ = *fd;
    ASSERT_TRUE(a_.AttachShared(fd_, 1).ok());
    ASSERT_TRUE(b_.AttachShared(fd_, 2).ok());
  }
  void TearDown() override { close(fd_); }

  int fd_ = -1;
  PodServerCounts a_, b_;
};

TEST_F(PodServerCountsTest, WorkersAgreeOnKeys) {
  const auto pool = a_.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  ASSERT_TRUE(pool.has_value());
  EXPECT_EQ(b_.Intern(PodServerCounts::PoolKeyText("app", "alice")), pool);
  EXPECT_NE(b_.Intern(PodServerCounts::PoolKeyText("app", "bob")), pool);
  // Names may hold any byte: ("a", "b:c") and ("a:b", "c") stay apart.
  EXPECT_NE(a_.Intern(PodServerCounts::PoolKeyText("a", "b:c")),
            a_.Intern(PodServerCounts::PoolKeyText("a:b", "c")));
  EXPECT_NE(a_.Intern(PodServerCounts::PoolKeyText("1", "2")),
            a_.Intern(PodServerCounts::PoolKeyText("12", "")));
  EXPECT_EQ(a_.Intern(std::string(PodServerCounts::kMaxKeyLength + 1, 'x')), std::nullopt);
}

TEST_F(PodServerCountsTest, PausesRecordedByOneWorkerAreWhatAnotherStartsWith) {
  EXPECT_FALSE(b_.RecordedPauses().all);
  a_.RecordPause("app", true);
  a_.RecordPause("other", true);
  a_.RecordPause("other", false);
  auto paused = b_.RecordedPauses();
  EXPECT_FALSE(paused.all);
  EXPECT_EQ(paused.databases, std::vector<std::string>{"app"});
  a_.RecordPause("", true);
  EXPECT_TRUE(b_.RecordedPauses().all);
  // RESUME without a name resumes everything.
  b_.RecordPause("", false);
  paused = a_.RecordedPauses();
  EXPECT_FALSE(paused.all);
  EXPECT_TRUE(paused.databases.empty());
  // The statement epoch is one for the pod.
  a_.statement_epoch()->fetch_add(1);
  EXPECT_EQ(b_.statement_epoch()->load(), 1u);
}

TEST_F(PodServerCountsTest, ALimitHoldsForThePodAndReservationsAreAllOrNone) {
  const auto pool = *a_.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  const auto db = *a_.Intern(PodServerCounts::DatabaseKeyText("app"));
  EXPECT_TRUE(a_.TryReserve({{pool, 2}, {db, 3}}));
  EXPECT_TRUE(b_.TryReserve({{pool, 2}, {db, 3}}));
  EXPECT_FALSE(a_.TryReserve({{pool, 2}, {db, 3}}));  // the pool is full in the pod
  EXPECT_EQ(a_.Total(pool), 2);
  EXPECT_EQ(a_.Mine(pool), 1);
  EXPECT_EQ(b_.Mine(pool), 1);
  // The database has room but the pool has none: the database's count is not taken.
  EXPECT_EQ(a_.Total(db), 2);
  b_.Release({pool, db});
  EXPECT_EQ(a_.Total(pool), 1);
  EXPECT_TRUE(a_.TryReserve({{pool, 2}, {db, 3}}));
  // Negative: no room at all; 0: unlimited.
  EXPECT_FALSE(a_.TryReserve({{db, -1}}));
  EXPECT_TRUE(a_.TryReserve({{db, 0}}));
  EXPECT_EQ(a_.Total(db), 3);
}

TEST_F(PodServerCountsTest, AHandOffMovesAServerWithoutChangingThePodTotal) {
  const auto pool = *a_.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  ASSERT_TRUE(a_.TryReserve({{pool, 1}}));
  a_.Transfer({pool}, a_.worker(), b_.worker());
  EXPECT_EQ(a_.Mine(pool), 0);
  EXPECT_EQ(b_.Mine(pool), 1);
  EXPECT_EQ(a_.Total(pool), 1);
  // Worker 2 dies: its server comes back to the pod.
  PodServerCounts::ReleaseWorker(fd_, b_.worker());
  EXPECT_EQ(a_.Total(pool), 0);
  EXPECT_TRUE(a_.TryReserve({{pool, 1}}));
}

// A dead worker's servers stay in the pod's totals until the supervisor releases them (its
// backends may still run in PostgreSQL), while its own counts start from zero at once for a
// worker restarted in its slot.
TEST_F(PodServerCountsTest, ADeadWorkersServersStayCountedUntilReleased) {
  const auto pool = *a_.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  const auto db = *a_.Intern(PodServerCounts::DatabaseKeyText("app"));
  ASSERT_TRUE(b_.TryReserve({{pool, 4}, {db, 4}}));
  ASSERT_TRUE(b_.TryReserve({{pool, 4}, {db, 4}}));
  b_.AddIdle(pool, 1);
  PodServerCounts::HeldServers held = PodServerCounts::DetachWorker(fd_, b_.worker());
  EXPECT_EQ(b_.Mine(pool), 0);
  EXPECT_EQ(a_.Total(pool), 2);
  EXPECT_EQ(a_.Total(db), 2);
  EXPECT_EQ(a_.SiblingWithIdle(pool), std::nullopt);  // an idle server of the dead is no one's
  EXPECT_TRUE(a_.TryReserve({{pool, 3}, {db, 3}}));
  EXPECT_FALSE(a_.TryReserve({{pool, 3}, {db, 3}}));  // the held two still count
  PodServerCounts::ReleaseHeld(fd_, held);
  EXPECT_EQ(a_.Total(pool), 1);
  EXPECT_TRUE(a_.TryReserve({{pool, 3}, {db, 3}}));
}

// The pod's lease reports its backends' pids per database (issue 34): a server's record follows
// it to a sibling, and a dead worker's stay listed while its servers are held.
TEST_F(PodServerCountsTest, BackendPidsAreListedPerDatabaseUntilTheirServersGo) {
  using ::testing::UnorderedElementsAre;
  const auto app = *a_.Intern(PodServerCounts::DatabaseKeyText("app"));
  const auto other = *a_.Intern(PodServerCounts::DatabaseKeyText("other"));
  const int first = a_.RecordBackend(app, 101);
  const int second = b_.RecordBackend(app, 102);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  ASSERT_GE(b_.RecordBackend(other, 103), 0);
  EXPECT_THAT(b_.BackendPids(app), UnorderedElementsAre(101, 102));
  EXPECT_THAT(a_.BackendPids(other), UnorderedElementsAre(103));
  // 102 moves from b to a: a finds its record; b's death no longer takes it along.
  b_.MoveBackend(second, a_.worker());
  EXPECT_EQ(a_.FindBackend(102), second);
  PodServerCounts::HeldServers held = PodServerCounts::DetachWorker(fd_, b_.worker());
  ASSERT_EQ(held.backends.size(), 1u);  // 103's
  EXPECT_THAT(a_.BackendPids(other), UnorderedElementsAre(103));
  PodServerCounts::ReleaseHeld(fd_, held);
  EXPECT_TRUE(a_.BackendPids(other).empty());
  a_.ForgetBackend(first);
  EXPECT_THAT(a_.BackendPids(app), UnorderedElementsAre(102));
  EXPECT_EQ(a_.FindBackend(101), -1);
}

TEST_F(PodServerCountsTest, SiblingsSeeEachOthersIdleServersAndWaitingClients) {
  const auto pool = *a_.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  EXPECT_EQ(a_.SiblingWithIdle(pool), std::nullopt);
  b_.AddIdle(pool, 2);
  a_.AddIdle(pool, 5);  // its own idle servers are not a sibling's
  EXPECT_EQ(a_.SiblingWithIdle(pool), b_.worker());
  EXPECT_EQ(b_.SiblingWithIdle(pool), a_.worker());
  a_.AddWaiting(pool, 1);
  a_.SetOldestWait(pool, 1000);
  EXPECT_EQ(b_.WaitingTotal(pool), 1);
  ASSERT_TRUE(b_.OldestWaitingSibling(pool).has_value());
  EXPECT_EQ(b_.OldestWaitingSibling(pool)->worker, a_.worker());
  EXPECT_EQ(b_.OldestWaitingSibling(pool)->since_us, 1000);
  EXPECT_EQ(a_.OldestWaitingSibling(pool), std::nullopt);  // its own clients are not a sibling's
  PodServerCounts::ReleaseWorker(fd_, a_.worker());
  EXPECT_EQ(b_.OldestWaitingSibling(pool), std::nullopt);
  EXPECT_EQ(b_.WaitingTotal(pool), 0);
  EXPECT_EQ(b_.SiblingWithIdle(pool), std::nullopt);
}

TEST_F(PodServerCountsTest, TheLeaseSharesHoldUntilTheLeaseRunsOutThenTheFloorThenNothing) {
  const auto db = a_.Intern(PodServerCounts::DatabaseKeyText("app"));
  ASSERT_TRUE(db.has_value());
  // A new pod holds nothing.
  EXPECT_EQ(b_.EnforcedShare(*db, 1'000'000).cap, 0);
  a_.PublishShare(*db, {.cap = 6, .floor = 2});
  // No lease times yet (never renewed): the share as written.
  EXPECT_EQ(b_.EnforcedShare(*db, 1'000'000).cap, 6);
  const int64_t start = 10'000'000, timeout = 1'000'000, forget = 30'000'000;
  a_.PublishLeaseTimes({start, timeout, forget});
  EXPECT_EQ(b_.EnforcedShare(*db, start + timeout * 3 / 4 - 1).cap, 6);
  // The holder stopped renewing (it died): the workers shrink to the floor on their own...
  EXPECT_EQ(b_.EnforcedShare(*db, start + timeout * 3 / 4).cap, 2);
  // ... and hold nothing once the controller may have given their floor away.
  EXPECT_EQ(b_.EnforcedShare(*db, start + forget - timeout).cap, 0);
  // A renewal moves the start: the share is back.
  a_.PublishLeaseTimes({start + forget, timeout, forget});
  EXPECT_EQ(b_.EnforcedShare(*db, start + forget + 1).cap, 6);
  const PodServerCounts::Share share = b_.ShareOf(*db);
  EXPECT_EQ(share.cap, 6);
  EXPECT_EQ(share.floor, 2);
  EXPECT_EQ(b_.lease_times().start_us, start + forget);
  EXPECT_EQ(b_.DatabaseNames(), std::vector<std::string>{"app"});
}

TEST_F(PodServerCountsTest, SiblingsClaimNoMoreClosesThanTheExcessAndDemandAddsUp) {
  const auto db = a_.Intern(PodServerCounts::DatabaseKeyText("app"));
  ASSERT_TRUE(db.has_value());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a_.TryReserve({{*db, 0}}));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(b_.TryReserve({{*db, 0}}));
  // 5 open, share 3: two closes between both workers, however they interleave.
  EXPECT_TRUE(a_.ClaimShed(*db, 3));
  EXPECT_TRUE(b_.ClaimShed(*db, 3));
  EXPECT_FALSE(a_.ClaimShed(*db, 3));
  EXPECT_FALSE(b_.ClaimShed(*db, 3));
  a_.Release({*db});
  a_.EndShed(*db);
  EXPECT_FALSE(a_.ClaimShed(*db, 3));
  b_.Release({*db});
  b_.EndShed(*db);
  EXPECT_EQ(a_.Total(*db), 3);
  EXPECT_FALSE(b_.ClaimShed(*db, 3));
  a_.SetDemand(*db, 4);
  b_.SetDemand(*db, 3);
  EXPECT_EQ(a_.DemandTotal(*db), 7);
  // A dead worker's demand goes with it.
  PodServerCounts::ReleaseWorker(fd_, 2);
  EXPECT_EQ(a_.DemandTotal(*db), 4);
  EXPECT_EQ(a_.Total(*db), 2);
}

TEST_F(PodServerCountsTest, ConcurrentReservationsNeverExceedTheLimit) {
  const auto pool = *a_.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  constexpr int kLimit = 7;
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (PodServerCounts* counts : {&a_, &b_, &a_, &b_}) {
    threads.emplace_back([&, counts] {
      for (int i = 0; i < 2000; ++i) {
        if (counts->TryReserve({{pool, kLimit}})) {
          const int now = granted.fetch_add(1) + 1;
          EXPECT_LE(now, kLimit);
          granted.fetch_sub(1);
          counts->Release({pool});
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(a_.Total(pool), 0);
}

TEST_F(PodServerCountsTest, AnotherProcessFindsTheSameKeys) {
  // Workers are processes: a key must land in the same slot whatever the process (a per-process
  // hash seed would give each worker its own count of the same pool).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("POD_COUNTS_FD", std::to_string(fd_).c_str(), 1);
    execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=PodServerCountsChild.*", nullptr);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const auto pool = *a_.Intern(PodServerCounts::PoolKeyText("app", "child"));
  EXPECT_EQ(a_.Total(pool), 1);
  EXPECT_FALSE(a_.TryReserve({{pool, 1}}));
}

// Run by AnotherProcessFindsTheSameKeys in a fresh process (a new exec: its own hash seeds).
TEST(PodServerCountsChild, ReservesOneServerInTheParentsRegion) {
  const char* fd_text = getenv("POD_COUNTS_FD");
  if (fd_text == nullptr) GTEST_SKIP() << "run by AnotherProcessFindsTheSameKeys";
  PodServerCounts counts;
  ASSERT_TRUE(counts.AttachShared(atoi(fd_text), 7).ok());
  const auto pool = counts.Intern(PodServerCounts::PoolKeyText("app", "child"));
  ASSERT_TRUE(pool.has_value());
  ASSERT_TRUE(counts.TryReserve({{*pool, 1}}));
}

TEST(PodServerCountsPrivate, WithoutASupervisorOneWorkerCountsAlone) {
  PodServerCounts counts;
  const auto pool = *counts.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  EXPECT_TRUE(counts.TryReserve({{pool, 1}}));
  EXPECT_FALSE(counts.TryReserve({{pool, 1}}));
  counts.AddIdle(pool, 1);
  EXPECT_EQ(counts.SiblingWithIdle(pool), std::nullopt);
}

TEST(PodServerCountsRegion, ARegionOfAnotherBuildIsRefused) {
  // A rolling restart after an upgrade: the running supervisor made the region with the old
  // build's layout. The new build's worker refuses it instead of misreading it.
  auto good = PodServerCounts::CreateSharedRegion();
  ASSERT_TRUE(good.ok()) << good.status();
  struct stat st;
  ASSERT_EQ(fstat(*good, &st), 0);

  const int smaller = memfd_create("old-servers", 0);
  ASSERT_GE(smaller, 0);
  ASSERT_EQ(ftruncate(smaller, st.st_size - 8), 0);
  PodServerCounts a;
  const absl::Status refused = a.AttachShared(smaller, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("restart the whole pod"), std::string_view::npos) << refused;
  // It still counts privately, as before the attempt.
  const auto pool = a.Intern(PodServerCounts::PoolKeyText("app", "alice"));
  ASSERT_TRUE(pool.has_value());
  EXPECT_TRUE(a.TryReserve({{*pool, 1}}));

  // The same size, another layout version (its first 8 bytes).
  const int same_size = memfd_create("other-servers", 0);
  ASSERT_GE(same_size, 0);
  ASSERT_EQ(ftruncate(same_size, st.st_size), 0);
  const uint64_t other_layout = 0x7067666c00000002;
  ASSERT_EQ(pwrite(same_size, &other_layout, sizeof(other_layout), 0), 8);
  PodServerCounts b;
  EXPECT_EQ(b.AttachShared(same_size, 1).code(), absl::StatusCode::kFailedPrecondition);
  PodServerCounts c;
  EXPECT_TRUE(c.AttachShared(*good, 1).ok());
  close(smaller);
  close(same_size);
  close(*good);
}

}  // namespace
}  // namespace pgfleet::budget
