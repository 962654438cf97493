// The room one open server holds in the budgets: in the pod's shared counts and in this worker's
// (pool/server_budget.h takes and returns it; the server keeps it while open).
#pragma once

#include <string>

#include "pooler/budget/pod_server_counts.h"

namespace pgfleet::pool {

// The pod's count keys of one pool: its own, its database's and its server user's.
struct PodKeys {
  budget::PodServerCounts::Key pool = 0;
  budget::PodServerCounts::Key database = 0;
  budget::PodServerCounts::Key user = 0;
};

// What one open server holds: its room in the pod's counts and in this worker's.
struct ServerRoom {
  PodKeys keys;
  std::string database;     // this worker's count per database (caps, metrics)
  std::string server_user;  // ... and per server user
  bool reserve = false;     // opened with the reserve pool's room
  int backend_slot = -1;    // its backend pid's record in the pod's counts, once logged in
};

}  // namespace pgfleet::pool
