// Time as a seam: the objects that decide with time take an `absl::Time now` argument, and the
// plumbing around them reads it from a Clock, so tests drive them in simulated time.
#pragma once

#include <time.h>

#include "absl/time/time.h"

namespace pgfleet::base {

class Clock {
 public:
  virtual ~Clock() = default;
  // The current time on this clock. Only differences between two readings mean anything.
  virtual absl::Time Now() const = 0;
};

// CLOCK_MONOTONIC (vDSO, no syscall), on the same scale as net::MonotonicNow().
class MonotonicClock final : public Clock {
 public:
  absl::Time Now() const override {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return absl::UnixEpoch() + absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
  }
};

// A clock that moves only when told to (tests).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1)) : now_(start) {}
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }
  void Set(absl::Time t) { now_ = t; }

 private:
  absl::Time now_;
};

}  // namespace pgfleet::base
