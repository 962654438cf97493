// Peer endpoint lookup.
#include "peering/peer_directory.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"

namespace pgfleet::peering {

std::string PeerDirectory::SocketPathFor(uint32_t peer_id) const {
  return absl::StrCat(runtime_dir_, "/worker-", peer_id, ".sock");
}

std::optional<std::string> PeerDirectory::TargetFor(uint32_t peer_id) const {
  std::string path = SocketPathFor(peer_id);
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return absl::StrCat("unix:", path);
}

}  // namespace pgfleet::peering
