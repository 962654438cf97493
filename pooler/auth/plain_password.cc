#include "pooler/auth/plain_password.h"

#include <openssl/crypto.h>

#include <string>

#include "pooler/auth/md5.h"
#include "pooler/auth/scram_primitives.h"
#include "pooler/auth/secret.h"

namespace pgfleet::auth {
namespace {

// The SCRAM building blocks are this library's own.
using internal::ClientKeyFromSalted;
using internal::SaltedPassword;
using internal::Sha256;

bool SameBytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

std::optional<PlainPasswordMatch> VerifyPlainPassword(std::string_view stored_secret,
                                                      std::string_view user,
                                                      std::string_view password) {
  switch (ClassifySecret(stored_secret)) {
    case SecretKind::kEmpty:
      return std::nullopt;
    case SecretKind::kPlain:
      if (SameBytes(stored_secret, password)) return PlainPasswordMatch{};
      return std::nullopt;
    case SecretKind::kMd5:
      if (SameBytes(stored_secret, Md5PasswordHash(user, password))) return PlainPasswordMatch{};
      return std::nullopt;
    case SecretKind::kScramSha256: {
      auto secret = ParseScramSecret(stored_secret);
      if (!secret.ok()) return std::nullopt;
      const ScramKey client_key =
          ClientKeyFromSalted(SaltedPassword(password, secret->salt, secret->iterations));
      const ScramKey stored_key = Sha256(client_key);
      if (CRYPTO_memcmp(stored_key.data(), secret->stored_key.data(), stored_key.size()) != 0) {
        return std::nullopt;
      }
      return PlainPasswordMatch{.scram_client_key = client_key};
    }
  }
  return std::nullopt;
}

}  // namespace pgfleet::auth
