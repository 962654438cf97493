// Everything one worker pools: its pools by (database, user), its clients, the cancel keys it
// minted, limits shared across pools (max_client_conn, max_db_connections, max_user_connections)
// and the janitor that enforces timeouts.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pooler/auth/hba.h"
#include "pooler/auth/userlist.h"
#include "pooler/base/intrusive_list.h"
#include "pooler/base/random.h"
#include "pooler/budget/client_budget.h"
#include "pooler/config/config.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/admin_hook.h"
#include "pooler/pool/cancel_registry.h"
#include "pooler/pool/cancel_request.h"
#include "pooler/pool/param_sync.h"
#include "pooler/pool/pause_state.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/prepared_statements.h"
#include "pooler/pool/rate_limiter.h"
#include "pooler/pool/stats.h"
#include "pooler/pool/tls_policy.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::pool {

class PoolRegistry final : public CancelTarget {
 public:
  PoolRegistry(net::EventLoop& loop, std::shared_ptr<const config::Config> config,
               auth::Userlist userlist, uint32_t peer_id, base::RandomSource& random);
  ~PoolRegistry() override;

  net::EventLoop& loop() { return loop_; }
  const config::Config& config() const { return *config_; }
  const auth::Userlist& userlist() const { return userlist_; }
  const TrackedParamNames& tracked_params() const { return tracked_params_; }
  base::RandomSource& random() { return random_; }
  WorkerCounters& counters() { return counters_; }
  StatementRegistry& statements() { return statements_; }
  ClientBudget& client_budget() { return client_budget_; }
  // Databases paused by the admin console; GetOrCreatePool pauses new pools of those.
  PauseState& pause_state() { return pause_state_; }
  uint32_t peer_id() const { return peer_id_; }

  // Takes ownership of an accepted socket.
  void AcceptClient(int fd, std::string peer_address);

  // The pool for (database config, user), created on first use.
  Pool* GetOrCreatePool(const config::DatabaseConfig& db, const std::string& user);
  // Opens a server connection for `pool` (limits already checked). Null when connect fails at
  // once.
  ServerConn* OpenServer(Pool* pool);

  // Cancel keys: mint a unique key for `client`, find the client for a key, forget it.
  protocol::CancelKey MintCancelKey(ClientConn* client);
  void ForgetCancelKey(const protocol::CancelKey& key);
  // Handles a CancelRequest (DESIGN.md cancel steps 1-2): our own key is cancelled here, a
  // sibling's is handed to the forwarder unless it was already forwarded once.
  CancelOutcome HandleCancel(const protocol::CancelKey& key, bool forwarded) override;
  void set_cancel_forwarder(CancelForwarder* forwarder) { forwarder_ = forwarder; }

  // The admin console (null = the "pgfleet" database is an ordinary name).
  AdminConsoleHandler* admin_console() const { return admin_console_; }
  void set_admin_console(AdminConsoleHandler* console) { admin_console_ = console; }
  // A logged-in console client leaves the login list for the admin list.
  void MoveToAdmin(ClientConn* client);
  // Live clients by id, for answers that arrive after the request (may return null).
  ClientConn* FindClient(uint64_t id) const;
  // Every client not in a pool (logging in or on the console), for SHOW CLIENTS.
  const base::IntrusiveList<ClientConn>& login_clients() const { return login_clients_; }
  const base::IntrusiveList<ClientConn>& admin_clients() const { return admin_clients_; }
  // Cancels whatever `server` runs, unconditionally, before pgfleet drops the connection.
  void CancelAbandonedQuery(const ServerConn& server);

  // Server connection accounting for max_db_connections / max_user_connections.
  int DatabaseServerCount(const std::string& db) const;
  int UserServerCount(const std::string& user) const;
  // True when `pool` may open one more server under its database's and user's budgets.
  bool ServerBudgetAllows(const Pool* pool) const;
  bool DatabaseBudgetAllows(const Pool* pool) const;
  bool UserBudgetAllows(const Pool* pool) const;
  void CountServer(const Pool* pool, int delta);
  // Caps on server connections per database granted by the budget controller (DESIGN.md
  // "Connection budget"); until EnableDatabaseCaps() the static max_db_connections share applies.
  void EnableDatabaseCaps() { db_caps_enabled_ = true; }
  void SetDatabaseCap(const std::string& db, int cap) { db_caps_[db] = cap; }
  // The cap in force for `db`: nullopt while caps are off, 0 when none was granted.
  std::optional<int> DatabaseCap(const std::string& db) const;
  // Brings `db` toward its cap: closes idle servers over it and marks busy ones to close on
  // release (with `force`, closes busy ones too). Returns how many servers were closed now.
  int EnforceDatabaseCap(const std::string& db, bool force);
  // Frees room for `pool` under max_db_connections / max_user_connections by closing an idle
  // server of another pool that shares the full budget (same database, same user, or both when
  // both are full). True when one was closed.
  bool EvictIdleServerFor(const Pool* pool);

