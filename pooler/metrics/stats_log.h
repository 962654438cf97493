// PgBouncer's log_stats: every stats_period a worker logs its rates over the period (transactions
// and queries per second, bytes per second, and the average transaction, query and wait times),
// one line per worker, so that an operator without a metrics scraper still sees the load. Pure:
// the worker samples its pools' totals; this decides when a line is due and what it says.
#pragma once

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "pooler/conn/stats.h"

namespace pgfleet::metrics {

class StatsLog {
 public:
  // `totals`: the worker's pools' counters now. The line for the period since the last line, once
  // `period` has passed; the first call only starts the period.
  std::optional<std::string> Sample(absl::Time now, absl::Duration period,
                                    const pool::PoolStats& totals);

 private:
  absl::Time since_ = absl::InfinitePast();
  pool::PoolStats last_;
};

// The sum of the counters of `stats` (histograms left out).
void AddCounters(const pool::PoolStats& stats, pool::PoolStats& sum);

}  // namespace pgfleet::metrics
