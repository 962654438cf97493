// What kind of password a userlist or pg_shadow entry holds.
#pragma once

#include <string_view>

namespace pgfleet::auth {

enum class SecretKind { kEmpty, kPlain, kMd5, kScramSha256 };

// "md5" + 32 hex chars = kMd5; "SCRAM-SHA-256$..." = kScramSha256; "" = kEmpty; else kPlain.
SecretKind ClassifySecret(std::string_view secret);

}  // namespace pgfleet::auth
