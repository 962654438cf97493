#include "pooler/metrics/aggregate.h"

#include "gtest/gtest.h"

namespace pgfleet::metrics {
namespace {

peering::v1::WorkerStats Worker(uint64_t transactions, uint32_t active, uint64_t max_wait_us) {
  peering::v1::WorkerStats w;
  w.set_clients_accepted(10);
  w.set_clients(3);
  auto* p = w.add_pools();
  p->set_database("app");
  p->set_user("u");
  p->set_pool_mode("transaction");
  p->set_transactions(transactions);
  p->set_client_active(active);
  p->set_server_idle(2);
  p->set_max_wait_us(max_wait_us);
  auto* h = p->mutable_query_duration();
  for (int i = 0; i < 18; ++i) h->add_counts(i == 3 ? transactions : 0);
  h->set_count(transactions);
  h->set_sum_us(transactions * 100);
  auto* e = w.add_errors();
  e->set_sqlstate_class("22");
  e->set_count(1);
  auto* b = w.add_budgets();
  b->set_database("app");
  b->set_share(5);
  b->set_max_db_connections(10);
  return w;
}

TEST(AggregateTest, EverythingSumsCountersAndGauges) {
  peering::v1::WorkerStats total;
  AddWorkerStats(Worker(100, 2, 50), AddMode::kEverything, &total);
  AddWorkerStats(Worker(30, 1, 70), AddMode::kEverything, &total);
  ASSERT_EQ(total.pools_size(), 1);
  const auto& p = total.pools(0);
  EXPECT_EQ(p.transactions(), 130u);
  EXPECT_EQ(p.client_active(), 3u);
  EXPECT_EQ(p.server_idle(), 4u);
  EXPECT_EQ(p.max_wait_us(), 70u);  // the longest wait, not a sum
  EXPECT_EQ(p.pool_mode(), "transaction");
  EXPECT_EQ(p.query_duration().counts(3), 130u);
  EXPECT_EQ(p.query_duration().sum_us(), 13000u);
  EXPECT_EQ(total.clients_accepted(), 20u);
  EXPECT_EQ(total.clients(), 6u);
  ASSERT_EQ(total.errors_size(), 1);
  EXPECT_EQ(total.errors(0).count(), 2u);
  ASSERT_EQ(total.budgets_size(), 1);
  EXPECT_EQ(total.budgets(0).share(), 10);
  EXPECT_EQ(total.budgets(0).max_db_connections(), 10);  // the same budget, not summed
  EXPECT_EQ(LoggedInServers(total), 4u);
}

TEST(AggregateTest, CountersOnlyLeavesGaugesAlone) {
  peering::v1::WorkerStats retired;
  AddWorkerStats(Worker(100, 2, 50), AddMode::kCountersOnly, &retired);
  const auto& p = retired.pools(0);
  EXPECT_EQ(p.transactions(), 100u);
  EXPECT_EQ(p.client_active(), 0u);
  EXPECT_EQ(p.server_idle(), 0u);
  EXPECT_EQ(retired.clients(), 0u);
  EXPECT_EQ(retired.clients_accepted(), 10u);
  EXPECT_EQ(retired.budgets(0).share(), 0);
}

TEST(AggregateTest, PoolsAreMatchedByDatabaseAndUser) {
  peering::v1::WorkerStats a = Worker(1, 0, 0);
  peering::v1::WorkerStats b = Worker(1, 0, 0);
  b.mutable_pools(0)->set_user("v");
  peering::v1::WorkerStats total;
  AddWorkerStats(a, AddMode::kEverything, &total);
  AddWorkerStats(b, AddMode::kEverything, &total);
  AddWorkerStats(a, AddMode::kEverything, &total);
  ASSERT_EQ(total.pools_size(), 2);
  EXPECT_EQ(total.pools(0).transactions(), 2u);
  EXPECT_EQ(total.pools(1).user(), "v");
}

}  // namespace
}  // namespace pgfleet::metrics
