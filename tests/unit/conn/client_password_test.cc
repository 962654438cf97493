// The client password exchange without sockets: built client messages in, what pgfleet answers and
// how the exchange ends out. The SCRAM clients are pgfleet's own client side (auth/scram.h).
#include "pooler/conn/client_password.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/auth/md5.h"
#include "pooler/auth/scram.h"
#include "pooler/auth/scram_primitives.h"
#include "pooler/base/random.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/sqlstate.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::pool {
namespace {

using protocol::StringSink;
using protocol::testing::AsBytes;
using protocol::testing::AsString;
using protocol::testing::BodyOf;
using protocol::testing::Build;
using Outcome = PasswordVerdict::Outcome;

constexpr std::string_view kFailedMessage = "password authentication failed for user \"alice\"";
const std::vector<uint8_t> kEndPoint = {1, 2, 3, 4, 5, 6, 7, 8};

// A stored SCRAM secret for "s3cret".
std::string ScramSecretText() {
  return auth::FormatScramSecret(auth::MakeScramSecret("s3cret", AsBytes("pepper"), 4096));
}

class ClientPasswordTest : public ::testing::Test {
 protected:
  // Starts an exchange for `alice`; returns the start's verdict.
  PasswordVerdict Start(std::string secret, config::AuthType method,
                        std::optional<std::vector<uint8_t>> end_point = std::nullopt) {
    ClientPasswordOptions options;
    options.user = "alice";
    options.secret = std::move(secret);
    options.method = method;
    options.tls_server_end_point = std::move(end_point);
    exchange_.emplace(std::move(options), random_);
    return exchange_->Start();
  }

  // Feeds one whole built message.
  PasswordVerdict Feed(const std::string& message) {
    return exchange_->OnMessage(static_cast<uint8_t>(message[0]), BodyOf(message));
  }

  // The authentication request pgfleet sends, after checking it is one.
  static std::optional<protocol::AuthenticationView> SentRequest(const PasswordVerdict& verdict) {
    const std::string& bytes = verdict.to_client.bytes();
    EXPECT_FALSE(bytes.empty());
    if (bytes.empty() || bytes[0] != 'R') return std::nullopt;
    auto request = protocol::ParseAuthentication(BodyOf(bytes));
    EXPECT_TRUE(request.ok()) << request.status();
    if (!request.ok()) return std::nullopt;
    return *request;
  }

  // Runs md5 from the start with `password`; returns the verdict for the PasswordMessage.
  PasswordVerdict RunMd5(std::string secret, std::string_view password) {
    const PasswordVerdict start = Start(std::move(secret), config::AuthType::kMd5);
    EXPECT_EQ(start.outcome, Outcome::kContinue);
    auto request = SentRequest(start);
    if (!request.has_value()) return {};
    EXPECT_EQ(request->code, static_cast<int32_t>(protocol::AuthRequest::kMd5));
    std::span<const uint8_t, 4> salt(request->data.data(), 4);
    const std::string response =
        auth::Md5SaltedResponse(auth::Md5PasswordHash("alice", password), salt);
    return Feed(Build([&](StringSink& s) { protocol::BuildPasswordMessage(s, response); }));
  }

  // A SCRAM run from the SASL request on: the mechanisms offered, the verdict for the
  // SASLResponse and whether the client accepted pgfleet's signature.
  struct ScramRun {
    bool offered_plus = false;
    PasswordVerdict final_verdict;
    bool server_verified = false;
  };
  ScramRun RunScram(const PasswordVerdict& start, std::string_view password,
                    auth::ScramClientBinding binding = {}) {
    ScramRun run;
    EXPECT_EQ(start.outcome, Outcome::kContinue) << start.message;
    auto request = SentRequest(start);
    if (!request.has_value()) return run;
    EXPECT_EQ(request->code, static_cast<int32_t>(protocol::AuthRequest::kSasl));
    EXPECT_TRUE(protocol::SaslOffers(request->data, auth::kScramSha256));
    run.offered_plus = protocol::SaslOffers(request->data, auth::kScramSha256Plus);
    const std::string_view mechanism =
        binding.flag == auth::ScramClientBinding::Flag::kTlsServerEndPoint ? auth::kScramSha256Plus
                                                                           : auth::kScramSha256;
    auto client = auth::ScramClientExchange::WithPassword(std::string(password), random_);
    const std::string client_first = client.ClientFirst(std::move(binding));
    const PasswordVerdict second = Feed(Build(
        [&](StringSink& s) { protocol::BuildSaslInitialResponse(s, mechanism, client_first); }));
    EXPECT_EQ(second.outcome, Outcome::kContinue) << second.message;
    auto server_first = SentRequest(second);
    if (!server_first.has_value()) return run;
    EXPECT_EQ(server_first->code, static_cast<int32_t>(protocol::AuthRequest::kSaslContinue));
    auto client_final = client.HandleServerFirst(AsString(server_first->data));
    EXPECT_TRUE(client_final.ok()) << client_final.status();
    if (!client_final.ok()) return run;
    run.final_verdict =
        Feed(Build([&](StringSink& s) { protocol::BuildSaslResponse(s, *client_final); }));
    if (run.final_verdict.outcome == Outcome::kAuthenticated) {
      auto server_final = SentRequest(run.final_verdict);
      if (server_final.has_value()) {
        EXPECT_EQ(server_final->code, static_cast<int32_t>(protocol::AuthRequest::kSaslFinal));
        run.server_verified = client.VerifyServerFinal(AsString(server_final->data)).ok();
      }
    }
    return run;
  }

