// CPU quota detection.
#include "pooler/supervisor/cpu_quota.h"

#include <sched.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pgfleet::supervisor {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The process's cgroup v2 path from /proc/self/cgroup ("0::/kubepods/...").
std::string OwnCgroupPath() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "/";
}

}  // namespace

std::optional<int> ParseCpuMax(const std::string& cpu_max) {
  std::vector<std::string> parts = absl::StrSplit(cpu_max, ' ', absl::SkipEmpty());
  if (parts.size() != 2 || parts[0] == "max") return std::nullopt;
  int64_t quota = 0;
  int64_t period = 0;
  if (!absl::SimpleAtoi(parts[0], &quota) || !absl::SimpleAtoi(parts[1], &period) || quota <= 0 ||
      period <= 0) {
    return std::nullopt;
  }
  return static_cast<int>((quota + period - 1) / period);
}

int AvailableCpus(const std::string& cgroup_root) {
  int cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  // The quota may be set on our cgroup or on any ancestor; the tightest one counts.
  std::string path = OwnCgroupPath();
  while (true) {
    auto quota = ParseCpuMax(ReadFirstLine(cgroup_root + path + "/cpu.max"));
    if (quota.has_value() && *quota < cpus) cpus = *quota;
    if (path.empty() || path == "/") break;
    path = path.substr(0, path.rfind('/'));
  }
  return cpus < 1 ? 1 : cpus;
}

int ResolveWorkerCount(const std::string& workers) {
  int n = 0;
  if (workers != "auto" && absl::SimpleAtoi(workers, &n) && n > 0) return n;
  return AvailableCpus();
}

}  // namespace pgfleet::supervisor
