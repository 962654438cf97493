// The budget allocator: floors, demand-following shares, lower-then-grant, and the invariant under
// random joins, leaves, crashes, partitions, demand swings and message delays.
#include "peering/controller/budget_allocator.h"

#include <deque>
#include <iostream>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pgfleet::peering::controller {
namespace {

using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(SplitProportionallyTest, PartsAddUpAndFollowWeights) {
  EXPECT_THAT(SplitProportionally(9, {89, 4, 4}), ElementsAre(8, 1, 0));
  EXPECT_THAT(SplitProportionally(10, {1, 1, 1}), ElementsAre(4, 3, 3));
  EXPECT_THAT(SplitProportionally(5, {0, 0}), ElementsAre(0, 0));
  EXPECT_THAT(SplitProportionally(0, {3, 1}), ElementsAre(0, 0));
  EXPECT_THAT(SplitProportionally(7, {3, 1}), ElementsAre(5, 2));
}

// Applies grants as an ideal worker would (instant, always under cap) and acks them.
void ApplyAndAck(BudgetAllocator& alloc, const std::vector<GrantOut>& grants) {
  for (const auto& g : grants) alloc.Ack(g.worker, g.seq);
}

TEST(BudgetAllocatorTest, NewWorkersGetFloorsThenTheRestEvenlyWithoutDemand) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 12);
  for (WorkerId w : {1, 2, 3}) alloc.AddWorker(w, {});
  auto grants = alloc.Rebalance(kT0);
  ASSERT_EQ(grants.size(), 3u);
  for (WorkerId w : {1, 2, 3}) {
    EXPECT_EQ(alloc.Share(w, "app")->cap, 4) << w;
    EXPECT_EQ(alloc.Share(w, "app")->floor, 1) << w;
  }
  EXPECT_EQ(alloc.Committed("app"), 12);
}

TEST(BudgetAllocatorTest, BusyWorkerGetsMostOnlyAfterOthersAcknowledgeLowering) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 12);
  for (WorkerId w : {1, 2, 3}) alloc.AddWorker(w, {});
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  alloc.SetDemand(1, "app", 90, kT0);
  alloc.SetDemand(2, "app", 5, kT0);
  alloc.SetDemand(3, "app", 5, kT0);
  auto lowers = alloc.Rebalance(kT0);
  // Nothing is free: workers 2 and 3 are lowered, worker 1 not raised yet.
  EXPECT_EQ(alloc.Share(1, "app")->cap, 4);
  EXPECT_LT(alloc.Share(2, "app")->cap, 4);
  EXPECT_EQ(alloc.Share(2, "app")->held, 4);
  EXPECT_EQ(alloc.Committed("app"), 12);
  ApplyAndAck(alloc, lowers);
  alloc.Rebalance(kT0);
  EXPECT_GE(alloc.Share(1, "app")->cap, 8);
  EXPECT_GE(alloc.Share(2, "app")->cap, 1);  // the floor stays
  EXPECT_LE(alloc.Committed("app"), 12);
}

TEST(BudgetAllocatorTest, UnacknowledgedLowerKeepsItsRoomCounted) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 6);
  alloc.AddWorker(1, {});
  alloc.AddWorker(2, {});
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  alloc.SetDemand(1, "app", 50, kT0);
  alloc.Rebalance(kT0);  // lowers worker 2, never acked
  // Nor does a report free it: one sent before worker 2 saw the lower, it may still open up to
  // its old cap.
  alloc.SetOpen(2, "app", 0);
  EXPECT_EQ(alloc.Share(2, "app")->held, 3);
  for (int i = 0; i < 5; ++i) alloc.Rebalance(kT0 + absl::Seconds(i));
  EXPECT_EQ(alloc.Share(1, "app")->cap, 3);
  EXPECT_EQ(alloc.Committed("app"), 6);
}

