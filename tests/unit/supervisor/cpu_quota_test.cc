// CPU quota parsing for `workers: auto`.
#include "pooler/supervisor/cpu_quota.h"

#include "gtest/gtest.h"

namespace pgfleet::supervisor {
namespace {

TEST(CpuQuotaTest, NoQuota) { EXPECT_FALSE(ParseCpuMax("max 100000").has_value()); }
TEST(CpuQuotaTest, WholeCpus) { EXPECT_EQ(ParseCpuMax("200000 100000"), 2); }
TEST(CpuQuotaTest, FractionRoundsUp) { EXPECT_EQ(ParseCpuMax("150000 100000"), 2); }
TEST(CpuQuotaTest, SmallQuotaIsOne) { EXPECT_EQ(ParseCpuMax("10000 100000"), 1); }
TEST(CpuQuotaTest, Garbage) {
  EXPECT_FALSE(ParseCpuMax("").has_value());
  EXPECT_FALSE(ParseCpuMax("abc def").has_value());
  EXPECT_FALSE(ParseCpuMax("-5 100000").has_value());
}
TEST(CpuQuotaTest, AvailableCpusIsPositive) { EXPECT_GE(AvailableCpus(), 1); }
TEST(CpuQuotaTest, QuotaInFakeCgroupCapsTheCount) {
  char tmpl[] = "/tmp/pgfleet-cg-XXXXXX";
  std::string root = mkdtemp(tmpl);
  // Our own cgroup path under the fake root, with a one-CPU quota at the top.
  FILE* f = fopen((root + "/cpu.max").c_str(), "w");
  fputs("100000 100000\n", f);
  fclose(f);
  EXPECT_EQ(AvailableCpus(root), 1);
}
TEST(CpuQuotaTest, ResolveWorkerCount) {
  EXPECT_EQ(ResolveWorkerCount("3"), 3);
  EXPECT_GE(ResolveWorkerCount("auto"), 1);
}

}  // namespace
}  // namespace pgfleet::supervisor
