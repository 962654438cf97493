// Plain counters bumped on the data path (no locks, no name lookups); exported elsewhere.
#pragma once

#include <cstdint>

namespace pgfleet::pool {

struct PoolStats {
  uint64_t transactions = 0;
  uint64_t queries = 0;
  uint64_t received_bytes = 0;  // from clients
  uint64_t sent_bytes = 0;      // to clients
  uint64_t transaction_time_us = 0;
  uint64_t query_time_us = 0;
  uint64_t wait_time_us = 0;
  uint64_t server_assignments = 0;
  uint64_t errors = 0;
};

struct WorkerCounters {
  uint64_t clients_accepted = 0;
  uint64_t clients_rejected_max_client_conn = 0;
  uint64_t login_failures = 0;
  uint64_t cancels_received = 0;
  uint64_t cancels_sent = 0;
  uint64_t cancels_forwarded = 0;
  uint64_t cancels_dropped = 0;
  uint64_t servers_opened = 0;
  uint64_t server_login_failures = 0;
  uint64_t protocol_errors = 0;
  uint64_t cancels_rate_limited = 0;                    // pool.cancel_rate_limit
  uint64_t clients_rejected_max_concurrent_logins = 0;  // pool.max_concurrent_logins
  uint64_t clients_rejected_hba = 0;                    // auth.hba_file: reject or no rule
};

}  // namespace pgfleet::pool
