// A client proving its password to pgfleet, without sockets: md5 or SCRAM-SHA-256[-PLUS] against
// the user's stored secret. Fed each whole message the client sends during the exchange, it
// decides what pgfleet answers and whether the client is in, failed or broke the protocol.
// ClientConn is the I/O shell around it (framing, sending, counting, logging, closing), as
// ServerConn is around ServerLogin; unit tests drive it with built messages.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pooler/auth/scram.h"
#include "pooler/base/random.h"
#include "pooler/config/config.h"
#include "pooler/protocol/byte_sink.h"

namespace pgfleet::pool {

// Who is logging in, against what, known once the secret is (userlist or auth_query).
struct ClientPasswordOptions {
  std::string user;
  // The stored secret: a plain password, an md5 hash or a SCRAM secret; "" when the user is
  // unknown or has none (the exchange still runs, so that looks like a wrong password).
  std::string secret;
  // md5, scram-sha-256 or plain (the client's hba rule's method, else auth.type); md5 with a
  // SCRAM secret runs SCRAM, as PostgreSQL does; plain checks the clear-text password against
  // any kind of secret.
  config::AuthType method = config::AuthType::kScramSha256;
  // Over an established TLS session: the tls-server-end-point hash of pgfleet's certificate, so
  // SCRAM-SHA-256-PLUS is offered; nullopt without TLS or when it cannot be computed.
  std::optional<std::vector<uint8_t>> tls_server_end_point;
};

// What to do after the start or one client message.
struct PasswordVerdict {
  enum class Outcome {
    kContinue,       // send `to_client` (when not empty) and wait for the next message
    kAuthenticated,  // send `to_client` (when not empty): the client is in
    kFailed,         // FATAL `sqlstate` `message`: wrong password, unknown user, unusable secret
    kProtocolError,  // FATAL 08P01 `message`: the client broke the exchange
  };
  Outcome outcome = Outcome::kContinue;
  protocol::StringSink to_client;
  // kAuthenticated against a stored SCRAM secret: the ClientKey recovered from the proof, which
  // lets pgfleet log in to servers holding that secret without knowing the password.
  std::optional<auth::ScramKey> scram_client_key;
  std::string sqlstate;  // kFailed
  std::string message;   // kFailed, kProtocolError
  // kFailed: the method whose proof was wrong ("md5", "scram-sha-256"), for the log.
  std::string_view method;
  // kFailed: the stored secret itself is unusable (malformed), which is the operator's fault and
  // not a login failure of the client's; no request was sent.
  bool bad_stored_secret = false;
  // kProtocolError: the message was not a password message at all (counted as a protocol error,
  // like a broken frame).
  bool unexpected_message = false;
};

class ClientPasswordExchange {
 public:
  // `random` must outlive the exchange.
  ClientPasswordExchange(ClientPasswordOptions options, base::RandomSource& random);

  // Whether a message of `type` can take part in the exchange (only 'p' messages do); anything
  // else is refused as soon as its header is seen, before its body arrives.
  static bool Expects(uint8_t type) { return type == 'p'; }
  // The verdict for a message Expects refuses, or one whose frame is broken.
  static PasswordVerdict UnexpectedMessage();

  // Opens the exchange: kContinue with AuthenticationMD5Password or AuthenticationSASL in
  // `to_client`, or kFailed (nothing to send) when the stored SCRAM secret is malformed.
  PasswordVerdict Start();
  // One whole message the client sent during the exchange.
  PasswordVerdict OnMessage(uint8_t type, std::span<const uint8_t> body);

  // The stored secret as given, for the pool's server logins once the client is in.
  const std::string& secret() const { return options_.secret; }

 private:
  PasswordVerdict OnMd5Password(std::span<const uint8_t> body);
  PasswordVerdict OnPlainPassword(std::span<const uint8_t> body);
  PasswordVerdict OnSaslInitialResponse(std::span<const uint8_t> body);
  PasswordVerdict OnSaslResponse(std::span<const uint8_t> body);
  PasswordVerdict WrongPassword(std::string_view method);

  ClientPasswordOptions options_;
  base::RandomSource& random_;
  // False when the stored secret cannot match any password (none, or md5 when SCRAM is asked
  // for): the exchange runs to its end all the same, then fails like a wrong password.
  bool can_succeed_ = true;
  std::array<uint8_t, 4> md5_salt_{};
  std::optional<auth::ScramServerExchange> scram_;
  // Each message is accepted once and in order; after an end nothing more is.
  enum class Stage {
    kNotStarted,
    kExpectPlain,
    kExpectMd5,
    kExpectSaslInitial,
    kExpectSaslResponse,
    kDone
  };
  Stage stage_ = Stage::kNotStarted;
};

}  // namespace pgfleet::pool
