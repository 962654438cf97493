// Per-worker registry of pools, clients, cancel keys and shared limits.
#include "pooler/pool/pool_registry.h"

#include <unistd.h>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/config/worker_share.h"
#include "pooler/net/socket.h"
#include "pooler/pool/client_conn.h"
#include "pooler/pool/server_conn.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {
namespace {
constexpr absl::Duration kJanitorInterval = absl::Milliseconds(100);
}  // namespace

PoolRegistry::PoolRegistry(net::EventLoop& loop, std::shared_ptr<const config::Config> config,
                           auth::Userlist userlist, uint32_t peer_id, base::RandomSource& random)
    : loop_(loop),
      config_(std::move(config)),
      userlist_(std::move(userlist)),
      peer_id_(peer_id),
      random_(random),
      tracked_params_(config_->pool.track_extra_parameters),
      client_budget_(config_->pool.max_client_conn) {
  janitor_timer_ = loop_.RunEvery(kJanitorInterval, [this] { Janitor(); });
}

PoolRegistry::~PoolRegistry() { loop_.CancelTimer(janitor_timer_); }

void PoolRegistry::AcceptClient(int fd, std::string peer_address) {
  net::TuneSocket(fd, config_->pool.tcp_keepalive);
  auto* client = new ClientConn(loop_, fd, this, NextConnectionId(), std::move(peer_address));
  if (!client->Register().ok()) {
    close(fd);
    delete client;
    return;
  }
  ++client_count_;
  ++counters_.clients_accepted;
  client->set_holds_client_slot(client_budget_.TryAcquire());
  login_clients_.PushBack(client);
  clients_by_id_[client->id()] = client;
  PGFLEET_LOG(kDebug, "client_connect", "client=", client->id(), " addr=", client->peer_address());
}

Pool* PoolRegistry::GetOrCreatePool(const config::DatabaseConfig& db, const std::string& user) {
  auto key = std::make_pair(db.name, user);
  auto it = pools_.find(key);
  if (it != pools_.end()) return it->second.get();
  auto pool = std::make_unique<Pool>(this, db, user);
  Pool* raw = pool.get();
  if (pause_state_.IsPaused(db.name)) raw->SetPaused(true);
  pools_.emplace(std::move(key), std::move(pool));
  return raw;
}

ServerConn* PoolRegistry::OpenServer(Pool* pool) {
  auto fd = net::ConnectTo(pool->db().host, pool->db().port);
  if (!fd.ok()) {
    PGFLEET_LOG(kWarning, "server_connect_failed", "db=", base::LogQuote(pool->db().name),
                " error=", base::LogQuote(base::Sv(fd.status().message())));
    return nullptr;
  }
  auto* server = new ServerConn(loop_, *fd, pool, NextConnectionId());
  if (!server->Register(/*connecting=*/true).ok()) {
    close(*fd);
    delete server;
    return nullptr;
  }
  servers_by_id_[server->id()] = server;
  ++counters_.servers_opened;
  return server;
}

ServerConn* PoolRegistry::FindServer(uint64_t id) const {
  auto it = servers_by_id_.find(id);
  return it == servers_by_id_.end() ? nullptr : it->second;
}

void PoolRegistry::CountServer(const Pool* pool, int delta) {
  db_server_counts_[pool->db().name] += delta;
  user_server_counts_[pool->server_user()] += delta;
}

int PoolRegistry::DatabaseServerCount(const std::string& db) const {
  auto it = db_server_counts_.find(db);
  return it == db_server_counts_.end() ? 0 : it->second;
}

int PoolRegistry::UserServerCount(const std::string& user) const {
  auto it = user_server_counts_.find(user);
  return it == user_server_counts_.end() ? 0 : it->second;
}

bool PoolRegistry::ServerBudgetAllows(const Pool* pool) const {
  return DatabaseBudgetAllows(pool) && UserBudgetAllows(pool);
}

