// Pool: server logins and their verdicts, what new clients are welcomed with, and the roles
// of the database's hosts (target_session_attrs).
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/pool_host.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

void Pool::OnServerConnected(ServerConn* server) { MoveServer(server, ServerState::kLogin); }

std::optional<size_t> Pool::HostOf(const ServerConn* server) const {
  return hosts_.IndexOf(server->address());
}

bool Pool::AcceptLogin(ServerConn* server) {
  const std::optional<size_t> host = HostOf(server);
  if (!host.has_value()) return false;  // a reload removed its host meanwhile
  const auto facts = HostFacts::FromParams(server->login_params());
  const absl::Time now = context_.loop().now();
  // Other databases listing the host learn its role too (a promotion one entry's login finds
  // retires another entry's servers there).
  if (facts.has_value()) host_->OnHostRole(server->address(), facts->in_hot_standby, now);
  if (hosts_.OnLogin(*host, facts, now)) return true;
  const HostStatus& status = hosts_.status(*host);
  PGFLEET_LOG(
      kInfo, "server_host_mismatch", "server=", server->id(), " db=", base::LogQuote(db_.name),
      " host=", status.address.host, " port=", status.address.port,
      " role=", HostRoleName(status.role), " read_only=", status.read_only ? "on" : "off",
      " target_session_attrs=", config::TargetSessionAttrsName(hosts_.target_session_attrs()));
  return false;
}

void Pool::OnServerReady(ServerConn* server) {
  host_->budget().RecordBackend(server->mutable_room(), server->backend_pid());
  if (!AcceptLogin(server)) {
    // Not a failed login: the host answered, it is just not the kind this entry wants. Another
    // host is tried at once; this one again after HostSelector::kRoleRecheck.
    server->MarkHostRejected();
    server->Close("host does not match target_session_attrs");
    ScheduleServeWaiting();
    return;
  }
  // Idle from here on: closing it now (RECONNECT, a lowered budget) is not a failed login.
  MoveServer(server, ServerState::kIdle, /*front=*/true);
  consecutive_connect_failures_ = 0;
  next_connect_allowed_ = absl::InfinitePast();
  if (!db_.connect_query.empty()) {
    // PgBouncer's connect_query, once per new server before any client gets it: the server is
    // idle once it is answered (MakeIdle); a failure closes it.
    StartHiddenQuery(server, db_.connect_query, "connect_query could not be sent");
    LearnWelcome(server);
    return;
  }
  LearnWelcome(server);
  MakeIdle(server);
  ServeWelcomedClients();
}

void Pool::LearnWelcome(const ServerConn* server) {
  // Every login refreshes what new clients are told: the server behind the address may have
  // changed since (another major, a promoted standby), and a client must hear the values of the
  // servers it will get, not of the first one this pool ever opened.
  welcome_params_ = server->login_params();
  server_defaults_ = server->params();
  if (welcome_known_) return;
  welcome_known_ = true;
  WarnUnreportedTrackedParameters();
  while (ClientConn* client = clients_[ClientState::kWelcome].front()) {
    MoveClient(client, ClientState::kIdle);
    WelcomeClient(client);
  }
}

void Pool::WelcomeClient(ClientConn* client) {
  ClientStream& stream = client->stream();
  // In every mode: a session pool's server takes them at the link, and the next client's link
  // undoes them.
  TakeStartupSettings(client->startup_settings(), &stream.session);
  if (relay_settings_.session == SessionTracking::kTrack) {
    CarryUnreportedStartupParams(context_.tracked_params(), server_defaults_, &stream.params,
                                 &stream.session);
  }
  client->SendWelcome(welcome_params_, server_defaults_);
}

void Pool::WarnUnreportedTrackedParameters() const {
  // A tracked parameter that this server never reports (search_path before PostgreSQL 18) is
  // only known from clients' startup packets: a SET inside a session is not seen.
  std::string_view version = "unknown";
  for (const auto& [name, value] : welcome_params_) {
    if (name == "server_version") version = value;
  }
  if (!context_.config().pool.track_extra_parameters_configured) return;
  for (const auto& wanted : context_.config().pool.track_extra_parameters) {
    const bool reported =
        std::any_of(welcome_params_.begin(), welcome_params_.end(),
                    [&](const auto& param) { return absl::EqualsIgnoreCase(param.first, wanted); });
    if (reported) continue;
    PGFLEET_LOG(kWarning, "tracked_parameter_not_reported", "db=", base::LogQuote(db_.name),
                " parameter=", base::LogQuote(wanted), " server_version=", base::LogQuote(version),
                " effect=\"pool.track_extra_parameters: a client's SET of it is not seen; only its "
                "startup value is applied\"");
  }
}