TEST(BudgetAllocatorTest, RejoinedWorkerStillClosingServersFreesRoomAsItReportsThem) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 12);
  alloc.AddWorker(1, {{"app", HeldShare{1, 1, 1}}});
  // Back at its floor after a lost lease, with 7 busy servers still to close.
  alloc.AddWorker(2, {{"app", HeldShare{1, 1, 8}}});
  alloc.SetDemand(1, "app", 40, kT0);
  alloc.SetDemand(2, "app", 1, kT0);
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  EXPECT_EQ(alloc.Share(1, "app")->cap, 4);  // all that is free: 12 - 8
  // Worker 2 needs no grant, so it sends no ack; its reports say the servers are gone.
  alloc.SetOpen(2, "app", 1);
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  EXPECT_EQ(alloc.Share(2, "app")->held, 1);
  EXPECT_EQ(alloc.Share(1, "app")->cap, 11);
  EXPECT_EQ(alloc.Committed("app"), 12);
}

// A lost worker (frozen, killed, cut off) keeps its room until the caller knows how many of its
// backends PostgreSQL still lists; then it counts at least its floor, and never more than before.
TEST(BudgetAllocatorTest, ExpiredWorkerCountsWhatItHeldUntilItsBackendsAreGone) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 10);
  alloc.AddWorker(1, {});
  alloc.AddWorker(2, {});
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  ASSERT_EQ(alloc.Share(2, "app")->cap, 5);
  alloc.ExpireWorker(2);
  alloc.SetDemand(1, "app", 50, kT0);
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  EXPECT_EQ(alloc.Share(1, "app")->cap, 5);
  EXPECT_EQ(alloc.Committed("app"), 10);
  alloc.SetLostBackends(2, "app", 3);
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  EXPECT_EQ(alloc.Share(1, "app")->cap, 7);
  alloc.SetLostBackends(2, "app", 4);
  EXPECT_EQ(alloc.Share(2, "app")->held, 3);
  alloc.SetLostBackends(2, "app", 0);
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  EXPECT_EQ(alloc.Share(2, "app")->held, 1);  // its floor: it may open that much on its own
  EXPECT_EQ(alloc.Share(1, "app")->cap, 9);
  alloc.RemoveWorker(2);
  alloc.Rebalance(kT0);
  EXPECT_EQ(alloc.Share(1, "app")->cap, 10);
}

TEST(BudgetAllocatorTest, RejoiningWorkerKeepsWhatItReportsAndNothingIsRaisedWhileRecovering) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 12);
  alloc.set_raises_allowed(false);
  alloc.AddWorker(1, {{"app", {7, 1}}});
  alloc.SetReserved(3);
  EXPECT_TRUE(alloc.Rebalance(kT0).empty());
  EXPECT_EQ(alloc.Committed("app"), 10);
  alloc.AddWorker(2, {});
  alloc.SetDemand(2, "app", 10, kT0);
  alloc.Rebalance(kT0);
  EXPECT_EQ(alloc.Share(2, "app")->cap, 0);
  alloc.set_raises_allowed(true);
  alloc.SetReserved(0);
  alloc.Rebalance(kT0);
  EXPECT_GT(alloc.Share(2, "app")->cap, 0);
  EXPECT_LE(alloc.Committed("app"), 12);
}

TEST(BudgetAllocatorTest, BudgetCutIsReachedByLowering) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 12);
  alloc.AddWorker(1, {});
  alloc.AddWorker(2, {});
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  alloc.SetBudget("app", 4);
  auto grants = alloc.Rebalance(kT0);
  EXPECT_EQ(alloc.Share(1, "app")->cap + alloc.Share(2, "app")->cap, 4);
  EXPECT_EQ(alloc.Committed("app"), 12);  // until acked
  ApplyAndAck(alloc, grants);
  EXPECT_EQ(alloc.Committed("app"), 4);
}

