// Peer endpoint lookup.
#include "peering/peer_directory.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

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

std::vector<uint32_t> PeerDirectory::ListPeers() const {
  std::vector<uint32_t> peers;
  DIR* dir = opendir(runtime_dir_.c_str());
  if (dir == nullptr) return peers;
  while (dirent* entry = readdir(dir)) {
    absl::string_view name(entry->d_name);
    if (!absl::ConsumePrefix(&name, "worker-") || !absl::ConsumeSuffix(&name, ".sock")) continue;
    uint32_t id = 0;
    if (absl::SimpleAtoi(name, &id)) peers.push_back(id);
  }
  closedir(dir);
  std::sort(peers.begin(), peers.end());
  return peers;
}

}  // namespace pgfleet::peering
