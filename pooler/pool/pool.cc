// Pool: assignment, release and the per-state lists.
#include "pooler/pool/pool.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/pool_host.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

namespace {
constexpr absl::Duration kMaxConnectBackoff = absl::Seconds(1);
}  // namespace

Pool::Pool(PoolHost* host, config::DatabaseConfig db, std::string user)
    : BudgetedPool(host->context(), std::move(db), std::move(user), &host->budget().pod()),
      host_(host),
      hosts_(host->HostsFor(db_)),
      server_defaults_(context_.tracked_params().size()) {
  UpdateRelaySettings();
}

Pool::~Pool() {
  if (give_timer_ != 0) context_.loop().CancelTimer(give_timer_);
}

void Pool::UpdateRelaySettings() {
  const auto& pool_config = context_.config().pool;
  relay_settings_.max_packet_size = static_cast<uint32_t>(pool_config.max_packet_size);
  relay_settings_.track_prepared =
      mode_ != config::PoolMode::kSession && pool_config.max_prepared_statements > 0;
  relay_settings_.max_prepared_statements =
      static_cast<size_t>(std::max(0, pool_config.max_prepared_statements));
  relay_settings_.tracked = &context_.tracked_params();
  relay_settings_.statements = &context_.statements();
  relay_settings_.session = SessionTracking::kOff;
  if (mode_ != config::PoolMode::kSession) {
    switch (context_.config().EffectiveSessionState(db_, user_)) {
      case config::SessionState::kTrack:
        relay_settings_.session = SessionTracking::kTrack;
        break;
      case config::SessionState::kRefuse:
        relay_settings_.session = SessionTracking::kRefuse;
        break;
      case config::SessionState::kPass:
        break;
    }
  }
  relay_settings_.pins = &pins_;
  // TakeIdleServer's limits on the loop's integer clock (negative: off). server_check_query "-"
  // turns the check off like a negative server_check_delay.
  const absl::Duration lifetime = context_.config().EffectiveServerLifetime(db_);
  server_lifetime_us_ = lifetime > absl::ZeroDuration() ? absl::ToInt64Microseconds(lifetime) : -1;
  server_check_delay_us_ = pool_config.server_check_delay >= absl::ZeroDuration() &&
                                   pool_config.server_check_query != "-"
                               ? absl::ToInt64Microseconds(pool_config.server_check_delay)
                               : -1;
  round_robin_ = pool_config.server_round_robin;
  pins_.set_limit(context_.config().EffectiveMaxPinnedServers(db_));
}

int Pool::pool_size() const { return context_.config().EffectivePoolSize(db_, user_); }

void Pool::ApplyConfig(const config::DatabaseConfig& db) {
  const bool target_changed = !db.SameTarget(db_);
  hosts_.Reconfigure(db);
  // A forced server user may change: take back what was published under the old keys first.
  if (pod_keys_known_ && pod_keys_.has_value() && published_idle_ != 0) {
    budget::PodServerCounts& pod = host_->budget().pod();
    pod.AddIdle(pod_keys_->pool, -published_idle_);
    pod.AddIdle(pod_keys_->database, -published_idle_);
    pod.AddIdle(pod_keys_->user, -published_idle_);
    published_idle_ = 0;
  }
  db_ = db;
  pod_keys_known_ = false;
  mode_ = context_.config().EffectivePoolMode(db_, user_);
  UpdateRelaySettings();
  if (target_changed) {
    for (ServerConn* s : servers_.In({ServerState::kActive, ServerState::kDraining})) {
      s->MarkCloseOnRelease();
    }
    CloseIdleServers("database settings changed");
    if (hub_server_ != nullptr) hub_server_->Close("database settings changed");
    welcome_known_ = false;
  } else if (welcome_known_ && login_server_count() == 0) {
    // SIGHUP refreshes what new clients are told without closing anything: one new login where
    // the pool has room (LearnWelcome), as every later login does; a full pool keeps the last
    // login's values until its next one.
    LaunchServer(ServerBudget::Purpose::kPoolSize);
  }
  PublishPodCounts();
}

