// Logins that wait for a query on one of the pool's servers (auth_query, the startup settings
// check), and the startup settings check itself.
//
// A client's startup settings (`options` -c switches, or parameters that name a setting) become
// its session's settings, sent to each server it gets as its SETs are. PostgreSQL refuses a bad
// one at login (a value it cannot parse, a setting only a superuser may change, one fixed at
// connection start); so does pgfleet: before the welcome, a server of the pool tries them
// (ServerConn::StartSettingsCheck) and the client gets PostgreSQL's error as a FATAL. Verdicts
// are kept per pool (its server user is who runs the SETs): a pool's clients with the same
// settings cost one check.
#include <string>

#include "pooler/pool/pool.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {
namespace {

// Enough for the few combinations a pool's applications send; a client sending ever new values
// costs a check each, and the cache starts over.
constexpr size_t kMaxCheckedSettings = 1024;

std::string StartupSettingsKey(std::span<const protocol::StartupSetting> settings) {
  std::string key;
  for (const auto& setting : settings) {
    key.append(setting.name).push_back('\0');
    key.append(setting.value).push_back('\0');
  }
  return key;
}

}  // namespace

bool Pool::StartupSettingsKnownGood(ClientConn* client) {
  if (client->startup_settings().empty()) return true;
  auto verdict = checked_settings_.find(StartupSettingsKey(client->startup_settings()));
  if (verdict == checked_settings_.end()) {
    MoveClient(client, ClientState::kSettingsCheck);
    settings_check_waiters_.push_back(client);
    ServeWaiting();
    return false;
  }
  if (!verdict->second.sqlstate.empty()) {
    client->Fatal(verdict->second.sqlstate, verdict->second.message);
    return false;
  }
  return true;
}

void Pool::ServeLookupWaiters(int64_t now) {
  // Logins that wait for a lookup on a server; rare, so the common path skips them at once.
  if (!auth_query_waiters_.empty()) {
    ServeLookups(auth_query_waiters_, now, [this](ServerConn* server, ClientConn* client) {
      // The client's database's query: this pool is its auth_user's, maybe in auth_dbname.
      const auto& config = context_.config();
      const auto db = config.FindDatabase(client->database());
      const std::string query =
          db.has_value() ? config.EffectiveAuth(*db).query : config.auth.query;
      return server->StartAuthQuery(client, query, client->user());
    });
  }
  if (!settings_check_waiters_.empty()) {
    ServeLookups(settings_check_waiters_, now, [](ServerConn* server, ClientConn* client) {
      return server->StartSettingsCheck(client, client->startup_settings());
    });
  }
}

void Pool::ServeLookups(std::vector<ClientConn*>& waiters, int64_t now,
                        const std::function<bool(ServerConn*, ClientConn*)>& start) {
  while (!waiters.empty()) {
    ServerConn* server = TakeIdleServer(now);
    if (server == nullptr) return;
    ClientConn* client = waiters.front();
    waiters.erase(waiters.begin());
    MoveServer(server, ServerState::kTesting);
    client->set_lookup_server(server);
    if (!start(server, client)) server->Close("write failed");
  }
}

void Pool::OnStartupSettingsChecked(ClientConn* client, const LookupAnswer& answer) {
  if (client->closed() || client->state() != ClientState::kSettingsCheck) return;
  if (answer.error.empty() || !answer.sqlstate.empty()) {
    // PostgreSQL's own verdict; a connection that failed under the check decides nothing.
    if (checked_settings_.size() >= kMaxCheckedSettings) checked_settings_.clear();
    checked_settings_[StartupSettingsKey(client->startup_settings())] =
        SettingsVerdict{answer.sqlstate, answer.error};
  }
  if (!answer.error.empty()) {
    client->Fatal(
        answer.sqlstate.empty() ? protocol::sqlstate::kConnectionFailure : answer.sqlstate,
        answer.error);
    return;
  }
  AdmitClient(client);
}

}  // namespace pgfleet::pool
