// A pool of server connections for one (database, user), with one list per connection state
// (docs/architecture.md, "Connection state machines"). Decides when a client gets a server, when
// servers are opened and closed, and when a server goes back to the pool.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "pooler/auth/scram.h"
#include "pooler/base/intrusive_list.h"
#include "pooler/config/config.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/linked_client.h"
#include "pooler/conn/server_conn.h"
#include "pooler/conn/stats.h"
#include "pooler/conn/worker_context.h"
#include "pooler/listen/listen_hub.h"
#include "pooler/pool/host_selector.h"
#include "pooler/pool/server_budget.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class PoolHost;

// Pool is the connections' PoolEvents and the budget's BudgetedPool; final, so that its own calls
// of those virtuals are direct.
class Pool final : public BudgetedPool {
 public:
  Pool(PoolHost* host, config::DatabaseConfig db, std::string user);
  ~Pool();

  // Re-reads settings after a reload. Servers for a changed host/port/dbname are retired.
  void ApplyConfig(const config::DatabaseConfig& db);

  // --- client side ---
  // An authenticated client joins: welcomed at once when the server parameters are known,
  // otherwise after the first server logs in.
  void AddClient(ClientConn* client) override;
  // The client has messages to send: link it to a server now or queue it in arrival order.
  void RequestServer(ClientConn* client) override;
  // The client is going away; unlinks its server and releases it, or, mid-query, drains it
  // (pool_abandon.cc).
  void RemoveClient(ClientConn* client) override;
  // A waiting client's queued query was cancelled and it has nothing else queued: it leaves the
  // queue (queued_cancel.h).
  void LeaveQueue(ClientConn* client) override;

  // --- LISTEN hub (pool_listen.cc, docs/architecture.md "LISTEN hub") ---
  // After every change to the hub: sends what it wrote to its server, gives its server back when
  // nobody listens, asks for one when it needs one, and hands out LISTEN answers that waited.
  void SettleHub() override;
  // A message from the hub's server (ServerConn in kListening).
  void OnHubServerMessage(uint8_t type, std::span<const uint8_t> body) override;
  // The UNLISTENs `client`'s finished transaction committed on its server
  // (ClientSession::unlistened) stop the hub's deliveries too.
  void ApplyRelayedUnlistens(LinkedClient* client) override;
  // Clients listening through the hub and servers the hub holds (0 or 1) in this worker.
  size_t listening_client_count() const { return hub_.listener_count(); }
  size_t listening_server_count() const { return servers_.size(ServerState::kListening); }

  // --- server side ---
  void OnServerConnected(ServerConn* server) override;
  // Login finished: learn parameters, welcome waiting clients, serve the queue.
  void OnServerReady(ServerConn* server) override;
  // Login failed with a server ErrorResponse (`error` is the whole message, to pass on).
  void OnServerLoginFailed(ServerConn* server, std::span<const uint8_t> error,
                           bool fatal_for_clients) override;
  // A logged-in server reported in_hot_standby (a promotion): when its host no longer fits
  // target_session_attrs, the host's servers leave every pool of the database.
  void OnHotStandbyReport(ServerConn* server, bool in_hot_standby) override;
  // A server failed a client's write as read-only (25006): for an entry that wants a writable
  // host, the server closes when released and the host's role is checked at the next login.
  void OnReadOnlyError(ServerConn* server) override;
  // Servers of `address` close: idle ones now, the rest when released (their host changed role).
  void RetireHost(const config::HostAddress& address, std::string_view reason);
  // ServeWaiting once the current event batch is done (see ReleaseServer; a host name's lookup
  // that ended).
  void ScheduleServeWaiting();
  // The database's hosts as this worker knows them (shared by its pools).
  const HostSelector& hosts() const { return hosts_; }
  // The linked transaction is over (release rule met) or a hidden check/reset finished.
  void ReleaseServer(ServerConn* server) override;
  // The server socket is gone; unlink and forget it.
  void RemoveServer(ServerConn* server) override;
  // A server finished a test/reset query or a cancel and may serve again.
  void MakeIdle(ServerConn* server) override;
  // A draining server read more of what it owes, or a cancel for it landed: rolls back, returns
  // it to the pool or closes it once it can (pool_abandon.cc).
  void ContinueDrain(ServerConn* server) override;

