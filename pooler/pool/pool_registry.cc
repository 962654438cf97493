// Per-worker registry of pools, clients and servers.
#include "pooler/pool/pool_registry.h"

#include <unistd.h>

#include <vector>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/server_conn.h"
#include "pooler/net/socket.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

PoolRegistry::PoolRegistry(net::EventLoop& loop, std::shared_ptr<const config::Config> config,
                           auth::Userlist userlist, uint32_t peer_id, base::RandomSource& random)
    : context_(loop, std::move(config), std::move(userlist), peer_id, random),
      cancels_(context_, *this),
      budget_(context_, *this, servers_by_id_),
      client_budget_(context_.config().pool.max_client_conn),
      janitor_(context_, clients_, cancels_, pools_) {
  context_.resolver().set_callbacks(
      [this] {
        // Connects that waited for a lookup go on.
        for (auto& [key, pool] : pools_) pool->ScheduleServeWaiting();
      },
      [this](const std::string& host, int port) {
        // A failover by DNS: servers of the old address finish and close.
        PGFLEET_LOG(kInfo, "server_host_address_changed", "host=", host, " port=", port);
        for (auto& [key, pool] : pools_) {
          pool->RetireHost(config::HostAddress{host, port}, "host name resolves to a new address");
        }
      });
}

PoolRegistry::~PoolRegistry() = default;

void PoolRegistry::AcceptClient(int fd, std::string peer_address, bool slot_taken) {
  const auto& pool = config().pool;
  net::TuneSocket(
      fd, pool.tcp_keepalive,
      net::KeepaliveTimings{
          .idle_seconds = static_cast<int>(absl::ToInt64Seconds(pool.tcp_keepidle)),
          .interval_seconds = static_cast<int>(absl::ToInt64Seconds(pool.tcp_keepintvl)),
          .count = pool.tcp_keepcnt,
          .user_timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(pool.tcp_user_timeout)),
      });
  net::SetSocketBuffers(fd, pool.tcp_socket_buffer);
  auto* client =
      new ClientConn(context_, *this, fd, context_.NextConnectionId(), std::move(peer_address));
  if (!client->Register().ok()) {
    close(fd);
    delete client;
    if (slot_taken) client_budget_.Release();
    return;
  }
  ++client_count_;
  ++context_.counters().clients_accepted;
  client->set_holds_client_slot(slot_taken || client_budget_.TryAcquire());
  clients_.Add(client);
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

HostSelector& PoolRegistry::HostsFor(const config::DatabaseConfig& db) {
  auto& hosts = hosts_by_database_[db.name];
  if (hosts == nullptr) hosts = std::make_unique<HostSelector>(db, context_.random());
  return *hosts;
}

void PoolRegistry::OnHostRole(const config::HostAddress& address, bool in_hot_standby,
                              absl::Time now) {
  for (auto& [database, hosts] : hosts_by_database_) {
    const std::optional<size_t> host = hosts->IndexOf(address);
    if (!host.has_value()) continue;
    // First news of a host is no change of role: nothing of it is pooled in this database yet.
    const bool known = hosts->status(*host).role != HostRole::kUnknown;
    if (!hosts->OnHotStandbyReport(*host, in_hot_standby, now) || !known) continue;
    PGFLEET_LOG(kWarning, "server_host_role_changed", "db=", base::LogQuote(database),
                " host=", address.host, " port=", address.port,
                " in_hot_standby=", in_hot_standby ? "on" : "off", " target_session_attrs=",
                config::TargetSessionAttrsName(hosts->target_session_attrs()));
    const std::string reason = base::StrCat(
        "host became ", in_hot_standby ? "a standby" : "a primary",
        " (target_session_attrs=", config::TargetSessionAttrsName(hosts->target_session_attrs()),
        ")");
    ForEachPoolOf(database, [&](Pool& pool) { pool.RetireHost(address, reason); });
  }
}

void PoolRegistry::ForEachPoolOf(std::string_view name, const std::function<void(Pool&)>& fn) {
  for (auto& [key, pool] : pools_) {
    if (key.first == name) fn(*pool);
  }
}

