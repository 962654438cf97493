// Classifies stored passwords the way PostgreSQL's get_password_type() does.
#include "pooler/auth/secret.h"

namespace pgfleet::auth {

SecretKind ClassifySecret(std::string_view secret) {
  if (secret.empty()) return SecretKind::kEmpty;
  // PostgreSQL accepts only lower-case hex here (MD5_PASSWD_CHARSET), so "MD5..." or a short hash
  // is an ordinary plain-text password, as it would be for the server.
  if (secret.size() == 35 && secret.starts_with("md5") &&
      secret.substr(3).find_first_not_of("0123456789abcdef") == std::string_view::npos) {
    return SecretKind::kMd5;
  }
  // By prefix only, unlike PostgreSQL, which falls back to plain text when the verifier does not
  // parse: a damaged verifier in a userlist should fail logins loudly, not turn its own text into
  // a working password.
  if (secret.starts_with("SCRAM-SHA-256$")) return SecretKind::kScramSha256;
  return SecretKind::kPlain;
}

}  // namespace pgfleet::auth
