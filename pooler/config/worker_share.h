// A worker's even share of a pod-wide number: what the metrics report as a worker's share of
// max_db_connections when no controller grants caps. The budgets themselves hold for the pod as
// a whole (pooler/pool/server_budget.h, docs/architecture.md "One pool per pod").
#pragma once

#include "pooler/config/config.h"

namespace pgfleet::config {

// Marks a strict budget whose share for this worker is zero (distinct from 0 = unlimited).
inline constexpr int kNoConnections = -1;

// Worker `index`'s share of `total` among `count` workers: total / N, the remainder to the first
// workers, so the shares add up to the total. `total` 0 (unlimited) stays 0; a total smaller than
// the worker count gives some workers kNoConnections.
int StrictShare(int total, int index, int count);

}  // namespace pgfleet::config
