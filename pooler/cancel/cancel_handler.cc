// Cancel keys and CancelRequests of one worker.
#include "pooler/cancel/cancel_handler.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pooler/base/log.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/server_conn.h"
#include "pooler/net/socket.h"

namespace pgfleet::pool {

CancelHandler::~CancelHandler() {
  for (net::EventLoop::TimerId timer : retry_timers_) context_.loop().CancelTimer(timer);
}

protocol::CancelKey CancelHandler::MintCancelKey(ClientConn* client, size_t secret_size) {
  protocol::CancelKey key;
  do {
    uint8_t bytes[2 + protocol::kCancelSecretSize32];
    const size_t size = std::min(secret_size, protocol::kCancelSecretSize32);
    context_.random().Fill(std::span<uint8_t>(bytes, 2 + size));
    key.pid = protocol::MakeCancelPid(context_.peer_id(), (uint32_t{bytes[0]} << 8) | bytes[1]);
    key.secret.assign(bytes + 2, bytes + 2 + size);
  } while (KeyInUse(key) || !cancel_keys_.emplace(key, client).second);
  return key;
}

void CancelHandler::ForgetCancelKey(const protocol::CancelKey& key) { cancel_keys_.erase(key); }

void CancelHandler::KeepCancelKey(const ClientConn& client, const ServerConn& server) {
  auto it = cancel_keys_.find(client.cancel_key());
  if (it == cancel_keys_.end() || it->second != &client) return;
  abandoned_[it->first] = AbandonedQuery{server.id(), server.link_generation()};
  cancel_keys_.erase(it);
}

ServerConn* CancelHandler::StillRunning(const AbandonedQuery& query) const {
  ServerConn* server = servers_.FindServer(query.server_id);
  if (server == nullptr || server->link_generation() != query.link_generation ||
      !server->query_in_progress()) {
    return nullptr;
  }
  return server;
}

CancelOutcome CancelHandler::HandleCancel(const protocol::CancelKey& key, bool forwarded) {
  WorkerCounters& counters = context_.counters();
  const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
  if (owner != context_.peer_id()) {
    if (!forwarded && forwarder_ != nullptr && forwarder_->ForwardCancel(key)) {
      ++counters.cancels_forwarded;
      return CancelOutcome::kForwarded;
    }
    ++counters.cancels_dropped;
    PGFLEET_LOG(kDebug, "cancel_dropped", "reason=", forwarded ? "not_owner" : "unknown_owner",
                " owner=", owner);
    return CancelOutcome::kDropped;
  }
  if (auto left = abandoned_.find(key); left != abandoned_.end()) {
    // Its client left mid-query, perhaps right after sending this: the query may still run.
    ServerConn* server = StillRunning(left->second);
    if (server == nullptr) {
      abandoned_.erase(left);
      ++counters.cancels_dropped;
      PGFLEET_LOG(kDebug, "cancel_dropped", "reason=abandoned_query_over");
      return CancelOutcome::kDropped;
    }
    if (!CancelQuery(*server, forwarded ? "abandoned_forwarded" : "abandoned_client")) {
      ++counters.cancels_dropped;
      return CancelOutcome::kDropped;
    }
    PGFLEET_LOG(kInfo, "cancel_request", "client=gone server=", server->id(),
                " forwarded=", forwarded ? "true" : "false");
    return CancelOutcome::kSent;
  }
  auto it = cancel_keys_.find(key);
  if (it == cancel_keys_.end()) {
    // A key minted without a controller (pod block 0) may be the same-numbered worker's of
    // another pod: the forwarder offers it to the other pods, once.
    if (!forwarded && forwarder_ != nullptr && protocol::PodBlockOfPeerId(owner) == 0 &&
        forwarder_->ForwardCancel(key)) {
      ++counters.cancels_forwarded;
      return CancelOutcome::kForwarded;
    }
    // Unknown keys are dropped silently, as PostgreSQL does.
    ++counters.cancels_dropped;
    PGFLEET_LOG(kDebug, "cancel_dropped", "reason=unknown_key");
    return CancelOutcome::kDropped;
  }
  ClientConn* client = it->second;
  ServerConn* server = client->server();
  if (server == nullptr && client->CancelQueuedQuery()) {
    // Its query still waited for a server: answered here, and no server is touched.
    ++counters.cancels_queued;
    PGFLEET_LOG(kInfo, "cancel_queued_query", "client=", client->id(),
                " forwarded=", forwarded ? "true" : "false");
    return CancelOutcome::kSent;
  }
  if (server == nullptr || !server->query_in_progress()) {
    ++counters.cancels_dropped;
    PGFLEET_LOG(kDebug, "cancel_dropped", "reason=idle_client client=", client->id());
    return CancelOutcome::kDropped;
  }
  if (!CancelQuery(*server, forwarded ? "client_forwarded" : "client")) {
    ++counters.cancels_dropped;
    return CancelOutcome::kDropped;
  }
  PGFLEET_LOG(kInfo, "cancel_request", "client=", client->id(), " server=", server->id(),
              " forwarded=", forwarded ? "true" : "false");
  return CancelOutcome::kSent;
}

bool CancelHandler::CancelQuery(ServerConn& server, std::string_view why) {
  const absl::Time now = context_.loop().now();
  if (!StartCancel(server, 1, now)) {
    // Refused at once (no listener there this instant): retried like a failed connect, with the
    // server held meanwhile.
    if (!ScheduleRetry(server.id(), server.link_generation(), 1, now)) return false;
    server.AddCancelInFlight();
  }
  PGFLEET_LOG(kDebug, "cancel_started", "server=", server.id(), " why=", why);
  return true;
}

namespace {

// Where the server's own connection goes (its peer address): no lookup on the loop, and the same
// host when its name has several addresses. A server whose socket is gone falls back to its name.
absl::StatusOr<int> ConnectToServersHost(const ServerConn& server) {
  if (auto peer = net::PeerOf(server.fd()); peer.ok()) return net::ConnectToAddress(*peer);
  return net::ConnectTo(server.address().host, server.address().port);
}

}  // namespace

bool CancelHandler::StartCancel(ServerConn& server, int attempt, absl::Time first_started_at) {
  auto fd = ConnectToServersHost(server);
  if (!fd.ok()) return false;
  auto request = std::make_unique<CancelRequestConn>(
      context_.loop(), *fd, this, server.id(), server.link_generation(), attempt, first_started_at);
  if (!request->Register(/*connecting=*/true).ok()) return false;
  server.AddCancelInFlight();
  Track(std::move(request));
  return true;
}

bool CancelHandler::RetryCancel(const CancelRequestConn& failed) {
  return ScheduleRetry(failed.server_id(), failed.link_generation(), failed.attempt(),
                       failed.first_started_at());
}

bool CancelHandler::ScheduleRetry(uint64_t server_id, uint64_t link_generation, int failed_attempt,
                                  absl::Time first_started_at) {
  // Within cancel_wait_timeout of the first attempt: after 50 ms, doubling to at most a second.
  const absl::Duration backoff =
      std::min(absl::Milliseconds(50) * (1 << std::min(failed_attempt - 1, 5)), absl::Seconds(1));
  if (context_.loop().now() + backoff - first_started_at >
      context_.config().pool.cancel_wait_timeout) {
    return false;
  }
  PGFLEET_LOG(kInfo, "cancel_retry", "server=", server_id, " attempt=", failed_attempt + 1,
              " backoff_ms=", absl::ToInt64Milliseconds(backoff));
  auto timer = std::make_shared<net::EventLoop::TimerId>(0);
  *timer = context_.loop().RunAfter(
      backoff, [this, timer, server_id, link_generation, failed_attempt, first_started_at] {
        retry_timers_.erase(*timer);
        RunRetry(server_id, link_generation, failed_attempt + 1, first_started_at);
      });
  retry_timers_.insert(*timer);
  return true;
}

void CancelHandler::RunRetry(uint64_t server_id, uint64_t link_generation, int attempt,
                             absl::Time first_started_at) {
  ServerConn* server = FindServer(server_id);
  if (server == nullptr) return;
  // This retry carries one hold on the server: a new request takes it over, or it is released.
  if (server->link_generation() != link_generation || !server->query_in_progress()) {
    ++context_.counters().cancels_dropped;
    server->CancelFinished();
    return;
  }
  if (StartCancel(*server, attempt, first_started_at)) {
    server->CancelFinished();  // the new request took its own hold
    return;
  }
  if (ScheduleRetry(server_id, link_generation, attempt, first_started_at)) return;  // kept
  ++context_.counters().cancels_dropped;
  server->CancelFinished();
}

bool CancelHandler::CancelAbandonedQuery(const ServerConn& server) {
  auto fd = ConnectToServersHost(server);
  if (!fd.ok()) return false;
  auto request = std::make_unique<CancelRequestConn>(context_.loop(), *fd, this,
                                                     server.backend_pid(), server.backend_secret());
  if (!request->Register(/*connecting=*/true).ok()) return false;
  Track(std::move(request));
  return true;
}

bool CancelHandler::AllowCancelFrom(std::string_view peer_address) {
  const int limit = context_.config().pool.cancel_rate_limit;
  WorkerCounters& counters = context_.counters();
  limiter_.set_per_second(limit);
  uint64_t refused = 0;
  if (limiter_.Allow(SourceOf(peer_address), context_.loop().now(), &refused)) return true;
  ++counters.cancels_rate_limited;
  if (refused > 0) {
    PGFLEET_LOG(kWarning, "cancel_rate_limited", "addr=", SourceOf(peer_address),
                " limit_per_s=", limit, " refused=", refused,
                " total=", counters.cancels_rate_limited);
  }
  return false;
}

void CancelHandler::Track(std::unique_ptr<CancelRequestConn> request) {
  CancelRequestConn* raw = request.get();
  requests_.emplace(raw, std::move(request));
}

void CancelHandler::Forget(CancelRequestConn* request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  context_.loop().DeferredDelete(std::move(it->second));
  requests_.erase(it);
}

void CancelHandler::ExpireStale(absl::Time now) {
  const absl::Duration timeout = context_.config().pool.cancel_wait_timeout;
  std::vector<CancelRequestConn*> stale;
  for (auto& [raw, request] : requests_) {
    if (now - raw->started_at() > timeout) stale.push_back(raw);
  }
  for (CancelRequestConn* raw : stale) raw->Finish("timeout");
  absl::erase_if(abandoned_,
                 [this](const auto& entry) { return StillRunning(entry.second) == nullptr; });
}

}  // namespace pgfleet::pool