  // A FATAL 28P01 for a wrong password of `method`, with nothing to send.
  static void ExpectWrongPassword(const PasswordVerdict& verdict, std::string_view method) {
    EXPECT_EQ(verdict.outcome, Outcome::kFailed);
    EXPECT_EQ(verdict.sqlstate, protocol::sqlstate::kInvalidPassword);
    EXPECT_EQ(verdict.message, kFailedMessage);
    EXPECT_EQ(verdict.method, method);
    EXPECT_FALSE(verdict.bad_stored_secret);
    EXPECT_TRUE(verdict.to_client.bytes().empty());
    EXPECT_FALSE(verdict.scram_client_key.has_value());
  }

  static void ExpectProtocolError(const PasswordVerdict& verdict, std::string_view message,
                                  bool unexpected_message = false) {
    EXPECT_EQ(verdict.outcome, Outcome::kProtocolError);
    EXPECT_EQ(verdict.message, message);
    EXPECT_EQ(verdict.unexpected_message, unexpected_message);
    EXPECT_TRUE(verdict.to_client.bytes().empty());
  }

  base::RandomSource& random_ = base::SystemRandom();
  std::optional<ClientPasswordExchange> exchange_;
};

TEST_F(ClientPasswordTest, Md5WithAPlainSecretAcceptsTheRightPassword) {
  const PasswordVerdict verdict = RunMd5("s3cret", "s3cret");
  EXPECT_EQ(verdict.outcome, Outcome::kAuthenticated) << verdict.message;
  EXPECT_TRUE(verdict.to_client.bytes().empty());  // AuthenticationOk comes with the welcome
  EXPECT_FALSE(verdict.scram_client_key.has_value());
  EXPECT_EQ(exchange_->secret(), "s3cret");
}

TEST_F(ClientPasswordTest, Md5WithAnMd5SecretAcceptsTheRightPassword) {
  const PasswordVerdict verdict = RunMd5(auth::Md5PasswordHash("alice", "s3cret"), "s3cret");
  EXPECT_EQ(verdict.outcome, Outcome::kAuthenticated) << verdict.message;
}

TEST_F(ClientPasswordTest, Md5RefusesAWrongPassword) {
  ExpectWrongPassword(RunMd5("s3cret", "guess"), "md5");
  ExpectWrongPassword(RunMd5(auth::Md5PasswordHash("alice", "s3cret"), "guess"), "md5");
}

TEST_F(ClientPasswordTest, Md5WithoutASecretFailsLikeAWrongPassword) {
  // The challenge is sent all the same, so an unknown user cannot be told apart.
  ExpectWrongPassword(RunMd5("", ""), "md5");
  ExpectWrongPassword(RunMd5("", "anything"), "md5");
}

// plain (PgBouncer's auth_type, hba `password`): the password in clear text, against any secret.
TEST_F(ClientPasswordTest, PlainChecksTheClearTextPasswordAgainstAnySecret) {
  const auto run = [&](std::string secret, std::string_view password) {
    const PasswordVerdict start = Start(std::move(secret), config::AuthType::kPlain);
    EXPECT_EQ(start.outcome, Outcome::kContinue);
    auto request = SentRequest(start);
    if (request.has_value()) {
      EXPECT_EQ(request->code, static_cast<int32_t>(protocol::AuthRequest::kCleartext));
    }
    return Feed(Build([&](StringSink& s) { protocol::BuildPasswordMessage(s, password); }));
  };
  EXPECT_EQ(run("s3cret", "s3cret").outcome, Outcome::kAuthenticated);
  EXPECT_EQ(run(auth::Md5PasswordHash("alice", "s3cret"), "s3cret").outcome,
            Outcome::kAuthenticated);
  const PasswordVerdict scram = run(ScramSecretText(), "s3cret");
  EXPECT_EQ(scram.outcome, Outcome::kAuthenticated);
  // The ClientKey that the password derives logs the pool in to servers holding the secret.
  ASSERT_TRUE(scram.scram_client_key.has_value());
  const auto secret = auth::ParseScramSecret(ScramSecretText());
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ(auth::internal::Sha256(*scram.scram_client_key), secret->stored_key);
  ExpectWrongPassword(run("s3cret", "guess"), "plain");
  ExpectWrongPassword(run(auth::Md5PasswordHash("alice", "s3cret"), "guess"), "plain");
  ExpectWrongPassword(run(ScramSecretText(), "guess"), "plain");
  ExpectWrongPassword(run("", ""), "plain");
}

TEST_F(ClientPasswordTest, ScramWithAPlainSecretRunsToTheEnd) {
  const ScramRun run = RunScram(Start("s3cret", config::AuthType::kScramSha256), "s3cret");
  EXPECT_FALSE(run.offered_plus);
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kAuthenticated) << run.final_verdict.message;
  EXPECT_TRUE(run.server_verified);
  // From a plain password the pool's logins use the password, not a ClientKey.
  EXPECT_FALSE(run.final_verdict.scram_client_key.has_value());
}

