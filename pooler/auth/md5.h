// PostgreSQL's md5 password scheme (AuthenticationMD5Password), both as verifier and as client.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pgfleet::auth {

// "md5" + hex(md5(password + user)): what pg_shadow stores and what userlist.txt may hold.
std::string Md5PasswordHash(std::string_view user, std::string_view password);

// The PasswordMessage a client sends for `salt`: "md5" + hex(md5(hex_part(hash) + salt)), where
// `md5_hash` is the stored "md5..." hash (so a stored hash is enough to log in to a server).
std::string Md5SaltedResponse(std::string_view md5_hash, std::span<const uint8_t, 4> salt);

// True when `client_response` is right for `salt`, given the stored secret (plain text or an
// "md5..." hash). Constant-time comparison.
[[nodiscard]] bool VerifyMd5Response(std::string_view stored_secret, std::string_view user,
                                     std::span<const uint8_t, 4> salt,
                                     std::string_view client_response);

}  // namespace pgfleet::auth
