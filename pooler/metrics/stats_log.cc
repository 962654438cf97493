#include "pooler/metrics/stats_log.h"

#include "absl/strings/str_cat.h"

namespace pgfleet::metrics {

void AddCounters(const pool::PoolStats& stats, pool::PoolStats& sum) {
  sum.transactions += stats.transactions;
  sum.queries += stats.queries;
  sum.received_bytes += stats.received_bytes;
  sum.sent_bytes += stats.sent_bytes;
  sum.transaction_time_us += stats.transaction_time_us;
  sum.query_time_us += stats.query_time_us;
  sum.wait_time_us += stats.wait_time_us;
  sum.server_assignments += stats.server_assignments;
}

std::optional<std::string> StatsLog::Sample(absl::Time now, absl::Duration period,
                                            const pool::PoolStats& totals) {
  if (since_ == absl::InfinitePast() || now < since_) {
    since_ = now;
    last_ = pool::PoolStats();
    AddCounters(totals, last_);
    return std::nullopt;
  }
  const absl::Duration elapsed = now - since_;
  if (elapsed < period || elapsed <= absl::ZeroDuration()) return std::nullopt;
  const double seconds = absl::ToDoubleSeconds(elapsed);
  // Counters of pools that closed since may make a total smaller: that period counts from 0.
  const auto delta = [](uint64_t now_value, uint64_t then) {
    return now_value >= then ? now_value - then : now_value;
  };
  const uint64_t xacts = delta(totals.transactions, last_.transactions);
  const uint64_t queries = delta(totals.queries, last_.queries);
  const uint64_t waits = delta(totals.server_assignments, last_.server_assignments);
  const auto per_second = [&](uint64_t n) { return static_cast<uint64_t>(n / seconds); };
  const auto average = [](uint64_t total_us, uint64_t n) { return n == 0 ? 0 : total_us / n; };
  std::string line = absl::StrCat(
      "xacts_per_s=", per_second(xacts), " queries_per_s=", per_second(queries),
      " in_bytes_per_s=", per_second(delta(totals.received_bytes, last_.received_bytes)),
      " out_bytes_per_s=", per_second(delta(totals.sent_bytes, last_.sent_bytes)),
      " xact_us=", average(delta(totals.transaction_time_us, last_.transaction_time_us), xacts),
      " query_us=", average(delta(totals.query_time_us, last_.query_time_us), queries),
      " wait_us=", average(delta(totals.wait_time_us, last_.wait_time_us), waits),
      " period_s=", static_cast<uint64_t>(seconds));
  since_ = now;
  last_ = pool::PoolStats();
  AddCounters(totals, last_);
  return line;
}

}  // namespace pgfleet::metrics
