// A password a client sent in clear text (PgBouncer's auth_type plain, hba `password`) checked
// against whatever the userlist or auth_query stores for the user: the password itself, its md5
// hash, or a SCRAM secret.
#pragma once

#include <optional>
#include <string_view>

#include "pooler/auth/scram.h"

namespace pgfleet::auth {

struct PlainPasswordMatch {
  // Against a SCRAM secret: the ClientKey the password derives, which logs the pool in to
  // servers that hold the same secret.
  std::optional<ScramKey> scram_client_key;
};

// nullopt unless `password` is the one `stored_secret` was made from. Comparisons take constant
// time; a SCRAM secret costs one PBKDF2 at its iteration count.
std::optional<PlainPasswordMatch> VerifyPlainPassword(std::string_view stored_secret,
                                                      std::string_view user,
                                                      std::string_view password);

}  // namespace pgfleet::auth
