// Turns the pod's stats (one WorkerStats per worker slot) into Prometheus metric families, with
// the names of names.h. Pure: no I/O, so it is unit-tested on hand-made snapshots.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pgfleet/peering/v1/peering.pb.h"
#include "prometheus/metric_family.h"

namespace pgfleet::metrics {

struct PodView {
  std::string version;
  bool up = false;               // ready to serve (the /readyz answer)
  int workers_serving = 0;       // worker processes accepting clients
  uint64_t worker_restarts = 0;  // workers the supervisor restarted after they died
  // Per worker slot: counters since the pod started (processes that served the slot before
  // included) and the gauges of the processes serving it now.
  std::map<int, peering::v1::WorkerStats> slots;
};

std::vector<prometheus::MetricFamily> BuildFamilies(const PodView& view);

}  // namespace pgfleet::metrics