absl::Duration Pool::max_wait(absl::Time now) const {
  const ClientConn* first = clients_[ClientState::kWaiting].front();
  return first == nullptr ? absl::ZeroDuration() : now - first->wait_started_at();
}

void Pool::AddClient(ClientConn* client) {
  if (StartupSettingsKnownGood(client)) AdmitClient(client);
}

void Pool::AdmitClient(ClientConn* client) {
  if (welcome_known_) {
    MoveClient(client, ClientState::kIdle);
    WelcomeClient(client);
    if (!client->closed()) client->OnServerReleased();
    return;
  }
  // Its wait for the pool's first server counts as waiting in the pod (PublishPodCounts).
  client->set_wait_started_at(context_.loop().now_us());
  MoveClient(client, ClientState::kWelcome);
  if (login_server_count() == 0 && servers_[ServerState::kIdle].empty() &&
      !LaunchServer(ServerBudget::Purpose::kPoolSize) && CanLaunch()) {
    // The pod is full: a sibling's server brings the parameters to welcome with (or its room).
    AskSiblingForRoom();
  }
}

void Pool::RequestServer(ClientConn* client) {
  const int64_t now = context_.loop().now_us();
  client->set_wait_started_at(now);
  if (clients_[ClientState::kWaiting].empty() && !paused_) {
    if (ServerConn* server = TakeIdleServer(now)) {
      Link(client, server);
      return;
    }
  }
  MoveClient(client, ClientState::kWaiting);
  ServeWaiting();
}

void Pool::Link(ClientConn* client, ServerConn* server) {
  const int64_t now = context_.loop().now_us();
  MoveServer(server, ServerState::kActive);
  MoveClient(client, ClientState::kActive);
  server->Attach(client);
  client->Attach(server);
  // Backpressure belongs to a link: a server paused for its previous client reads again.
  server->SetReadEnabled(true);
  stats_.RecordWait(static_cast<uint64_t>(now - client->wait_started_at_us()));
  ++stats_.server_assignments;
  std::string sql;
  bool sync = BuildParamSync(context_.tracked_params(), client->params(), server->params(), &sql);
  // Settings the client SET that the server does not report (statement_timeout, and
  // search_path before PostgreSQL 18), and the RESET of those an earlier client left.
  const SessionSettings& wanted = client->stream().session.settings();
  if (!wanted.empty() || !server->relay().applied_settings().empty()) {
    sync = BuildSessionSync(wanted, server->relay().applied_settings(), &sql) || sync;
    server->relay().set_applied_settings(wanted);
  }
  if (sync) {
    if (!server->SendHiddenQuery(sql)) {
      server->Close("write failed");
      return;
    }
  }
  client->RelayToServer();
}

ServerConn* Pool::TakeIdleServer(int64_t now) {
  // The idle list runs from the most recently used: LIFO by default, oldest first (FIFO) with
  // server_round_robin.
  const auto next = [this] {
    return round_robin_ ? servers_[ServerState::kIdle].back()
                        : servers_[ServerState::kIdle].front();
  };
  while (ServerConn* server = next()) {
    // A server retires once it served past its lifetime: one that never served a client is kept
    // (a lifetime shorter than a login, PgBouncer's server_lifetime = 0, means "use once").
    if (server_lifetime_us_ > 0 && server->linked_at_us() != 0 &&
        now - server->created_at_us() > server_lifetime_us_) {
      server->Close("server lifetime over");
      continue;
    }
    if (server_check_delay_us_ >= 0 && now - server->last_used_at_us() > server_check_delay_us_) {
      const auto& pool_config = context_.config().pool;
      // Long idle: prove the connection still works before a client depends on it.
      server->touch(now);
      StartHiddenQuery(server, pool_config.server_check_query, "server check failed");
      continue;
    }
    return server;
  }
  return nullptr;
}