ServerConn* PoolRegistry::OpenServer(Pool* pool, const config::HostAddress& address,
                                     const net::ResolvedAddress& resolved) {
  auto fd = net::ConnectToAddress(resolved);
  if (!fd.ok()) {
    PGFLEET_LOG(kWarning, "server_connect_failed", "db=", base::LogQuote(pool->db().name),
                " host=", address.host, " port=", address.port,
                " error=", base::LogQuote(base::Sv(fd.status().message())));
    return nullptr;
  }
  net::SetSocketBuffers(*fd, config().pool.tcp_socket_buffer);
  auto* server = new ServerConn(context_.loop(), *fd, pool, context_.NextConnectionId(), address);
  if (!server->Register(/*connecting=*/true).ok()) {
    close(*fd);
    delete server;
    return nullptr;
  }
  servers_by_id_[server->id()] = server;
  ++context_.counters().servers_opened;
  return server;
}

ServerConn* PoolRegistry::AdoptServer(Pool* pool, int fd, const ServerHandoff& moved) {
  auto* server =
      new ServerConn(context_.loop(), fd, pool, context_.NextConnectionId(),
                     config::HostAddress{moved.host, static_cast<int>(moved.port)}, moved);
  if (!server->Register(/*connecting=*/false).ok()) {
    delete server;  // closes fd
    return nullptr;
  }
  servers_by_id_[server->id()] = server;
  return server;
}

void PoolRegistry::OnHandoff(HandoffMessage message, int fd) {
  if (message.kind == HandoffMessage::Kind::kClient) {
    // A sibling with more clients passed a new connection on before reading from it, and
    // counted it as this worker's (ClientBudget::TryAcquireFor).
    if (fd >= 0) {
      AcceptClient(fd, std::move(message.peer_address), /*slot_taken=*/true);
    } else {
      client_budget_.Release();
    }
    return;
  }
  auto pool = pools_.find(std::make_pair(message.database, message.user));
  switch (message.kind) {
    case HandoffMessage::Kind::kRequest:
      if (pool != pools_.end()) pool->second->GiveIdleServer(message.from);
      return;
    case HandoffMessage::Kind::kRoom:
      if (pool != pools_.end()) {
        pool->second->OnRoomFreed();
      } else {
        // Room in a database or user budget (kEvict's answer): any pool may use it.
        for (auto& [key, each] : pools_) each->OnRoomFreed();
      }
      return;
    case HandoffMessage::Kind::kEvict:
      EvictForSibling(message);
      return;
    case HandoffMessage::Kind::kClient:
      break;  // above: no pool
    case HandoffMessage::Kind::kServer:
      break;
  }
  if (closed_all_) {
    // Shutting down: this worker's servers are closed, and one adopted now would stay open after
    // the loop stops (LeakSanitizer caught one a sibling handed over then). Close it and give its
    // room back to the pod.
    if (fd >= 0) close(fd);
    budget_.ReleaseArrived(message.database, message.user);
    return;
  }
  if (pool == pools_.end()) {
    // Only a worker whose clients wait for the pool is sent one; after a reload removed the
    // database it may be gone: close the server and give its room back.
    auto db = config().FindDatabase(message.database);
    if (!db.has_value()) {
      if (fd >= 0) close(fd);
      budget_.ReleaseArrived(message.database, message.user);
      return;
    }
    pool = pools_.find(std::make_pair(GetOrCreatePool(*db, message.user)->db().name, message.user));
  }
  if (fd < 0) {
    budget_.ReleaseArrived(message.database, message.user);
    return;
  }
  pool->second->AdoptServer(fd, message.server);
}

void PoolRegistry::EvictForSibling(const HandoffMessage& request) {
  for (auto& [key, pool] : pools_) {
    if (pool->waiting_count() > 0) continue;
    if (!request.database.empty() && pool->db().name != request.database) continue;
    if (!request.user.empty() && pool->server_user() != request.user) continue;
    if (!pool->EvictOneIdleServer()) continue;
    HandoffMessage room;
    room.kind = HandoffMessage::Kind::kRoom;
    room.from = budget_.pod().worker();
    if (server_mover_ != nullptr) server_mover_->Send(request.from, room, -1);
    return;
  }
}

ServerConn* PoolRegistry::FindServer(uint64_t id) const {
  auto it = servers_by_id_.find(id);
  return it == servers_by_id_.end() ? nullptr : it->second;
}

void PoolRegistry::DeleteServer(ServerConn* server) {
  servers_by_id_.erase(server->id());
  context_.loop().DeferredDelete(std::unique_ptr<net::DeferredDeletable>(server));
}

