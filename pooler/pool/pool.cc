// Pool: assignment, release and the per-state lists.
#include "pooler/pool/pool.h"

#include <algorithm>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/pool_registry.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

namespace {
constexpr absl::Duration kMaxConnectBackoff = absl::Seconds(1);
}  // namespace

Pool::Pool(PoolRegistry* registry, config::DatabaseConfig db, std::string user)
    : registry_(registry),
      db_(std::move(db)),
      user_(std::move(user)),
      mode_(registry->config().EffectivePoolMode(db_, user_)),
      server_defaults_(registry->tracked_params().size()) {
  UpdateRelaySettings();
}

Pool::~Pool() = default;

bool Pool::tracks_prepared_statements() const {
  return mode_ != config::PoolMode::kSession &&
         registry_->config().pool.max_prepared_statements > 0;
}

void Pool::UpdateRelaySettings() {
  const auto& pool_config = registry_->config().pool;
  relay_settings_.max_packet_size = static_cast<uint32_t>(pool_config.max_packet_size);
  relay_settings_.track_prepared = tracks_prepared_statements();
  relay_settings_.max_prepared_statements =
      static_cast<size_t>(std::max(0, pool_config.max_prepared_statements));
  relay_settings_.tracked = &registry_->tracked_params();
  relay_settings_.statements = &registry_->statements();
}

int Pool::pool_size() const { return registry_->config().EffectivePoolSize(db_); }

void Pool::ApplyConfig(const config::DatabaseConfig& db) {
  bool target_changed = db.host != db_.host || db.port != db_.port || db.dbname != db_.dbname ||
                        db.user != db_.user || db.password != db_.password;
  db_ = db;
  mode_ = registry_->config().EffectivePoolMode(db_, user_);
  UpdateRelaySettings();
  if (target_changed) {
    for (auto* s = active_servers_.front(); s != nullptr; s = active_servers_.Next(s)) {
      s->MarkCloseOnRelease();
    }
    CloseIdleServers("database settings changed");
    welcome_known_ = false;
  }
}

size_t Pool::client_count() const {
  return welcome_clients_.size() + idle_clients_.size() + waiting_clients_.size() +
         active_clients_.size();
}

size_t Pool::server_count() const {
  return login_servers_.size() + idle_servers_.size() + active_servers_.size() +
         testing_servers_.size();
}

absl::Duration Pool::max_wait(absl::Time now) const {
  const ClientConn* first = waiting_clients_.front();
  return first == nullptr ? absl::ZeroDuration() : now - first->wait_started_at();
}

void Pool::MoveClient(ClientConn* client, ClientState state) {
  base::IntrusiveList<ClientConn>::RemoveFromOwner(client);
  client->set_state(state);
  switch (state) {
    case ClientState::kWelcome:
      welcome_clients_.PushBack(client);
      break;
    case ClientState::kIdle:
      idle_clients_.PushBack(client);
      break;
    case ClientState::kWaiting:
      waiting_clients_.PushBack(client);
      break;
    case ClientState::kActive:
      active_clients_.PushBack(client);
      break;
    default:
      break;
  }
}

void Pool::MoveServer(ServerConn* server, ServerState state) {
  base::IntrusiveList<ServerConn>::RemoveFromOwner(server);
  server->set_state(state);
  switch (state) {
    case ServerState::kConnecting:
    case ServerState::kLogin:
      login_servers_.PushBack(server);
      break;
    case ServerState::kIdle:
      idle_servers_.PushFront(server);  // LIFO keeps the busiest servers warm
      break;
    case ServerState::kActive:
      active_servers_.PushBack(server);
      break;
    case ServerState::kTesting:
    case ServerState::kCanceling:
      testing_servers_.PushBack(server);
      break;
    case ServerState::kClosed:
      break;
  }
}

void Pool::AddClient(ClientConn* client) {
  if (welcome_known_) {
    MoveClient(client, ClientState::kIdle);
    client->SendWelcome(welcome_params_, server_defaults_);
    if (!client->closed()) client->OnServerReleased();
    return;
  }
  MoveClient(client, ClientState::kWelcome);
  if (login_servers_.empty() && idle_servers_.empty()) LaunchServer(false);
}