void Pool::ServeWelcomedClients() {
  // Clients just welcomed may have pipelined their first query already.
  std::vector<ClientConn*> pending;
  for (ClientConn* c : clients_.In({ClientState::kIdle})) {
    if (!c->in().empty()) pending.push_back(c);
  }
  for (ClientConn* c : pending) {
    if (!c->closed() && c->state() == ClientState::kIdle) c->OnServerReleased();
  }
}

void Pool::FailWelcomeClients(std::span<const uint8_t> error) {
  while (ClientConn* client = clients_[ClientState::kWelcome].front()) client->FatalRaw(error);
  while (ClientConn* client = clients_[ClientState::kWaiting].front()) client->FatalRaw(error);
  auto waiters = std::move(auth_query_waiters_);
  auth_query_waiters_.clear();
  for (ClientConn* client : waiters) {
    client->OnLookupAnswer(LookupAnswer::Failed("auth_query login failed"));
  }
  while (ClientConn* client = clients_[ClientState::kSettingsCheck].front()) {
    client->FatalRaw(error);
  }
  settings_check_waiters_.clear();
}

void Pool::OnServerLoginFailed(ServerConn* server, std::span<const uint8_t> error,
                               bool fatal_for_clients) {
  const auto retry = context_.config().pool.server_login_retry;
  if (!fatal_for_clients) {
    // The host's reason (shutting down, starting up, too many connections): other hosts may
    // serve meanwhile.
    if (const auto host = HostOf(server)) {
      hosts_.OnConnectFailed(*host, context_.loop().now(), retry, "login failed");
    }
    return;
  }
  // The credentials' or the database's: every host would say the same.
  ++consecutive_connect_failures_;
  next_connect_allowed_ =
      context_.loop().now() +
      std::min(absl::Milliseconds(100) * (1 << std::min(consecutive_connect_failures_, 8)), retry);
  FailWelcomeClients(error);
}

void Pool::OnHotStandbyReport(ServerConn* server, bool in_hot_standby) {
  const absl::Time now = context_.loop().now();
  host_->OnHostRole(server->address(), in_hot_standby, now);
  // New clients are told the role as it is now (libpq's target_session_attrs reads it), not as
  // the last login found it; where the host no longer fits, its servers are leaving and what
  // clients hear stays that of the kind they will get.
  const std::optional<size_t> host = HostOf(server);
  if (!host.has_value() || !hosts_.Serves(*host, now)) return;
  for (auto& [name, value] : welcome_params_) {
    if (name == "in_hot_standby") value = in_hot_standby ? "on" : "off";
  }
}

void Pool::OnReadOnlyError(ServerConn* server) {
  const auto attrs = db_.target_session_attrs;
  if (attrs != config::TargetSessionAttrs::kReadWrite &&
      attrs != config::TargetSessionAttrs::kPrimary) {
    return;
  }
  // A client's own SET TRANSACTION READ ONLY gets 25006 on a primary too: only this server goes
  // (a new login tells the host's role), not the host's others.
  server->MarkCloseOnRelease();
  if (const auto host = HostOf(server)) hosts_.Forget(*host);
}

void Pool::RetireHost(const config::HostAddress& address, std::string_view reason) {
  std::vector<ServerConn*> idle;
  for (ServerConn* s : servers_.In({ServerState::kIdle})) {
    if (s->address() == address) idle.push_back(s);
  }
  for (ServerConn* s : idle) s->Close(reason);
  // The LISTEN hub's server listens on the next server it gets (notifications in between are
  // lost, as for any session that ends).
  if (hub_server_ != nullptr && hub_server_->address() == address) hub_server_->Close(reason);
  // The rest finish what they run (a transaction ends as PostgreSQL ends it) and close when
  // released.
  for (ServerConn* s : servers_.In({ServerState::kActive, ServerState::kTesting,
                                    ServerState::kCanceling, ServerState::kDraining})) {
    if (s->address() == address) s->MarkCloseOnRelease();
  }
  ScheduleServeWaiting();
}

}  // namespace pgfleet::pool
