// OpenSSL-backed random source.
#include "pooler/base/random.h"

#include <openssl/rand.h>

#include "pooler/base/check.h"

namespace pgfleet::base {

void SecureRandomBytes(std::span<uint8_t> out) {
  PGFLEET_CHECK(RAND_bytes(out.data(), static_cast<int>(out.size())) == 1);
}

namespace {
class OpenSslRandom final : public RandomSource {
 public:
  void Fill(std::span<uint8_t> out) override { SecureRandomBytes(out); }
};
}  // namespace

RandomSource& SystemRandom() {
  static OpenSslRandom* random = new OpenSslRandom();
  return *random;
}

}  // namespace pgfleet::base
