// Admin commands applied to one worker.
#include "pooler/admin/actions.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::admin {
namespace {

using peering::v1::AdminCommandReply;
using peering::v1::AdminCommandRequest;

constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

AdminCommandReply Ok() {
  AdminCommandReply reply;
  reply.set_ok(true);
  return reply;
}

AdminCommandReply Error(std::string message) {
  AdminCommandReply reply;
  reply.set_ok(false);
  reply.set_error(std::move(message));
  return reply;
}

}  // namespace

AdminActions::AdminActions(pool::PoolRegistry& registry, std::function<absl::Status()> reload)
    : registry_(registry), reload_(std::move(reload)) {}

AdminActions::~AdminActions() {
  if (timer_ != 0) registry_.loop().CancelTimer(timer_);
}

void AdminActions::ForPools(const std::string& database,
                            const std::function<void(pool::Pool&)>& fn) {
  // Collected first: fn may close connections, which never removes pools, but stay safe.
  std::vector<pool::Pool*> pools;
  for (const auto& [key, pool] : registry_.pools()) {
    if (database.empty() || key.first == database) pools.push_back(pool.get());
  }
  for (pool::Pool* pool : pools) fn(*pool);
}

void AdminActions::WaitUntil(std::function<bool()> ready, std::function<void()> then) {
  if (ready()) {
    then();
    return;
  }
  waits_.push_back({std::move(ready), std::move(then)});
  if (timer_ == 0) timer_ = registry_.loop().RunEvery(kPollInterval, [this] { Poll(); });
}

void AdminActions::Poll() {
  std::vector<std::function<void()>> due;
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (it->ready()) {
      due.push_back(std::move(it->then));
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
  if (waits_.empty() && timer_ != 0) {
    registry_.loop().CancelTimer(timer_);
    timer_ = 0;
  }
  for (auto& fn : due) fn();
}

void AdminActions::Apply(const AdminCommandRequest& request, Done done) {
  const std::string db = request.database();
  auto& pause = registry_.pause_state();
  switch (request.command()) {
    case AdminCommandRequest::COMMAND_PAUSE: {
      PGFLEET_LOG(kInfo, "admin_pause", "db=", db.empty() ? "*" : db);
      pause.Pause(db);
      ForPools(db, [](pool::Pool& p) { p.SetPaused(true); });
      WaitUntil(
          [this, db] {
            bool drained = true;
            ForPools(db, [&drained](pool::Pool& p) { drained &= !p.paused() || p.PauseDrained(); });
            return drained;
          },
          [this, db, done] {
            // PgBouncer's PAUSE also disconnects from the servers, e.g. for a database restart.
            ForPools(db, [](pool::Pool& p) {
              if (p.paused()) p.CloseIdleServers("paused by admin");
            });
            PGFLEET_LOG(kInfo, "admin_paused", "db=", db.empty() ? "*" : db);
            done(Ok());
          });
      return;
    }
    case AdminCommandRequest::COMMAND_RESUME: {
      if (!db.empty() && pause.all()) {
        done(Error("every database is paused: RESUME without a database name"));
        return;
      }
      PGFLEET_LOG(kInfo, "admin_resume", "db=", db.empty() ? "*" : db);
      pause.Resume(db);
      ForPools(db, [](pool::Pool& p) { p.SetPaused(false); });
      done(Ok());
      return;
    }
    case AdminCommandRequest::COMMAND_RECONNECT:
      PGFLEET_LOG(kInfo, "admin_reconnect", "db=", db.empty() ? "*" : db);
      ForPools(db, [](pool::Pool& p) { p.Reconnect(); });
      done(Ok());
      return;
    case AdminCommandRequest::COMMAND_KILL:
      // Without a name: every database (the console's sessions stay).
      PGFLEET_LOG(kInfo, "admin_kill", "db=", db.empty() ? "*" : db);
      pause.Pause(db);
      ForPools(db, [](pool::Pool& p) {
        p.SetPaused(true);
        p.Shutdown("database killed by admin");
      });
      done(Ok());
      return;
    case AdminCommandRequest::COMMAND_RELOAD: {
      absl::Status status = reload_ ? reload_() : absl::OkStatus();
      done(status.ok() ? Ok() : Error(std::string(base::Sv(status.message()))));
      return;
    }
    case AdminCommandRequest::COMMAND_SCHEMA_CHANGED:
      // The pod's epoch is shared: this worker moves it for its siblings too.
      PGFLEET_LOG(kInfo, "schema_changed_by_peer");
      registry_.context().statements().OnRemoteSchemaChange();
      done(Ok());
      return;
    case AdminCommandRequest::COMMAND_DISABLE:
    case AdminCommandRequest::COMMAND_ENABLE: {
      const bool disable = request.command() == AdminCommandRequest::COMMAND_DISABLE;
      PGFLEET_LOG(kInfo, disable ? "admin_disable" : "admin_enable", "db=", db);
      if (disable) {
        pause.Disable(db);
      } else {
        pause.Enable(db);
      }
      done(Ok());
      return;
    }
    case AdminCommandRequest::COMMAND_KILL_CLIENT: {
      // Ids are fleet-wide (SHOW CLIENTS): the peer id in the high half. Only the owner acts.
      const uint64_t id = request.client_id();
      if ((id >> 32) == registry_.context().peer_id()) {
        if (pool::ClientConn* client = registry_.FindClient(id & 0xffffffffu)) {
          PGFLEET_LOG(kInfo, "admin_kill_client", "client=", client->id());
          client->Fatal(protocol::sqlstate::kAdminShutdown, "client killed by admin");
        }
      }
      done(Ok());
      return;
    }
    case AdminCommandRequest::COMMAND_WAIT_FOR_CLIENTS:
      PGFLEET_LOG(kInfo, "admin_wait_for_clients");
      if (stop_accepting_) stop_accepting_();
      WaitUntil([this] { return registry_.client_count() == registry_.admin_clients().size(); },
                [done] { done(Ok()); });
      return;
    case AdminCommandRequest::COMMAND_SET: {
      PGFLEET_LOG(kInfo, "admin_set", "setting=", request.setting(),
                  " value=", base::LogQuote(request.value()));
      absl::Status status = apply_setting_ ? apply_setting_(request.setting(), request.value())
                                           : absl::UnimplementedError("SET is not available");
      done(status.ok() ? Ok() : Error(std::string(base::Sv(status.message()))));
      return;
    }
    case AdminCommandRequest::COMMAND_WAIT_CLOSE:
      WaitUntil(
          [this, db] {
            bool none = true;
            ForPools(db, [&none](pool::Pool& p) { none &= !p.HasServersToClose(); });
            return none;
          },
          [done] { done(Ok()); });
      return;
    default:
      done(Error("unknown admin command"));
      return;
  }
}

}  // namespace pgfleet::admin
