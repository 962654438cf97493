// Plain counters bumped on the data path (no locks, no name lookups); exported elsewhere
// (pooler/metrics for Prometheus, pooler/admin for SHOW).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pgfleet::pool {

// Upper bounds (inclusive, microseconds) of the duration histogram buckets; a last bucket takes
// everything above. Fixed, so every worker's histograms add up and the exporter needs no
// negotiation. From 100 us (a cached SELECT over loopback) to 30 s, about 2.5x apart.
inline constexpr std::array<uint64_t, 17> kDurationBucketBoundsUs = {
    100,    250,    500,    1000,    2500,    5000,    10000,    25000,   50000,
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000};
inline constexpr size_t kDurationBuckets = kDurationBucketBoundsUs.size() + 1;

// A histogram of durations: Record() is a short scan and three increments (typical durations
// stop the scan in the first few buckets).
struct DurationHistogram {
  std::array<uint64_t, kDurationBuckets> counts{};  // not cumulative; last = above every bound
  uint64_t sum_us = 0;
  uint64_t count = 0;

  static size_t BucketFor(uint64_t us) {
    size_t i = 0;
    while (i < kDurationBucketBoundsUs.size() && us > kDurationBucketBoundsUs[i]) ++i;
    return i;
  }
  void Record(uint64_t us) {
    ++counts[BucketFor(us)];
    sum_us += us;
    ++count;
  }
};

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
  uint64_t servers_handed_over = 0;  // idle servers given to sibling workers
  uint64_t servers_adopted = 0;      // ... and taken from them
  // The LISTEN hub (listen_hub.h): NotificationResponses written to clients, and those dropped
  // from a client's full queue (NotificationQueue::kMaxBytes) because it did not read them.
  uint64_t notifications_sent = 0;
  uint64_t notifications_dropped = 0;
  DurationHistogram query_duration;
  DurationHistogram transaction_duration;
  DurationHistogram wait_duration;

  // One finished query (ReadyForQuery answered a client's Query/Sync), `us` after it was sent.
  void RecordQuery(uint64_t us) {
    query_time_us += us;
    query_duration.Record(us);
  }
  // One transaction released its server after `us` linked.
  void RecordTransaction(uint64_t us) {
    transaction_time_us += us;
    transaction_duration.Record(us);
  }
  // One client waited `us` for a server.
  void RecordWait(uint64_t us) {
    wait_time_us += us;
    wait_duration.Record(us);
  }
};

// SQLSTATE classes are two characters of [0-9A-Z]: 36 * 36 counters, indexed without hashing.
inline constexpr size_t kSqlStateClasses = 36 * 36;

struct WorkerCounters {
  uint64_t clients_accepted = 0;
  uint64_t clients_rejected_max_client_conn = 0;
  uint64_t login_failures = 0;
  uint64_t cancels_received = 0;
  uint64_t cancels_sent = 0;
  uint64_t cancels_forwarded = 0;
  uint64_t cancels_dropped = 0;
  // CancelRequests answered by pgfleet because the query still waited for a server.
  uint64_t cancels_queued = 0;
  // Cancels pgfleet sent PostgreSQL for queries whose client went away (or was closed) mid-query.
  uint64_t cancels_abandoned = 0;
  // Further cancels for abandoned work that still ran after the one before.
  uint64_t cancels_repeated = 0;
  uint64_t servers_opened = 0;
  // One pool per pod: idle servers given to / taken from sibling workers.
  uint64_t servers_handed_over = 0;
  uint64_t servers_adopted = 0;
  // Client connections accepted here and passed to a sibling with fewer (listen.balance_clients).
  uint64_t clients_balanced = 0;
  uint64_t server_login_failures = 0;
  uint64_t protocol_errors = 0;
  uint64_t cancels_rate_limited = 0;                    // pool.cancel_rate_limit
  uint64_t clients_rejected_max_concurrent_logins = 0;  // pool.max_concurrent_logins
  uint64_t clients_rejected_hba = 0;                    // auth.hba_file: reject or no rule
  uint64_t clients_rejected_tls_required = 0;           // plain text under client_tls_sslmode
  uint64_t tls_handshake_failures = 0;                  // clients whose TLS handshake failed
  // Errors sent to clients (the server's, relayed, and pgfleet's own), by SQLSTATE class.
  std::array<uint64_t, kSqlStateClasses> errors_by_class{};

  // Counts one error with this SQLSTATE; anything malformed counts as class "XX" (internal).
  void CountError(std::string_view sqlstate) { ++errors_by_class[SqlStateClassIndex(sqlstate)]; }

  static size_t SqlStateClassIndex(std::string_view sqlstate) {
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
      return -1;
    };
    const int a = sqlstate.size() >= 2 ? digit(sqlstate[0]) : -1;
    const int b = sqlstate.size() >= 2 ? digit(sqlstate[1]) : -1;
    if (a < 0 || b < 0) return static_cast<size_t>(('X' - 'A' + 10) * 36 + ('X' - 'A' + 10));
    return static_cast<size_t>(a * 36 + b);
  }
  // The two-character class of an index.
  static std::string SqlStateClassName(size_t index) {
    auto ch = [](size_t d) { return static_cast<char>(d < 10 ? '0' + d : 'A' + (d - 10)); };
    return std::string{ch(index / 36), ch(index % 36)};
  }
};

}  // namespace pgfleet::pool
