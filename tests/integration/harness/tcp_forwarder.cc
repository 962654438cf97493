#include "tests/integration/harness/tcp_forwarder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

namespace pgfleet::testing {

namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

}  // namespace

TcpForwarder::TcpForwarder(int target_port) : target_port_(target_port) {
  Listen();
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpForwarder::~TcpForwarder() {
  stop_ = true;
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
  }
  for (auto& relay : relays_) relay.join();
}

void TcpForwarder::Listen() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Loopback(port_);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    close(fd);
    throw std::runtime_error("tcp_forwarder: cannot listen");
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::lock_guard<std::mutex> lock(mu_);
  port_ = ntohs(addr.sin_port);
  listen_fd_ = fd;
  changed_.notify_all();
}

void TcpForwarder::StopAccepting() {
  // The acceptor closes the socket itself, between polls: closed while a poll holds it, the
  // socket would live (and complete handshakes) until that poll returns.
  std::unique_lock<std::mutex> lock(mu_);
  stop_accepting_ = true;
  if (!changed_.wait_for(lock, std::chrono::seconds(5), [&] { return listen_fd_ < 0; })) {
    throw std::runtime_error("tcp_forwarder: the acceptor did not stop within 5 s");
  }
}

void TcpForwarder::ResumeAccepting() { Listen(); }

void TcpForwarder::AcceptLoop() {
  while (!stop_) {
    int fd;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_accepting_ && listen_fd_ >= 0) {
        close(listen_fd_);
        listen_fd_ = -1;
        stop_accepting_ = false;
        changed_.notify_all();
      }
      // Stopped: until ResumeAccepting listens again (the bound lets the destructor's stop_ in).
      if (listen_fd_ < 0) {
        changed_.wait_for(lock, std::chrono::milliseconds(20), [&] { return listen_fd_ >= 0; });
        continue;
      }
      fd = listen_fd_;
    }
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (listen_fd_ != fd) continue;  // stopped meanwhile
    const int client = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in target = Loopback(target_port_);
    if (connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
      close(client);
      close(server);
      continue;
    }
    ++accepted_;
    relays_.emplace_back([client, server, this] { Relay(client, server, &stop_); });
  }
}

void TcpForwarder::Relay(int a, int b, const std::atomic<bool>* stop) {
  char buffer[16384];
  pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  while (!*stop) {
    if (poll(fds, 2, 50) <= 0) continue;
    bool done = false;
    for (int i = 0; i < 2 && !done; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n <= 0) {
        done = true;
        break;
      }
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = write(fds[1 - i].fd, buffer + off, static_cast<size_t>(n - off));
        if (w <= 0) {
          done = true;
          break;
        }
        off += w;
      }
    }
    if (done) break;
  }
  close(a);
  close(b);
}

}  // namespace pgfleet::testing
