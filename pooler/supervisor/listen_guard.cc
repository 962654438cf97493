// One pgfleet per address and port (listen_guard.h).
#include "pooler/supervisor/listen_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pooler/base/strings.h"

namespace pgfleet::supervisor {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

bool IsWildcard(const std::string& address) {
  return address.empty() || address == "*" || address == "0.0.0.0" || address == "::";
}

std::string HostPort(const std::string& address, int port) {
  return address.find(':') != std::string::npos ? base::StrCat("[", address, "]:", port)
                                                : base::StrCat(address, ":", port);
}

// Binds `address:port` without SO_REUSEPORT: EADDRINUSE while anything listens there. Other
// errors (an address not on this host, a privileged port) are left for the real bind to report.
bool PortInUse(const std::string& address, int port) {
  const std::string host = address == "*" ? "0.0.0.0" : address;
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res) != 0) return false;
  bool in_use = false;
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (res->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    in_use = bind(fd, res->ai_addr, res->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(res);
  return in_use;
}

sockaddr_un AbstractAddress(const std::string& name, socklen_t* length) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  // sun_path[0] stays NUL: the abstract namespace. The name is not NUL-terminated; its length is.
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

// The pid of the process that holds the lock `name`, asked by connecting to it.
std::optional<int> LockHolder(const std::string& name) {
  socklen_t length = 0;
  const sockaddr_un addr = AbstractAddress(name, &length);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<int> pid;
  struct ucred cred = {};
  socklen_t cred_length = sizeof(cred);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), length) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_length) == 0 && cred.pid > 0) {
    pid = cred.pid;
  }
  close(fd);
  return pid;
}

std::string ProcessName(int pid) {
  return std::string(
      absl::StripAsciiWhitespace(ReadSmallFile(base::StrCat("/proc/", pid, "/comm"))));
}

}  // namespace

ListenGuard::~ListenGuard() {
  for (int fd : lock_fds_) close(fd);
}

std::string ListenLockName(const std::string& address, int port) {
  return base::StrCat("pgfleet-listen-", address.empty() ? "*" : address, "-", port);
}

absl::Status ListenGuard::Acquire(const std::string& address, int port,
                                  const std::string& unix_socket_dir) {
  const std::string where = HostPort(address, port);
  if (port != 0) {
    // Best effort: where unix sockets are refused (a seccomp profile), the probe alone decides.
    const std::string name = ListenLockName(address, port);
    socklen_t length = 0;
    const sockaddr_un addr = AbstractAddress(name, &length);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, reinterpret_cast<const sockaddr*>(&addr), length) == 0) {
      // Listening, so that a pgfleet refused can connect and learn who holds it (SO_PEERCRED).
      listen(fd, 4);
      lock_fds_.push_back(fd);
    } else if (fd >= 0) {
      const int bind_errno = errno;
      close(fd);
      if (bind_errno == EADDRINUSE) {
        const std::optional<int> pid = LockHolder(name);
        return absl::FailedPreconditionError(base::StrCat(
            "cannot listen on ", where, ": another pgfleet already serves it (",
            pid.has_value() ? base::StrCat("pid ", *pid, ", ") : std::string(), "lock @", name,
            "); stop it first, or give this one another listen.address or listen.port"));
      }
    }
    if (PortInUse(address, port)) {
      const std::string who = FindTcpListener(address, port);
      return absl::FailedPreconditionError(base::StrCat(
          "cannot listen on ", where, ": address already in use",
          who.empty() ? std::string(" by another process") : base::StrCat(" by ", who),
          "; pgfleet will not share its port with another listener (it would split the clients)"));
    }
  }
  if (!unix_socket_dir.empty() && port != 0) return CheckUnixSocketFree(unix_socket_dir, port);
  return absl::OkStatus();
}

absl::Status ListenGuard::CheckUnixSocketFree(const std::string& unix_socket_dir, int port) {
  const std::string path = base::StrCat(unix_socket_dir, "/.s.PGSQL.", port);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::OkStatus();  // ListenUnix says why
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (!live) return absl::OkStatus();  // absent, or stale (nobody accepts): replaced
  return absl::FailedPreconditionError(
      base::StrCat("cannot listen on unix socket ", path,
                   ": another server accepts connections on it; pgfleet will not replace it"));
}

std::string FindTcpListener(const std::string& address, int port) {
  // /proc/net/tcp prints an IPv4 address as the hex of its 32-bit value in memory.
  std::string want_v4;
  if (struct in_addr in; !IsWildcard(address) && inet_pton(AF_INET, address.c_str(), &in) == 1) {
    want_v4 = absl::StrFormat("%08X", in.s_addr);
  }
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const bool v6 = absl::EndsWith(table, "6");
    const std::string text = ReadSmallFile(table);
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      if (fields.size() < 10 || fields[3] != "0A") continue;  // 0A: LISTEN
      const size_t colon = fields[1].rfind(':');
      if (colon == absl::string_view::npos) continue;
      int local_port = 0;
      if (!absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) || local_port != port) {
        continue;
      }
      const absl::string_view local = fields[1].substr(0, colon);
      if (!v6 && !want_v4.empty() && local != want_v4 && local != "00000000") continue;
      if (fields[9] != "0") inodes.emplace_back(fields[9]);
    }
  }
  if (inodes.empty()) return "";
  std::vector<int> pids;
  if (DIR* proc = opendir("/proc")) {
    while (struct dirent* entry = readdir(proc)) {
      int pid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
      const std::string fd_dir = base::StrCat("/proc/", pid, "/fd");
      DIR* fds = opendir(fd_dir.c_str());
      if (fds == nullptr) continue;  // another user's process: not ours to read
      while (struct dirent* fd = readdir(fds)) {
        char target[64];
        const std::string link = base::StrCat(fd_dir, "/", fd->d_name);
        const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
        if (n <= 0) continue;
        const std::string_view socket(target, static_cast<size_t>(n));
        if (!socket.starts_with("socket:[")) continue;
        const std::string_view inode = socket.substr(8, socket.size() - 9);
        if (std::find(inodes.begin(), inodes.end(), inode) != inodes.end()) {
          pids.push_back(pid);
          break;
        }
      }
      closedir(fds);
    }
    closedir(proc);
  }
  if (pids.empty()) return "";
  // The first of them: the parent of a pod of processes that share the socket.
  const int pid = *std::min_element(pids.begin(), pids.end());
  const std::string name = ProcessName(pid);
  return name.empty() ? base::StrCat("pid ", pid) : base::StrCat("pid ", pid, " (", name, ")");
}

}  // namespace pgfleet::supervisor
