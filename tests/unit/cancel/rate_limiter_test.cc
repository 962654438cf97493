// Tests for pooler/cancel/rate_limiter.h.
#include "pooler/cancel/rate_limiter.h"

#include "gtest/gtest.h"

namespace pgfleet::pool {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(RateLimiterTest, AllowsOneSecondsBurstThenRefusesUntilRefilled) {
  RateLimiter limiter(5);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Allow("10.0.0.1", kStart)) << i;
  EXPECT_FALSE(limiter.Allow("10.0.0.1", kStart));
  // 200 ms refill one token at 5/s.
  EXPECT_TRUE(limiter.Allow("10.0.0.1", kStart + absl::Milliseconds(200)));
  EXPECT_FALSE(limiter.Allow("10.0.0.1", kStart + absl::Milliseconds(200)));
  // A long pause refills to the burst, not beyond it.
  const absl::Time later = kStart + absl::Seconds(60);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Allow("10.0.0.1", later)) << i;
  EXPECT_FALSE(limiter.Allow("10.0.0.1", later));
}

TEST(RateLimiterTest, SourcesHaveSeparateBuckets) {
  RateLimiter limiter(1);
  EXPECT_TRUE(limiter.Allow("a", kStart));
  EXPECT_FALSE(limiter.Allow("a", kStart));
  EXPECT_TRUE(limiter.Allow("b", kStart));
}

TEST(RateLimiterTest, ZeroMeansUnlimited) {
  RateLimiter limiter(0);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter.Allow("a", kStart));
  EXPECT_EQ(limiter.source_count(), 0u);
}

TEST(RateLimiterTest, ReportsTheFirstRefusalThenOncePerInterval) {
  RateLimiter limiter(1);
  uint64_t report = 99;
  EXPECT_TRUE(limiter.Allow("a", kStart, &report));
  EXPECT_EQ(report, 0u);
  EXPECT_FALSE(limiter.Allow("a", kStart, &report));
  EXPECT_EQ(report, 1u);  // the first refusal is reported at once
  // A sustained flood: a token now and then, refusals in between, one report per interval.
  int reports = 0;
  uint64_t reported_refusals = 1;
  for (int ms = 1; ms <= 25000; ++ms) {
    (void)limiter.Allow("a", kStart + absl::Milliseconds(ms), &report);
    if (report > 0) {
      ++reports;
      reported_refusals += report;
    }
  }
  EXPECT_EQ(reports, 2);  // at 10 s and 20 s
  EXPECT_GT(reported_refusals, 19000u);
  // Nothing is reported without the out-parameter, and other sources report on their own.
  EXPECT_FALSE(limiter.Allow("a", kStart + absl::Seconds(25)));
  EXPECT_TRUE(limiter.Allow("b", kStart + absl::Seconds(25), &report));
  EXPECT_FALSE(limiter.Allow("b", kStart + absl::Seconds(25), &report));
  EXPECT_EQ(report, 1u);
}

TEST(RateLimiterTest, MemoryStaysBoundedWithManySources) {
  RateLimiter limiter(10, /*max_sources=*/8);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(limiter.Allow(std::to_string(i), kStart));
    EXPECT_LE(limiter.source_count(), 8u);
  }
  // Refilled buckets are dropped first, so a busy source keeps its state.
  RateLimiter keep(1, /*max_sources=*/2);
  EXPECT_TRUE(keep.Allow("busy", kStart));
  EXPECT_TRUE(keep.Allow("idle", kStart - absl::Seconds(10)));
  EXPECT_TRUE(keep.Allow("new", kStart));
  EXPECT_FALSE(keep.Allow("busy", kStart));
}

TEST(SourceOfTest, StripsThePort) {
  EXPECT_EQ(SourceOf("127.0.0.1:5432"), "127.0.0.1");
  EXPECT_EQ(SourceOf("[::1]:5432"), "::1");
  EXPECT_EQ(SourceOf("unix"), "unix");
}

}  // namespace
}  // namespace pgfleet::pool
