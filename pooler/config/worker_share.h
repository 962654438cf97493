// The static split of fleet-wide budgets among the workers of one pod (docs/architecture.md,
// "Connection budget", without a controller): each worker gets total / N, the remainder spread
// over the first workers, so the shares always add up to the total and never exceed it.
#pragma once

#include "pooler/config/config.h"

namespace pgfleet::config {

// Marks a strict budget whose share for this worker is zero (distinct from 0 = unlimited).
inline constexpr int kNoConnections = -1;

// Worker `index`'s share of `total` among `count` workers. `total` 0 (unlimited) stays 0; a
// strict budget smaller than the worker count gives some workers kNoConnections.
int StrictShare(int total, int index, int count);
// Like StrictShare for sizes that are not hard limits (pool sizes): at least 1 when total > 0.
int SoftShare(int total, int index, int count);

// `fleet` with every budget replaced by worker `index`'s share: max_db_connections (pool and
// per database), max_user_connections (pool and per user), default/min/reserve pool sizes and
// per-database pool sizes. max_client_conn is left whole: the pod enforces it with a shared
// counter, so clients are not refused while other workers have room.
Config ShareForWorker(const Config& fleet, int index, int count);

}  // namespace pgfleet::config
