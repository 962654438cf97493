// A worker's stats as one WorkerStats message: what GetWorkerStats answers siblings (SHOW) and
// what the worker publishes into the SnapshotRegion for the supervisor's /metrics. Built on the
// loop thread from the pools' plain counters (pool/stats.h); nothing here runs per query.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "pgfleet/peering/v1/peering.pb.h"
#include "pooler/config/config.h"
#include "pooler/metrics/snapshot_region.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/pool_registry.h"

namespace pgfleet::metrics {

// PgBouncer's stats_period: SHOW STATS averages cover the last complete period of this length.
inline constexpr absl::Duration kStatsPeriod = absl::Seconds(60);

class WorkerStatsSource {
 public:
  // `slot` of `worker_count`: the pod's budgets are reported split evenly among the workers.
  WorkerStatsSource(pool::PoolRegistry& registry, uint32_t peer_id, int slot, int worker_count);
  ~WorkerStatsSource();

  // The fleet-wide config (before the per-worker split), after each (re)load.
  void SetFleetConfig(std::shared_ptr<const config::Config> fleet);
  // Whether the worker accepts clients (false before listening and once shutting down).
  void set_ready(bool ready) { ready_ = ready; }

  // Fills `out` (loop thread). `request.include_connections` adds a row per connection.
  void Fill(const peering::v1::GetWorkerStatsRequest& request, peering::v1::WorkerStats* out);
  // Starts the timer that closes stats periods (SHOW STATS averages).
  void Start();
  // Closes the stats period when it is due (loop thread).
  void Tick();

 private:
  void FillConnections(peering::v1::WorkerStats* out);

  pool::PoolRegistry& registry_;
  uint32_t peer_id_;
  int slot_;
  int worker_count_;
  bool ready_ = false;
  absl::Time started_at_;  // unix
  absl::Time config_loaded_at_;
  std::shared_ptr<const config::Config> fleet_;
  net::EventLoop::TimerId timer_ = 0;

  // Stats period bookkeeping per (database, user): the counters at the period's start and the
  // last complete period's deltas.
  struct PeriodCounters {
    uint64_t transactions = 0, queries = 0, received_bytes = 0, sent_bytes = 0,
             transaction_time_us = 0, query_time_us = 0, wait_time_us = 0, server_assignments = 0;
  };
  absl::Time period_started_;  // monotonic (loop time)
  std::map<std::pair<std::string, std::string>, PeriodCounters> period_base_;
  std::map<std::pair<std::string, std::string>, PeriodCounters> last_period_;
  uint64_t last_period_seconds_ = 0;
};

// Publishes the worker's stats into its SnapshotRegion slot every kPublishInterval (and on
// demand), for the supervisor's /metrics and /readyz.
class SnapshotPublisher {
 public:
  static constexpr absl::Duration kPublishInterval = absl::Milliseconds(500);

  SnapshotPublisher(net::EventLoop& loop, std::unique_ptr<SnapshotRegion> region, uint32_t slot,
                    WorkerStatsSource& source);
  ~SnapshotPublisher();
  void Start();
  void PublishNow();

 private:
  net::EventLoop& loop_;
  std::unique_ptr<SnapshotRegion> region_;
  uint32_t slot_;
  WorkerStatsSource& source_;
  net::EventLoop::TimerId timer_ = 0;
  std::string buffer_;
  bool warned_too_big_ = false;
};

}  // namespace pgfleet::metrics
