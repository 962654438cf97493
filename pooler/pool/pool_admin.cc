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
  for (auto* list : {&login_servers_, &active_servers_, &testing_servers_}) {
    for (ServerConn* s = list->front(); s != nullptr; s = list->Next(s)) s->MarkCloseOnRelease();
  }
  CloseIdleServers("reconnect requested by admin");
}

bool Pool::HasServersToClose() const {
  for (const auto* list : {&login_servers_, &idle_servers_, &active_servers_, &testing_servers_}) {
    for (const ServerConn* s = list->front(); s != nullptr; s = list->Next(s)) {
      if (s->close_on_release()) return true;
    }
  }
  return false;
}

void Pool::ForEachClient(const std::function<void(const ClientConn&)>& fn) const {
  for (const auto* list :
       {&active_clients_, &waiting_clients_, &idle_clients_, &welcome_clients_}) {
    for (const ClientConn* c = list->front(); c != nullptr; c = list->Next(c)) fn(*c);
  }
}

void Pool::ForEachServer(const std::function<void(const ServerConn&)>& fn) const {
  for (const auto* list : {&active_servers_, &idle_servers_, &testing_servers_, &login_servers_}) {
    for (const ServerConn* s = list->front(); s != nullptr; s = list->Next(s)) fn(*s);
  }
}

}  // namespace pgfleet::pool