void Pool::ServeWaiting() {
  const int64_t now = context_.loop().now_us();
  ServeLookupWaiters(now);
  if (paused_) return;
  // The LISTEN hub serves many clients with one server: it goes before the queue.
  if (hub_.wants_server()) {
    if (ServerConn* server = TakeIdleServer(now)) GiveHubServer(server);
  }
  while (!clients_[ClientState::kWaiting].empty()) {
    ServerConn* server = TakeIdleServer(now);
    if (server == nullptr) break;
    Link(clients_[ClientState::kWaiting].front(), server);
  }
  // Launching does not change what is wanted: count it once.
  const size_t wanted = servers_wanted();
  while (wanted > login_server_count() + testing_server_count()) {
    if (!LaunchServer(ServerBudget::Purpose::kPoolSize)) {
      // No room in the pod: a sibling's idle server serves instead, or frees the budget. (No host
      // to try now: clients wait, Maintain tries again.)
      if (CanLaunch()) AskSiblingForRoom();
      break;
    }
  }
  OfferIdleServerToSibling();
}

size_t Pool::servers_wanted() const {
  return waiting_count() + auth_query_waiters_.size() + settings_check_waiters_.size() +
         (hub_.wants_server() ? 1 : 0) + (!welcome_known_ && welcome_client_count() > 0 ? 1 : 0);
}

// PostgreSQL reports a parameter that changes without a query (in_hot_standby after a promotion)
// only with a session's next ReadyForQuery. A pool that nobody uses would go on welcoming clients
// with the old value: libpq's target_session_attrs=read-write then refuses a promoted primary
// ("session is read-only") for as long as nothing else runs a query there. So the janitor asks one
// idle server (the check query) when the pool has had no traffic for a while; traffic brings the
// reports by itself.
void Pool::RefreshWelcome(absl::Time now) {
  constexpr absl::Duration kWelcomeRefresh = absl::Seconds(2);
  const auto& pc = context_.config().pool;
  if (!welcome_known_ || welcome_prober_ != nullptr || pc.server_check_query == "-") return;
  if (now - welcome_refreshed_at_ < kWelcomeRefresh || active_server_count() > 0) return;
  ServerConn* server = servers_[ServerState::kIdle].front();  // the most recently used
  if (server == nullptr || now - server->last_used_at() < kWelcomeRefresh) return;
  welcome_refreshed_at_ = now;
  welcome_prober_ = server;
  welcome_prober_last_used_ = server->last_used_at_us();
  StartHiddenQuery(server, pc.server_check_query, "server check failed");
}

void Pool::StartHiddenQuery(ServerConn* server, std::string_view sql,
                            std::string_view close_reason) {
  MoveServer(server, ServerState::kTesting);
  if (!server->SendHiddenQuery(sql)) server->Close(close_reason);
}

void Pool::ScheduleServeWaiting() {
  if (serve_scheduled_) return;
  serve_scheduled_ = true;
  context_.loop().RunAfterBatch([this] {
    serve_scheduled_ = false;
    ServeWaiting();
  });
}

bool Pool::CanLaunch() const {
  const absl::Time now = context_.loop().now();
  return !host_->closed_all() && !paused_ && now >= next_connect_allowed_ && hosts_.AnyToTry(now);
}

