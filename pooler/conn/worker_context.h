// What every connection of a worker reads and counts, without the registry that owns the pools:
// the config in force, credentials sources, TLS contexts, the loop, counters, randomness, the
// tracked parameters and the worker-wide prepared statement names. Connections and pools hold
// this instead of PoolRegistry (docs/architecture.md, "Threads and the event loop").
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "pooler/auth/hba.h"
#include "pooler/auth/userlist.h"
#include "pooler/base/random.h"
#include "pooler/config/config.h"
#include "pooler/conn/stats.h"
#include "pooler/conn/tls_policy.h"
#include "pooler/net/event_loop.h"
#include "pooler/net/resolver.h"
#include "pooler/relay/param_sync.h"
#include "pooler/relay/prepared_statements.h"

namespace pgfleet::pool {

class WorkerContext {
 public:
  WorkerContext(net::EventLoop& loop, std::shared_ptr<const config::Config> config,
                auth::Userlist userlist, uint32_t peer_id, base::RandomSource& random)
      : loop_(loop),
        config_(std::move(config)),
        userlist_(std::move(userlist)),
        peer_id_(peer_id),
        random_(random),
        tracked_params_(config_->pool.track_extra_parameters),
        resolver_(loop) {}
  WorkerContext(const WorkerContext&) = delete;
  WorkerContext& operator=(const WorkerContext&) = delete;

  net::EventLoop& loop() { return loop_; }
  const config::Config& config() const { return *config_; }
  const auth::Userlist& userlist() const { return userlist_; }
  // The cancel-key prefix of this worker (docs/architecture.md, "Cancel keys").
  uint32_t peer_id() const { return peer_id_; }
  base::RandomSource& random() { return random_; }
  WorkerCounters& counters() { return counters_; }
  const WorkerCounters& counters() const { return counters_; }
  const TrackedParamNames& tracked_params() const { return tracked_params_; }
  StatementRegistry& statements() { return statements_; }
  const StatementRegistry& statements() const { return statements_; }
  // Server host names, resolved off the loop and kept for dns_max_ttl.
  net::Resolver& resolver() { return resolver_; }
  net::Resolver::Ttls dns_ttls() const {
    return {.answer = config_->pool.dns_max_ttl, .failure = config_->pool.dns_nxdomain_ttl};
  }

  // auth.hba_file's rules (null = no hba file: every client may try auth.type). Set at start and
  // on reload; a client is checked once, when its startup packet arrives.
  const auth::HbaRules* hba() const { return hba_.get(); }
  void set_hba(std::shared_ptr<const auth::HbaRules> hba) { hba_ = std::move(hba); }
  // The `tls:` contexts (set at start and on reload, which re-reads certificate files). A
  // connection keeps the context it started with until it closes.
  const TlsContexts& tls() const { return tls_; }
  void set_tls(TlsContexts tls) { tls_ = std::move(tls); }

  // A reloaded config and userlist; the tracked parameter names stay (they size every ParamSet).
  void Apply(std::shared_ptr<const config::Config> config, auth::Userlist userlist) {
    config_ = std::move(config);
    userlist_ = std::move(userlist);
  }

  uint64_t NextConnectionId() { return ++last_connection_id_; }

 private:
  net::EventLoop& loop_;
  std::shared_ptr<const config::Config> config_;
  auth::Userlist userlist_;
  uint32_t peer_id_;
  base::RandomSource& random_;
  TrackedParamNames tracked_params_;
  WorkerCounters counters_;
  StatementRegistry statements_;
  net::Resolver resolver_;
  std::shared_ptr<const auth::HbaRules> hba_;
  TlsContexts tls_;
  uint64_t last_connection_id_ = 0;
};

}  // namespace pgfleet::pool
