// log_stats (PgBouncer's): a line of the period's rates once per stats_period.
#include "pooler/metrics/stats_log.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pgfleet::metrics {
namespace stats_log_test {

using ::testing::HasSubstr;

pool::PoolStats Totals(uint64_t xacts, uint64_t queries, uint64_t xact_us, uint64_t bytes_in) {
  pool::PoolStats stats;
  stats.transactions = xacts;
  stats.queries = queries;
  stats.transaction_time_us = xact_us;
  stats.received_bytes = bytes_in;
  return stats;
}

TEST(StatsLogTest, ALineOfThePeriodsRatesOncePerPeriod) {
  StatsLog log;
  const absl::Time start = absl::FromUnixSeconds(1000);
  const absl::Duration period = absl::Seconds(10);
  // The first sample starts the period; nothing is due within it.
  EXPECT_FALSE(log.Sample(start, period, Totals(100, 200, 5000, 1000)).has_value());
  EXPECT_FALSE(log.Sample(start + absl::Seconds(9), period, Totals(150, 300, 9000, 2000)));
  // 10 s later: 100 more transactions (10/s) of 100 us each, 200 queries (20/s), 10 kB in.
  auto line = log.Sample(start + absl::Seconds(10), period, Totals(200, 400, 15000, 11000));
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("xacts_per_s=10 queries_per_s=20 in_bytes_per_s=1000"));
  EXPECT_THAT(*line, HasSubstr("xact_us=100"));
  EXPECT_THAT(*line, HasSubstr("period_s=10"));
  // The next period counts from that line.
  EXPECT_FALSE(log.Sample(start + absl::Seconds(15), period, Totals(200, 400, 15000, 11000)));
  line = log.Sample(start + absl::Seconds(20), period, Totals(200, 400, 15000, 11000));
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("xacts_per_s=0 queries_per_s=0"));
  EXPECT_THAT(*line, HasSubstr("xact_us=0"));
}

}  // namespace stats_log_test
}  // namespace pgfleet::metrics