bool Pool::LaunchServer(ServerBudget::Purpose purpose) {
  if (!CanLaunch()) return false;
  const absl::Time now = context_.loop().now();
  const std::optional<size_t> host = hosts_.Pick(now);
  if (!host.has_value()) return false;
  const config::HostAddress& address = hosts_.status(*host).address;
  // A host name waits for its lookup (off the loop); ServeWaiting runs again when it ends.
  const net::Resolver::Answer resolved =
      context_.resolver().Resolve(address.host, address.port, context_.dns_ttls());
  if (resolved.state == net::Resolver::State::kPending) return false;
  if (resolved.state == net::Resolver::State::kFailed) {
    PGFLEET_LOG(kWarning, "server_connect_failed", "db=", base::LogQuote(db_.name),
                " host=", address.host, " port=", address.port,
                " error=", base::LogQuote(resolved.error));
    hosts_.OnConnectFailed(*host, now, kMaxConnectBackoff, resolved.error);
    if (hosts_.size() == 1 && server_count() == 0) {
      // No other host and no server could serve: the clients waiting for this database hear
      // why now, not after query_wait_timeout (with servers open, a passing DNS failure costs
      // them nothing).
      protocol::StringSink error;
      protocol::BuildErrorResponse(error, "FATAL", protocol::sqlstate::kConnectionFailure,
                                   resolved.error);
      FailWelcomeClients(base::AsBytes(error.bytes()));
    }
    return false;
  }
  ServerBudget& budget = host_->budget();
  std::optional<ServerRoom> room = budget.TryOpen(*this, purpose);
  if (!room.has_value()) return false;
  ServerConn* server = host_->OpenServer(this, address, resolved.address);
  if (server == nullptr) {
    budget.Closed(*room);
    hosts_.OnConnectFailed(*host, now, kMaxConnectBackoff, "connect failed at once");
    return false;
  }
  server->set_room(*std::move(room));
  servers_.Add(server);  // kConnecting
  return true;
}

void Pool::MoveServer(ServerConn* server, ServerState to, bool front) {
  const bool was_idle = server->state() == ServerState::kIdle;
  servers_.Move(server, to, front);
  if (was_idle != (to == ServerState::kIdle)) PublishPodCounts();
}

void Pool::MoveClient(ClientConn* client, ClientState to) {
  const auto counted = [](ClientState s) {
    return s == ClientState::kWaiting || s == ClientState::kWelcome;
  };
  const bool was_counted = counted(client->state());
  clients_.Move(client, to);
  if (was_counted || counted(to)) PublishPodCounts();
}

const std::optional<PodKeys>& Pool::PodKeysOf() const {
  if (!pod_keys_known_) {
    pod_keys_ = host_->budget().InternKeys(*this);
    pod_keys_known_ = true;
  }
  return pod_keys_;
}

void Pool::PublishPodCounts() {
  const auto keys = PodKeysOf();
  if (!keys.has_value()) return;
  budget::PodServerCounts& pod = host_->budget().pod();
  // Siblings only need to know whether this worker has an idle server: publishing 0 or 1 keeps
  // the shared cache line quiet while a busy worker's idle count moves between 1 and many.
  const int idle = idle_server_count() > 0 ? 1 : 0;
  // Clients waiting to be welcomed wait for a server as much as queued ones: a sibling whose
  // servers are never idle under its own load must still yield one (YieldToSibling), or they
  // wait until their connect timeout. One server welcomes them all, so they count as one.
  const ClientConn* oldest = clients_[ClientState::kWaiting].front();
  const bool needs_welcome = !welcome_known_ && welcome_client_count() > 0;
  if (oldest == nullptr && needs_welcome) oldest = clients_[ClientState::kWelcome].front();
  // Siblings only ask whether this worker has clients waiting, and since when: 0 or 1 as for
  // idle, so a queue that stays long under load publishes nothing per transaction.
  const int waiting = waiting_count() > 0 || needs_welcome ? 1 : 0;
  if (idle != published_idle_) {
    // Under the database's and the user's keys too: a sibling short of room in either budget
    // finds a worker that can close an idle server for it (AskSiblingForRoom).
    const int delta = idle - published_idle_;
    pod.AddIdle(keys->pool, delta);
    pod.AddIdle(keys->database, delta);
    pod.AddIdle(keys->user, delta);
  }
  if (waiting != published_waiting_) pod.AddWaiting(keys->pool, waiting - published_waiting_);
  published_idle_ = idle;
  published_waiting_ = waiting;
  // The queue is FIFO: its front waited longest.
  const int64_t since = oldest != nullptr ? oldest->wait_started_at_us() : 0;
  if (since != published_oldest_wait_us_) {
    pod.SetOldestWait(keys->pool, since);
    published_oldest_wait_us_ = since;
  }
}

