// How many CPUs this process may use: the affinity mask, capped by the cgroup v2 CPU quota
// (cpu.max), so `workers: auto` matches a pod's limit rather than the node's core count.
#pragma once

#include <optional>
#include <string>

namespace pgfleet::supervisor {

// ceil(quota / period) from a cpu.max line ("max 100000" = no quota -> nullopt).
std::optional<int> ParseCpuMax(const std::string& cpu_max);

// min(CPUs in sched_getaffinity, cgroup quota), at least 1. `cgroup_root` is where the
// process's cgroup v2 directory is found (tests point it elsewhere).
int AvailableCpus(const std::string& cgroup_root = "/sys/fs/cgroup");

// The worker count a config's `workers` value asks for ("auto" or a number).
int ResolveWorkerCount(const std::string& workers);

}  // namespace pgfleet::supervisor