TEST_F(ClientPasswordTest, ScramWithAStoredSecretRecoversAUsableClientKey) {
  const std::string secret_text = ScramSecretText();
  const ScramRun run = RunScram(Start(secret_text, config::AuthType::kScramSha256), "s3cret");
  ASSERT_EQ(run.final_verdict.outcome, Outcome::kAuthenticated) << run.final_verdict.message;
  EXPECT_TRUE(run.server_verified);
  ASSERT_TRUE(run.final_verdict.scram_client_key.has_value());
  // The key logs in to a server holding the same secret, as the pool's server logins will.
  auto secret = auth::ParseScramSecret(secret_text);
  ASSERT_TRUE(secret.ok()) << secret.status();
  auth::ScramServerExchange server(*secret, random_);
  auto client = auth::ScramClientExchange::WithClientKey(*run.final_verdict.scram_client_key,
                                                         *secret, random_);
  auto server_first = server.HandleClientFirst(client.ClientFirst());
  ASSERT_TRUE(server_first.ok()) << server_first.status();
  auto client_final = client.HandleServerFirst(*server_first);
  ASSERT_TRUE(client_final.ok()) << client_final.status();
  EXPECT_TRUE(server.HandleClientFinal(*client_final).ok());
}

TEST_F(ClientPasswordTest, Md5MethodWithAScramSecretRunsScram) {
  const ScramRun run = RunScram(Start(ScramSecretText(), config::AuthType::kMd5), "s3cret");
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kAuthenticated) << run.final_verdict.message;
}

TEST_F(ClientPasswordTest, ScramOverTlsOffersPlusAndBindsToTheEndPoint) {
  auth::ScramClientBinding binding;
  binding.flag = auth::ScramClientBinding::Flag::kTlsServerEndPoint;
  binding.data = kEndPoint;
  const ScramRun run =
      RunScram(Start("s3cret", config::AuthType::kScramSha256, kEndPoint), "s3cret", binding);
  EXPECT_TRUE(run.offered_plus);
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kAuthenticated) << run.final_verdict.message;
  EXPECT_TRUE(run.server_verified);
}

TEST_F(ClientPasswordTest, ScramPlusWithAnotherEndPointFails) {
  // Someone terminated TLS in between: the client saw another certificate.
  auth::ScramClientBinding binding;
  binding.flag = auth::ScramClientBinding::Flag::kTlsServerEndPoint;
  binding.data = {9, 9, 9, 9};
  const ScramRun run =
      RunScram(Start("s3cret", config::AuthType::kScramSha256, kEndPoint), "s3cret", binding);
  ExpectWrongPassword(run.final_verdict, "scram-sha-256");
}

TEST_F(ClientPasswordTest, ScramOverTlsRefusesADowngradeFromPlus) {
  Start("s3cret", config::AuthType::kScramSha256, kEndPoint);
  // "y": the client claims pgfleet offered no -PLUS, which it did.
  auto client = auth::ScramClientExchange::WithPassword("s3cret", random_);
  auth::ScramClientBinding binding;
  binding.flag = auth::ScramClientBinding::Flag::kSupportedNotUsed;
  const std::string client_first = client.ClientFirst(std::move(binding));
  const PasswordVerdict verdict = Feed(Build([&](StringSink& s) {
    protocol::BuildSaslInitialResponse(s, auth::kScramSha256, client_first);
  }));
  EXPECT_EQ(verdict.outcome, Outcome::kProtocolError);
  EXPECT_FALSE(verdict.unexpected_message);
  EXPECT_FALSE(verdict.message.empty());
}

