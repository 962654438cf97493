// Everything one worker pools: its pools by (database, user), its clients before they join a pool
// and on the admin console, its live servers, and the parts cut along their seams: the context
// every connection reads (worker_context.h), cancel handling (cancel_handler.h), the server budget
// (server_budget.h) and the janitor (janitor.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pooler/auth/userlist.h"
#include "pooler/base/random.h"
#include "pooler/budget/client_budget.h"
#include "pooler/cancel/cancel_handler.h"
#include "pooler/config/config.h"
#include "pooler/conn/admin_hook.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/worker_context.h"
#include "pooler/handoff/server_mover.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/host_selector.h"
#include "pooler/pool/janitor.h"
#include "pooler/pool/pause_state.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/pool_host.h"
#include "pooler/pool/server_budget.h"

namespace pgfleet::pool {

class PoolRegistry final : public ClientHost,
                           public ServerDirectory,
                           public PoolHost,
                           public BudgetedPools {
 public:
  PoolRegistry(net::EventLoop& loop, std::shared_ptr<const config::Config> config,
               auth::Userlist userlist, uint32_t peer_id, base::RandomSource& random);
  ~PoolRegistry() override;

  WorkerContext& context() override { return context_; }
  const WorkerContext& context() const { return context_; }
  // Shortcuts for the two things every caller reads.
  net::EventLoop& loop() { return context_.loop(); }
  const config::Config& config() const { return context_.config(); }
  CancelHandler& cancels() override { return cancels_; }
  ServerBudget& budget() override { return budget_; }
  ClientBudget& client_budget() { return client_budget_; }
  // Databases paused by the admin console; GetOrCreatePool pauses new pools of those.
  PauseState& pause_state() { return pause_state_; }
  const PauseState& pause_state() const { return pause_state_; }

  // Takes ownership of an accepted socket.
  // `slot_taken`: a sibling that passed the connection already counted it as this worker's
  // client in max_client_conn's shared count.
  void AcceptClient(int fd, std::string peer_address, bool slot_taken = false);

  // The pool for (database config, user), created on first use.
  Pool* GetOrCreatePool(const config::DatabaseConfig& db, const std::string& user) override;
  // BudgetedPools: every pool of the worker, for the budget's sweeps.
  void ForEachBudgetedPool(absl::FunctionRef<void(BudgetedPool&)> fn) override {
    for (auto& [key, pool] : pools_) fn(*pool);
  }
  const PoolMap& pools() const { return pools_; }
  // The hosts of database `db` as this worker knows them, created on first use; every pool of
  // the database shares them.
  HostSelector& HostsFor(const config::DatabaseConfig& db) override;
  const absl::flat_hash_map<std::string, std::unique_ptr<HostSelector>>& host_selectors() const {
    return hosts_by_database_;
  }
  // A server at `address` told its role (a login, or in_hot_standby reported later): every
  // database listing that host learns it, and those it no longer fits retire their servers there.
  void OnHostRole(const config::HostAddress& address, bool in_hot_standby, absl::Time now) override;
  // Every pool of database `name`.
  void ForEachPoolOf(std::string_view name, const std::function<void(Pool&)>& fn);
  // Opens a server connection for `pool` to `address` (the budget already agreed). Null when
  // connect fails at once.
  ServerConn* OpenServer(Pool* pool, const config::HostAddress& address,
                         const net::ResolvedAddress& resolved) override;
  // A closed server leaves the directory; deleted after the event batch.
  void DeleteServer(ServerConn* server) override;
  // A server a sibling handed over, registered with the loop; null when it cannot be.
  ServerConn* AdoptServer(Pool* pool, int fd, const ServerHandoff& moved) override;
  // One pool per pod: the sibling hand-off sockets (null = no siblings) and what arrives on them
  // (`fd` is ours: a kServer's socket, else -1).
  ServerMover* server_mover() const override { return server_mover_; }
  void set_server_mover(ServerMover* mover) { server_mover_ = mover; }
  void OnHandoff(HandoffMessage message, int fd);
  // A sibling's clients wait on a full database or user budget: close an idle server of a pool
  // of this worker that shares it, and tell the sibling.
  void EvictForSibling(const HandoffMessage& request);
  // Live servers by id, so callbacks holding only an id (cancels) never touch a freed server.
  ServerConn* FindServer(uint64_t id) const override;

  // ClientHost: the worker's side of a client's life before and outside pools.
  void MoveClient(ClientConn* client, ClientState state) override;
  void DeleteClient(ClientConn* client) override;
  void RunAuthQuery(ClientConn* client, const config::DatabaseConfig& db) override;
  // pool.max_concurrent_logins: takes a login slot (false = the worker is at the cap); each
  // successful TryBeginLogin is paired with one EndLogin.
  [[nodiscard]] bool TryBeginLogin() override;
  void EndLogin() override { --logins_in_progress_; }
  // The admin console (null = the "pgfleet" database is an ordinary name).
  AdminConsoleHandler* admin_console() const override { return admin_console_; }
  std::string_view CountClient(ClientConn* client) override;
  bool AcceptsClients(const std::string& database) const override {
    return !pause_state_.IsDisabled(database);
  }
  void set_admin_console(AdminConsoleHandler* console) { admin_console_ = console; }

  // Live clients by id, for answers that arrive after the request (may return null).
  ClientConn* FindClient(uint64_t id) const;
  size_t client_count() const { return client_count_; }
  // Clients logging in (startup, auth, auth query) and on the console, for SHOW CLIENTS.
  size_t login_client_count() const;
  const base::IntrusiveList<ClientConn>& admin_clients() const {
    return clients_[ClientState::kAdmin];
  }
  void ForEachWorkerClient(const std::function<void(const ClientConn&)>& fn) const;

  // Applies a reloaded config (pool sizes, timeouts, userlist). The worker loads and checks it.
  void Reload(std::shared_ptr<const config::Config> config, auth::Userlist userlist);

  // Stops accepting work: clients are told and closed, servers closed (those whose clients were
  // mid-query once they have drained, see Pool::Shutdown).
  void CloseAll(std::string_view reason);
  // After CloseAll nothing opens a server again (the janitor's min_pool_size would otherwise
  // open some while draining servers finish, and the worker would exit with them).
  bool closed_all() const override { return closed_all_; }
  // Servers draining after their client left mid-query, in every pool.
  size_t draining_server_count() const;

 private:
  bool closed_all_ = false;
  // Clients logging in and on the console, in state order.
  std::vector<ClientConn*> WorkerClients() const;

  WorkerContext context_;
  PoolMap pools_;
  absl::flat_hash_map<std::string, std::unique_ptr<HostSelector>> hosts_by_database_;
  ServerMap servers_by_id_;
  CancelHandler cancels_;
  ServerBudget budget_;
  ClientBudget client_budget_;
  PauseState pause_state_;
  AdminConsoleHandler* admin_console_ = nullptr;
  ServerMover* server_mover_ = nullptr;
  // The worker's client states; pooled states live in each pool.
  ClientLists clients_{ClientState::kStartup, ClientState::kAuth, ClientState::kAuthQuery,
                       ClientState::kAdmin};
  absl::flat_hash_map<uint64_t, ClientConn*> clients_by_id_;
  size_t client_count_ = 0;
  size_t logins_in_progress_ = 0;
  // Last: its timer must stop before what it sweeps goes.
  Janitor janitor_;
};

}  // namespace pgfleet::pool