bool PoolRegistry::DatabaseBudgetAllows(const Pool* pool) const {
  // 0 = unlimited; config::kNoConnections (negative) = this worker's share is zero.
  int db_limit = pool->db().max_db_connections;
  if (db_caps_enabled_ && db_limit != 0) {
    auto cap = db_caps_.find(pool->db().name);
    db_limit = cap == db_caps_.end() || cap->second == 0 ? config::kNoConnections : cap->second;
  }
  return !(db_limit < 0 || (db_limit > 0 && DatabaseServerCount(pool->db().name) >= db_limit));
}

bool PoolRegistry::UserBudgetAllows(const Pool* pool) const {
  const int user_limit = config_->EffectiveMaxUserConnections(pool->server_user());
  return !(user_limit < 0 ||
           (user_limit > 0 && UserServerCount(pool->server_user()) >= user_limit));
}

bool PoolRegistry::EvictIdleServerFor(const Pool* pool) {
  const bool database_full = !DatabaseBudgetAllows(pool);
  const bool user_full = !UserBudgetAllows(pool);
  for (auto& [key, other] : pools_) {
    if (other.get() == pool || other->waiting_count() > 0) continue;
    // Closing one of `other`'s servers frees room only in the budgets the two pools share.
    if (database_full && other->db().name != pool->db().name) continue;
    if (user_full && other->server_user() != pool->server_user()) continue;
    if (other->EvictOneIdleServer()) return true;
  }
  return false;
}

protocol::CancelKey PoolRegistry::MintCancelKey(ClientConn* client) {
  protocol::CancelKey key;
  do {
    uint8_t bytes[2 + protocol::kCancelSecretSize];
    random_.Fill(bytes);
    key.pid = protocol::MakeCancelPid(peer_id_, (uint32_t{bytes[0]} << 8) | bytes[1]);
    std::copy(bytes + 2, bytes + sizeof(bytes), key.secret.begin());
  } while (!cancel_keys_.emplace(key, client).second);
  return key;
}

void PoolRegistry::ForgetCancelKey(const protocol::CancelKey& key) { cancel_keys_.erase(key); }

CancelOutcome PoolRegistry::HandleCancel(const protocol::CancelKey& key, bool forwarded) {
  const uint32_t owner = protocol::PeerIdOfCancelPid(key.pid);
  if (owner != peer_id_) {
    if (!forwarded && forwarder_ != nullptr && forwarder_->ForwardCancel(key)) {
      ++counters_.cancels_forwarded;
      return CancelOutcome::kForwarded;
    }
    ++counters_.cancels_dropped;
    PGFLEET_LOG(kDebug, "cancel_dropped", "reason=", forwarded ? "not_owner" : "unknown_owner",
                " owner=", owner);
    return CancelOutcome::kDropped;
  }
  auto it = cancel_keys_.find(key);
  if (it == cancel_keys_.end()) {
    // A key minted without a controller (pod block 0) may be the same-numbered worker's of
    // another pod: the forwarder offers it to the other pods, once.
    if (!forwarded && forwarder_ != nullptr && protocol::PodBlockOfPeerId(owner) == 0 &&
        forwarder_->ForwardCancel(key)) {
      ++counters_.cancels_forwarded;
      return CancelOutcome::kForwarded;
    }
    // Unknown keys are dropped silently, as PostgreSQL does.
    ++counters_.cancels_dropped;
    PGFLEET_LOG(kDebug, "cancel_dropped", "reason=unknown_key");
    return CancelOutcome::kDropped;
  }
  ClientConn* client = it->second;
  ServerConn* server = client->server();
  if (server == nullptr || !server->query_in_progress()) {
    ++counters_.cancels_dropped;
    PGFLEET_LOG(kDebug, "cancel_dropped", "reason=idle_client client=", client->id());
    return CancelOutcome::kDropped;
  }
  auto fd = net::ConnectTo(server->pool()->db().host, server->pool()->db().port);
  if (!fd.ok()) {
    ++counters_.cancels_dropped;
    return CancelOutcome::kDropped;
  }
  auto request = std::make_unique<CancelRequestConn>(loop_, *fd, this, server->id(),
                                                     server->link_generation());
  if (!request->Register(/*connecting=*/true).ok()) {
    ++counters_.cancels_dropped;
    return CancelOutcome::kDropped;
  }
  server->AddCancelInFlight();
  PGFLEET_LOG(kInfo, "cancel_request", "client=", client->id(), " server=", server->id(),
              " forwarded=", forwarded ? "true" : "false");
  TrackCancelRequest(std::move(request));
  return CancelOutcome::kSent;
}