void Pool::RequestServer(ClientConn* client) {
  const absl::Time now = registry_->loop().now();
  client->set_wait_started_at(now);
  if (waiting_clients_.empty() && !paused_) {
    if (ServerConn* server = TakeIdleServer(now)) {
      Link(client, server);
      return;
    }
  }
  MoveClient(client, ClientState::kWaiting);
  ServeWaiting();
}

void Pool::Link(ClientConn* client, ServerConn* server) {
  const absl::Time now = registry_->loop().now();
  MoveServer(server, ServerState::kActive);
  MoveClient(client, ClientState::kActive);
  server->Attach(client);
  client->Attach(server);
  // Backpressure belongs to a link: a server paused for its previous client reads again.
  server->SetReadEnabled(true);
  stats_.RecordWait(
      static_cast<uint64_t>(absl::ToInt64Microseconds(now - client->wait_started_at())));
  ++stats_.server_assignments;
  std::string sql;
  if (BuildParamSync(registry_->tracked_params(), client->params(), server->params(), &sql)) {
    if (!server->SendHiddenQuery(sql)) {
      server->Close("write failed");
      return;
    }
  }
  client->RelayToServer();
}

ServerConn* Pool::TakeIdleServer(absl::Time now) {
  const auto& pool_config = registry_->config().pool;
  while (ServerConn* server = idle_servers_.front()) {
    if (now - server->created_at() > pool_config.server_lifetime &&
        pool_config.server_lifetime > absl::ZeroDuration()) {
      server->Close("server lifetime over");
      continue;
    }
    if (pool_config.server_check_delay >= absl::ZeroDuration() &&
        now - server->last_used_at() > pool_config.server_check_delay &&
        pool_config.server_check_query != "-") {
      // Long idle: prove the connection still works before a client depends on it.
      MoveServer(server, ServerState::kTesting);
      server->touch(now);
      if (!server->SendHiddenQuery(pool_config.server_check_query)) {
        server->Close("server check failed");
      }
      continue;
    }
    return server;
  }
  return nullptr;
}

void Pool::ServeWaiting() {
  const absl::Time now = registry_->loop().now();
  while (!auth_query_waiters_.empty()) {
    ServerConn* server = TakeIdleServer(now);
    if (server == nullptr) break;
    ClientConn* client = auth_query_waiters_.front();
    auth_query_waiters_.erase(auth_query_waiters_.begin());
    MoveServer(server, ServerState::kTesting);
    client->set_auth_query_server(server);
    if (!server->StartAuthQuery(client, registry_->config().auth.query, client->user())) {
      server->Close("write failed");
    }
  }
  if (paused_) return;
  while (!waiting_clients_.empty()) {
    ServerConn* server = TakeIdleServer(now);
    if (server == nullptr) break;
    Link(waiting_clients_.front(), server);
  }
  size_t demand = waiting_clients_.size() + auth_query_waiters_.size() +
                  (welcome_known_                ? 0
                   : welcome_clients_.size() > 0 ? 1
                                                 : 0);
  while (demand > login_servers_.size() + testing_servers_.size()) {
    if (!LaunchServer(false)) break;
  }
}

void Pool::ScheduleServeWaiting() {
  if (serve_scheduled_) return;
  serve_scheduled_ = true;
  registry_->loop().RunAfterBatch([this] {
    serve_scheduled_ = false;
    ServeWaiting();
  });
}

bool Pool::CanLaunch(bool use_reserve) const {
  if (paused_) return false;
  if (registry_->loop().now() < next_connect_allowed_) return false;
  int limit = pool_size() + (use_reserve ? registry_->config().EffectiveReservePoolSize(db_) : 0);
  if (static_cast<int>(server_count()) >= limit) return false;
  return true;
}