TEST(BudgetAllocatorTest, ManyWorkersSmallBudgetFloorsDropToZeroAndDemandDecides) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 5);
  for (WorkerId w = 1; w <= 20; ++w) alloc.AddWorker(w, {});
  alloc.SetDemand(7, "app", 30, kT0);
  ApplyAndAck(alloc, alloc.Rebalance(kT0));
  EXPECT_EQ(alloc.Share(7, "app")->cap, 5);
  EXPECT_EQ(alloc.Share(1, "app")->floor, 0);
}

// ---- Random simulation: real open connections never exceed the budget. ----

class BudgetAllocatorSimTest : public ::testing::TestWithParam<uint32_t> {};

struct SimWorker {
  WorkerId id = 0;
  bool alive = true;         // process exists (a crashed one has nothing open)
  bool partitioned = false;  // messages to and from the controller are lost
  std::map<std::string, int> cap, floor, open, demand;
  uint64_t applied_seq = 0;
  int64_t lease_sent_tick = 0;  // when the newest renewed report was sent
  bool lease_lost = false;
  int epoch = 0;  // a rejoin opens a new stream: whatever the old one carried is dropped
};

TEST_P(BudgetAllocatorSimTest, OpenConnectionsNeverExceedBudget) {
  std::mt19937 rng(GetParam());
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  const std::vector<std::string> dbs = {"a", "b"};
  std::map<std::string, int> budget = {{"a", 12}, {"b", 5}};
  constexpr int64_t kWorkerLease = 20;      // the worker shrinks to its floor after this
  constexpr int64_t kControllerLease = 25;  // the controller expires it after this
  constexpr int64_t kForget = 60;

  BudgetAllocator alloc(AllocatorOptions{1, absl::Milliseconds(300)});
  for (const auto& db : dbs) alloc.SetBudget(db, budget[db]);
  std::map<WorkerId, SimWorker> workers;
  std::map<WorkerId, int64_t> last_heard;  // controller side
  struct InFlight {
    int64_t deliver_at;
    WorkerId worker;
    int epoch;
    GrantOut grant;       // seq 0 = only a renewal
    int64_t report_sent;  // echo: send tick of the newest report the controller had
  };
  std::deque<InFlight> to_workers;
  struct AckInFlight {
    int64_t deliver_at;
    WorkerId worker;
    int epoch;
    uint64_t seq;                     // 0 = the open counts of a report
    std::map<std::string, int> open;  // what the report says is open
  };
  std::deque<AckInFlight> to_controller;
  std::map<WorkerId, int64_t> newest_report_sent;  // controller's view
  // A stream delivers in order: each message arrives no earlier than the one before it.
  std::map<WorkerId, int64_t> last_down, last_up;
  auto down_at = [&](WorkerId id, int64_t at) {
    return last_down[id] = std::max(last_down[id], at);
  };
  auto up_at = [&](WorkerId id, int64_t at) { return last_up[id] = std::max(last_up[id], at); };
  auto send_up = [&](const SimWorker& w, int64_t tick, uint64_t seq,
                     std::map<std::string, int> open) {
    to_controller.push_back({up_at(w.id, tick + 1 + static_cast<int64_t>(rng() % 3)), w.id, w.epoch,
                             seq, std::move(open)});
  };
  WorkerId next_id = 1;

  auto join = [&](int64_t tick) {
    SimWorker w;
    w.id = next_id++;
    w.lease_sent_tick = tick;
    for (const auto& db : dbs) w.cap[db] = w.floor[db] = w.open[db] = w.demand[db] = 0;
    alloc.AddWorker(w.id, {});
    last_heard[w.id] = tick;
    newest_report_sent[w.id] = tick;
    workers[w.id] = w;
  };
  for (int i = 0; i < 3; ++i) join(0);

  for (int64_t tick = 1; tick < 3000; ++tick) {
    const absl::Time now = kT0 + absl::Milliseconds(100 * tick);
    // Membership and demand changes.
    if (chance(2) && workers.size() < 12) join(tick);
    if (chance(4) && !workers.empty()) {
      auto it = std::next(workers.begin(), rng() % workers.size());
      SimWorker& w = it->second;
      const int what = static_cast<int>(rng() % 4);
      if (what == 0 && w.alive && !w.partitioned) {
        // Graceful leave: closes everything, then says so.
        for (auto& [db, open] : w.open) open = 0;
        alloc.RemoveWorker(w.id);
        last_heard.erase(w.id);
        workers.erase(it);
        continue;
      } else if (what == 1) {
        w.alive = false;  // crash: the kernel closes its sockets
        for (auto& [db, open] : w.open) open = 0;
      } else if (what == 2) {
        w.partitioned = !w.partitioned;
      }
    }
    for (auto& [id, w] : workers) {
      if (chance(10)) {
        for (const auto& db : dbs) w.demand[db] = static_cast<int>(rng() % (chance(30) ? 40 : 4));
      }
    }
    // Deliveries to workers.
    std::deque<InFlight> later;
    for (auto& m : to_workers) {
      if (m.deliver_at > tick) {
        later.push_back(std::move(m));
        continue;
      }
      auto it = workers.find(m.worker);
      if (it == workers.end() || !it->second.alive) continue;
      if (it->second.partitioned) {
        // A stream is reliable and ordered: what a partition holds up arrives after it heals,
        // unless the stream is replaced first (a rejoin, which the epoch check drops).
        later.push_back(std::move(m));
        continue;
      }
      SimWorker& w = it->second;
      if (m.epoch != w.epoch) continue;
      w.lease_sent_tick = std::max(w.lease_sent_tick, m.report_sent);
      const bool lease_ok = tick < m.report_sent + kWorkerLease && !w.lease_lost;
      for (const auto& s : m.grant.shares) {
        if (!lease_ok && s.cap > w.cap[s.database]) continue;  // never grow without a lease
        w.cap[s.database] = s.cap;
        w.floor[s.database] = s.floor;
      }
      if (lease_ok) w.applied_seq = std::max(w.applied_seq, m.grant.seq);
    }
    to_workers = std::move(later);
    // Workers act: open toward demand within cap, close toward cap slowly (busy servers are
    // released at random), renew, ack.
    for (auto& [id, w] : workers) {
      if (!w.alive) continue;
      if (!w.lease_lost && tick >= w.lease_sent_tick + kWorkerLease) {
        w.lease_lost = true;  // fail-static: fall back to the floor, hard
        for (const auto& db : dbs) {
          w.cap[db] = std::min(w.cap[db], w.floor[db]);
          w.open[db] = std::min(w.open[db], w.cap[db]);
        }
      }
      if (w.lease_lost && tick >= w.lease_sent_tick + kForget - 5) {
        for (const auto& db : dbs) w.cap[db] = w.open[db] = 0;
      }
      bool under = true;
      for (const auto& db : dbs) {
        if (w.open[db] > w.cap[db] && chance(40)) --w.open[db];
        if (w.open[db] < std::min(w.demand[db], w.cap[db]) && chance(50)) ++w.open[db];
        under = under && w.open[db] <= w.cap[db];
      }
      if (w.partitioned) continue;
      if (w.lease_lost) {
        // Rejoin with what it holds now.
        std::map<std::string, HeldShare> held;
        for (const auto& db : dbs) held[db] = {w.cap[db], w.floor[db], w.open[db]};
        alloc.AddWorker(w.id, held);
        w.lease_lost = false;
        w.applied_seq = 0;  // a new stream: acks name its grants only
        ++w.epoch;
        w.lease_sent_tick = tick;
        newest_report_sent[w.id] = tick;
        last_heard[w.id] = tick;
        continue;
      }
      // Report (arrives next tick at the latest; applied immediately here for simplicity).
      last_heard[w.id] = tick;
      newest_report_sent[w.id] = tick;
      for (const auto& db : dbs) alloc.SetDemand(w.id, db, w.demand[db], now);
      // Its open counts travel up the stream like acks, so they may arrive late.
      send_up(w, tick, 0, w.open);
      to_workers.push_back(
          {down_at(w.id, tick + 1 + static_cast<int64_t>(rng() % 4)), w.id, w.epoch, {}, tick});
      if (under && w.applied_seq > 0) {
        send_up(w, tick, w.applied_seq, {});
      }
    }
    // Acks and reported open counts reach the controller.
    std::deque<AckInFlight> acks_later;
    for (auto& a : to_controller) {
      if (a.deliver_at > tick) {
        acks_later.push_back(a);
        continue;
      }
      auto w = workers.find(a.worker);
      if (w == workers.end() || w->second.epoch != a.epoch) continue;
      if (a.seq == 0) {
        for (const auto& [db, open] : a.open) alloc.SetOpen(a.worker, db, open);
      } else {
        alloc.Ack(a.worker, a.seq);
      }
    }
    to_controller = std::move(acks_later);
    // Controller: expire, forget, rebalance.
    for (auto it = last_heard.begin(); it != last_heard.end();) {
      const int64_t silent = tick - it->second;
      if (silent > kForget) {
        alloc.RemoveWorker(it->first);
        it = last_heard.erase(it);
        continue;
      }
      if (silent > kControllerLease && alloc.IsLive(it->first)) alloc.ExpireWorker(it->first);
      // What a monitoring connection sees: the backends a lost worker still has.
      if (!alloc.IsLive(it->first)) {
        auto w = workers.find(it->first);
        for (const auto& db : dbs) {
          alloc.SetLostBackends(it->first, db, w == workers.end() ? 0 : w->second.open.at(db));
        }
      }
      ++it;
    }
    for (auto& grant : alloc.Rebalance(now)) {
      const WorkerId id = grant.worker;
      auto w = workers.find(id);
      const int epoch = w == workers.end() ? 0 : w->second.epoch;
      to_workers.push_back({down_at(id, tick + 1 + static_cast<int64_t>(rng() % 4)), id, epoch,
                            std::move(grant), newest_report_sent[id]});
    }
    // The invariants.
    for (const auto& db : dbs) {
      int open = 0;
      for (const auto& [id, w] : workers) open += w.open.at(db);
      if (open > budget[db]) {
        for (const auto& [id, w] : workers) {
          auto share = alloc.Share(id, db);
          std::cerr << "worker " << id << " alive=" << w.alive << " part=" << w.partitioned
                    << " lost=" << w.lease_lost << " open=" << w.open.at(db)
                    << " cap=" << w.cap.at(db) << " floor=" << w.floor.at(db)
                    << " ctl_cap=" << (share ? share->cap : -1)
                    << " ctl_held=" << (share ? share->held : -1) << " live=" << alloc.IsLive(id)
                    << "\n";
        }
      }
      ASSERT_LE(open, budget[db]) << "db=" << db << " tick=" << tick;
      ASSERT_LE(alloc.Committed(db), budget[db]) << "db=" << db << " tick=" << tick;
    }
    // Dead workers disappear from the simulation once the controller forgot them.
    for (auto it = workers.begin(); it != workers.end();) {
      if (!it->second.alive && !last_heard.contains(it->first)) {
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, BudgetAllocatorSimTest, ::testing::Range(1u, 41u));

TEST(BudgetAllocatorSimTest2, DemandShiftsBudgetToTheBusyWorker) {
  BudgetAllocator alloc;
  alloc.SetBudget("app", 12);
  for (WorkerId w : {1, 2, 3}) alloc.AddWorker(w, {});
  absl::Time now = kT0;
  for (int round = 0; round < 20; ++round) {
    alloc.SetDemand(1, "app", 90, now);
    alloc.SetDemand(2, "app", 5, now);
    alloc.SetDemand(3, "app", 5, now);
    ApplyAndAck(alloc, alloc.Rebalance(now));
    now += absl::Milliseconds(200);
  }
  EXPECT_GE(alloc.Share(1, "app")->cap, 9);
  EXPECT_EQ(alloc.Committed("app"), 12);
}

}  // namespace
}  // namespace pgfleet::peering::controller
