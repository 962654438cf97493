#include "pooler/metrics/families.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/conn/stats.h"
#include "pooler/metrics/names.h"
#include "prometheus/text_serializer.h"

namespace pgfleet::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

PodView TwoWorkers() {
  PodView view;
  view.version = "1.2.3";
  view.up = true;
  view.workers_serving = 2;
  view.worker_restarts = 1;
  for (int slot : {0, 1}) {
    auto& w = view.slots[slot];
    w.set_max_client_conn(100);
    w.set_cancels_forwarded(slot + 1);
    auto* p = w.add_pools();
    p->set_database("app");
    p->set_user("u");
    p->set_client_active(2);
    p->set_client_waiting(1);
    p->set_client_welcome(1);
    p->set_max_wait_us(1500000);
    p->set_transactions(10);
    pool::DurationHistogram h;
    h.Record(100);       // first bucket (bounds are inclusive)
    h.Record(500);       // the 500 us bucket
    h.Record(59999400);  // above every bound
    for (uint64_t c : h.counts) p->mutable_transaction_duration()->add_counts(c);
    p->mutable_transaction_duration()->set_count(h.count);
    p->mutable_transaction_duration()->set_sum_us(h.sum_us);
    auto* b = w.add_budgets();
    b->set_database("app");
    b->set_share(5);
    b->set_max_db_connections(10);
    auto* e = w.add_errors();
    e->set_sqlstate_class("42");
    e->set_count(3);
  }
  return view;
}

std::string Render(const PodView& view) {
  return prometheus::TextSerializer().Serialize(BuildFamilies(view));
}

TEST(FamiliesTest, PodLevelSeries) {
  const std::string text = Render(TwoWorkers());
  EXPECT_THAT(text, HasSubstr("pgfleet_build_info{version=\"1.2.3\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_up 1\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_workers 2\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_worker_restarts_total 1\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_max_client_conn 100\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_budget_max_db_connections{database=\"app\"} 10\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE pgfleet_worker_restarts_total counter"));
}

TEST(FamiliesTest, PoolSeriesArePerWorker) {
  const std::string text = Render(TwoWorkers());
  EXPECT_THAT(text, HasSubstr("pgfleet_pools_client_active_connections{database=\"app\",user=\"u\","
                              "worker=\"0\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_pools_client_active_connections{database=\"app\",user=\"u\","
                              "worker=\"1\"} 2\n"));
  // Clients still waiting for the pool's first server count as waiting, as in PgBouncer.
  EXPECT_THAT(text, HasSubstr("pgfleet_pools_client_waiting_connections{database=\"app\","
                              "user=\"u\",worker=\"0\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_pools_client_maxwait_seconds{database=\"app\",user=\"u\","
                              "worker=\"0\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_stats_transactions_total{database=\"app\",user=\"u\","
                              "worker=\"1\"} 10\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_budget_share{database=\"app\",worker=\"1\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_cancel_forwarded_total{worker=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_errors_total{class=\"42\",worker=\"0\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_prepared_statements_total{event=\"hit\",worker=\"0\"} 0\n"));
}

TEST(FamiliesTest, HistogramsAreCumulativeInSeconds) {
  const std::string text = Render(TwoWorkers());
  const std::string prefix =
      "pgfleet_stats_transaction_duration_seconds_bucket{database=\"app\",user=\"u\",worker=\"0\",";
  EXPECT_THAT(text, HasSubstr(prefix + "le=\"0.0001\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(prefix + "le=\"0.00025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(prefix + "le=\"0.0005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(prefix + "le=\"30\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(prefix + "le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_stats_transaction_duration_seconds_count{database=\"app\","
                              "user=\"u\",worker=\"0\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_stats_transaction_duration_seconds_sum{database=\"app\","
                              "user=\"u\",worker=\"0\"} 60\n"));
  // A histogram with no observations still has its series (the dashboard's rate() needs them).
  EXPECT_THAT(text, HasSubstr("pgfleet_stats_wait_duration_seconds_bucket{database=\"app\","
                              "user=\"u\",worker=\"0\",le=\"+Inf\"} 0\n"));
}

TEST(FamiliesTest, EveryNameIsExported) {
  const std::string text = Render(TwoWorkers());
  for (std::string_view name : {names::kBuildInfo,
                                names::kUp,
                                names::kWorkers,
                                names::kWorkerRestarts,
                                names::kMaxClientConn,
                                names::kBudgetMaxDbConnections,
                                names::kPoolsClientActive,
                                names::kPoolsClientWaiting,
                                names::kPoolsClientIdle,
                                names::kPoolsServerActive,
                                names::kPoolsServerIdle,
                                names::kPoolsServerUsed,
                                names::kPoolsServerTesting,
                                names::kPoolsServerLogin,
                                names::kPoolsClientMaxWait,
                                names::kStatsTransactions,
                                names::kStatsQueries,
                                names::kStatsReceivedBytes,
                                names::kStatsSentBytes,
                                names::kStatsQueryDuration,
                                names::kStatsTransactionDuration,
                                names::kStatsWaitDuration,
                                names::kBudgetShare,
                                names::kCancelReceived,
                                names::kCancelForwarded,
                                names::kCancelDropped,
                                names::kClientConnections,
                                names::kClientsRejected,
                                names::kCancelRateLimited,
                                names::kErrors,
                                names::kPreparedStatements}) {
    EXPECT_THAT(text, HasSubstr("\n" + std::string(name))) << name;
  }
}

TEST(FamiliesTest, NoWorkersYet) {
  PodView view;
  view.version = "v";
  const std::string text = Render(view);
  EXPECT_THAT(text, HasSubstr("pgfleet_up 0\n"));
  EXPECT_THAT(text, HasSubstr("pgfleet_workers 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("pgfleet_max_client_conn ")));
}

}  // namespace
}  // namespace pgfleet::metrics
