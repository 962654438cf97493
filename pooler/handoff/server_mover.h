// The seam between the pools and the pod's hand-off sockets: how a pool asks a sibling worker for
// an idle server and how it hands one over (docs/architecture.md, "One pool per pod"). The worker
// implements it (pooler/worker/handoff_channel.h); without siblings there is none.
#pragma once

#include <cstdint>

#include "pooler/handoff/handoff_message.h"

namespace pgfleet::pool {

class ServerMover {
 public:
  virtual ~ServerMover() = default;
  // Sends `message` to sibling `worker` (its local peer id), with `fd` attached when not -1 (the
  // fd stays the caller's to close). False when it could not be sent now; nothing was sent.
  virtual bool Send(uint32_t worker, const HandoffMessage& message, int fd) = 0;
};

}  // namespace pgfleet::pool
