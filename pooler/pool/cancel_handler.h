// Query cancellation for one worker: the cancel keys it minted, CancelRequests it handles (its
// own keys cancelled here, a sibling's handed to peering), the outbound cancels in flight to
// PostgreSQL, and the per-source rate limit (docs/architecture.md, "Cancel keys").
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "pooler/pool/cancel_registry.h"
#include "pooler/pool/cancel_request.h"
#include "pooler/pool/rate_limiter.h"
#include "pooler/pool/worker_context.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::pool {

class ClientConn;
class ServerConn;

// Finds a live server by id, so a cancel that finishes late never touches a freed one.
class ServerDirectory {
 public:
  virtual ~ServerDirectory() = default;
  virtual ServerConn* FindServer(uint64_t id) const = 0;
};

class CancelHandler final : public CancelTarget {
 public:
  CancelHandler(WorkerContext& context, const ServerDirectory& servers)
      : context_(context), servers_(servers) {}
  ~CancelHandler() override;

  // A key unique among this worker's live clients, carrying the worker's peer id, with a random
  // secret of `secret_size` bytes (protocol::CancelSecretSizeFor the client's protocol).
  protocol::CancelKey MintCancelKey(ClientConn* client, size_t secret_size);
  void ForgetCancelKey(const protocol::CancelKey& key);
  // Handles a CancelRequest: our own key is cancelled here, a sibling's is handed to the
  // forwarder unless it was already forwarded once.
  CancelOutcome HandleCancel(const protocol::CancelKey& key, bool forwarded) override;
  void set_forwarder(CancelForwarder* forwarder) { forwarder_ = forwarder; }

  // Sends PostgreSQL a CancelRequest for the query `server` runs, on a new connection. It goes out
  // only if, when that connects, the same link still runs a query, and the server counts it as in
  // flight until it is over, so that it is not reused before then (kCanceling, kDraining). `why`
  // is logged. False when no connection could be started.
  [[nodiscard]] bool CancelQuery(ServerConn& server, std::string_view why);
  // Cancels whatever `server` runs, unconditionally, because pgfleet closes the connection right
  // after (nothing can be checked or held then). False when no connection could be started.
  bool CancelAbandonedQuery(const ServerConn& server);
  // pool.cancel_rate_limit: true when a CancelRequest from `peer_address` may be acted on; a
  // refused one is counted, and logged at most once per 10 s per address (with the count).
  [[nodiscard]] bool AllowCancelFrom(std::string_view peer_address);

  // For CancelRequestConn: the server a cancel was for (null once gone); the request is over.
  ServerConn* FindServer(uint64_t id) const { return servers_.FindServer(id); }
  WorkerCounters& counters() { return context_.counters(); }
  void Forget(CancelRequestConn* request);
  // Gives up on cancels that waited longer than pool.cancel_wait_timeout (the janitor).
  void ExpireStale(absl::Time now);

 private:
  void Track(std::unique_ptr<CancelRequestConn> request);

  WorkerContext& context_;
  const ServerDirectory& servers_;
  CancelForwarder* forwarder_ = nullptr;
  absl::flat_hash_map<protocol::CancelKey, ClientConn*> cancel_keys_;
  absl::flat_hash_map<CancelRequestConn*, std::unique_ptr<CancelRequestConn>> requests_;
  RateLimiter limiter_{0};
};

}  // namespace pgfleet::pool
