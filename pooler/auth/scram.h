// SCRAM-SHA-256 (RFC 5802/7677) as PostgreSQL speaks it, pure: no sockets, injectable randomness.
// Channel binding: only "n" and "y" GS2 headers (no -PLUS) until TLS lands.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pooler/base/random.h"

namespace pgfleet::auth {

inline constexpr std::string_view kScramSha256 = "SCRAM-SHA-256";
inline constexpr int kDefaultScramIterations = 4096;
using ScramKey = std::array<uint8_t, 32>;

// A parsed "SCRAM-SHA-256$<iterations>:<salt b64>$<StoredKey b64>:<ServerKey b64>" secret.
struct ScramSecret {
  int iterations = 0;
  std::vector<uint8_t> salt;
  ScramKey stored_key{};
  ScramKey server_key{};
};

// Error (InvalidArgument) when `text` is not exactly that shape with 32-byte keys, a non-empty salt
// and a positive iteration count.
[[nodiscard]] absl::StatusOr<ScramSecret> ParseScramSecret(std::string_view text);
// Derives a secret from a plain password (SaltedPassword via PBKDF2-HMAC-SHA-256). The password
// is used as given: PostgreSQL's SASLprep leaves ASCII unchanged, and non-ASCII passwords that
// SASLprep would rewrite (NFKC, mapped-to-nothing characters) are not normalized here.
// `iterations` must be positive (checked: callers validate counts that come from outside).
ScramSecret MakeScramSecret(std::string_view password, std::span<const uint8_t> salt,
                            int iterations);
std::string FormatScramSecret(const ScramSecret& secret);

// The server side of one exchange: pgfleet verifying a client.
class ScramServerExchange {
 public:
  // `secret` is the user's stored secret (build one with MakeScramSecret for plain passwords).
  ScramServerExchange(ScramSecret secret, base::RandomSource& random);

  // Takes the client-first-message (the SASLInitialResponse data) and returns the
  // server-first-message to send in AuthenticationSASLContinue. Errors: InvalidArgument for
  // malformed input; Unimplemented for channel binding ("p="), an authzid or a mandatory
  // extension; FailedPrecondition when called twice. After any error the exchange is over.
  [[nodiscard]] absl::StatusOr<std::string> HandleClientFirst(std::string_view client_first);
  // Takes the client-final-message and returns the server-final-message ("v=...") for
  // AuthenticationSASLFinal. Error (PermissionDenied) = wrong password or tampered nonce;
  // InvalidArgument = malformed message or a c= that does not echo the GS2 header.
  [[nodiscard]] absl::StatusOr<std::string> HandleClientFinal(std::string_view client_final);
  // After a successful HandleClientFinal: the ClientKey recovered from the proof, which lets the
  // pooler log in to a server holding the same secret without knowing the password.
  const ScramKey& client_key() const { return client_key_; }

 private:
  ScramSecret secret_;
  base::RandomSource& random_;
  std::string client_first_bare_;
  std::string server_first_;
  std::string nonce_;
  ScramKey client_key_{};
  // The GS2 header of the client-first-message ("n,," or "y,,"); the c= attribute must echo it.
  std::string gs2_header_;
  // Each message is accepted once and in order; any failure ends the exchange.
  enum class Stage { kExpectClientFirst, kExpectClientFinal, kDone };
  Stage stage_ = Stage::kExpectClientFirst;
};

// The client side: pgfleet logging in to a PostgreSQL server.
class ScramClientExchange {
 public:
  // With the plain password.
  static ScramClientExchange WithPassword(std::string password, base::RandomSource& random);
  // With keys recovered from a client's exchange: works only when the server's salt and
  // iteration count are those of `secret` (checked in HandleServerFirst).
  static ScramClientExchange WithClientKey(const ScramKey& client_key, const ScramSecret& secret,
                                           base::RandomSource& random);

  // The client-first-message for SASLInitialResponse ("n,,n=,r=<nonce>"). Each call starts the
  // exchange over with a fresh nonce.
  std::string ClientFirst();
  // Takes the server-first-message (AuthenticationSASLContinue data), returns client-final.
  // With a password this runs PBKDF2 for the server's iteration count on the calling thread.
  // Errors: InvalidArgument (malformed), PermissionDenied (nonce not extending ours),
  // FailedPrecondition (out of order, or WithClientKey and the server's salt/count differ).
  [[nodiscard]] absl::StatusOr<std::string> HandleServerFirst(std::string_view server_first);
  // Checks the server's signature in the server-final-message (AuthenticationSASLFinal data).
  // PermissionDenied when the signature is wrong or the server sent "e=<error>".
  [[nodiscard]] absl::Status VerifyServerFinal(std::string_view server_final);

 private:
  explicit ScramClientExchange(base::RandomSource& random) : random_(&random) {}
  base::RandomSource* random_;
  std::optional<std::string> password_;
  std::optional<ScramKey> client_key_;
  std::optional<ScramSecret> secret_;
  std::string client_first_bare_;
  std::string nonce_;
  ScramKey server_key_{};
  std::string auth_message_;
};

}  // namespace pgfleet::auth
