// The budget as PostgreSQL counts it when a pod is lost (issue 34): a pod frozen, killed or cut
// off keeps PostgreSQL's backends, so its room is given to others only once PostgreSQL no longer
// lists them (pgfleet-controller's controller.monitor), and a pod that comes back after losing
// its lease fails no running transaction. PostgreSQL's backends are sampled every 20 ms.
#include <signal.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fleet_fixture.h"

namespace pgfleet::testing {
namespace lost_member_test {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr milliseconds kSampleEvery{20};

// Every process of a pod: its workers and its lease first, then the supervisor (on SIGCONT the
// supervisor then finds its children running).
void SignalPod(const PgfleetProcess& pod, int signo) {
  for (pid_t worker : WorkerPids(pod.pid())) kill(worker, signo);
  if (const pid_t lease = PodLeasePid(pod.pid()); lease > 0) kill(lease, signo);
  kill(pod.pid(), signo);
}

// The most backends PostgreSQL lists for pod `name` (its application_name) in the sampler's
// window since Mark().
int MaxOf(BudgetSampler& sampler, const std::string& name) {
  const auto window = sampler.Window();
  auto it = window.find("ctlpod" + name);
  return it == window.end() ? 0 : it->second.first;
}

class LostMemberTest : public ControllerFixture {
 protected:
  // The controller with a monitoring connection to the shared PostgreSQL, and a lost_room_hold
  // far longer than any test here waits: only the monitor can give a lost pod's room back.
  std::unique_ptr<ControllerProcess> StartMonitoredController(const std::string& more = "") {
    return StartController(true, absl::StrCat("  monitor: \"", pg().ConnString(),
                                              "\"\n  lost_room_hold: 25s\n", more));
  }
  // Waits until the controller has expired a lease (the n-th expiry in its log).
  bool WaitForExpiry(const ControllerProcess& controller, size_t n) {
    return WaitFor([&] { return CountInLog(controller.Log(), "event=lease_expired") >= n; },
                   seconds(10));
  }
};

// A pod frozen (SIGSTOP of all its processes: a long pause, a hung VM) while it holds half the
// budget under load. Before issue 34 the controller gave its share to the other pod once the
// lease ran out and PostgreSQL listed 15 backends for a budget of 12; on resuming, the pod closed
// servers under 3 running transactions. Now its room stays counted while PostgreSQL lists its
// backends, and its clients see no error when it comes back.
TEST_F(LostMemberTest, AFrozenPodsRoomIsGivenToOthersOnlyOnceItsBackendsAreGone) {
  auto controller = StartMonitoredController();
  auto a = StartPod("A", "127.0.0.2", *controller, 2);
  auto b = StartPod("B", "127.0.0.3", *controller);
  BudgetSampler sampler(kSampleEvery);
  Load load_a(*a, 10, "SELECT pg_sleep(0.05)");
  Load load_b(*b, 10, "SELECT pg_sleep(0.05)");
  // Both pods hold part of the budget.
  ASSERT_TRUE(WaitFor(
      [&] {
        sampler.Mark();
        WaitFor([&] { return sampler.window_samples() >= 3; }, seconds(2));
        return MaxOf(sampler, "A") >= 4 && MaxOf(sampler, "B") >= 4;
      },
      seconds(15)))
      << sampler.Describe();
  const int ok_before = load_a.ok();
  EXPECT_LE(sampler.window_max_total(), kFleetBudget) << "before: " << sampler.window_worst();

  sampler.Mark();
  SignalPod(*a, SIGSTOP);
  ASSERT_TRUE(WaitForExpiry(*controller, 1)) << controller->Log();
  // B wants everything, but A's backends are still there: B never grows into their room.
  EXPECT_FALSE(WaitFor([&] { return sampler.window_max_total() > kFleetBudget; }, seconds(2)))
      << "frozen: " << sampler.window_worst();
  EXPECT_GE(MaxOf(sampler, "A"), 1) << "A's backends stay while it is frozen";
  sampler.Mark();
  SignalPod(*a, SIGCONT);

  // A comes back, rejoins, and serves again; nothing it had running failed.
  EXPECT_TRUE(WaitFor([&] { return load_a.ok() > ok_before + 50; }, seconds(15))) << a->Log();
  load_a.Stop();
  load_b.Stop();
  sampler.Stop();
  EXPECT_LE(sampler.window_max_total(), kFleetBudget) << "resumed: " << sampler.window_worst();
  EXPECT_LE(sampler.max_total(), kFleetBudget) << sampler.Describe() << "\n" << controller->Log();
  EXPECT_EQ(load_a.errors(), 0) << load_a.first_error();
  EXPECT_EQ(load_b.errors(), 0) << load_b.first_error();
}

// A pod killed (every process SIGKILLed) while its servers run queries: PostgreSQL ends the
// backends within client_connection_check_interval, the monitor sees them gone, and the other
// pod gets their room within seconds of the expiry, not after lost_room_hold (25 s here; the
// rest of the killed pod's share, room it held without a reported backend, waits for that).
TEST_F(LostMemberTest, AKilledPodsRoomComesBackOncePostgresHasEndedItsBackends) {
  auto controller = StartMonitoredController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto b = StartPod("B", "127.0.0.3", *controller);
  BudgetSampler sampler(kSampleEvery);
  // A alone holds most of the budget; B's clients arrive as A is killed.
  Load load_a(*a, 10, "SELECT pg_sleep(0.5)");
  ASSERT_TRUE(WaitFor(
      [&] {
        sampler.Mark();
        WaitFor([&] { return sampler.window_samples() >= 3; }, seconds(2));
        return MaxOf(sampler, "A") >= 8;
      },
      seconds(15)))
      << sampler.Describe();
  const int b_before = MaxOf(sampler, "B");
  Load load_b(*b, 12, "SELECT pg_sleep(0.05)");

  SignalPod(*a, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitForExpiry(*controller, 1)) << controller->Log();
  // B grows into the room of A's backends, which it could not have while they were counted.
  EXPECT_TRUE(WaitFor(
      [&] {
        sampler.Mark();
        WaitFor([&] { return sampler.window_samples() >= 3; }, seconds(2));
        return MaxOf(sampler, "B") >= b_before + 5;
      },
      seconds(10)))
      << sampler.Describe() << "\n"
      << controller->Log() << "\nB:\n"
      << b->Log() << "\n"
      << "B had " << b_before;
  EXPECT_LT(std::chrono::steady_clock::now() - killed, seconds(15));
  EXPECT_THAT(controller->Log(), HasSubstr("event=lost_backends_gone"));
  load_a.Stop();
  load_b.Stop();
  sampler.Stop();
  EXPECT_LE(sampler.max_total(), kFleetBudget) << sampler.Describe() << "\n" << controller->Log();
  EXPECT_EQ(load_b.errors(), 0) << load_b.first_error();
}

// Chaos (issue 34, item 5): a controller with its monitor and three pods under client load; one
// fault after another, each waited out until every live pod serves again: a worker of A killed
// mid-query, B frozen past its lease and resumed, C's lease process killed, the controller
// killed and restarted, A killed whole and a new pod D started. PostgreSQL's backends, sampled
// every 20 ms, never exceed the budget; only A's clients (whose processes died) see errors.
TEST_F(LostMemberTest, FaultsOneAfterAnotherNeverPutPostgresOverTheBudget) {
  auto controller = StartMonitoredController();
  auto a = StartPod("A", "127.0.0.2", *controller, 2);
  auto b = StartPod("B", "127.0.0.3", *controller);
  auto c = StartPod("C", "127.0.0.4", *controller);
  BudgetSampler sampler(kSampleEvery);
  auto load_a = std::make_unique<Load>(*a, 8, "SELECT pg_sleep(0.2)");
  Load load_b(*b, 8, "SELECT pg_sleep(0.05)");
  Load load_c(*c, 8, "SELECT pg_sleep(0.05)");
  // Every live load completes `n` more queries (bounded).
  auto all_serve = [&](std::vector<Load*> loads, int n) {
    std::vector<int> before;
    for (Load* load : loads) before.push_back(load->ok());
    return WaitFor(
        [&] {
          for (size_t i = 0; i < loads.size(); ++i) {
            if (loads[i]->ok() < before[i] + n) return false;
          }
          return true;
        },
        seconds(20));
  };
  ASSERT_TRUE(all_serve({load_a.get(), &load_b, &load_c}, 20)) << sampler.Describe();
  // The most backends each phase saw, so that a failure names the fault that caused it.
  std::string phases;
  auto phase = [&](const std::string& name) {
    absl::StrAppend(&phases, "\n  ", name, ": ", sampler.window_max_total(), " (",
                    sampler.window_worst(), ")");
    sampler.Mark();
  };
  phase("warm-up");

  // 1. A worker of A dies mid-query: its clients lose their connections, no one else does.
  const std::vector<pid_t> workers = WorkerPids(a->pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[0], SIGKILL);
  EXPECT_TRUE(all_serve({load_a.get(), &load_b, &load_c}, 20)) << "after a worker died";
  phase("1. a worker of A killed");

  // 2. B frozen past its lease, then resumed. The dead worker's own member expires too (step 1):
  // only a pod's lease expiring is B's.
  const auto pod_expiries = [&] {
    size_t n = 0;
    for (absl::string_view line : absl::StrSplit(controller->Log(), '\n')) {
      if (absl::StrContains(line, "event=lease_expired") && absl::StrContains(line, "/pod ")) ++n;
    }
    return n;
  };
  const size_t expiries = pod_expiries();
  SignalPod(*b, SIGSTOP);
  EXPECT_TRUE(WaitFor([&] { return pod_expiries() > expiries; }, seconds(10))) << controller->Log();
  SignalPod(*b, SIGCONT);
  EXPECT_TRUE(all_serve({load_a.get(), &load_b, &load_c}, 20)) << "after B was frozen";
  phase("2. B frozen past its lease and resumed");

  // 3. C's lease process dies; the supervisor restarts it and the workers keep serving.
  const pid_t lease = PodLeasePid(c->pid());
  ASSERT_GT(lease, 0);
  kill(lease, SIGKILL);
  EXPECT_TRUE(
      WaitFor([&] { return CountInLog(c->Log(), "event=pod_lease_started") >= 2; }, seconds(10)))
      << c->Log();
  EXPECT_TRUE(all_serve({load_a.get(), &load_b, &load_c}, 20)) << "after C's lease died";
  phase("3. C's lease process killed");

  // 4. The controller dies and comes back.
  controller->Kill();
  EXPECT_TRUE(all_serve({load_a.get(), &load_b, &load_c}, 10)) << "without a controller";
  controller->Start();
  EXPECT_TRUE(
      WaitFor([&] { return controller->Log().find("event=recovery_done") != std::string::npos; },
              seconds(10)));
  EXPECT_TRUE(all_serve({load_a.get(), &load_b, &load_c}, 20)) << "after the restart";
  phase("4. the controller killed and restarted");

  // 5. A dies whole; D starts and is served in its place.
  SignalPod(*a, SIGKILL);
  load_a->Stop();
  auto d = StartPod("D", "127.0.0.5", *controller);
  Load load_d(*d, 8, "SELECT pg_sleep(0.05)");
  EXPECT_TRUE(all_serve({&load_b, &load_c, &load_d}, 20)) << "after A died and D came";

  load_b.Stop();
  load_c.Stop();
  load_d.Stop();
  sampler.Stop();
  phase("5. A killed whole, D started");
  std::cerr << "chaos: " << sampler.Describe() << phases << "\n";  // for the record (issue 34)
  EXPECT_GT(sampler.samples(), 100);
  EXPECT_LE(sampler.max_total(), kFleetBudget) << sampler.Describe() << phases << "\n"
                                               << controller->Log();
  EXPECT_EQ(load_b.errors() + load_c.errors() + load_d.errors(), 0)
      << load_b.first_error() << load_c.first_error() << load_d.first_error();
}

}  // namespace lost_member_test
}  // namespace pgfleet::testing
