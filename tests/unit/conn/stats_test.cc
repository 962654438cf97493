#include "pooler/conn/stats.h"

#include "gtest/gtest.h"

namespace pgfleet::pool {
namespace {

TEST(DurationHistogramTest, BoundsAreInclusive) {
  EXPECT_EQ(DurationHistogram::BucketFor(0), 0u);
  EXPECT_EQ(DurationHistogram::BucketFor(100), 0u);
  EXPECT_EQ(DurationHistogram::BucketFor(101), 1u);
  EXPECT_EQ(DurationHistogram::BucketFor(30000000), kDurationBucketBoundsUs.size() - 1);
  EXPECT_EQ(DurationHistogram::BucketFor(30000001), kDurationBuckets - 1);
}

TEST(DurationHistogramTest, RecordCountsSumsAndBuckets) {
  PoolStats stats;
  stats.RecordQuery(120);
  stats.RecordQuery(2000000);
  EXPECT_EQ(stats.query_time_us, 2000120u);
  EXPECT_EQ(stats.query_duration.count, 2u);
  EXPECT_EQ(stats.query_duration.sum_us, 2000120u);
  EXPECT_EQ(stats.query_duration.counts[1], 1u);
  EXPECT_EQ(stats.query_duration.counts[DurationHistogram::BucketFor(2000000)], 1u);
  stats.RecordWait(5);
  stats.RecordTransaction(7);
  EXPECT_EQ(stats.wait_time_us, 5u);
  EXPECT_EQ(stats.transaction_duration.count, 1u);
}

TEST(WorkerCountersTest, ErrorsAreCountedBySqlStateClass) {
  WorkerCounters c;
  c.CountError("22012");
  c.CountError("22P02");
  c.CountError("57P01");
  c.CountError("?");  // malformed: internal error class
  EXPECT_EQ(c.errors_by_class[WorkerCounters::SqlStateClassIndex("22000")], 2u);
  EXPECT_EQ(WorkerCounters::SqlStateClassName(WorkerCounters::SqlStateClassIndex("57P01")), "57");
  EXPECT_EQ(c.errors_by_class[WorkerCounters::SqlStateClassIndex("XX000")], 1u);
  EXPECT_EQ(WorkerCounters::SqlStateClassName(WorkerCounters::SqlStateClassIndex("0A000")), "0A");
}

}  // namespace
}  // namespace pgfleet::pool
