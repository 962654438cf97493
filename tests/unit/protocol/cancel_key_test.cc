// Tests for pooler/protocol/cancel_key.h: the layout of pooler-minted ProcessIDs.
#include "pooler/protocol/cancel_key.h"

#include <cstdint>
#include <random>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"

namespace pgfleet::protocol {
namespace {

static_assert(kMaxPeerId == 65535);
static_assert(MakeCancelPid(kMaxPeerId, 0xffffffffu) == 0x7fffffffu);
static_assert(PeerIdOfCancelPid(MakeCancelPid(1234, 0x7fff)) == 1234);

TEST(CancelKeyTest, EveryPeerIdKeepsSignBitClearAndRoundTrips) {
  std::mt19937 rng(20240611);
  for (uint32_t peer = 0; peer <= kMaxPeerId; ++peer) {
    for (uint32_t random : {0u, 0x7fffu, 0x8000u, 0xffffffffu, static_cast<uint32_t>(rng())}) {
      const uint32_t pid = MakeCancelPid(peer, random);
      ASSERT_EQ(pid & 0x80000000u, 0u) << peer << " " << random;
      ASSERT_EQ(PeerIdOfCancelPid(pid), peer) << peer << " " << random;
      ASSERT_EQ(pid & 0x7fffu, random & 0x7fffu) << peer << " " << random;
    }
  }
}

TEST(CancelKeyTest, RandomBitsNeverLeakIntoPeerId) {
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t peer = rng() & kMaxPeerId;
    const uint32_t random = rng();
    ASSERT_EQ(PeerIdOfCancelPid(MakeCancelPid(peer, random)), peer) << random;
  }
  // All random bits set, peer 0: the peer field stays zero.
  EXPECT_EQ(PeerIdOfCancelPid(MakeCancelPid(0, 0xffffffffu)), 0u);
}

TEST(CancelKeyTest, PeerIdAboveMaxIsMasked) {
  EXPECT_EQ(PeerIdOfCancelPid(MakeCancelPid(kMaxPeerId + 1, 0)), 0u);
  EXPECT_EQ(MakeCancelPid(0xffffffffu, 0) & 0x80000000u, 0u);
}

TEST(CancelKeyTest, PeerIdOfForeignPidIgnoresSignBit) {
  // A key minted elsewhere (e.g. a real backend pid with the sign bit set) still decodes in range:
  // the sign bit is dropped and bits 15..30 are the peer id.
  EXPECT_EQ(PeerIdOfCancelPid(0xffffffffu), kMaxPeerId);
  EXPECT_EQ(PeerIdOfCancelPid(0x80000000u), 0u);
  EXPECT_EQ(PeerIdOfCancelPid(0x80008000u), 1u);
}

TEST(CancelKeyTest, EqualityAndHash) {
  CancelKey a{MakeCancelPid(3, 9), {1, 2, 3, 4}};
  CancelKey b = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(absl::Hash<CancelKey>{}(a), absl::Hash<CancelKey>{}(b));
  b.secret[3] = 5;
  EXPECT_FALSE(a == b);
  b = a;
  b.pid ^= 1;
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace pgfleet::protocol
