// PostgreSQL's md5 password scheme on top of OpenSSL's MD5.
#include "pooler/auth/md5.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "pooler/auth/secret.h"
#include "pooler/base/check.h"
#include "pooler/base/strings.h"

namespace pgfleet::auth {
namespace {

using base::Av;

constexpr std::string_view kMd5Prefix = "md5";

// Debian's absl 20220623 is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW=0),
// which std::string_view does not convert to implicitly.

// Lower-case hex of MD5(a || b), the only digest shape the scheme uses.
std::string Md5Hex(std::string_view a, std::string_view b) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  PGFLEET_CHECK(ctx != nullptr);
  unsigned char digest[16];
  unsigned int len = 0;
  // MD5 is only missing when OpenSSL runs in FIPS-only mode; no md5 login can work then, and
  // silently producing a wrong hash would be harder to diagnose than stopping.
  PGFLEET_CHECK(EVP_DigestInit_ex(ctx, EVP_md5(), nullptr) == 1);
  PGFLEET_CHECK(EVP_DigestUpdate(ctx, a.data(), a.size()) == 1);
  PGFLEET_CHECK(EVP_DigestUpdate(ctx, b.data(), b.size()) == 1);
  PGFLEET_CHECK(EVP_DigestFinal_ex(ctx, digest, &len) == 1 && len == sizeof(digest));
  EVP_MD_CTX_free(ctx);

  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * sizeof(digest), '\0');
  for (size_t i = 0; i < sizeof(digest); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

std::string Md5PasswordHash(std::string_view user, std::string_view password) {
  return absl::StrCat(Av(kMd5Prefix), Md5Hex(password, user));
}

std::string Md5SaltedResponse(std::string_view md5_hash, std::span<const uint8_t, 4> salt) {
  // Tolerate a hash without its "md5" prefix: the salted step hashes only the hex part.
  std::string_view hex = md5_hash;
  if (hex.starts_with(kMd5Prefix)) hex.remove_prefix(kMd5Prefix.size());
  std::string_view salt_bytes(base::AsText(salt));
  return absl::StrCat(Av(kMd5Prefix), Md5Hex(hex, salt_bytes));
}

bool VerifyMd5Response(std::string_view stored_secret, std::string_view user,
                       std::span<const uint8_t, 4> salt, std::string_view client_response) {
  std::string hash;
  switch (ClassifySecret(stored_secret)) {
    case SecretKind::kMd5:
      hash = std::string(stored_secret);
      break;
    case SecretKind::kPlain:
      hash = Md5PasswordHash(user, stored_secret);
      break;
    case SecretKind::kEmpty:
    case SecretKind::kScramSha256:
      // An empty password never authenticates (as in PostgreSQL), and a SCRAM verifier cannot
      // answer an md5 challenge.
      return false;
  }
  const std::string expected = Md5SaltedResponse(hash, salt);
  // The length is public (always 35); only the contents must be compared in constant time.
  if (client_response.size() != expected.size()) return false;
  return CRYPTO_memcmp(client_response.data(), expected.data(), expected.size()) == 0;
}

}  // namespace pgfleet::auth
