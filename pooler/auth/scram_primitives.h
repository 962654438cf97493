// SCRAM-SHA-256 building blocks (RFC 5802 section 3) and strict base64, under scram.cc and its
// tests. Not part of the auth API: callers outside pooler/auth use scram.h.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pgfleet::auth {

using ScramKey = std::array<uint8_t, 32>;

namespace internal {

// Standard base64 with '=' padding and no line breaks (RFC 4648 section 4).
std::string Base64Encode(std::span<const uint8_t> data);
// Strict decoding: length a multiple of 4, padding only at the end, no whitespace. nullopt on
// anything else, so a malformed attribute is reported instead of silently repaired.
std::optional<std::vector<uint8_t>> Base64Decode(std::string_view text);

ScramKey Sha256(std::span<const uint8_t> data);
ScramKey HmacSha256(std::span<const uint8_t> key, std::string_view data);
// Hi(password, salt, i) = PBKDF2-HMAC-SHA-256 with a 32-byte output.
ScramKey SaltedPassword(std::string_view password, std::span<const uint8_t> salt, int iterations);
// HMAC(SaltedPassword, "Client Key") and HMAC(SaltedPassword, "Server Key").
ScramKey ClientKeyFromSalted(const ScramKey& salted_password);
ScramKey ServerKeyFromSalted(const ScramKey& salted_password);
// ClientProof = ClientKey XOR HMAC(H(ClientKey), AuthMessage).
ScramKey ClientProof(const ScramKey& client_key, std::string_view auth_message);
// ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage): what a server recovers from a proof.
ScramKey RecoverClientKey(const ScramKey& stored_key, const ScramKey& client_proof,
                          std::string_view auth_message);
// ServerSignature = HMAC(ServerKey, AuthMessage).
ScramKey ServerSignature(const ScramKey& server_key, std::string_view auth_message);

}  // namespace internal
}  // namespace pgfleet::auth
