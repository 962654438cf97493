#include "pooler/cancel/repeat_cancel.h"

#include <algorithm>

namespace pgfleet::pool {

void RepeatCancel::Sent(size_t batches_owed) {
  wait_ = batches_owed < owed_at_last_ ? kFirstWait : std::min(2 * wait_, kLongestWait);
  owed_at_last_ = batches_owed;
}

bool RepeatCancel::Due(absl::Time now, size_t batches_owed) const {
  const absl::Duration wait = batches_owed < owed_at_last_ ? kFirstWait : wait_;
  return now - last_ended_ >= wait;
}

}  // namespace pgfleet::pool
