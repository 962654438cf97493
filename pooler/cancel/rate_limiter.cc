// Token buckets keyed by source address.
#include "pooler/cancel/rate_limiter.h"

#include <algorithm>
#include <vector>

#include "pooler/base/strings.h"

namespace pgfleet::pool {

void RateLimiter::Refill(Bucket& bucket, absl::Time now) const {
  const double elapsed = std::max(0.0, absl::ToDoubleSeconds(now - bucket.updated));
  bucket.tokens = std::min<double>(per_second_, bucket.tokens + elapsed * per_second_);
  bucket.updated = now;
}

bool RateLimiter::Allow(std::string_view source, absl::Time now, uint64_t* report_refused) {
  if (report_refused != nullptr) *report_refused = 0;
  if (per_second_ <= 0) return true;
  auto it = buckets_.find(base::Av(source));
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_sources_) {
      // Drop the buckets that have refilled: they hold no state a new bucket would not.
      std::vector<std::string> full;
      for (auto& [key, bucket] : buckets_) {
        Refill(bucket, now);
        if (bucket.tokens >= per_second_) full.push_back(key);
      }
      for (const std::string& key : full) buckets_.erase(key);
      if (buckets_.size() >= max_sources_) buckets_.clear();
    }
    Bucket fresh;
    fresh.tokens = per_second_;
    fresh.updated = now;
    it = buckets_.emplace(std::string(source), fresh).first;
  } else {
    Refill(it->second, now);
  }
  Bucket& bucket = it->second;
  if (bucket.tokens >= 1.0) {
    bucket.tokens -= 1.0;
    return true;
  }
  ++bucket.refused;
  if (report_refused != nullptr && now - bucket.reported >= kReportInterval) {
    *report_refused = bucket.refused;
    bucket.refused = 0;
    bucket.reported = now;
  }
  return false;
}

std::string_view SourceOf(std::string_view peer_address) {
  if (!peer_address.empty() && peer_address.front() == '[') {
    const size_t close = peer_address.find(']');
    if (close != std::string_view::npos) return peer_address.substr(1, close - 1);
  }
  const size_t colon = peer_address.rfind(':');
  return colon == std::string_view::npos ? peer_address : peer_address.substr(0, colon);
}

}  // namespace pgfleet::pool
