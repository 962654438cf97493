// Query cancellation for one worker: the cancel keys it minted, CancelRequests it handles (its
// own keys cancelled here, a sibling's handed to peering), the outbound cancels in flight to
// PostgreSQL, and the per-source rate limit (docs/architecture.md, "Cancel keys").
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "pooler/cancel/cancel_request.h"
#include "pooler/cancel/rate_limiter.h"
#include "pooler/conn/client_cancels.h"
#include "pooler/conn/worker_context.h"
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

class CancelHandler final : public ClientCancels, public CancelRequestOwner {
 public:
  CancelHandler(WorkerContext& context, const ServerDirectory& servers)
      : context_(context), servers_(servers) {}
  ~CancelHandler() override;

  // A key unique among this worker's live clients, carrying the worker's peer id, with a random
  // secret of `secret_size` bytes (protocol::CancelSecretSizeFor the client's protocol).
  protocol::CancelKey MintCancelKey(ClientConn* client, size_t secret_size) override;
  // The client is gone: its key cancels nothing more (unless KeepCancelKey moved it first).
  void ForgetCancelKey(const protocol::CancelKey& key) override;
  // `client` left while `server` runs its query (Pool::AbandonServer): its key keeps naming that
  // query until the server has finished it, so that a CancelRequest the client sent just before
  // it left, forwarded by a sibling or another pod and arriving after the goodbye, still reaches
  // PostgreSQL (docs/architecture.md, "Abandoned queries").
  void KeepCancelKey(const ClientConn& client, const ServerConn& server);
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
  [[nodiscard]] bool AllowCancelFrom(std::string_view peer_address) override;

  // For CancelRequestConn: the server a cancel was for (null once gone); the request is over.
  ServerConn* FindServer(uint64_t id) const override { return servers_.FindServer(id); }
  WorkerCounters& counters() override { return context_.counters(); }
  void Forget(CancelRequestConn* request) override;
  bool RetryCancel(const CancelRequestConn& failed) override;
  // Gives up on cancels that waited longer than pool.cancel_wait_timeout, and forgets the keys of
  // departed clients whose query is over (the janitor).
  void ExpireStale(absl::Time now);

 private:
  void Track(std::unique_ptr<CancelRequestConn> request);
  // Connects a CancelRequest for `server`'s current query (CancelQuery and its retries); false
  // when no connection could be started.
  bool StartCancel(ServerConn& server, int attempt, absl::Time first_started_at);
  // Schedules the attempt after `failed_attempt` once its backoff is over; false when that would
  // end past cancel_wait_timeout from the first attempt.
  bool ScheduleRetry(uint64_t server_id, uint64_t link_generation, int failed_attempt,
                     absl::Time first_started_at);
  // A retry whose backoff is over: a new request if the same link still runs a query, else the
  // server's hold (which the retry carried) is released.
  void RunRetry(uint64_t server_id, uint64_t link_generation, int attempt,
                absl::Time first_started_at);

  WorkerContext& context_;
  const ServerDirectory& servers_;
  // The query a departed client left running: the server and the link that ran it.
  struct AbandonedQuery {
    uint64_t server_id = 0;
    uint64_t link_generation = 0;
  };
  // The server still runs the query `query` names (same link, answers owed); null otherwise.
  ServerConn* StillRunning(const AbandonedQuery& query) const;
  bool KeyInUse(const protocol::CancelKey& key) const {
    return cancel_keys_.contains(key) || abandoned_.contains(key);
  }

  CancelForwarder* forwarder_ = nullptr;
  absl::flat_hash_map<protocol::CancelKey, ClientConn*> cancel_keys_;
  // Keys of clients that left mid-query, until their server has finished the query (few: at most
  // one per draining server); swept by ExpireStale.
  absl::flat_hash_map<protocol::CancelKey, AbandonedQuery> abandoned_;
  absl::flat_hash_map<CancelRequestConn*, std::unique_ptr<CancelRequestConn>> requests_;
  RateLimiter limiter_{0};
  // Cancel retries waiting for their backoff (cancelled with the handler).
  absl::flat_hash_set<net::EventLoop::TimerId> retry_timers_;
};

}  // namespace pgfleet::pool