  // Queues `client` for an auth_query on one of this pool's servers (this pool's user is
  // auth.user).
  void RequestAuthQuery(ClientConn* client);
  // The client leaves the queues of auth_query and of the startup settings check.
  void CancelLookups(ClientConn* client);
  // The check of `client`'s startup settings answered (pool_settings_check.cc).
  void OnStartupSettingsChecked(ClientConn* client, const LookupAnswer& answer) override;

  // Periodic maintenance: timeouts, min_pool_size, reserve pool, lifetimes.
  void Maintain(absl::Time now);

  // Counts for SHOW POOLS / metrics / tests.
  size_t client_count() const { return clients_.total(); }
  size_t waiting_count() const override { return clients_.size(ClientState::kWaiting); }
  size_t active_client_count() const { return clients_.size(ClientState::kActive); }
  size_t idle_client_count() const { return clients_.size(ClientState::kIdle); }
  size_t welcome_client_count() const { return clients_.size(ClientState::kWelcome); }
  // Servers this pool's clients wait for: the queue, auth_query lookups, a LISTEN hub without a
  // server, and one for the first login when no server has told the pool its welcome (startup
  // parameters) yet. The pool launches servers for them, and the pod reports them as demand to
  // the controller: a pod whose share is 0 gets room only for demand it reports.
  size_t servers_wanted() const;
  size_t server_count() const { return servers_.total(); }
  size_t idle_server_count() const { return servers_.size(ServerState::kIdle); }
  size_t active_server_count() const { return servers_.size(ServerState::kActive); }
  // Connecting or logging in.
  size_t login_server_count() const {
    return servers_.size(ServerState::kConnecting) + servers_.size(ServerState::kLogin);
  }
  // Running a check, reset or auth query, waiting for a cancel to land, or draining after its
  // client left mid-query (sv_tested): each serves the queue once done.
  size_t testing_server_count() const {
    return servers_.size(ServerState::kTesting) + servers_.size(ServerState::kCanceling) +
           servers_.size(ServerState::kDraining);
  }
  // Draining after its client left mid-query (docs/architecture.md, "Abandoned queries").
  size_t draining_server_count() const { return servers_.size(ServerState::kDraining); }
  absl::Duration max_wait(absl::Time now) const;

  // Tells every client `reason` (FATAL 57P01) and closes every connection of the pool.
  void Shutdown(std::string_view reason);
  // Graceful shutdown step: closes clients that have been idle (outside a transaction) for a
  // moment, so one that just logged in gets to send its first query. True when none remain.
  bool CloseIdleClients(std::string_view reason, absl::Time now);

  // Closes every idle server (RECONNECT, reload of connection settings).
  void CloseIdleServers(std::string_view reason);
  // An idle server of this pool to give up so another pool of the same database may open one.
  bool EvictOneIdleServer() override;
  int ServersInUseOrWanted() const override {
    return static_cast<int>(active_server_count() + login_server_count() + testing_server_count() +
                            listening_server_count() + servers_wanted());
  }

  // --- one pool per pod (pool_handoff.cc) ---
  // This pool's keys in the pod's counts, interned once (again after a reload); nullopt when
  // the pod's table is full.
  const std::optional<PodKeys>& PodKeysOf() const override;

  // A sibling worker has a client waiting and the pod is full: hand it an idle server (or, for one
  // that cannot move, close it and tell the sibling the room is free).
  void GiveIdleServer(uint32_t to);
  // A sibling handed a server over (`fd` is ours now): it serves this worker's waiting clients.
  void AdoptServer(int fd, const ServerHandoff& moved);
  // A sibling freed room in the pod for this pool.
  void OnRoomFreed() {
    sibling_asked_at_ = absl::InfinitePast();
    ServeWaiting();
  }
  // A server went to a sibling: off the lists and deleted; its room moved with it.
  void ForgetHandedOver(ServerConn* server) override;

