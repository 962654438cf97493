// The worker's periodic sweep (every 100 ms): clients that take too long to log in, cancels that
// wait too long, and each pool's maintenance (timeouts, min_pool_size, reserve pool, lifetimes).
#pragma once

#include "pooler/cancel/cancel_handler.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/worker_context.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/pool.h"

namespace pgfleet::pool {

class Janitor {
 public:
  // Everything referenced outlives the janitor; `login_clients` holds the worker's clients before
  // they join a pool (startup, auth, auth query).
  Janitor(WorkerContext& context, const ClientLists& login_clients, CancelHandler& cancels,
          const PoolMap& pools);
  ~Janitor();
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // One sweep at `now` (the timer calls it; tests may too).
  void Sweep(absl::Time now);

 private:
  void ExpireLogins(absl::Time now);

  WorkerContext& context_;
  const ClientLists& login_clients_;
  CancelHandler& cancels_;
  const PoolMap& pools_;
  net::EventLoop::TimerId timer_ = 0;
};

}  // namespace pgfleet::pool