void Pool::MakeIdle(ServerConn* server) {
  if (server == welcome_prober_) {
    welcome_prober_ = nullptr;
    server->touch(welcome_prober_last_used_);
  } else {
    server->touch(context_.loop().now_us());
  }
  if (server->close_on_release()) {
    server->Close("closed on release");
    return;
  }
  if (server->state() != ServerState::kIdle) {
    MoveServer(server, ServerState::kIdle, /*front=*/true);
  }
  ServeWaiting();
}

void Pool::ReleaseServer(ServerConn* server) {
  const int64_t now = context_.loop().now_us();
  ClientConn* client = ClientOf(server);
  if (client != nullptr && !client->stream().session.unlistened.empty()) {
    ApplyRelayedUnlistens(client);
  }
  if (client != nullptr) {
    // Its transactions were counted as they ended (RelayObserver::OnTransactionEnded).
    server->Detach();
    client->Detach();
    MoveClient(client, ClientState::kIdle);
  }
  server->touch(now);
  server->SetReadEnabled(true);
  if (server->cancels_in_flight() > 0) {
    // A cancel may still land; keep the server out of use until it has (docs/architecture.md,
    // "Cancel keys").
    MoveServer(server, ServerState::kCanceling);
  } else if (host_->budget().ShedOnRelease(server)) {
    // Closed: the pod holds more of its database than the controller's share.
  } else if (server->close_on_release() ||
             host_->budget().PodServers(*this) >
                 pool_size() + context_.config().EffectiveReservePoolSize(db_, user_)) {
    // Over the pod's size (a reload made the pool smaller).
    server->Close("pool over size");
  } else {
    MoveServer(server, ServerState::kIdle, /*front=*/true);
    YieldToSibling(server);
  }
  // Waiting clients get servers after the batch, as PgBouncer's per-loop activation does: the
  // answers this batch relays reach their clients back to back (one wakeup of a client process
  // such as pgbench for several of them), then the next queries go out together. A client
  // that asks for a server meanwhile queues behind the waiting ones, so arrival order holds.
  ScheduleServeWaiting();
  if (client != nullptr && !client->closed()) client->OnServerReleased();
}

void Pool::RemoveClient(ClientConn* client) {
  CancelLookups(client);
  if (hub_.listener_count() > 0) {
    // Delivery stops at once; the hub's server UNLISTENs what nobody else listens on.
    hub_.Remove(client);
    SettleHub();
  }
  ServerConn* server = client->server();
  if (server == nullptr) {
    MoveClient(client, ClientState::kClosed);
    return;
  }
  ClientSession& session = client->stream().session;
  if (session.pinned()) {
    // What pinned the server (temporary tables, advisory locks...) goes with a DISCARD ALL
    // before anyone else uses it (ReturnServer).
    server->relay().RequireSessionReset();
  }
  if (session.pin_counted) {
    pins_.OnPinChanged(false, 0);
    session.pin_counted = false;
  }
  const bool clean =
      server->IsReleasable() && server->in().empty() && !server->has_pending_output();
  if (!clean) {
    // Every path that closes a client mid-query ends here (docs/architecture.md, "Abandoned
    // queries").
    AbandonServer(server, client);
    return;
  }
  server->Detach();
  client->Detach();
  MoveClient(client, ClientState::kClosed);
  ReturnServer(server);
}