bool Pool::LaunchServer(bool use_reserve) {
  if (!CanLaunch(use_reserve)) return false;
  if (!registry_->ServerBudgetAllows(this)) {
    // Make room by closing an idle server another pool of this database does not need.
    if (!registry_->EvictIdleServerFor(this) || !registry_->ServerBudgetAllows(this)) {
      return false;
    }
  }
  ServerConn* server = registry_->OpenServer(this);
  if (server == nullptr) {
    ++consecutive_connect_failures_;
    next_connect_allowed_ = registry_->loop().now() + absl::Milliseconds(200);
    return false;
  }
  if (use_reserve) ++reserve_in_use_;
  registry_->CountServer(this, +1);
  MoveServer(server, ServerState::kConnecting);
  return true;
}

void Pool::OnServerConnected(ServerConn* server) { MoveServer(server, ServerState::kLogin); }

void Pool::OnServerReady(ServerConn* server) {
  consecutive_connect_failures_ = 0;
  next_connect_allowed_ = absl::InfinitePast();
  if (!welcome_known_) {
    welcome_known_ = true;
    welcome_params_ = server->login_params();
    server_defaults_ = server->params();
    while (ClientConn* client = welcome_clients_.front()) {
      MoveClient(client, ClientState::kIdle);
      client->SendWelcome(welcome_params_, server_defaults_);
    }
  }
  MakeIdle(server);
  // Clients welcomed above may have pipelined their first query already.
  std::vector<ClientConn*> pending;
  for (auto* c = idle_clients_.front(); c != nullptr; c = idle_clients_.Next(c)) {
    if (!c->in().empty()) pending.push_back(c);
  }
  for (ClientConn* c : pending) {
    if (!c->closed() && c->state() == ClientState::kIdle) c->OnServerReleased();
  }
}

void Pool::FailWelcomeClients(std::span<const uint8_t> error) {
  while (ClientConn* client = welcome_clients_.front()) client->FatalRaw(error);
  while (ClientConn* client = waiting_clients_.front()) client->FatalRaw(error);
  auto waiters = std::move(auth_query_waiters_);
  auth_query_waiters_.clear();
  for (ClientConn* client : waiters) {
    client->OnAuthQueryResult(false, "", "auth_query login failed");
  }
}

void Pool::OnServerLoginFailed(ServerConn* server, std::span<const uint8_t> error,
                               bool fatal_for_clients) {
  (void)server;
  ++consecutive_connect_failures_;
  const auto retry = registry_->config().pool.server_login_retry;
  next_connect_allowed_ =
      registry_->loop().now() +
      std::min(absl::Milliseconds(100) * (1 << std::min(consecutive_connect_failures_, 8)), retry);
  if (fatal_for_clients) FailWelcomeClients(error);
}

void Pool::MakeIdle(ServerConn* server) {
  server->touch(registry_->loop().now());
  if (server->close_on_release()) {
    server->Close("closed on release");
    return;
  }
  MoveServer(server, ServerState::kIdle);
  ServeWaiting();
}

void Pool::ReleaseServer(ServerConn* server) {
  const absl::Time now = registry_->loop().now();
  ClientConn* client = server->client();
  if (client != nullptr) {
    ++stats_.transactions;
    stats_.RecordTransaction(
        static_cast<uint64_t>(absl::ToInt64Microseconds(now - server->linked_at())));
    server->Detach();
    client->Detach();
    MoveClient(client, ClientState::kIdle);
  }
  server->touch(now);
  server->SetReadEnabled(true);
  if (server->cancels_in_flight() > 0) {
    // A cancel may still land; keep the server out of use until it has (PROTOCOL-NOTES 1.5).
    MoveServer(server, ServerState::kCanceling);
  } else if (static_cast<int>(server_count()) > pool_size() + reserve_in_use_ ||
             server->close_on_release()) {
    server->Close("pool over size");
  } else {
    MoveServer(server, ServerState::kIdle);
  }
  // Waiting clients get servers after the batch, as PgBouncer's per-loop activation does: the
  // answers this batch relays reach their clients back to back (one wakeup of a client process
  // such as pgbench for several of them), then the next queries go out together. A client
  // that asks for a server meanwhile queues behind the waiting ones, so arrival order holds.
  ScheduleServeWaiting();
  if (client != nullptr && !client->closed()) client->OnServerReleased();
}

