// SCRAM-SHA-256 building blocks: base64, SHA-256, HMAC, PBKDF2 and the RFC 5802 key algebra.
#include "pooler/auth/scram_primitives.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "pooler/base/check.h"

namespace pgfleet::auth {
namespace internal {
namespace {

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

ScramKey Xor(const ScramKey& a, const ScramKey& b) {
  ScramKey out;
  for (size_t i = 0; i < out.size(); ++i) out[i] = a[i] ^ b[i];
  return out;
}

}  // namespace

std::string Base64Encode(std::span<const uint8_t> data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t v = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
    out.push_back(kBase64Alphabet[(v >> 18) & 0x3f]);
    out.push_back(kBase64Alphabet[(v >> 12) & 0x3f]);
    out.push_back(kBase64Alphabet[(v >> 6) & 0x3f]);
    out.push_back(kBase64Alphabet[v & 0x3f]);
  }
  const size_t rest = data.size() - i;
  if (rest > 0) {
    uint32_t v = data[i] << 16;
    if (rest == 2) v |= data[i + 1] << 8;
    out.push_back(kBase64Alphabet[(v >> 18) & 0x3f]);
    out.push_back(kBase64Alphabet[(v >> 12) & 0x3f]);
    out.push_back(rest == 2 ? kBase64Alphabet[(v >> 6) & 0x3f] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::vector<uint8_t>> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      int digit = 0;
      if (last && j >= 4 - padding) {
        digit = 0;  // '=' padding, already counted.
      } else {
        digit = Base64Value(text[i + j]);
        if (digit < 0) return std::nullopt;
      }
      v = (v << 6) | static_cast<uint32_t>(digit);
    }
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (!last || padding < 2) out.push_back(static_cast<uint8_t>(v >> 8));
    if (!last || padding < 1) out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

ScramKey Sha256(std::span<const uint8_t> data) {
  ScramKey out;
  unsigned int len = 0;
  PGFLEET_CHECK(EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr) ==
                    1 &&
                len == out.size());
  return out;
}

ScramKey HmacSha256(std::span<const uint8_t> key, std::string_view data) {
  ScramKey out;
  unsigned int len = 0;
  PGFLEET_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                     reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(),
                     &len) != nullptr &&
                len == out.size());
  return out;
}

ScramKey SaltedPassword(std::string_view password, std::span<const uint8_t> salt, int iterations) {
  // Every caller validates the count first (ParseScramSecret, HandleServerFirst).
  PGFLEET_CHECK(iterations > 0);
  ScramKey out;
  PGFLEET_CHECK(PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()), salt.data(),
                                  static_cast<int>(salt.size()), iterations, EVP_sha256(),
                                  static_cast<int>(out.size()), out.data()) == 1);
  return out;
}

ScramKey ClientKeyFromSalted(const ScramKey& salted_password) {
  return HmacSha256(salted_password, "Client Key");
}

ScramKey ServerKeyFromSalted(const ScramKey& salted_password) {
  return HmacSha256(salted_password, "Server Key");
}

ScramKey ClientProof(const ScramKey& client_key, std::string_view auth_message) {
  return Xor(client_key, HmacSha256(Sha256(client_key), auth_message));
}

ScramKey RecoverClientKey(const ScramKey& stored_key, const ScramKey& client_proof,
                          std::string_view auth_message) {
  return Xor(client_proof, HmacSha256(stored_key, auth_message));
}

ScramKey ServerSignature(const ScramKey& server_key, std::string_view auth_message) {
  return HmacSha256(server_key, auth_message);
}

}  // namespace internal

}  // namespace pgfleet::auth
