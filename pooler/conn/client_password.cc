// Client password decisions: which challenge the stored secret and method call for, and what each
// answer of the client's means.
#include "pooler/conn/client_password.h"

#include <utility>

#include "pooler/auth/md5.h"
#include "pooler/auth/plain_password.h"
#include "pooler/auth/secret.h"
#include "pooler/base/strings.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {
namespace {

PasswordVerdict ProtocolError(std::string_view message) {
  PasswordVerdict verdict;
  verdict.outcome = PasswordVerdict::Outcome::kProtocolError;
  verdict.message = std::string(message);
  return verdict;
}

// The same words for a wrong password, an unknown user and an unusable secret, as PostgreSQL's,
// so user names cannot be probed.
PasswordVerdict Failed(std::string_view user) {
  PasswordVerdict verdict;
  verdict.outcome = PasswordVerdict::Outcome::kFailed;
  verdict.sqlstate = std::string(protocol::sqlstate::kInvalidPassword);
  verdict.message = base::StrCat("password authentication failed for user \"", user, "\"");
  return verdict;
}

}  // namespace

ClientPasswordExchange::ClientPasswordExchange(ClientPasswordOptions options,
                                               base::RandomSource& random)
    : options_(std::move(options)), random_(random) {}

PasswordVerdict ClientPasswordExchange::UnexpectedMessage() {
  PasswordVerdict verdict = ProtocolError("expected password response");
  verdict.unexpected_message = true;
  return verdict;
}

PasswordVerdict ClientPasswordExchange::Start() {
  const auto kind = auth::ClassifySecret(options_.secret);
  const auto method = options_.method;
  const bool use_scram =
      method == config::AuthType::kScramSha256 ||
      (method == config::AuthType::kMd5 && kind == auth::SecretKind::kScramSha256);
  // Still run a challenge so a missing user looks like a wrong password; it cannot succeed.
  can_succeed_ =
      !(kind == auth::SecretKind::kEmpty || (use_scram && kind == auth::SecretKind::kMd5));
  PasswordVerdict verdict;
  if (method == config::AuthType::kPlain) {
    can_succeed_ = kind != auth::SecretKind::kEmpty;
    protocol::BuildAuthenticationCleartextPassword(verdict.to_client);
    stage_ = Stage::kExpectPlain;
    return verdict;
  }
  if (!use_scram) {
    random_.Fill(md5_salt_);
    protocol::BuildAuthenticationMd5(verdict.to_client, md5_salt_);
    stage_ = Stage::kExpectMd5;
    return verdict;
  }
  auth::ScramSecret scram_secret;
  if (kind == auth::SecretKind::kScramSha256) {
    auto parsed = auth::ParseScramSecret(options_.secret);
    if (!parsed.ok()) {
      stage_ = Stage::kDone;
      PasswordVerdict failed = Failed(options_.user);
      failed.bad_stored_secret = true;
      return failed;
    }
    scram_secret = *std::move(parsed);
  } else {
    uint8_t salt[16];
    random_.Fill(salt);
    if (!can_succeed_) {
      // An unknown user gets random keys, so no proof can match. No PBKDF2 for them: 4096
      // rounds on the event loop per attempt would let unauthenticated clients stall the worker.
      scram_secret.iterations = auth::kDefaultScramIterations;
      scram_secret.salt.assign(salt, salt + sizeof(salt));
      random_.Fill(scram_secret.stored_key);
      random_.Fill(scram_secret.server_key);
    } else {
      scram_secret = auth::MakeScramSecret(options_.secret, salt, auth::kDefaultScramIterations);
    }
  }
  // Over TLS, offer channel binding too (PostgreSQL lists -PLUS first); libpq's
  // channel_binding=require then proves no one terminated TLS in between.
  const bool offer_plus = options_.tls_server_end_point.has_value();
  scram_.emplace(std::move(scram_secret), random_, options_.tls_server_end_point);
  std::vector<std::string_view> mechanisms;
  if (offer_plus) mechanisms.push_back(auth::kScramSha256Plus);
  mechanisms.push_back(auth::kScramSha256);
  protocol::BuildAuthenticationSasl(verdict.to_client, mechanisms);
  stage_ = Stage::kExpectSaslInitial;
  return verdict;
}

