// fd_passing.h over sendmsg/recvmsg with SCM_RIGHTS.
#include "pooler/net/fd_passing.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "pooler/base/strings.h"
#include "pooler/net/socket.h"

namespace pgfleet::net {
namespace {

// Room for a few descriptors, not one: should a peer attach more, recvmsg still takes them (and
// we close them) instead of reporting MSG_CTRUNC, which would fail a message that was otherwise
// fine.
constexpr size_t kMaxFdsReceived = 4;

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(base::StrCat("bad unix socket path: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Closes every descriptor of the SCM_RIGHTS messages in `msg`, except the first when `keep` is
// given, which receives it (-1 when none came).
void TakeFds(msghdr* msg, int* keep) {
  if (keep != nullptr) *keep = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(c);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, data + i * sizeof(int), sizeof(int));  // CMSG_DATA may be unaligned
      if (keep != nullptr && *keep == -1) {
        *keep = fd;
      } else {
        close(fd);
      }
    }
  }
}

}  // namespace

absl::Status SendWithFd(int socket, std::string_view bytes, int fd) {
  iovec iov = {const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::UnavailableError("handoff socket full");
    }
    return Errno("sendmsg");
  }
  // SEQPACKET sends a message whole or not at all; anything else is a misuse (a stream socket).
  if (static_cast<size_t>(n) != bytes.size()) {
    return absl::InternalError(base::StrCat("sendmsg sent ", n, " of ", bytes.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Received>> ReceiveWithFd(int socket, size_t max_bytes,
                                                      std::string& buffer) {
  // One byte more than allowed, so that a message of exactly max_bytes is not mistaken for a
  // truncated one; MSG_TRUNC catches the longer ones. A buffer allocated and zeroed per receive
  // (64 KiB for a hand-off, twice per message with the read that finds nothing) cost more than
  // the rest of a server hand-off (perf): the caller's is sized once.
  if (buffer.size() < max_bytes + 1) buffer.resize(max_bytes + 1);
  Received received;
  iovec iov = {buffer.data(), max_bytes + 1};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFdsReceived * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    return Errno("recvmsg");
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || static_cast<size_t>(n) > max_bytes) {
    // The rest of the message is lost either way; whatever descriptors came must not leak.
    TakeFds(&msg, nullptr);
    return absl::InvalidArgumentError(
        (msg.msg_flags & MSG_CTRUNC) != 0
            ? std::string("handoff message carried too many descriptors")
            : base::StrCat("handoff message longer than ", max_bytes, " bytes"));
  }
  TakeFds(&msg, &received.fd);
  received.bytes = std::string_view(buffer.data(), static_cast<size_t>(n));
  return received;
}

absl::StatusOr<int> ListenSeqpacket(const std::string& path) {
  auto addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket(AF_UNIX, SOCK_SEQPACKET)");
  // A previous run's socket file would make bind fail with EADDRINUSE.
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    auto status = Errno(base::StrCat("bind ", path));
    close(fd);
    return status;
  }
  if (listen(fd, SOMAXCONN) != 0) {
    auto status = Errno(base::StrCat("listen ", path));
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<int> ConnectSeqpacket(const std::string& path) {
  auto addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket(AF_UNIX, SOCK_SEQPACKET)");
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    // EAGAIN here is a full backlog, not a connect in progress: unix connects never pend.
    auto status = Errno(base::StrCat("connect ", path));
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<int> AcceptSeqpacket(int listener) {
  int fd;
  do {
    fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
    return Errno("accept");
  }
  return fd;
}

}  // namespace pgfleet::net
