// The admin console: the virtual database "pgfleet", reached with psql by a user listed in
// admin.users (every command) or admin.stats_users (SHOW only). Answers PgBouncer's commands for
// the whole pod: SHOW gathers every worker's stats through PodFanout, and PAUSE, RESUME,
// RECONNECT, KILL, RELOAD and WAIT_CLOSE run on every worker. A client's queries are answered in
// order, one at a time; an answer for a client that left meanwhile is dropped.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "pooler/admin/command.h"
#include "pooler/admin/fanout.h"
#include "pooler/config/config.h"
#include "pooler/conn/admin_hook.h"
#include "pooler/pool/pool_registry.h"

namespace pgfleet::admin {

struct ConsoleOptions {
  std::string version;
  uint32_t own_peer_id = 0;
  // The fleet-wide config (before the per-worker split), current after reloads.
  std::function<std::shared_ptr<const config::Config>()> fleet_config;
  // SHUTDOWN: stops the pod gracefully (the supervisor's SIGTERM path).
  std::function<void()> shutdown;
};

class Console final : public pool::AdminConsoleHandler {
 public:
  // `registry` and `fanout` outlive the console.
  Console(pool::PoolRegistry& registry, PodFanout& fanout, ConsoleOptions options);

  bool MayConnect(const std::string& user) const override;
  void HandleQuery(pool::ClientConn& client, std::string_view sql) override;

 private:
  struct Session {
    bool busy = false;
    std::deque<std::string> queued;
  };
  // Runs one statement for `client_id`; calls Reply() exactly once, now or later.
  void Run(uint64_t client_id, const std::string& user, std::string sql);
  void RunShow(uint64_t client_id, const Command& command);
  void RunAction(uint64_t client_id, const Command& command);
  // SHUTDOWN WAIT_FOR_SERVERS | WAIT_FOR_CLIENTS.
  void RunWaitingShutdown(uint64_t client_id, ShutdownMode mode);
  // Sends `request` to every worker of the pod and answers the client with `tag` (or the
  // workers' errors); `after`, when set, runs once all succeeded (the client is closed first).
  void Broadcast(uint64_t client_id, const std::string& tag,
                 const peering::v1::AdminCommandRequest& request, absl::Duration deadline,
                 std::function<void()> after);
  // Sends `bytes` (the answer, without ReadyForQuery) then ReadyForQuery if the client is still
  // there, and starts its next queued statement. `close_after` closes the client afterwards.
  void Reply(uint64_t client_id, const std::string& bytes, bool close_after = false);
  bool IsAdmin(const std::string& user) const;

  pool::PoolRegistry& registry_;
  PodFanout& fanout_;
  ConsoleOptions options_;
  absl::flat_hash_map<uint64_t, Session> sessions_;
};

}  // namespace pgfleet::admin