  // --- admin console (pool_admin.cc) ---
  // PAUSE/KILL: while paused no client is given a server and no server is opened; clients queue
  // (query_wait_timeout still applies) and linked transactions finish. Resuming serves the queue.
  void SetPaused(bool paused);
  bool paused() const { return paused_; }
  // True once a pause has drained: no server is linked to a client.
  bool PauseDrained() const { return servers_[ServerState::kActive].empty(); }
  // RECONNECT: closes idle servers now and every other server when it is released.
  void Reconnect();
  // True while some server is marked to close at its next release (WAIT_CLOSE).
  bool HasServersToClose() const;
  // Every client / server of the pool, in state-list order (SHOW CLIENTS/SERVERS).
  void ForEachClient(const std::function<void(const ClientConn&)>& fn) const;
  void ForEachServer(const std::function<void(const ServerConn&)>& fn) const;

 private:
  // A server's linked client. The pool links only its own clients (Link), and every one is a
  // ClientConn: the server knows it only as the LinkedClient it writes to.
  static ClientConn* ClientOf(const ServerConn* server) {
    return static_cast<ClientConn*>(server->client());
  }
  void Link(ClientConn* client, ServerConn* server);
  // An unlinked server whose client left and whose transaction is over: reset (session mode,
  // server_reset_query_always) or released.
  void ReturnServer(ServerConn* server);
  // The client left `server` mid-query (pool_abandon.cc): PostgreSQL gets a CancelRequest, and the
  // server stays open, counted against every budget, until it has answered what it owes.
  void AbandonServer(ServerConn* server, ClientConn* client);
  // Draining servers that are not clean within server_connect_timeout are closed.
  void ExpireDraining(absl::Time now);
  void ServeWaiting();
  // An idle server becomes the LISTEN hub's (pool_listen.cc).
  void GiveHubServer(ServerConn* server);
  // The hub's server closed (RemoveServer): its channels are LISTENed on the next one.
  void OnHubServerLost();
  // The hub waited query_wait_timeout for a server: the clients whose LISTEN waits get the
  // queued clients' FATAL.
  void ExpireHubWaiters(absl::Time now, absl::Duration limit);
  // Keeps the welcome true while nothing runs: see Pool::RefreshWelcome.
  void RefreshWelcome(absl::Time now);
  // A check, reset or refresh query on `server` (kTesting until its ReadyForQuery makes it idle);
  // closes it with `close_reason` when the query cannot be sent.
  void StartHiddenQuery(ServerConn* server, std::string_view sql, std::string_view close_reason);
  // Opens a server if the pod has room for `purpose` (server_budget.h).
  bool LaunchServer(ServerBudget::Purpose purpose);
  // Not paused, not backing off after failed logins, and some host may be tried now.
  bool CanLaunch() const;
  // A server's host, if the database still lists it.
  std::optional<size_t> HostOf(const ServerConn* server) const;
  // Whether `server` may serve clients of this pool: a login whose host does not fit
  // target_session_attrs is closed and another host tried.
  bool AcceptLogin(ServerConn* server);
  // Every state change goes through these (the lists' transition function), so the pod sees this
  // worker's idle servers and waiting clients of the pool.
  void MoveServer(ServerConn* server, ServerState to, bool front = false);
  void MoveClient(ClientConn* client, ClientState to);
  void PublishPodCounts();
  ServerConn* TakeIdleServer(int64_t now_us);
  void FailWelcomeClients(std::span<const uint8_t> error);
  // Logs each track_extra_parameters name the first server's login did not report.
  void WarnUnreportedTrackedParameters() const;
  // Each logged-in server (or one handed over) tells what new clients are welcomed with.
  void LearnWelcome(const ServerConn* server);
  // Sends a client its login answer; with session_state: track, its startup values of
  // parameters the servers do not report become session settings first
  // (CarryUnreportedStartupParams).
  void WelcomeClient(ClientConn* client);
  // AddClient once the client's startup settings are known to be good.
  void AdmitClient(ClientConn* client);
  // True when `client` has no startup settings, or settings this pool's servers took before.
  // Otherwise it is refused (settings refused before) or queued for a check on a server, and
  // AdmitClient follows the check (OnStartupSettingsChecked). pool_settings_check.cc.
  bool StartupSettingsKnownGood(ClientConn* client);
  // Gives idle servers to the logins waiting for an auth_query or a settings check (rare: the
  // common path only tests two lists for emptiness).
  void ServeLookupWaiters(int64_t now);
  // Hands each client of `waiters`, in order, an idle server for its lookup (auth_query, the
  // settings check), while idle servers last; `start` sends the lookup (false: write failed).
  // pool_settings_check.cc.
  void ServeLookups(std::vector<ClientConn*>& waiters, int64_t now,
                    const std::function<bool(ServerConn*, ClientConn*)>& start);
  void ServeWelcomedClients();
  // No room for a server: a sibling's idle server of this pool, or, when the database's or the
  // user's budget is what is full, a sibling's idle server of another pool in it, closed for us.
  void AskSiblingForRoom();
  // Nobody waits here: an idle server goes to a sibling whose clients wait for one.
  void OfferIdleServerToSibling();
  // A released server while siblings' clients wait too: true when it went to one of them.
  bool YieldToSibling(ServerConn* server);
  // Sends an idle server to sibling `to` (or closes one that cannot move and says the room is
  // free). True when it left this worker.
  bool HandOver(ServerConn* server, uint32_t to);
  int pool_size() const;
  void UpdateRelaySettings();

