// What a pool needs from the worker that owns it (PoolRegistry implements it): the server budget,
// cancels, the database's hosts, the hand-off to siblings, and opening and deleting servers. The
// pool includes this, never pool_registry.h, so the registry depends on the pool and not back.
#pragma once

#include "absl/time/time.h"
#include "pooler/cancel/cancel_handler.h"
#include "pooler/config/config.h"
#include "pooler/conn/worker_context.h"
#include "pooler/handoff/server_mover.h"
#include "pooler/pool/host_selector.h"
#include "pooler/pool/server_budget.h"

namespace pgfleet::pool {

class Pool;
class ServerConn;

class PoolHost {
 public:
  virtual WorkerContext& context() = 0;
  virtual ServerBudget& budget() = 0;
  virtual CancelHandler& cancels() = 0;
  // The hosts of database `db` as this worker knows them; every pool of the database shares them.
  virtual HostSelector& HostsFor(const config::DatabaseConfig& db) = 0;
  // A server at `address` told its role: every database listing that host learns it.
  virtual void OnHostRole(const config::HostAddress& address, bool in_hot_standby,
                          absl::Time now) = 0;
  // The sibling hand-off sockets (null = no siblings).
  virtual ServerMover* server_mover() const = 0;
  // The worker stopped taking work: nothing opens a server again.
  virtual bool closed_all() const = 0;
  // Opens a server connection for `pool` to `address` (the budget already agreed). Null when
  // connect fails at once.
  // `resolved`: where `address` resolved to (net::Resolver).
  virtual ServerConn* OpenServer(Pool* pool, const config::HostAddress& address,
                                 const net::ResolvedAddress& resolved) = 0;
  // A server a sibling handed over, registered with the loop; null when it cannot be.
  virtual ServerConn* AdoptServer(Pool* pool, int fd, const ServerHandoff& moved) = 0;
  // A closed server leaves the worker; deleted after the event batch.
  virtual void DeleteServer(ServerConn* server) = 0;

 protected:
  ~PoolHost() = default;
};

}  // namespace pgfleet::pool
