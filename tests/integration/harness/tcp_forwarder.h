// A loopback TCP forwarder in front of a real server: each connection it accepts is relayed to
// the target, byte for byte, on a thread of its own. The test can stop accepting (new connections
// are refused, as by a server whose listen queue is full or a proxy that restarts) while the
// connections already made go on, then accept again on the same port.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace pgfleet::testing {

class TcpForwarder {
 public:
  explicit TcpForwarder(int target_port);
  ~TcpForwarder();
  TcpForwarder(const TcpForwarder&) = delete;
  TcpForwarder& operator=(const TcpForwarder&) = delete;

  int port() const { return port_; }
  // Closes the listening socket: a connect to port() is refused until ResumeAccepting.
  void StopAccepting();
  void ResumeAccepting();
  // Connections accepted so far (refused ones are not counted).
  int accepted() const { return accepted_.load(); }

 private:
  void Listen();
  void AcceptLoop();
  static void Relay(int a, int b, const std::atomic<bool>* stop);

  int target_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  bool stop_accepting_ = false;  // under mu_: the acceptor closes the socket next
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::condition_variable changed_;  // listen_fd_ changed
  std::thread acceptor_;
  std::vector<std::thread> relays_;
};

}  // namespace pgfleet::testing
