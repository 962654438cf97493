// The layout of pooler-minted cancel keys (docs/architecture.md, "Cancel keys"): the ProcessID
// keeps its sign bit clear, carries the owning worker's fleet-wide peer id (its pod's block and
// its local id) in bits 15..30 and 15 random bits in 0..14. The secret is random: 4 bytes on
// protocol 3.0 (47 unguessable bits in all), 32 on 3.2 (271), as PostgreSQL 18 sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace pgfleet::protocol {

inline constexpr int kPeerIdBits = 16;
inline constexpr uint32_t kMaxPeerId = (1u << kPeerIdBits) - 1;
inline constexpr size_t kCancelSecretSize = 4;       // protocol 3.0
inline constexpr size_t kCancelSecretSize32 = 32;    // what pgfleet (and PostgreSQL 18) mint on 3.2
inline constexpr size_t kMaxCancelSecretSize = 256;  // protocol 3.2's limit

struct CancelKey {
  uint32_t pid = 0;
  // Any length up to kMaxCancelSecretSize: a key only ever matches one of its own length.
  absl::InlinedVector<uint8_t, kCancelSecretSize32> secret;

  bool operator==(const CancelKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const CancelKey& key) {
    return H::combine(std::move(h), key.pid, key.secret);
  }
};

// Builds the ProcessID from a peer id and random bits (only the low 15 bits of `random` count).
inline constexpr uint32_t MakeCancelPid(uint32_t peer_id, uint32_t random) {
  return ((peer_id & kMaxPeerId) << 15) | (random & 0x7fff);
}
inline constexpr uint32_t PeerIdOfCancelPid(uint32_t pid) { return (pid >> 15) & kMaxPeerId; }

// A peer id is (pod block << 8) | local id. The supervisor hands out local ids 1..255 within its
// pod; pgfleet-controller gives each pod a block 1..255 (peering/controller/controller_service.h
// explains why ids are then fleet-unique). Block 0 = no controller: the id is only pod-unique.
inline constexpr int kLocalPeerIdBits = 8;
inline constexpr uint32_t kMaxLocalPeerId = (1u << kLocalPeerIdBits) - 1;
inline constexpr uint32_t kMaxPodBlock = kMaxPeerId >> kLocalPeerIdBits;
inline constexpr uint32_t MakePeerId(uint32_t block, uint32_t local) {
  return ((block & kMaxPodBlock) << kLocalPeerIdBits) | (local & kMaxLocalPeerId);
}
inline constexpr uint32_t PodBlockOfPeerId(uint32_t peer_id) {
  return (peer_id >> kLocalPeerIdBits) & kMaxPodBlock;
}
inline constexpr uint32_t LocalPartOfPeerId(uint32_t peer_id) { return peer_id & kMaxLocalPeerId; }

}  // namespace pgfleet::protocol
