// Cryptographic randomness for cancel keys, salts and nonces (OpenSSL's CSPRNG).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pgfleet::base {

// Fills `out` from OpenSSL's RAND_bytes; aborts if the CSPRNG fails, because handing out
// predictable keys would be worse than stopping.
void SecureRandomBytes(std::span<uint8_t> out);

// Source of random bytes, injectable so tests can make keys deterministic.
class RandomSource {
 public:
  virtual ~RandomSource() = default;
  virtual void Fill(std::span<uint8_t> out) = 0;
};

// The production source: SecureRandomBytes.
RandomSource& SystemRandom();

}  // namespace pgfleet::base
