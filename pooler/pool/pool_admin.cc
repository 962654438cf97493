// Pool: the admin console's controls (PAUSE/RESUME, RECONNECT, WAIT_CLOSE) and its iteration over
// connections for SHOW CLIENTS/SERVERS. Kept apart from pool.cc, which is the data path.
#include "pooler/pool/pool.h"

namespace pgfleet::pool {

void Pool::SetPaused(bool paused) {
  if (paused_ == paused) return;
  paused_ = paused;
  // Resuming: queued clients get servers (and servers are opened for them) right away.
  if (!paused_) ServeWaiting();
}

void Pool::Reconnect() {
  for (ServerConn* s :
       servers_.In({ServerState::kConnecting, ServerState::kLogin, ServerState::kActive,
                    ServerState::kTesting, ServerState::kCanceling, ServerState::kDraining})) {
    s->MarkCloseOnRelease();
  }
  CloseIdleServers("reconnect requested by admin");
  if (hub_server_ != nullptr) hub_server_->Close("reconnect requested by admin");
  // The servers behind the address may have changed (that is why one reconnects): new clients
  // wait for the next login's parameters instead of hearing the old ones.
  welcome_known_ = false;
}

bool Pool::HasServersToClose() const {
  for (const ServerConn* s : servers_.In(
           {ServerState::kConnecting, ServerState::kLogin, ServerState::kIdle, ServerState::kActive,
            ServerState::kTesting, ServerState::kCanceling, ServerState::kDraining})) {
    if (s->close_on_release()) return true;
  }
  return false;
}

void Pool::ForEachClient(const std::function<void(const ClientConn&)>& fn) const {
  for (const ClientConn* c :
       clients_.In({ClientState::kActive, ClientState::kWaiting, ClientState::kIdle,
                    ClientState::kWelcome, ClientState::kSettingsCheck})) {
    fn(*c);
  }
}

void Pool::ForEachServer(const std::function<void(const ServerConn&)>& fn) const {
  for (const ServerConn* s :
       servers_.In({ServerState::kActive, ServerState::kIdle, ServerState::kTesting,
                    ServerState::kCanceling, ServerState::kDraining, ServerState::kListening,
                    ServerState::kConnecting, ServerState::kLogin})) {
    fn(*s);
  }
}

}  // namespace pgfleet::pool
