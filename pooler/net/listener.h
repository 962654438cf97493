// Accepts connections on one listening socket and hands each to a callback.
#pragma once

#include <functional>
#include <string>

#include "pooler/net/event_loop.h"

namespace pgfleet::net {

class Listener final : public IoHandler {
 public:
  // `on_accept(fd, peer_address)` takes ownership of the fd (non-blocking, close-on-exec).
  using AcceptCallback = std::function<void(int fd, std::string peer_address)>;

  Listener(EventLoop& loop, int fd, AcceptCallback on_accept);
  ~Listener() override;

  [[nodiscard]] absl::Status Start();
  // Stops accepting; with `close_socket` false the socket stays open (its backlog is kept for a
  // successor process that inherits it).
  void Stop(bool close_socket);
  int fd() const { return fd_; }
  void OnIoEvent(uint32_t events) override;

 private:
  EventLoop& loop_;
  int fd_;
  AcceptCallback on_accept_;
  bool active_ = false;
};

}  // namespace pgfleet::net