void Pool::ReturnServer(ServerConn* server) {
  const auto& pool_config = context_.config().pool;
  if (server->relay().session_reset_required() && !server->close_on_release()) {
    // Whatever server_reset_query says: only DISCARD ALL also unlocks advisory locks, drops
    // temporary tables, closes cursors and stops listening.
    StartHiddenQuery(server, "DISCARD ALL", "server reset failed");
  } else if ((mode_ == config::PoolMode::kSession || pool_config.server_reset_query_always) &&
             !pool_config.server_reset_query.empty() && !server->close_on_release()) {
    StartHiddenQuery(server, pool_config.server_reset_query, "server reset failed");
  } else {
    ReleaseServer(server);
  }
}

void Pool::LeaveQueue(ClientConn* client) {
  if (client->state() == ClientState::kWaiting) MoveClient(client, ClientState::kIdle);
}

void Pool::RemoveServer(ServerConn* server) {
  if (server == welcome_prober_) welcome_prober_ = nullptr;
  const ServerState old_state = server->state();
  ClientConn* client = ClientOf(server);
  if (client != nullptr) {
    server->Detach();
    client->Detach();
    MoveClient(client, ClientState::kIdle);
  }
  MoveServer(server, ServerState::kClosed);
  host_->budget().Closed(server->room());
  host_->DeleteServer(server);
  if (servers_.size(ServerState::kIdle) + servers_.size(ServerState::kActive) +
          servers_.size(ServerState::kTesting) + servers_.size(ServerState::kCanceling) +
          servers_.size(ServerState::kDraining) + servers_.size(ServerState::kListening) ==
      0) {
    // No server of the last generation is left: the next may be another (a restarted, replaced
    // or promoted PostgreSQL), so new clients wait for its login to hear what it reports.
    welcome_known_ = false;
  }
  if ((old_state == ServerState::kConnecting || old_state == ServerState::kLogin) &&
      !server->host_rejected()) {
    // A refused or timed-out connect costs PostgreSQL nothing, so the host is retried at least
    // every second: once it is back, clients must be served within 2 s, however long it was gone.
    if (const auto host = HostOf(server)) {
      hosts_.OnConnectFailed(
          *host, context_.loop().now(),
          std::min(kMaxConnectBackoff, context_.config().pool.server_login_retry),
          "connect failed");
    }
  }
  if (client != nullptr && !client->closed()) {
    client->Fatal(protocol::sqlstate::kConnectionFailure,
                  "server connection closed unexpectedly during a transaction");
  }
  if (server == hub_server_) OnHubServerLost();
}

void Pool::RequestAuthQuery(ClientConn* client) {
  auth_query_waiters_.push_back(client);
  ServeWaiting();
}

void Pool::CancelLookups(ClientConn* client) {
  std::erase(auth_query_waiters_, client);
  std::erase(settings_check_waiters_, client);
}

void Pool::CloseIdleServers(std::string_view reason) {
  while (ServerConn* server = servers_[ServerState::kIdle].front()) server->Close(reason);
}

bool Pool::EvictOneIdleServer() {
  ServerConn* server = servers_[ServerState::kIdle].back();  // the least recently used
  if (server == nullptr) return false;
  server->Close("evicted for another pool of the database");
  return true;
}

void Pool::Shutdown(std::string_view reason) {
  for (ClientConn* client :
       clients_.In({ClientState::kSettingsCheck, ClientState::kWelcome, ClientState::kIdle,
                    ClientState::kWaiting, ClientState::kActive})) {
    if (!client->closed()) client->Fatal(protocol::sqlstate::kAdminShutdown, reason);
  }
  for (ServerConn* server : servers_.In(
           {ServerState::kConnecting, ServerState::kLogin, ServerState::kIdle, ServerState::kActive,
            ServerState::kTesting, ServerState::kCanceling, ServerState::kListening})) {
    if (server->state() != ServerState::kClosed) server->Close(reason);
  }
  // Servers whose clients just left mid-query run on in PostgreSQL until their cancel lands:
  // they close once they have answered, and count against the budgets until then.
  for (ServerConn* server : servers_.In({ServerState::kDraining})) server->MarkCloseOnRelease();
}

}  // namespace pgfleet::pool