void Pool::RemoveClient(ClientConn* client) {
  CancelAuthQuery(client);
  ServerConn* server = client->server();
  if (server != nullptr) {
    const bool clean =
        server->IsReleasable() && server->in().empty() && !server->has_pending_output();
    server->Detach();
    client->Detach();
    base::IntrusiveList<ClientConn>::RemoveFromOwner(client);
    const auto& pool_config = registry_->config().pool;
    if (!clean) {
      server->Close("client disconnected while server was not ready");
    } else if ((mode_ == config::PoolMode::kSession || pool_config.server_reset_query_always) &&
               !pool_config.server_reset_query.empty()) {
      MoveServer(server, ServerState::kTesting);
      if (!server->SendHiddenQuery(pool_config.server_reset_query)) {
        server->Close("server reset failed");
      }
    } else {
      ReleaseServer(server);
    }
    return;
  }
  base::IntrusiveList<ClientConn>::RemoveFromOwner(client);
}

void Pool::RemoveServer(ServerConn* server) {
  const ServerState old_state = server->state();
  ClientConn* client = server->client();
  if (client != nullptr) {
    server->Detach();
    client->Detach();
    MoveClient(client, ClientState::kIdle);
  }
  base::IntrusiveList<ServerConn>::RemoveFromOwner(server);
  server->set_state(ServerState::kClosed);
  registry_->CountServer(this, -1);
  if (reserve_in_use_ > 0 && static_cast<int>(server_count()) < pool_size() + reserve_in_use_) {
    --reserve_in_use_;
  }
  registry_->DeleteServer(server);
  if (old_state == ServerState::kConnecting || old_state == ServerState::kLogin) {
    if (next_connect_allowed_ <= registry_->loop().now()) {
      ++consecutive_connect_failures_;
      // A refused or timed-out connect costs PostgreSQL nothing, so retry at least every second:
      // once it is back, clients must be served within 2 s, however long it was gone.
      next_connect_allowed_ =
          registry_->loop().now() +
          std::min({absl::Milliseconds(50) * (1 << std::min(consecutive_connect_failures_, 8)),
                    kMaxConnectBackoff, registry_->config().pool.server_login_retry});
    }
  }
  if (client != nullptr && !client->closed()) {
    client->Fatal(protocol::sqlstate::kConnectionFailure,
                  "server connection closed unexpectedly during a transaction");
  }
}

void Pool::RequestAuthQuery(ClientConn* client) {
  auth_query_waiters_.push_back(client);
  ServeWaiting();
}

void Pool::CancelAuthQuery(ClientConn* client) {
  auth_query_waiters_.erase(
      std::remove(auth_query_waiters_.begin(), auth_query_waiters_.end(), client),
      auth_query_waiters_.end());
}

void Pool::CloseIdleServers(std::string_view reason) {
  while (ServerConn* server = idle_servers_.front()) server->Close(reason);
}

bool Pool::EvictOneIdleServer() {
  ServerConn* server = idle_servers_.back();  // the least recently used
  if (server == nullptr) return false;
  server->Close("evicted for another pool of the database");
  return true;
}

void Pool::Shutdown(std::string_view reason) {
  for (auto* list : {&welcome_clients_, &idle_clients_, &waiting_clients_, &active_clients_}) {
    while (ClientConn* client = list->front()) {
      client->Fatal(protocol::sqlstate::kAdminShutdown, reason);
    }
  }
  for (auto* list : {&login_servers_, &idle_servers_, &active_servers_, &testing_servers_}) {
    while (ServerConn* server = list->front()) server->Close(reason);
  }
}

bool Pool::CloseIdleClients(std::string_view reason, absl::Time now) {
  constexpr absl::Duration kIdleGrace = absl::Seconds(1);
  std::vector<ClientConn*> idle;
  for (auto* c = idle_clients_.front(); c != nullptr; c = idle_clients_.Next(c)) {
    if (now - c->last_activity_at() > kIdleGrace && c->in().empty()) idle.push_back(c);
  }
  for (ClientConn* c : idle) c->Fatal(protocol::sqlstate::kAdminShutdown, reason);
  return client_count() == 0;
}

