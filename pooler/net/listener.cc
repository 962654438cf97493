// Listening socket accept loop.
#include "pooler/net/listener.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pooler/base/log.h"
#include "pooler/net/socket.h"

namespace pgfleet::net {

Listener::Listener(EventLoop& loop, int fd, AcceptCallback on_accept)
    : loop_(loop), fd_(fd), on_accept_(std::move(on_accept)) {}

Listener::~Listener() { Stop(/*close_socket=*/true); }

absl::Status Listener::Start() {
  active_ = true;
  return loop_.Add(fd_, this, EPOLLIN);
}

void Listener::Stop(bool close_socket) {
  if (active_) {
    loop_.Remove(fd_);
    active_ = false;
  }
  if (close_socket && fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

void Listener::OnIoEvent(uint32_t) {
  if (!active_) return;
  // Bounded per wakeup so a connection storm cannot starve established clients.
  for (int i = 0; i < 64; ++i) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        PGFLEET_LOG(kError, "accept_failed", "error=too_many_open_files");
      }
      return;
    }
    on_accept_(fd, PeerAddressString(addr));
  }
}

}  // namespace pgfleet::net