void PoolRegistry::TrackCancelRequest(std::unique_ptr<CancelRequestConn> request) {
  CancelRequestConn* raw = request.get();
  cancel_requests_.emplace(raw, std::move(request));
}

void PoolRegistry::CancelAbandonedQuery(const ServerConn& server) {
  auto fd = net::ConnectTo(server.pool()->db().host, server.pool()->db().port);
  if (!fd.ok()) return;
  auto request = std::make_unique<CancelRequestConn>(loop_, *fd, this, server.backend_pid(),
                                                     server.backend_secret());
  if (!request->Register(/*connecting=*/true).ok()) return;
  TrackCancelRequest(std::move(request));
}

void PoolRegistry::ForgetCancelRequest(CancelRequestConn* request) {
  auto it = cancel_requests_.find(request);
  if (it == cancel_requests_.end()) return;
  loop_.DeferredDelete(std::move(it->second));
  cancel_requests_.erase(it);
}

void PoolRegistry::RunAuthQuery(ClientConn* client, const config::DatabaseConfig& db) {
  config::DatabaseConfig auth_db = db;
  if (!config_->auth.dbname.empty()) {
    auto other = config_->FindDatabase(config_->auth.dbname);
    if (other.has_value()) auth_db = *other;
  }
  Pool* pool = GetOrCreatePool(auth_db, config_->auth.user);
  if (pool->credentials().secret.empty()) {
    if (auto it = userlist_.find(config_->auth.user); it != userlist_.end()) {
      pool->credentials().secret = it->second;
    }
  }
  pool->RequestAuthQuery(client);
}

void PoolRegistry::DeleteClient(ClientConn* client) {
  if (client->pool() != nullptr) {
    client->pool()->RemoveClient(client);
  } else {
    base::IntrusiveList<ClientConn>::RemoveFromOwner(client);
  }
  client->set_state(ClientState::kClosed);
  clients_by_id_.erase(client->id());
  if (client->holds_client_slot()) client_budget_.Release();
  --client_count_;
  loop_.DeferredDelete(std::unique_ptr<net::DeferredDeletable>(client));
}

void PoolRegistry::MoveToAdmin(ClientConn* client) {
  base::IntrusiveList<ClientConn>::RemoveFromOwner(client);
  client->set_state(ClientState::kAdmin);
  admin_clients_.PushBack(client);
}

ClientConn* PoolRegistry::FindClient(uint64_t id) const {
  auto it = clients_by_id_.find(id);
  return it == clients_by_id_.end() ? nullptr : it->second;
}

void PoolRegistry::DeleteServer(ServerConn* server) {
  servers_by_id_.erase(server->id());
  loop_.DeferredDelete(std::unique_ptr<net::DeferredDeletable>(server));
}

absl::Status PoolRegistry::Reload(std::shared_ptr<const config::Config> config,
                                  auth::Userlist userlist) {
  config_ = std::move(config);
  userlist_ = std::move(userlist);
  client_budget_.set_limit(config_->pool.max_client_conn);
  for (auto& [key, pool] : pools_) {
    auto db = config_->FindDatabase(key.first);
    if (db.has_value()) {
      pool->ApplyConfig(*db);
    } else {
      pool->CloseIdleServers("database removed from config");
    }
  }
  return absl::OkStatus();
}