void Pool::Maintain(absl::Time now) {
  const auto& pc = registry_->config().pool;
  std::vector<ClientConn*> expired;
  // Clients queued too long.
  if (pc.query_wait_timeout > absl::ZeroDuration()) {
    for (auto* c = waiting_clients_.front(); c != nullptr; c = waiting_clients_.Next(c)) {
      if (now - c->wait_started_at() > pc.query_wait_timeout) expired.push_back(c);
    }
    for (auto* c = welcome_clients_.front(); c != nullptr; c = welcome_clients_.Next(c)) {
      if (now - c->connected_at() > pc.query_wait_timeout) expired.push_back(c);
    }
  }
  for (ClientConn* c : expired) {
    c->Fatal(protocol::sqlstate::kConnectionFailure,
             "query_wait_timeout: no server connection became available in time");
  }
  expired.clear();
  // Idle clients.
  if (pc.client_idle_timeout > absl::ZeroDuration()) {
    for (auto* c = idle_clients_.front(); c != nullptr; c = idle_clients_.Next(c)) {
      if (now - c->last_activity_at() > pc.client_idle_timeout) expired.push_back(c);
    }
    for (ClientConn* c : expired) {
      c->Fatal(protocol::sqlstate::kIdleSessionTimeout, "client_idle_timeout");
    }
    expired.clear();
  }
  // Linked clients: query_timeout and idle_transaction_timeout.
  std::vector<std::pair<ClientConn*, bool>> timed_out;  // (client, is_query_timeout)
  for (auto* s = active_servers_.front(); s != nullptr; s = active_servers_.Next(s)) {
    ClientConn* c = s->client();
    if (c == nullptr) continue;
    if (pc.query_timeout > absl::ZeroDuration() && s->query_in_progress() &&
        now - s->query_started_at() > pc.query_timeout) {
      timed_out.emplace_back(c, true);
    } else if (pc.idle_transaction_timeout > absl::ZeroDuration() && !s->query_in_progress() &&
               s->in_transaction() && now - c->last_activity_at() > pc.idle_transaction_timeout) {
      timed_out.emplace_back(c, false);
    }
  }
  for (auto [c, query] : timed_out) {
    // Stop the backend's work too: closing the socket alone would leave the query running.
    if (query && c->server() != nullptr) registry_->CancelAbandonedQuery(*c->server());
    // Closing the client closes its server: it is mid-transaction.
    c->Fatal(
        query ? protocol::sqlstate::kQueryCanceled : protocol::sqlstate::kIdleInTransactionTimeout,
        query ? "query_timeout: query ran longer than the configured limit"
              : "idle_transaction_timeout: transaction was idle too long");
  }
  // Servers: connect timeout, idle timeout, lifetime.
  std::vector<std::pair<ServerConn*, const char*>> to_close;
  for (auto* s = login_servers_.front(); s != nullptr; s = login_servers_.Next(s)) {
    if (now - s->created_at() > pc.server_connect_timeout)
      to_close.emplace_back(s, "connect timeout");
  }
  size_t count = server_count();
  const size_t min_size = static_cast<size_t>(registry_->config().EffectiveMinPoolSize(db_));
  for (auto* s = idle_servers_.back(); s != nullptr; s = static_cast<ServerConn*>(s->prev)) {
    if (pc.server_lifetime > absl::ZeroDuration() && now - s->created_at() > pc.server_lifetime) {
      to_close.emplace_back(s, "server lifetime over");
    } else if (pc.server_idle_timeout > absl::ZeroDuration() && count > min_size &&
               now - s->last_used_at() > pc.server_idle_timeout) {
      to_close.emplace_back(s, "server idle timeout");
      --count;
    }
  }
  for (auto [s, reason] : to_close) s->Close(reason);
  // Reserve pool: a client waiting past reserve_pool_timeout may use extra servers.
  if (!waiting_clients_.empty() && registry_->config().EffectiveReservePoolSize(db_) > 0 &&
      max_wait(now) > pc.reserve_pool_timeout) {
    LaunchServer(true);
  }
  while (static_cast<int>(server_count()) < registry_->config().EffectiveMinPoolSize(db_)) {
    if (!LaunchServer(false)) break;
  }
  ServeWaiting();
}

}  // namespace pgfleet::pool
