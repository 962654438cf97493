// Socket set-up: listeners (TCP with SO_REUSEPORT, unix), outbound connects and option tuning.
// All sockets are non-blocking and close-on-exec unless noted.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pooler/net/resolver.h"

namespace pgfleet::net {

// UNAVAILABLE with what failed and errno's text, for the calls of this library.
absl::Status Errno(std::string_view what);

// A TCP listener on `address:port` ("*"/"0.0.0.0" = any IPv4, "::" = any IPv6) with
// SO_REUSEADDR and SO_REUSEPORT, so several worker processes can share the port.
absl::StatusOr<int> ListenTcp(const std::string& address, int port, int backlog);
// A unix listener at `dir`/.s.PGSQL.`port` (a stale file is replaced), with the file's `mode`
// (0777 like PostgreSQL's default) and `group` (empty: the process's).
struct UnixSocketAccess {
  int mode = 0777;
  std::string group;
};
absl::StatusOr<int> ListenUnix(const std::string& dir, int port, int backlog,
                               const UnixSocketAccess& access = {});
// The port a bound socket listens on (to report `listen.port: 0`).
int BoundPort(int fd);

// Starts a non-blocking connect to `host:port` (or the unix socket in directory `host`).
// On success the fd is connecting or connected; completion is signalled by EPOLLOUT. A name is
// resolved now, blocking: server connects go through net::Resolver, off the loop.
absl::StatusOr<int> ConnectTo(const std::string& host, int port);
// A non-blocking connect to an address already resolved.
absl::StatusOr<int> ConnectToAddress(const ResolvedAddress& address);
// The address a connected socket's peer has: where a CancelRequest for its backend goes, the
// same address even when a host name has several.
absl::StatusOr<ResolvedAddress> PeerOf(int fd);
// "10.0.0.1:5432", "[::1]:5432" or the unix socket's path.
std::string AddressText(const ResolvedAddress& address);
// SO_ERROR after EPOLLOUT on a connecting socket: 0 = connected.
int PendingSocketError(int fd);

// TCP_NODELAY and keepalive on TCP sockets; no-op for unix sockets.
void TuneSocket(int fd, bool keepalive);
// The same, with keepalive's timings and TCP_USER_TIMEOUT: a zero keeps the system's value.
struct KeepaliveTimings {
  int idle_seconds = 0;
  int interval_seconds = 0;
  int count = 0;
  int user_timeout_ms = 0;
};
void TuneSocket(int fd, bool keepalive, const KeepaliveTimings& timings);
// SO_SNDBUF and SO_RCVBUF (PgBouncer's tcp_socket_buffer); 0 keeps the system's.
void SetSocketBuffers(int fd, int bytes);

// "1.2.3.4:5678" or "unix" for a peer address, for logs.
std::string PeerAddressString(const sockaddr_storage& addr);

}  // namespace pgfleet::net
