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
// connections before server_connect_timeout closes its server, not four a second.
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

  // A cancel went out while the server owed answers to `batches_owed` batches.
  void Sent(size_t batches_owed);
  // Whether another cancel is due at `now`: the last one ended (or the drain began) at
  // `last_ended`, and `batches_owed` batches are still owed.
  bool Due(absl::Time now, absl::Time last_ended, size_t batches_owed) const;

  absl::Duration wait_without_progress() const { return wait_; }

 private:
  size_t owed_at_last_ = std::numeric_limits<size_t>::max();  // none sent yet
  absl::Duration wait_ = kFirstWait;
};

}  // namespace pgfleet::pool
