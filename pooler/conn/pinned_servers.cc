// max_pinned_servers, counted in the pod's shared counts.
#include "pooler/conn/pool_events.h"

namespace pgfleet::pool {

std::optional<budget::PodServerCounts::Key> PinnedServers::PodKey() const {
  if (!key_known_ && pod_ != nullptr) {
    key_ = pod_->Intern(key_text_);
    key_known_ = true;
  }
  return key_;
}

bool PinnedServers::MayPin() const {
  const auto key = PodKey();
  return (key.has_value() ? pod_->Total(*key) : pinned_) < limit_;
}

void PinnedServers::OnPinChanged(bool pinned, uint32_t pin_mask) {
  const auto key = PodKey();
  if (!pinned) {
    --pinned_;
    if (key.has_value()) pod_->Release({*key});
    return;
  }
  ++pinned_;
  // Unlimited here: the limit is checked before a pin is made (MayPin), and a pin made anyway
  // inside a transaction still counts.
  if (key.has_value()) (void)pod_->TryReserve({{*key, 0}});
  for (int r = 0; r < kPinReasonCount; ++r) {
    if ((pin_mask & (1u << r)) != 0) ++pins_total_[r];
  }
}

}  // namespace pgfleet::pool