  // Runs auth_query for `client` on a dedicated connection as auth.user.
  void RunAuthQuery(ClientConn* client, const config::DatabaseConfig& db);

  // Applies a reloaded config (pool sizes, timeouts, userlist); returns an error and keeps the
  // old one when it does not load.
  absl::Status Reload(std::shared_ptr<const config::Config> config, auth::Userlist userlist);

  // Stops accepting work: clients are told and closed, servers closed.
  void CloseAll(std::string_view reason);

  size_t client_count() const { return client_count_; }
  const absl::flat_hash_map<std::pair<std::string, std::string>, std::unique_ptr<Pool>>& pools()
      const {
    return pools_;
  }

  // Live servers by id, so callbacks holding only an id (cancels) never touch a freed server.
  ServerConn* FindServer(uint64_t id) const;
  void ForgetCancelRequest(CancelRequestConn* request);
  // Starts `request` (registered, connecting) and keeps it until it finishes.
  void TrackCancelRequest(std::unique_ptr<CancelRequestConn> request);

  // auth.hba_file's rules (null = no hba file: every client may try auth.type). Set by the worker
  // at start and on reload; a client is checked once, when its startup packet arrives.
  const auth::HbaRules* hba() const { return hba_.get(); }
  void set_hba(std::shared_ptr<const auth::HbaRules> hba) { hba_ = std::move(hba); }
  // The `tls:` contexts (set by the worker at start and on reload, which re-reads certificate
  // files). A connection keeps the context it started with until it closes.
  const TlsContexts& tls() const { return tls_; }
  void set_tls(TlsContexts tls) { tls_ = std::move(tls); }
  // pool.max_concurrent_logins: takes a login slot (false = the worker is at the cap); each
  // successful TryBeginLogin is paired with one EndLogin.
  [[nodiscard]] bool TryBeginLogin();
  void EndLogin() { --logins_in_progress_; }
  size_t logins_in_progress() const { return logins_in_progress_; }
  // pool.cancel_rate_limit: true when a CancelRequest from `peer_address` may be acted on; a
  // refused one is counted, and logged at most once per 10 s per address (with the count).
  [[nodiscard]] bool AllowCancelFrom(std::string_view peer_address);

  uint64_t NextConnectionId() { return ++last_connection_id_; }
  void DeleteClient(ClientConn* client);
  void DeleteServer(ServerConn* server);

 private:
  void Janitor();

  net::EventLoop& loop_;
  std::shared_ptr<const config::Config> config_;
  auth::Userlist userlist_;
  uint32_t peer_id_;
  base::RandomSource& random_;
  CancelForwarder* forwarder_ = nullptr;
  AdminConsoleHandler* admin_console_ = nullptr;
  TrackedParamNames tracked_params_;
  ClientBudget client_budget_;
  PauseState pause_state_;
  WorkerCounters counters_;
  StatementRegistry statements_;

  absl::flat_hash_map<std::pair<std::string, std::string>, std::unique_ptr<Pool>> pools_;
  absl::flat_hash_map<protocol::CancelKey, ClientConn*> cancel_keys_;
  absl::flat_hash_map<uint64_t, ServerConn*> servers_by_id_;
  absl::flat_hash_map<CancelRequestConn*, std::unique_ptr<CancelRequestConn>> cancel_requests_;
  absl::flat_hash_map<std::string, int> db_server_counts_;
  absl::flat_hash_map<std::string, int> user_server_counts_;
  base::IntrusiveList<ClientConn> login_clients_;  // not yet in a pool (startup/auth)
  base::IntrusiveList<ClientConn> admin_clients_;  // on the admin console
  absl::flat_hash_map<uint64_t, ClientConn*> clients_by_id_;
  size_t client_count_ = 0;
  uint64_t last_connection_id_ = 0;
  net::EventLoop::TimerId janitor_timer_ = 0;
  std::shared_ptr<const auth::HbaRules> hba_;
  TlsContexts tls_;
  size_t logins_in_progress_ = 0;
  RateLimiter cancel_limiter_{0};
  bool db_caps_enabled_ = false;
  absl::flat_hash_map<std::string, int> db_caps_;
};

}  // namespace pgfleet::pool