  PoolHost* host_;                    // opens and deletes servers; the budget and cancels
  HostSelector& hosts_;               // the host's, for this database
  ServerConn* hub_server_ = nullptr;  // kListening, or none
  absl::Time hub_wait_started_ = absl::InfinitePast();  // since when the hub wants a server

  bool welcome_known_ = false;
  // RefreshWelcome: when it last asked a server, and the server asking now with the time it was
  // last used (restored when it is idle again, so idle timeouts count from its last real use).
  absl::Time welcome_refreshed_at_ = absl::InfinitePast();
  ServerConn* welcome_prober_ = nullptr;
  int64_t welcome_prober_last_used_ = 0;
  std::vector<std::pair<std::string, std::string>> welcome_params_;
  ParamSet server_defaults_;

  // TakeIdleServer's server_lifetime and server_check_delay in microseconds (negative: off), kept
  // by UpdateRelaySettings.
  int64_t server_lifetime_us_ = -1;
  int64_t server_check_delay_us_ = -1;
  bool round_robin_ = false;  // server_round_robin

  ClientLists clients_{ClientState::kSettingsCheck, ClientState::kWelcome, ClientState::kIdle,
                       ClientState::kWaiting, ClientState::kActive};

  std::vector<ClientConn*> auth_query_waiters_;
  std::vector<ClientConn*> settings_check_waiters_;
  // Startup settings this pool's servers took (an empty message) or refused, by
  // StartupSettingsKey; cleared when it grows past a bound.
  struct SettingsVerdict {
    std::string sqlstate;
    std::string message;
  };
  absl::flat_hash_map<std::string, SettingsVerdict> checked_settings_;

  // Idle servers are LIFO: the most recently used at the front keeps the busiest ones warm.
  ServerLists servers_{ServerState::kConnecting, ServerState::kLogin,    ServerState::kIdle,
                       ServerState::kActive,     ServerState::kTesting,  ServerState::kCanceling,
                       ServerState::kDraining,   ServerState::kListening};

  // What this worker last told the pod of its idle servers and waiting clients of the pool.
  int published_idle_ = 0;
  int published_waiting_ = 0;
  int64_t published_oldest_wait_us_ = 0;
  absl::Time next_connect_allowed_ = absl::InfinitePast();
  int consecutive_connect_failures_ = 0;
  bool paused_ = false;
  absl::Time sibling_asked_at_ = absl::InfinitePast();
  uint64_t give_timer_ = 0;  // GiveIdleServer's retry once a just-released server has settled
  // PodKeysOf's cache: interned once, again after a reload.
  mutable std::optional<PodKeys> pod_keys_;
  mutable bool pod_keys_known_ = false;
  bool serve_scheduled_ = false;
};

// The worker's pools by (database, user).
using PoolMap = absl::flat_hash_map<std::pair<std::string, std::string>, std::unique_ptr<Pool>>;

}  // namespace pgfleet::pool
