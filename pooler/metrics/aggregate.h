// Adding workers' stats together: pod totals for SHOW, and a worker slot's counters carried over
// from the processes that served it before (so a restart does not reset them).
#pragma once

#include <cstdint>

#include "pgfleet/peering/v1/peering.pb.h"

namespace pgfleet::metrics {

// Which parts of a WorkerStats AddWorkerStats adds.
enum class AddMode {
  kEverything,    // counters and gauges (a pod total of live workers)
  kCountersOnly,  // monotonic counters only (folding in an exited process: it holds nothing now)
};

// Adds `from` into `into`: pools are matched by (database, user), budgets by database and error
// classes by class; counters and histograms are summed, gauges summed (kEverything), max_wait and
// the configured limits take the maximum. Per-connection rows, identity and time fields of `into`
// are left alone.
void AddWorkerStats(const peering::v1::WorkerStats& from, AddMode mode,
                    peering::v1::WorkerStats* into);

// Server connections of `stats` that finished logging in (idle, active, tested, used).
uint64_t LoggedInServers(const peering::v1::WorkerStats& stats);

}  // namespace pgfleet::metrics
