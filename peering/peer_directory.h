// Where each peer id's peering endpoint is. Within a pod, a worker's endpoint is the unix socket
// <runtime_dir>/worker-<peer_id>.sock, so the directory is the filesystem itself: a sibling that
// exited leaves no socket and its keys are dropped, as PostgreSQL drops unknown keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pgfleet::peering {

class PeerDirectory {
 public:
  explicit PeerDirectory(std::string runtime_dir) : runtime_dir_(std::move(runtime_dir)) {}

  // The gRPC target for `peer_id` ("unix:/run/pgfleet/worker-3.sock"), or nullopt when no live
  // worker owns that id.
  std::optional<std::string> TargetFor(uint32_t peer_id) const;
  // The socket path this worker serves on.
  std::string SocketPathFor(uint32_t peer_id) const;
  // Peer ids of every worker socket in the runtime directory (this pod's workers, including the
  // caller's own), ascending.
  std::vector<uint32_t> ListPeers() const;
  const std::string& runtime_dir() const { return runtime_dir_; }

 private:
  std::string runtime_dir_;
};

}  // namespace pgfleet::peering
