// When a draining server's abandoned work gets its next cancel (Pool::ExpireDraining).
// Socket-free: the pool reports what it sent and asks what is due; unit tests drive it alike.
//
// One cancel does not always stop abandoned work. PostgreSQL ignores a cancel that reaches a
// backend between statements, so a pipeline's next query (after its own Sync) runs in full once
// the cancel stopped the one before, and so does a query the backend had not read yet. pgfleet
// therefore cancels again while the work still runs: soon where the last cancel made progress
// (fewer batches owed since it went out), so that each query of a pipeline stops within moments;
// after a doubling wait where it made none (work that survives cancels: a function that catches
// them, code that never checks), so that such work costs PostgreSQL a handful of cancel
// connections before server_connect_timeout closes its server, not three a second.
#pragma once

#include <cstddef>
#include <limits>

#include "absl/time/time.h"

namespace pgfleet::pool {

class RepeatCancel {
 public:
  // Well above the milliseconds PostgreSQL takes to act on a cancel.
  static constexpr absl::Duration kFirstWait = absl::Milliseconds(250);
  static constexpr absl::Duration kLongestWait = absl::Seconds(4);

  // The server began to drain at `drain_started`: waits count from then until a cancel ends.
  explicit RepeatCancel(absl::Time drain_started = absl::InfinitePast())
      : last_ended_(drain_started) {}

  // A cancel went out while the server owed answers to `batches_owed` batches.
  void Sent(size_t batches_owed);
  // The server's cancels in flight all ended (sent, dropped or failed) at `now`.
  void Ended(absl::Time now) { last_ended_ = now; }
  // Whether another cancel is due at `now`, with `batches_owed` batches still owed.
  bool Due(absl::Time now, size_t batches_owed) const;

  absl::Duration wait_without_progress() const { return wait_; }

 private:
  absl::Time last_ended_;
  size_t owed_at_last_ = std::numeric_limits<size_t>::max();  // none sent yet
  absl::Duration wait_ = kFirstWait;
};

}  // namespace pgfleet::pool
