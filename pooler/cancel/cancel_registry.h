// The narrow seam between pools and peering: where cancels for other workers go, and how a
// forwarded cancel reaches this worker's sessions. Peering depends only on this header.
#pragma once

#include "pooler/protocol/cancel_key.h"

namespace pgfleet::pool {

enum class CancelOutcome { kSent, kDropped, kForwarded };

// Implemented by peering: delivers a key minted by another worker to its owner, once.
class CancelForwarder {
 public:
  virtual ~CancelForwarder() = default;
  // Called on the loop thread; must not block. False when the owner is unknown (dropped).
  virtual bool ForwardCancel(const protocol::CancelKey& key) = 0;
};

// Implemented by the pool registry; called on the loop thread only.
class CancelTarget {
 public:
  virtual ~CancelTarget() = default;
  // `forwarded` = the key came from a peer; such a key is never forwarded again.
  virtual CancelOutcome HandleCancel(const protocol::CancelKey& key, bool forwarded) = 0;
};

}  // namespace pgfleet::pool