TEST_F(ClientPasswordTest, ScramRefusesAWrongPassword) {
  ExpectWrongPassword(
      RunScram(Start("s3cret", config::AuthType::kScramSha256), "guess").final_verdict,
      "scram-sha-256");
  ExpectWrongPassword(
      RunScram(Start(ScramSecretText(), config::AuthType::kScramSha256), "guess").final_verdict,
      "scram-sha-256");
}

TEST_F(ClientPasswordTest, ScramWithoutAUsableSecretFailsLikeAWrongPassword) {
  // No secret at all, and an md5 hash that SCRAM cannot use: the exchange runs to its end.
  ExpectWrongPassword(RunScram(Start("", config::AuthType::kScramSha256), "").final_verdict,
                      "scram-sha-256");
  ExpectWrongPassword(
      RunScram(Start(auth::Md5PasswordHash("alice", "s3cret"), config::AuthType::kScramSha256),
               "s3cret")
          .final_verdict,
      "scram-sha-256");
}

TEST_F(ClientPasswordTest, MalformedScramSecretFailsAtTheStart) {
  const PasswordVerdict verdict = Start("SCRAM-SHA-256$broken", config::AuthType::kScramSha256);
  EXPECT_EQ(verdict.outcome, Outcome::kFailed);
  EXPECT_TRUE(verdict.bad_stored_secret);
  EXPECT_EQ(verdict.sqlstate, protocol::sqlstate::kInvalidPassword);
  EXPECT_EQ(verdict.message, kFailedMessage);
  EXPECT_TRUE(verdict.to_client.bytes().empty());
  ExpectProtocolError(Feed(Build([](StringSink& s) { protocol::BuildPasswordMessage(s, "x"); })),
                      "expected password response", /*unexpected_message=*/true);
}

TEST_F(ClientPasswordTest, OtherMessagesThanPasswordsAreUnexpected) {
  EXPECT_TRUE(ClientPasswordExchange::Expects('p'));
  EXPECT_FALSE(ClientPasswordExchange::Expects('Q'));
  Start("s3cret", config::AuthType::kMd5);
  ExpectProtocolError(Feed(Build([](StringSink& s) { protocol::BuildQuery(s, "SELECT 1"); })),
                      "expected password response", /*unexpected_message=*/true);
  ExpectProtocolError(ClientPasswordExchange::UnexpectedMessage(), "expected password response",
                      /*unexpected_message=*/true);
}

TEST_F(ClientPasswordTest, MalformedPasswordMessageIsAProtocolError) {
  Start("s3cret", config::AuthType::kMd5);
  // No NUL terminator.
  ExpectProtocolError(Feed(protocol::testing::Typed('p', "md5abc")), "malformed password message");
}

TEST_F(ClientPasswordTest, UnknownSaslMechanismIsAProtocolError) {
  Start("s3cret", config::AuthType::kScramSha256);
  ExpectProtocolError(Feed(Build([](StringSink& s) {
                        protocol::BuildSaslInitialResponse(s, "OAUTHBEARER", "n,,");
                      })),
                      "client selected an invalid SASL authentication mechanism");
}

TEST_F(ClientPasswordTest, MalformedSaslInitialResponseIsAProtocolError) {
  Start("s3cret", config::AuthType::kScramSha256);
  ExpectProtocolError(Feed(protocol::testing::Typed('p', "SCRAM-SHA-256")),
                      "client selected an invalid SASL authentication mechanism");
  Start("s3cret", config::AuthType::kScramSha256);
  const PasswordVerdict verdict = Feed(Build([](StringSink& s) {
    protocol::BuildSaslInitialResponse(s, auth::kScramSha256, "not a client-first-message");
  }));
  EXPECT_EQ(verdict.outcome, Outcome::kProtocolError);
  EXPECT_FALSE(verdict.unexpected_message);
  EXPECT_FALSE(verdict.message.empty());
}

TEST_F(ClientPasswordTest, NothingIsAcceptedAfterTheEnd) {
  ASSERT_EQ(RunMd5("s3cret", "s3cret").outcome, Outcome::kAuthenticated);
  ExpectProtocolError(Feed(Build([](StringSink& s) { protocol::BuildPasswordMessage(s, "x"); })),
                      "expected password response", /*unexpected_message=*/true);
}

TEST_F(ClientPasswordTest, NothingIsAcceptedBeforeTheStart) {
  ClientPasswordOptions options;
  options.user = "alice";
  options.secret = "s3cret";
  ClientPasswordExchange exchange(std::move(options), random_);
  const std::string message =
      Build([](StringSink& s) { protocol::BuildPasswordMessage(s, "s3cret"); });
  ExpectProtocolError(exchange.OnMessage('p', BodyOf(message)), "expected password response",
                      /*unexpected_message=*/true);
}

}  // namespace
}  // namespace pgfleet::pool
