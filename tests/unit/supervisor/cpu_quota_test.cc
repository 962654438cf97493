// CPU quota parsing for `workers: auto`.
#include "pooler/supervisor/cpu_quota.h"

#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace pgfleet::supervisor {
namespace {

// The CPUs in this process's affinity mask: what AvailableCpus counts before any quota.
int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

// This process's cgroup v2 path ("/" at the top), as /proc/self/cgroup names it.
std::string OwnCgroupPath() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "/";
}

std::string MakeFakeCgroupRoot() {
  char tmpl[] = "/tmp/pgfleet-cg-XXXXXX";
  return mkdtemp(tmpl);
}

void WriteFile(const std::string& path, const std::string& content) {
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  fputs(content.c_str(), f);
  fclose(f);
}

TEST(CpuQuotaTest, NoQuota) { EXPECT_FALSE(ParseCpuMax("max 100000").has_value()); }
TEST(CpuQuotaTest, WholeCpus) { EXPECT_EQ(ParseCpuMax("200000 100000"), 2); }
TEST(CpuQuotaTest, FractionRoundsUp) { EXPECT_EQ(ParseCpuMax("150000 100000"), 2); }
TEST(CpuQuotaTest, SmallQuotaIsOne) { EXPECT_EQ(ParseCpuMax("10000 100000"), 1); }
TEST(CpuQuotaTest, Garbage) {
  EXPECT_FALSE(ParseCpuMax("").has_value());
  EXPECT_FALSE(ParseCpuMax("abc def").has_value());
  EXPECT_FALSE(ParseCpuMax("-5 100000").has_value());
}
TEST(CpuQuotaTest, WithoutQuotaTheAffinityMaskCounts) {
  // A cgroup tree without cpu.max files, and one whose top says "max": no cap.
  const std::string root = MakeFakeCgroupRoot();
  EXPECT_EQ(AvailableCpus(root), AffinityCpus());
  WriteFile(root + "/cpu.max", "max 100000\n");
  EXPECT_EQ(AvailableCpus(root), AffinityCpus());
}
TEST(CpuQuotaTest, QuotaInFakeCgroupCapsTheCount) {
  const std::string root = MakeFakeCgroupRoot();
  // Our own cgroup path under the fake root, with a one-CPU quota at the top.
  WriteFile(root + "/cpu.max", "100000 100000\n");
  EXPECT_EQ(AvailableCpus(root), 1);
}
TEST(CpuQuotaTest, TightestQuotaOnThePathCounts) {
  const std::string root = MakeFakeCgroupRoot();
  const std::string own = OwnCgroupPath();
  // Every directory from the top down to our own cgroup.
  std::string dir = root;
  for (size_t start = 1; start < own.size();) {
    size_t end = own.find('/', start);
    if (end == std::string::npos) end = own.size();
    dir += "/" + own.substr(start, end - start);
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0) << dir;
    start = end + 1;
  }
  WriteFile(root + "/cpu.max", "300000 100000\n");
  WriteFile(dir + "/cpu.max", "150000 100000\n");  // 1.5 CPUs round up to 2
  EXPECT_EQ(AvailableCpus(root), std::min(AffinityCpus(), 2));
}
TEST(CpuQuotaTest, ResolveWorkerCount) {
  EXPECT_EQ(ResolveWorkerCount("3"), 3);
  EXPECT_EQ(ResolveWorkerCount("auto"), AvailableCpus());
  EXPECT_EQ(ResolveWorkerCount("0"), AvailableCpus());
  EXPECT_EQ(ResolveWorkerCount("many"), AvailableCpus());
}

}  // namespace
}  // namespace pgfleet::supervisor
