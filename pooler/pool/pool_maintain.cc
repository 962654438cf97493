// The janitor's sweep of a pool (Pool::Maintain): clients past their timeouts (the pool's user's
// own where it sets them), servers past their connect timeout, idle timeout or lifetime, the
// reserve pool and min_pool_size; and the idle clients a shutdown closes.
#include <string_view>
#include <vector>

#include "pooler/pool/pool.h"
#include "pooler/pool/pool_host.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

bool Pool::CloseIdleClients(std::string_view reason, absl::Time now) {
  constexpr absl::Duration kIdleGrace = absl::Seconds(1);
  std::vector<ClientConn*> idle;
  for (ClientConn* c : clients_.In({ClientState::kIdle})) {
    if (now - c->last_activity_at() > kIdleGrace && c->in().empty()) idle.push_back(c);
  }
  // A client whose session state pins its server is between transactions too when that server
  // could be released: it goes as an idle one does (its server is reset on the way).
  for (ClientConn* c : clients_.In({ClientState::kActive})) {
    const ServerConn* server = c->server();
    if (mode_ != config::PoolMode::kSession && server != nullptr && server->IsReleasable() &&
        c->session().pinned() && now - c->last_activity_at() > kIdleGrace && c->in().empty()) {
      idle.push_back(c);
    }
  }
  for (ClientConn* c : idle) c->Fatal(protocol::sqlstate::kAdminShutdown, reason);
  return client_count() == 0;
}

void Pool::Maintain(absl::Time now) {
  const auto& pc = context_.config().pool;
  // The pool's user's own timeouts where it sets them ([users] in PgBouncer's terms).
  const config::ClientTimeouts timeouts = context_.config().EffectiveClientTimeouts(user_);
  std::vector<ClientConn*> expired;
  // Clients queued too long.
  if (timeouts.query_wait_timeout > absl::ZeroDuration()) {
    for (ClientConn* c : clients_.In({ClientState::kWaiting})) {
      if (now - c->wait_started_at() > timeouts.query_wait_timeout) expired.push_back(c);
    }
    for (ClientConn* c : clients_.In({ClientState::kSettingsCheck, ClientState::kWelcome})) {
      if (now - c->connected_at() > timeouts.query_wait_timeout) expired.push_back(c);
    }
  }
  if (pc.query_wait_notify > absl::ZeroDuration()) {
    for (ClientConn* c : clients_.In({ClientState::kWaiting})) {
      if (now - c->wait_started_at() > pc.query_wait_notify) c->NoticeQueued();
    }
  }
  for (ClientConn* c : expired) {
    c->Fatal(protocol::sqlstate::kConnectionFailure,
             "query_wait_timeout: no server connection became available in time");
  }
  expired.clear();
  ExpireHubWaiters(now, timeouts.query_wait_timeout);
  RefreshWelcome(now);
  // Idle clients.
  if (timeouts.client_idle_timeout > absl::ZeroDuration()) {
    for (ClientConn* c : clients_.In({ClientState::kIdle})) {
      // A client listening through the hub waits for notifications: it is no more idle than
      // one whose LISTEN pinned its server (kActive) was before the hub.
      if (now - c->last_activity_at() > timeouts.client_idle_timeout && !hub_.HasChannels(c)) {
        expired.push_back(c);
      }
    }
    for (ClientConn* c : expired) {
      c->Fatal(protocol::sqlstate::kIdleSessionTimeout, "client_idle_timeout");
    }
    expired.clear();
  }
  // Linked clients: query_timeout, transaction_timeout and idle_transaction_timeout.
  struct TimedOut {
    ClientConn* client;
    std::string_view sqlstate;
    std::string_view message;
  };
  std::vector<TimedOut> timed_out;
  // server_fast_close: in session pooling, a server RECONNECT or a RELOAD marked to close goes
  // between its client's transactions, and the client with it, instead of at the session's end.
  const bool fast_close = pc.server_fast_close && mode_ == config::PoolMode::kSession;
  for (ServerConn* s : servers_.In({ServerState::kActive})) {
    ClientConn* c = ClientOf(s);
    if (c == nullptr) continue;
    if (timeouts.query_timeout > absl::ZeroDuration() && s->query_in_progress() &&
        now - s->query_started_at() > timeouts.query_timeout) {
      timed_out.push_back({c, protocol::sqlstate::kQueryCanceled,
                           "query_timeout: query ran longer than the configured limit"});
    } else if (timeouts.transaction_timeout > absl::ZeroDuration() &&
               (s->query_in_progress() || s->in_transaction()) &&
               now - s->transaction_started_at() > timeouts.transaction_timeout) {
      timed_out.push_back(
          {c, protocol::sqlstate::kTransactionTimeout,
           "transaction_timeout: transaction ran longer than the configured limit"});
    } else if (timeouts.idle_transaction_timeout > absl::ZeroDuration() &&
               !s->query_in_progress() && s->in_transaction() &&
               now - c->last_activity_at() > timeouts.idle_transaction_timeout) {
      timed_out.push_back({c, protocol::sqlstate::kIdleInTransactionTimeout,
                           "idle_transaction_timeout: transaction was idle too long"});
    } else if (fast_close && s->close_on_release() && s->IsReleasable()) {
      timed_out.push_back({c, protocol::sqlstate::kAdminShutdown,
                           "server_fast_close: database configuration changed"});
    }
  }
  // Closing the client cancels what its server runs and drains the server (RemoveClient).
  for (const TimedOut& t : timed_out) t.client->Fatal(t.sqlstate, t.message);
  // Servers: connect timeout, idle timeout, lifetime.
  std::vector<std::pair<ServerConn*, const char*>> to_close;
  for (ServerConn* s : servers_.In({ServerState::kConnecting, ServerState::kLogin})) {
    if (now - s->created_at() > pc.server_connect_timeout)
      to_close.emplace_back(s, "connect timeout");
  }
  // min_pool_size is the pod's: idle servers close while the pod keeps more than that.
  int count = host_->budget().PodServers(*this);
  const int min_size = context_.config().EffectiveMinPoolSize(db_);
  for (auto* s = servers_[ServerState::kIdle].back(); s != nullptr;
       s = static_cast<ServerConn*>(s->prev)) {
    if (server_lifetime_us_ > 0 && s->linked_at_us() != 0 &&
        context_.loop().now_us() - s->created_at_us() > server_lifetime_us_) {
      to_close.emplace_back(s, "server lifetime over");
    } else if (pc.server_idle_timeout > absl::ZeroDuration() && count > min_size &&
               now - s->last_used_at() > pc.server_idle_timeout) {
      to_close.emplace_back(s, "server idle timeout");
      --count;
    }
  }
  for (auto [s, reason] : to_close) s->Close(reason);
  ExpireDraining(now);
  // Reserve pool: a client waiting past reserve_pool_timeout may use extra servers.
  if (!clients_[ClientState::kWaiting].empty() &&
      context_.config().EffectiveReservePoolSize(db_, user_) > 0 &&
      max_wait(now) > pc.reserve_pool_timeout) {
    LaunchServer(ServerBudget::Purpose::kReserve);
  }
  // Ahead of demand up to the pod's min_pool_size; the pod's count decides, so the workers
  // together open exactly that many.
  while (LaunchServer(ServerBudget::Purpose::kMinPoolSize)) {
  }
  ServeWaiting();
}

}  // namespace pgfleet::pool
