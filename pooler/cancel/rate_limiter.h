// Per-source token buckets, for limits such as CancelRequests per client address. Pure: the
// caller passes the time, so tests need no clock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace pgfleet::pool {

class RateLimiter {
 public:
  // `per_second` tokens refill each second into a bucket holding at most that many (one second's
  // burst); 0 = unlimited. At most `max_sources` buckets are kept: idle (full) buckets are dropped
  // first, and if every bucket is busy the table starts over, so memory stays bounded even when
  // requests come from very many addresses.
  explicit RateLimiter(int per_second, size_t max_sources = 4096)
      : per_second_(per_second), max_sources_(max_sources) {}

  // Takes one token from `source`'s bucket: true when it had one (the request may proceed). When
  // `report_refused` is given and a refusal should be logged, it is set to the number of refusals
  // from `source` since its last report (else to 0): the first refusal is reported, then at most
  // one every `kReportInterval`, so a sustained flood costs a log line per interval, not per
  // request.
  [[nodiscard]] bool Allow(std::string_view source, absl::Time now,
                           uint64_t* report_refused = nullptr);

  static constexpr absl::Duration kReportInterval = absl::Seconds(10);

  void set_per_second(int per_second) { per_second_ = per_second; }
  size_t source_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time updated;
    absl::Time reported = absl::InfinitePast();  // last refusal report
    uint64_t refused = 0;                        // refusals since then
  };
  // Refills `bucket` up to `now`.
  void Refill(Bucket& bucket, absl::Time now) const;

  int per_second_;
  size_t max_sources_;
  absl::flat_hash_map<std::string, Bucket> buckets_;
};

// The host part of an address as net::PeerAddressString writes it ("1.2.3.4:5" -> "1.2.3.4",
// "[::1]:5" -> "::1", "unix" -> "unix"), the key for per-source limits.
std::string_view SourceOf(std::string_view peer_address);

}  // namespace pgfleet::pool
