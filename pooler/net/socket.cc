// Socket helpers.
#include "pooler/net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "pooler/base/strings.h"

namespace pgfleet::net {
absl::Status Errno(std::string_view what) {
  return absl::UnavailableError(base::StrCat(what, ": ", strerror(errno)));
}

namespace {

std::string UnixPath(const std::string& dir, int port) {
  return base::StrCat(dir, "/.s.PGSQL.", port);
}

}  // namespace

absl::StatusOr<int> ListenTcp(const std::string& address, int port, int backlog) {
  std::string host = address;
  if (host == "*") host = "0.0.0.0";
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        base::StrCat("cannot resolve listen address ", address, ": ", gai_strerror(rc)));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Errno("socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (res->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
    auto status = Errno(base::StrCat("bind ", address, ":", port));
    freeaddrinfo(res);
    close(fd);
    return status;
  }
  freeaddrinfo(res);
  if (listen(fd, backlog) != 0) {
    close(fd);
    return Errno("listen");
  }
  return fd;
}

absl::StatusOr<int> ListenUnix(const std::string& dir, int port, int backlog,
                               const UnixSocketAccess& access) {
  std::string path = UnixPath(dir, port);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(base::StrCat("unix socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket(AF_UNIX)");
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    auto status = Errno(base::StrCat("bind ", path));
    close(fd);
    return status;
  }
  if (chmod(path.c_str(), static_cast<mode_t>(access.mode)) != 0) {
    auto status = Errno(base::StrCat("chmod ", path));
    close(fd);
    return status;
  }
  if (!access.group.empty()) {
    const struct group* group = getgrnam(access.group.c_str());
    if (group == nullptr) {
      close(fd);
      return absl::InvalidArgumentError(
          base::StrCat("unix_socket_group: no such group: ", access.group));
    }
    if (chown(path.c_str(), static_cast<uid_t>(-1), group->gr_gid) != 0) {
      auto status = Errno(base::StrCat("chown ", path, " to group ", access.group));
      close(fd);
      return status;
    }
  }
  if (listen(fd, backlog) != 0) {
    close(fd);
    return Errno("listen");
  }
  return fd;
}

int BoundPort(int fd) {
  struct sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

absl::StatusOr<int> ConnectToAddress(const ResolvedAddress& address) {
  const int fd = socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length);
  if (rc != 0 && errno != EINPROGRESS && errno != EAGAIN) {
    auto status = Errno(base::StrCat("connect to ", AddressText(address)));
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<int> ConnectTo(const std::string& host, int port) {
  auto address = ResolveNow(host, port);
  if (!address.ok()) return address.status();
  return ConnectToAddress(*address);
}

absl::StatusOr<ResolvedAddress> PeerOf(int fd) {
  ResolvedAddress address;
  address.length = sizeof(address.storage);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address.storage), &address.length) != 0) {
    return Errno("getpeername");
  }
  return address;
}

std::string AddressText(const ResolvedAddress& address) {
  if (address.storage.ss_family == AF_UNIX) {
    return reinterpret_cast<const sockaddr_un*>(&address.storage)->sun_path;
  }
  return PeerAddressString(address.storage);
}

int PendingSocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

void TuneSocket(int fd, bool keepalive) { TuneSocket(fd, keepalive, KeepaliveTimings{}); }

void TuneSocket(int fd, bool keepalive, const KeepaliveTimings& timings) {
  struct sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (timings.user_timeout_ms > 0) {
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timings.user_timeout_ms,
               sizeof(timings.user_timeout_ms));
  }
  if (!keepalive) return;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const std::pair<int, int> knobs[] = {{TCP_KEEPIDLE, timings.idle_seconds},
                                       {TCP_KEEPINTVL, timings.interval_seconds},
                                       {TCP_KEEPCNT, timings.count}};
  for (const auto& [option, value] : knobs) {
    if (value > 0) setsockopt(fd, IPPROTO_TCP, option, &value, sizeof(value));
  }
}

void SetSocketBuffers(int fd, int bytes) {
  if (bytes <= 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

std::string PeerAddressString(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return base::StrCat(host, ":", ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return base::StrCat("[", host, "]:", ntohs(in6->sin6_port));
  }
  return "unix";
}

}  // namespace pgfleet::net
