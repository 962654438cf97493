// SCRAM-SHA-256 (RFC 5802/7677) as PostgreSQL speaks it, pure: no sockets, injectable randomness.
// Channel binding: SCRAM-SHA-256-PLUS with tls-server-end-point (RFC 5929), the only type
// PostgreSQL implements; the TLS layer supplies the certificate hash (net::TlsSession).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pooler/auth/scram_primitives.h"
#include "pooler/base/random.h"

namespace pgfleet::auth {

inline constexpr std::string_view kScramSha256 = "SCRAM-SHA-256";
inline constexpr std::string_view kScramSha256Plus = "SCRAM-SHA-256-PLUS";
inline constexpr std::string_view kTlsServerEndPoint = "tls-server-end-point";
inline constexpr int kDefaultScramIterations = 4096;

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
  // `channel_binding`: over TLS, the tls-server-end-point hash of our certificate; its presence
  // means -PLUS was offered, so a client claiming we cannot bind ("y") is a downgrade.
  ScramServerExchange(ScramSecret secret, base::RandomSource& random,
                      std::optional<std::vector<uint8_t>> channel_binding = std::nullopt);

  // Takes the client-first-message (the SASLInitialResponse data) and returns the
  // server-first-message to send in AuthenticationSASLContinue. `plus` = the client selected
  // SCRAM-SHA-256-PLUS. Errors: InvalidArgument for malformed input or a GS2 flag that
  // contradicts the mechanism; PermissionDenied for a "y" when -PLUS was offered (downgrade);
  // Unimplemented for another channel binding type, an authzid or a mandatory extension;
  // FailedPrecondition when called twice. After any error the exchange is over.
  [[nodiscard]] absl::StatusOr<std::string> HandleClientFirst(std::string_view client_first,
                                                              bool plus = false);
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
  std::optional<std::vector<uint8_t>> channel_binding_;
  // The GS2 header of the client-first-message ("n,,", "y,," or "p=tls-server-end-point,,");
  // the c= attribute must echo it, followed by the binding data with "p=".
  std::string gs2_header_;
  bool binding_in_use_ = false;
  // Each message is accepted once and in order; any failure ends the exchange.
  enum class Stage { kExpectClientFirst, kExpectClientFinal, kDone };
  Stage stage_ = Stage::kExpectClientFirst;
};

// How the client side binds: "n" (no TLS), "y" (TLS, but the server offered no -PLUS) or "p"
// with the server certificate's tls-server-end-point hash (mechanism SCRAM-SHA-256-PLUS).
struct ScramClientBinding {
  enum class Flag { kNone, kSupportedNotUsed, kTlsServerEndPoint };
  Flag flag = Flag::kNone;
  std::vector<uint8_t> data;
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

  using Binding = ScramClientBinding;
  // The client-first-message for SASLInitialResponse ("n,,n=,r=<nonce>"). Each call starts the
  // exchange over with a fresh nonce.
  std::string ClientFirst(Binding binding = {});
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
  std::string gs2_header_;
  std::vector<uint8_t> binding_data_;
  ScramKey server_key_{};
  std::string auth_message_;
};

}  // namespace pgfleet::auth
