// What a client asks of its worker's cancel handling (CancelHandler, pooler/cancel, implements
// it): a key at login, its key forgotten at goodbye, and a CancelRequest that arrived on a new
// connection acted on. The connections never include the cancel library, which includes them.
#pragma once

#include <cstddef>
#include <string_view>

#include "pooler/cancel/cancel_registry.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::pool {

class ClientConn;

class ClientCancels : public CancelTarget {
 public:
  // A key unique among this worker's live clients, carrying the worker's peer id, with a random
  // secret of `secret_size` bytes (protocol::CancelSecretSizeFor the client's protocol).
  virtual protocol::CancelKey MintCancelKey(ClientConn* client, size_t secret_size) = 0;
  // The client is gone: its key cancels nothing more.
  virtual void ForgetCancelKey(const protocol::CancelKey& key) = 0;
  // pool.cancel_rate_limit: true when a CancelRequest from `peer_address` may be acted on.
  [[nodiscard]] virtual bool AllowCancelFrom(std::string_view peer_address) = 0;
};

}  // namespace pgfleet::pool
