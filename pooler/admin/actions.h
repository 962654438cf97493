// The admin commands that act on a worker's pools (PAUSE, RESUME, RECONNECT, KILL, RELOAD,
// WAIT_CLOSE), applied to this worker. The console broadcasts each one to every worker of the pod,
// and siblings run it here through the peering service. Loop thread only.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "pgfleet/peering/v1/peering.pb.h"
#include "pooler/net/event_loop.h"
#include "pooler/pool/pool_registry.h"

namespace pgfleet::admin {

class AdminActions {
 public:
  using Done = std::function<void(const peering::v1::AdminCommandReply&)>;

  // `reload` re-reads the config file (the worker's SIGHUP path).
  AdminActions(pool::PoolRegistry& registry, std::function<absl::Status()> reload);
  ~AdminActions();
  AdminActions(const AdminActions&) = delete;
  AdminActions& operator=(const AdminActions&) = delete;

  // Applies `request` and calls `done` once it took effect: at once for most commands; PAUSE
  // once no server of the paused pools is linked to a client, WAIT_CLOSE once no server waits
  // to be closed.
  void Apply(const peering::v1::AdminCommandRequest& request, Done done);
  // How this worker stops taking new clients (SHUTDOWN WAIT_FOR_CLIENTS).
  void set_stop_accepting(std::function<void()> stop) { stop_accepting_ = std::move(stop); }
  // How this worker applies SET key = value (the worker's config, reloaded with it).
  void set_apply_setting(std::function<absl::Status(const std::string&, const std::string&)> set) {
    apply_setting_ = std::move(set);
  }

 private:
  struct Wait {
    std::function<bool()> ready;
    std::function<void()> then;
  };
  // Calls `then` once `ready()` holds (checked now and every few milliseconds).
  void WaitUntil(std::function<bool()> ready, std::function<void()> then);
  void Poll();
  // Runs `fn` on every pool of `database` (every pool when empty).
  void ForPools(const std::string& database, const std::function<void(pool::Pool&)>& fn);

  pool::PoolRegistry& registry_;
  std::function<absl::Status()> reload_;
  std::function<void()> stop_accepting_;
  std::function<absl::Status(const std::string&, const std::string&)> apply_setting_;
  std::vector<Wait> waits_;
  net::EventLoop::TimerId timer_ = 0;
};

}  // namespace pgfleet::admin