void PoolRegistry::CloseAll(std::string_view reason) {
  std::vector<ClientConn*> clients;
  for (auto* c = login_clients_.front(); c != nullptr; c = login_clients_.Next(c)) {
    clients.push_back(c);
  }
  for (auto* c = admin_clients_.front(); c != nullptr; c = admin_clients_.Next(c)) {
    clients.push_back(c);
  }
  for (ClientConn* c : clients) c->Fatal(protocol::sqlstate::kAdminShutdown, reason);
  for (auto& [key, pool] : pools_) pool->Shutdown(reason);
}

void PoolRegistry::Janitor() {
  const absl::Time now = loop_.now();
  const auto login_timeout = config_->pool.client_login_timeout;
  if (login_timeout > absl::ZeroDuration()) {
    std::vector<ClientConn*> expired;
    for (auto* c = login_clients_.front(); c != nullptr; c = login_clients_.Next(c)) {
      if (now - c->connected_at() > login_timeout) expired.push_back(c);
    }
    for (ClientConn* c : expired) {
      c->Fatal(protocol::sqlstate::kProtocolViolation, "client_login_timeout");
    }
  }
  std::vector<CancelRequestConn*> stale;
  for (auto& [raw, request] : cancel_requests_) {
    if (now - raw->started_at() > config_->pool.cancel_wait_timeout) stale.push_back(raw);
  }
  for (CancelRequestConn* raw : stale) raw->Finish("timeout");
  for (auto& [key, pool] : pools_) pool->Maintain(now);
}

bool PoolRegistry::TryBeginLogin() {
  const int limit = config_->pool.max_concurrent_logins;
  if (limit > 0 && logins_in_progress_ >= static_cast<size_t>(limit)) {
    ++counters_.clients_rejected_max_concurrent_logins;
    return false;
  }
  ++logins_in_progress_;
  return true;
}

bool PoolRegistry::AllowCancelFrom(std::string_view peer_address) {
  cancel_limiter_.set_per_second(config_->pool.cancel_rate_limit);
  uint64_t refused = 0;
  if (cancel_limiter_.Allow(SourceOf(peer_address), loop_.now(), &refused)) return true;
  ++counters_.cancels_rate_limited;
  if (refused > 0) {
    PGFLEET_LOG(kWarning, "cancel_rate_limited", "addr=", SourceOf(peer_address),
                " limit_per_s=", config_->pool.cancel_rate_limit, " refused=", refused,
                " total=", counters_.cancels_rate_limited);
  }
  return false;
}

std::optional<int> PoolRegistry::DatabaseCap(const std::string& db) const {
  if (!db_caps_enabled_) return std::nullopt;
  auto it = db_caps_.find(db);
  return it == db_caps_.end() ? 0 : it->second;
}

int PoolRegistry::EnforceDatabaseCap(const std::string& db, bool force) {
  const std::optional<int> cap = DatabaseCap(db);
  if (!cap.has_value()) return 0;
  int excess = DatabaseServerCount(db) - *cap;
  if (excess <= 0) return 0;
  std::vector<ServerConn*> idle, marked, busy;
  for (const auto& [id, server] : servers_by_id_) {
    if (server->pool()->db().name != db || server->state() == ServerState::kClosed) continue;
    if (server->state() == ServerState::kIdle) {
      idle.push_back(server);
    } else if (server->close_on_release()) {
      marked.push_back(server);
    } else {
      busy.push_back(server);
    }
  }
  // Servers already marked close by themselves when released.
  if (!force) excess -= static_cast<int>(marked.size());
  int closed = 0;
  for (ServerConn* server : idle) {
    if (excess <= 0) break;
    server->Close("over the budget share");
    ++closed;
    --excess;
  }
  if (force) busy.insert(busy.begin(), marked.begin(), marked.end());
  for (ServerConn* server : busy) {
    if (excess <= 0) break;
    if (force) {
      server->Close("budget share lost with the controller");
      ++closed;
    } else {
      server->MarkCloseOnRelease();
    }
    --excess;
  }
  return closed;
}

}  // namespace pgfleet::pool
