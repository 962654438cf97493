// Authentication without a password (auth type cert, hba cert and peer): the client's identity
// comes from its connection, as PostgreSQL's cert and peer methods take it.
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "pooler/base/strings.h"
#include "pooler/conn/client_conn.h"
#include "pooler/net/tls.h"

namespace pgfleet::pool {
namespace {

// The operating-system user at the other end of a unix socket, or "" when unknown.
std::string PeerUserName(int fd) {
  struct ucred credentials {};
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return "";
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd entry {};
  struct passwd* found = nullptr;
  if (getpwuid_r(credentials.uid, &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return "";
  }
  return found->pw_name;
}

}  // namespace

bool ClientConn::IsOwnUserOnUnixSocket() const {
  if (peer_address_ != "unix") return false;
  struct ucred credentials {};
  socklen_t length = sizeof(credentials);
  return getsockopt(fd(), SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 &&
         credentials.uid == geteuid();
}

std::string ClientConn::CheckIdentity() const {
  if (EffectiveAuthType() == config::AuthType::kPeer) {
    // hba allows peer on local lines only; PostgreSQL's message either way.
    if (peer_address_ == "unix" && PeerUserName(fd()) == user_) return "";
    return base::StrCat("Peer authentication failed for user \"", user_, "\"");
  }
  const std::string common_name = tls() != nullptr ? tls()->VerifiedPeerCommonName() : "";
  if (common_name.empty()) return "connection requires a valid client certificate";
  if (common_name != user_) {
    return base::StrCat("certificate authentication failed for user \"", user_, "\"");
  }
  return "";
}

}  // namespace pgfleet::pool
