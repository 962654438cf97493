// The layout of pooler-minted cancel keys (DESIGN.md "Cancel keys and peering"): on protocol 3.0
// the ProcessID keeps its sign bit clear, carries the owning worker's fleet-wide peer id in bits
// 15..30 and 15 random bits in 0..14; the 4-byte SecretKey is random. 47 unguessable bits.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace pgfleet::protocol {

inline constexpr int kPeerIdBits = 16;
inline constexpr uint32_t kMaxPeerId = (1u << kPeerIdBits) - 1;
inline constexpr size_t kCancelSecretSize = 4;

struct CancelKey {
  uint32_t pid = 0;
  std::array<uint8_t, kCancelSecretSize> secret{};

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

}  // namespace pgfleet::protocol