void PoolRegistry::RunAuthQuery(ClientConn* client, const config::DatabaseConfig& db) {
  const config::AuthConfig auth = config().EffectiveAuth(db);
  config::DatabaseConfig auth_db = db;
  if (!auth.dbname.empty()) {
    auto other = config().FindDatabase(auth.dbname);
    if (other.has_value()) auth_db = *other;
  }
  Pool* pool = GetOrCreatePool(auth_db, auth.user);
  if (pool->credentials().secret.empty()) {
    if (auto it = context_.userlist().find(auth.user); it != context_.userlist().end()) {
      pool->credentials().secret = it->second;
    }
  }
  pool->RequestAuthQuery(client);
}

void PoolRegistry::MoveClient(ClientConn* client, ClientState state) {
  clients_.Move(client, state);
}

void PoolRegistry::DeleteClient(ClientConn* client) {
  if (client->pool() != nullptr) {
    client->pool()->RemoveClient(client);  // moves it to kClosed
  } else {
    clients_.Move(client, ClientState::kClosed);
  }
  clients_by_id_.erase(client->id());
  if (client->holds_client_slot()) client_budget_.Release();
  ClientConn::CountedKeys& counted = client->counted_keys();
  if (counted.database) budget_.pod().Release({*counted.database});
  if (counted.user) budget_.pod().Release({*counted.user});
  counted = {};
  --client_count_;
  context_.loop().DeferredDelete(std::unique_ptr<net::DeferredDeletable>(client));
}

std::string_view PoolRegistry::CountClient(ClientConn* client) {
  // PgBouncer's max_db_client_connections and max_user_client_connections, for the whole pod.
  // Counted only where a limit is set: a limit a RELOAD adds counts the clients that come after.
  const auto& config = context_.config();
  const auto db = config.FindDatabase(client->database());
  const int db_limit = db.has_value() ? db->max_db_client_connections : 0;
  const int user_limit = config.EffectiveMaxUserClientConnections(client->user());
  budget::PodServerCounts& pod = budget_.pod();
  ClientConn::CountedKeys& counted = client->counted_keys();
  if (db_limit > 0) {
    const auto key =
        pod.Intern(budget::PodServerCounts::DatabaseClientsKeyText(client->database()));
    if (key.has_value()) {
      if (!pod.TryReserve({{*key, db_limit}})) return "max_db_client_connections";
      counted.database = key;
    }
  }
  if (user_limit > 0) {
    const auto key = pod.Intern(budget::PodServerCounts::UserClientsKeyText(client->user()));
    if (key.has_value()) {
      if (!pod.TryReserve({{*key, user_limit}})) return "max_user_client_connections";
      counted.user = key;
    }
  }
  return {};
}

ClientConn* PoolRegistry::FindClient(uint64_t id) const {
  auto it = clients_by_id_.find(id);
  return it == clients_by_id_.end() ? nullptr : it->second;
}

size_t PoolRegistry::login_client_count() const {
  return clients_.size(ClientState::kStartup) + clients_.size(ClientState::kAuth) +
         clients_.size(ClientState::kAuthQuery);
}

std::vector<ClientConn*> PoolRegistry::WorkerClients() const {
  return clients_.In(
      {ClientState::kStartup, ClientState::kAuth, ClientState::kAuthQuery, ClientState::kAdmin});
}

void PoolRegistry::ForEachWorkerClient(const std::function<void(const ClientConn&)>& fn) const {
  for (const ClientConn* c : WorkerClients()) fn(*c);
}

void PoolRegistry::Reload(std::shared_ptr<const config::Config> config, auth::Userlist userlist) {
  context_.Apply(std::move(config), std::move(userlist));
  client_budget_.set_limit(context_.config().pool.max_client_conn);
  for (auto& [key, pool] : pools_) {
    auto db = context_.config().FindDatabase(key.first);
    if (db.has_value()) {
      pool->ApplyConfig(*db);
    } else {
      pool->CloseIdleServers("database removed from config");
    }
  }
}

void PoolRegistry::CloseAll(std::string_view reason) {
  closed_all_ = true;
  for (ClientConn* c : WorkerClients()) c->Fatal(protocol::sqlstate::kAdminShutdown, reason);
  for (auto& [key, pool] : pools_) pool->Shutdown(reason);
}

size_t PoolRegistry::draining_server_count() const {
  size_t n = 0;
  for (const auto& [key, pool] : pools_) n += pool->draining_server_count();
  return n;
}

bool PoolRegistry::TryBeginLogin() {
  const int limit = config().pool.max_concurrent_logins;
  if (limit > 0 && logins_in_progress_ >= static_cast<size_t>(limit)) {
    ++context_.counters().clients_rejected_max_concurrent_logins;
    return false;
  }
  ++logins_in_progress_;
  return true;
}

}  // namespace pgfleet::pool