PasswordVerdict ClientPasswordExchange::OnMessage(uint8_t type, std::span<const uint8_t> body) {
  if (!Expects(type)) {
    stage_ = Stage::kDone;
    return UnexpectedMessage();
  }
  // Which 'p' it is (PasswordMessage, SASLInitialResponse, SASLResponse) follows from the stage.
  const Stage stage = stage_;
  stage_ = Stage::kDone;  // every end is final; the one way on sets the next stage again
  switch (stage) {
    case Stage::kExpectPlain:
      return OnPlainPassword(body);
    case Stage::kExpectMd5:
      return OnMd5Password(body);
    case Stage::kExpectSaslInitial:
      return OnSaslInitialResponse(body);
    case Stage::kExpectSaslResponse:
      return OnSaslResponse(body);
    case Stage::kNotStarted:
    case Stage::kDone:
      break;
  }
  return UnexpectedMessage();
}

PasswordVerdict ClientPasswordExchange::OnMd5Password(std::span<const uint8_t> body) {
  auto password = protocol::ParsePasswordMessage(body);
  if (!password.ok()) return ProtocolError(base::Sv(password.status().message()));
  if (!can_succeed_ ||
      !auth::VerifyMd5Response(options_.secret, options_.user, md5_salt_, *password)) {
    return WrongPassword("md5");
  }
  PasswordVerdict verdict;
  verdict.outcome = PasswordVerdict::Outcome::kAuthenticated;
  return verdict;
}

PasswordVerdict ClientPasswordExchange::OnPlainPassword(std::span<const uint8_t> body) {
  auto password = protocol::ParsePasswordMessage(body);
  if (!password.ok()) return ProtocolError(base::Sv(password.status().message()));
  auto verified = can_succeed_
                      ? auth::VerifyPlainPassword(options_.secret, options_.user, *password)
                      : std::nullopt;
  if (!verified.has_value()) return WrongPassword("plain");
  PasswordVerdict verdict;
  verdict.outcome = PasswordVerdict::Outcome::kAuthenticated;
  // Against a stored SCRAM secret, the password's ClientKey logs the pool in to servers.
  verdict.scram_client_key = verified->scram_client_key;
  return verdict;
}

PasswordVerdict ClientPasswordExchange::OnSaslInitialResponse(std::span<const uint8_t> body) {
  auto initial = protocol::ParseSaslInitialResponse(body);
  const bool plus = initial.ok() && initial->mechanism == auth::kScramSha256Plus;
  if (!initial.ok() || (initial->mechanism != auth::kScramSha256 && !plus)) {
    return ProtocolError("client selected an invalid SASL authentication mechanism");
  }
  auto server_first = scram_->HandleClientFirst(initial->data, plus);
  if (!server_first.ok()) return ProtocolError(base::Sv(server_first.status().message()));
  PasswordVerdict verdict;
  protocol::BuildAuthenticationSaslContinue(verdict.to_client, *server_first);
  stage_ = Stage::kExpectSaslResponse;
  return verdict;
}

PasswordVerdict ClientPasswordExchange::OnSaslResponse(std::span<const uint8_t> body) {
  // A SASLResponse is nothing but its data.
  auto server_final = scram_->HandleClientFinal(base::AsText(body));
  if (!server_final.ok() || !can_succeed_) return WrongPassword("scram-sha-256");
  PasswordVerdict verdict;
  verdict.outcome = PasswordVerdict::Outcome::kAuthenticated;
  protocol::BuildAuthenticationSaslFinal(verdict.to_client, *server_final);
  // Only a stored SCRAM secret's ClientKey can log in to servers; from a plain password the
  // pool's logins use the password itself.
  if (auth::ClassifySecret(options_.secret) == auth::SecretKind::kScramSha256) {
    verdict.scram_client_key = scram_->client_key();
  }
  return verdict;
}

PasswordVerdict ClientPasswordExchange::WrongPassword(std::string_view method) {
  PasswordVerdict verdict = Failed(options_.user);
  verdict.method = method;
  return verdict;
}

}  // namespace pgfleet::pool
