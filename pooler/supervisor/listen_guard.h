// Refuses to start a second pgfleet (or anything) on an address and port that something already
// listens on. The pod's own listeners use SO_REUSEPORT so that its workers share the port, and on
// Linux that would let a second pgfleet of the same user bind the port too and silently take a
// share of new clients.
//
// Two checks, before the supervisor binds anything:
//  - a lock: a unix socket bound to `pgfleet-listen-<address>-<port>` in the abstract namespace and
//    listening for the supervisor's life. Two pgfleets that start at the same moment cannot both
//    pass the probe, and the one refused learns the holder's pid by connecting (SO_PEERCRED). The
//    abstract namespace belongs to the network namespace, as the port does, and a name is freed
//    with the last descriptor of its socket: a pgfleet that is killed leaves no lock file behind;
//  - a probe: a socket bound to the address and port WITHOUT SO_REUSEPORT (with SO_REUSEADDR, so
//    that connections in TIME_WAIT do not count) fails with EADDRINUSE while any socket listens
//    there, reuseport or not, pgfleet or not, whatever lock directory it used. The probe is closed
//    at once; the pod's SO_REUSEPORT listeners are bound right after, while the lock is held.
// The unix socket is probed by connecting to it: a live one is refused rather than replaced.
// Workers and rolling restarts are not affected: they inherit the supervisor's sockets and never
// bind.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pgfleet::supervisor {

class ListenGuard {
 public:
  ListenGuard() = default;
  ListenGuard(const ListenGuard&) = delete;
  ListenGuard& operator=(const ListenGuard&) = delete;
  ~ListenGuard();

  // Takes the lock for `address:port` and probes the port (port 0: no lock and no probe, the
  // kernel picks a free one) and the unix socket `unix_socket_dir`/.s.PGSQL.`port` (when set).
  // FailedPrecondition naming the address and, when it can be found, the process serving it.
  [[nodiscard]] absl::Status Acquire(const std::string& address, int port,
                                     const std::string& unix_socket_dir);
  // Once the port is known (listen.port: 0): probes the unix socket for it.
  [[nodiscard]] static absl::Status CheckUnixSocketFree(const std::string& unix_socket_dir,
                                                        int port);

  // Each address of a pod that listens on several is acquired in turn.
  bool locked() const { return !lock_fds_.empty(); }

 private:
  std::vector<int> lock_fds_;
};

// The lock's name in the abstract namespace, without its leading NUL (an empty address is "*").
std::string ListenLockName(const std::string& address, int port);

// Who listens on TCP `port` at `address` (or on any address when `address` is a wildcard), from
// /proc/net/tcp{,6} and the processes' descriptors this process may read: "pid 123 (postgres)";
// empty when none is found.
std::string FindTcpListener(const std::string& address, int port);

}  // namespace pgfleet::supervisor
