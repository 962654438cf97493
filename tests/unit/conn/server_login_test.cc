// The server login without sockets: built server messages in, what pgfleet answers and how the
// login ends out. The SCRAM exchanges run against pgfleet's own server side (auth/scram.h).
#include "pooler/conn/server_login.h"

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
#include "pooler/base/random.h"
#include "pooler/conn/server_login.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/startup.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::pool {
namespace server_login_test {

using protocol::StringSink;
using protocol::testing::AsBytes;
using protocol::testing::AsString;
using protocol::testing::BodyOf;
using protocol::testing::Build;
using Outcome = LoginVerdict::Outcome;
using namespace std::string_literals;

std::string Md5Request(std::span<const uint8_t, 4> salt) {
  return Build([&](StringSink& s) { protocol::BuildAuthenticationMd5(s, salt); });
}
std::string SaslRequest(std::span<const std::string_view> offer) {
  return Build([&](StringSink& s) { protocol::BuildAuthenticationSasl(s, offer); });
}
// The secret the SCRAM servers of these tests hold.
auth::ScramSecret ServerSecret() {
  return auth::MakeScramSecret("s3cret", AsBytes("pepper"), 4096);
}

class ServerLoginTest : public ::testing::Test {
 protected:
  ServerLoginTest() : tracked_({"search_path"}), login_(credentials_, random_, tracked_) {}

  // Starts the login as `alice` on database `app`; returns the StartupMessage.
  std::string Start(bool tls = false,
                    std::optional<std::vector<uint8_t>> end_point = std::nullopt) {
    ServerLoginOptions options;
    options.user = "alice";
    options.database = "app";
    options.application_name = "billing";
    options.tls = tls;
    if (end_point.has_value()) options.server_end_point = [end_point] { return end_point; };
    StringSink sink;
    login_.Start(std::move(options), sink);
    return sink.bytes();
  }

  // Feeds one whole built message.
  LoginVerdict Feed(const std::string& message) {
    return login_.OnMessage(static_cast<uint8_t>(message[0]), BodyOf(message));
  }

  // The body of the one message pgfleet sends, after checking its type.
  static std::string SentBody(const LoginVerdict& verdict, char type) {
    const std::string& bytes = verdict.to_server.bytes();
    EXPECT_FALSE(bytes.empty());
    if (bytes.empty()) return "";
    EXPECT_EQ(bytes[0], type);
    return std::string(AsString(BodyOf(bytes)));
  }

  // The password (or md5 response) of the PasswordMessage pgfleet sends.
  static std::optional<std::string> SentPassword(const LoginVerdict& verdict) {
    const std::string body = SentBody(verdict, 'p');
    auto password = protocol::ParsePasswordMessage(AsBytes(body));
    if (!password.ok()) return std::nullopt;
    return std::string(*password);
  }

  // Runs a SCRAM exchange with `server` after `offer`: the SASLInitialResponse's mechanism and
  // data, and the verdict for the server-final-message.
  struct ScramRun {
    std::string mechanism;
    std::string client_first;
    LoginVerdict final_verdict;
  };
  // `forged_final` replaces the server-final-message.
  ScramRun RunScram(auth::ScramServerExchange& server, std::span<const std::string_view> offer,
                    bool plus, std::optional<std::string> forged_final = std::nullopt) {
    ScramRun run;
    const LoginVerdict first = Feed(SaslRequest(offer));
    EXPECT_EQ(first.outcome, Outcome::kContinue) << first.message;
    const std::string initial = SentBody(first, 'p');
    auto parsed = protocol::ParseSaslInitialResponse(AsBytes(initial));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return run;
    run.mechanism = std::string(parsed->mechanism);
    run.client_first = std::string(parsed->data);
    auto server_first = server.HandleClientFirst(parsed->data, plus);
    EXPECT_TRUE(server_first.ok()) << server_first.status();
    if (!server_first.ok()) return run;
    const LoginVerdict second = Feed(
        Build([&](StringSink& s) { protocol::BuildAuthenticationSaslContinue(s, *server_first); }));
    EXPECT_EQ(second.outcome, Outcome::kContinue) << second.message;
    auto server_final = server.HandleClientFinal(SentBody(second, 'p'));
    EXPECT_TRUE(server_final.ok()) << server_final.status();
    if (!server_final.ok()) return run;
    const std::string final_data = forged_final.value_or(*server_final);
    run.final_verdict =
        Feed(Build([&](StringSink& s) { protocol::BuildAuthenticationSaslFinal(s, final_data); }));
    return run;
  }

  // A pgfleet-made FATAL 28000 whose message names `why`.
  static void ExpectFailedByPgfleet(const LoginVerdict& verdict, std::string_view why) {
    EXPECT_EQ(verdict.outcome, Outcome::kFailedByPgfleet);
    EXPECT_EQ(verdict.message, why);
    EXPECT_TRUE(verdict.fatal_for_clients);
    EXPECT_TRUE(verdict.to_server.bytes().empty());
    auto fields = protocol::ParseErrorFields(BodyOf(verdict.to_clients.bytes()));
    ASSERT_TRUE(fields.ok()) << fields.status();
    EXPECT_EQ(verdict.to_clients.bytes()[0], 'E');
    EXPECT_EQ(fields->severity, "FATAL");
    EXPECT_EQ(fields->sqlstate, protocol::sqlstate::kInvalidAuthorization);
    EXPECT_EQ(fields->message, "pgfleet cannot log in to the server: " + std::string(why));
  }

  ServerCredentials credentials_;
  base::RandomSource& random_ = base::SystemRandom();
  TrackedParamNames tracked_;
  ServerLogin login_;
};

constexpr std::string_view kScramOnly[] = {auth::kScramSha256};
constexpr std::string_view kScramAndPlus[] = {auth::kScramSha256Plus, auth::kScramSha256};
const std::vector<uint8_t> kEndPoint = {1, 2, 3, 4, 5, 6, 7, 8};

TEST_F(ServerLoginTest, StartupMessageNamesUserDatabaseAndApplication) {
  const std::string startup = Start();
  auto packet = protocol::ParseStartupPacket(AsBytes(startup));
  ASSERT_TRUE(packet.ok()) << packet.status();
  EXPECT_EQ(packet->kind, protocol::StartupKind::kStartup);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"user", "alice"}, {"database", "app"}, {"application_name", "billing"}};
  EXPECT_EQ(packet->parameters, expected);
}

TEST_F(ServerLoginTest, StartupMessageLeavesOutAnEmptyApplicationName) {
  ServerLoginOptions options;
  options.user = "alice";
  options.database = "app";
  StringSink sink;
  login_.Start(std::move(options), sink);
  auto packet = protocol::ParseStartupPacket(AsBytes(sink.bytes()));
  ASSERT_TRUE(packet.ok()) << packet.status();
  EXPECT_EQ(packet->parameters.size(), 2u);
}

TEST_F(ServerLoginTest, AuthenticationOkSendsNothing) {
  Start();
  const LoginVerdict verdict = Feed(Build(protocol::BuildAuthenticationOk));
  EXPECT_EQ(verdict.outcome, Outcome::kContinue);
  EXPECT_TRUE(verdict.to_server.bytes().empty());
}

TEST_F(ServerLoginTest, CleartextSendsThePlainPassword) {
  credentials_.secret = "s3cret";
  Start();
  const LoginVerdict verdict = Feed(protocol::testing::Typed('R', protocol::testing::I32(3)));
  EXPECT_EQ(verdict.outcome, Outcome::kContinue);
  const std::optional<std::string> password = SentPassword(verdict);
  ASSERT_TRUE(password.has_value());
  EXPECT_EQ(*password, "s3cret");
}

TEST_F(ServerLoginTest, CleartextWithoutAPlainPasswordFails) {
  credentials_.secret = auth::Md5PasswordHash("alice", "s3cret");
  Start();
  ExpectFailedByPgfleet(Feed(protocol::testing::Typed('R', protocol::testing::I32(3))),
                        "server asked for a cleartext password and none is configured");
}

TEST_F(ServerLoginTest, Md5WithAPlainPasswordHashesUserAndSalt) {
  credentials_.secret = "s3cret";
  Start();
  const uint8_t salt[4] = {9, 8, 7, 6};
  const LoginVerdict verdict = Feed(Md5Request(salt));
  EXPECT_EQ(verdict.outcome, Outcome::kContinue);
  const std::optional<std::string> response = SentPassword(verdict);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(*response, auth::Md5SaltedResponse(auth::Md5PasswordHash("alice", "s3cret"), salt));
  EXPECT_TRUE(auth::VerifyMd5Response("s3cret", "alice", salt, *response));
}

TEST_F(ServerLoginTest, Md5WithAStoredHashUsesItAsIs) {
  credentials_.secret = auth::Md5PasswordHash("alice", "s3cret");
  Start();
  const uint8_t salt[4] = {1, 2, 3, 4};
  const LoginVerdict verdict = Feed(Md5Request(salt));
  EXPECT_EQ(verdict.outcome, Outcome::kContinue);
  const std::optional<std::string> response = SentPassword(verdict);
  ASSERT_TRUE(response.has_value());
  EXPECT_TRUE(auth::VerifyMd5Response(credentials_.secret, "alice", salt, *response));
  EXPECT_TRUE(auth::VerifyMd5Response("s3cret", "alice", salt, *response));
}

TEST_F(ServerLoginTest, Md5WithOnlyAScramSecretFails) {
  credentials_.secret = auth::FormatScramSecret(ServerSecret());
  Start();
  const uint8_t salt[4] = {1, 2, 3, 4};
  ExpectFailedByPgfleet(Feed(Md5Request(salt)),
                        "server asked for md5 and no plain or md5 password is known for the user");
}

TEST_F(ServerLoginTest, MissingPasswordFailsEveryMethod) {
  Start();
  const uint8_t salt[4] = {1, 2, 3, 4};
  ExpectFailedByPgfleet(Feed(Md5Request(salt)),
                        "server asked for md5 and no plain or md5 password is known for the user");
  ExpectFailedByPgfleet(Feed(SaslRequest(kScramOnly)),
                        "server asked for SCRAM and no usable password is known for the user");
}

TEST_F(ServerLoginTest, UnsupportedMethodFails) {
  credentials_.secret = "s3cret";
  Start();
  // AuthenticationGSS.
  ExpectFailedByPgfleet(Feed(protocol::testing::Typed('R', protocol::testing::I32(7))),
                        "unsupported server authentication method 7");
}

TEST_F(ServerLoginTest, MalformedAuthenticationRequestCloses) {
  Start();
  const LoginVerdict verdict = Feed(protocol::testing::Typed('R', "\0\0"s));
  EXPECT_EQ(verdict.outcome, Outcome::kClose);
  EXPECT_EQ(verdict.message, "malformed authentication request");
}

TEST_F(ServerLoginTest, ScramWithAPlainPasswordRunsToTheEnd) {
  credentials_.secret = "s3cret";
  Start();
  auth::ScramServerExchange server(ServerSecret(), random_);
  const ScramRun run = RunScram(server, kScramOnly, /*plus=*/false);
  EXPECT_EQ(run.mechanism, auth::kScramSha256);
  EXPECT_TRUE(run.client_first.starts_with("n,,")) << run.client_first;
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kContinue) << run.final_verdict.message;
  EXPECT_TRUE(run.final_verdict.to_server.bytes().empty());
  EXPECT_EQ(Feed(Build(protocol::BuildAuthenticationOk)).outcome, Outcome::kContinue);
}

TEST_F(ServerLoginTest, ScramOverTlsBindsToTheServerCertificateWhenOffered) {
  credentials_.secret = "s3cret";
  Start(/*tls=*/true, kEndPoint);
  auth::ScramServerExchange server(ServerSecret(), random_, kEndPoint);
  const ScramRun run = RunScram(server, kScramAndPlus, /*plus=*/true);
  EXPECT_EQ(run.mechanism, auth::kScramSha256Plus);
  EXPECT_TRUE(run.client_first.starts_with("p=tls-server-end-point,,")) << run.client_first;
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kContinue) << run.final_verdict.message;
}

TEST_F(ServerLoginTest, ScramOverTlsSaysItCouldBindWhenPlusIsNotOffered) {
  credentials_.secret = "s3cret";
  Start(/*tls=*/true, kEndPoint);
  auth::ScramServerExchange server(ServerSecret(), random_);
  const ScramRun run = RunScram(server, kScramOnly, /*plus=*/false);
  EXPECT_EQ(run.mechanism, auth::kScramSha256);
  EXPECT_TRUE(run.client_first.starts_with("y,,")) << run.client_first;
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kContinue) << run.final_verdict.message;
}

TEST_F(ServerLoginTest, ScramWithARecoveredClientKeyRunsToTheEnd) {
  // What pgfleet keeps after verifying a client's SCRAM login: the stored secret and ClientKey.
  const auth::ScramSecret secret = ServerSecret();
  auth::ScramServerExchange client_side(secret, random_);
  auto client = auth::ScramClientExchange::WithPassword("s3cret", random_);
  auto server_first = client_side.HandleClientFirst(client.ClientFirst());
  ASSERT_TRUE(server_first.ok()) << server_first.status();
  auto client_final = client.HandleServerFirst(*server_first);
  ASSERT_TRUE(client_final.ok()) << client_final.status();
  ASSERT_TRUE(client_side.HandleClientFinal(*client_final).ok());
  credentials_.secret = auth::FormatScramSecret(secret);
  credentials_.scram_client_key = client_side.client_key();
  Start();
  auth::ScramServerExchange server(secret, random_);
  const ScramRun run = RunScram(server, kScramOnly, /*plus=*/false);
  EXPECT_EQ(run.final_verdict.outcome, Outcome::kContinue) << run.final_verdict.message;
}

TEST_F(ServerLoginTest, ScramSecretWithoutAClientKeyFails) {
  credentials_.secret = auth::FormatScramSecret(ServerSecret());
  Start();
  ExpectFailedByPgfleet(Feed(SaslRequest(kScramOnly)),
                        "server asked for SCRAM and no usable password is known for the user");
}

TEST_F(ServerLoginTest, ScramWithAForgedServerSignatureFails) {
  credentials_.secret = "s3cret";
  Start();
  auth::ScramServerExchange server(ServerSecret(), random_);
  // A server that does not know the secret cannot sign: 32 zero bytes in base64.
  const ScramRun run = RunScram(server, kScramOnly, /*plus=*/false,
                                "v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
  ExpectFailedByPgfleet(run.final_verdict, "server's SCRAM signature did not verify");
}

TEST_F(ServerLoginTest, SaslFinalWithoutAnExchangeFails) {
  Start();
  ExpectFailedByPgfleet(
      Feed(Build([](StringSink& s) { protocol::BuildAuthenticationSaslFinal(s, "v=AAAA"); })),
      "server's SCRAM signature did not verify");
}

TEST_F(ServerLoginTest, ScramWithoutAnOfferedMechanismFails) {
  credentials_.secret = "s3cret";
  Start();
  constexpr std::string_view kOther[] = {"OAUTHBEARER"};
  ExpectFailedByPgfleet(Feed(SaslRequest(kOther)), "server offers no supported SASL mechanism");
}

TEST_F(ServerLoginTest, SaslContinueWithoutAnExchangeCloses) {
  Start();
  const LoginVerdict verdict = Feed(
      Build([](StringSink& s) { protocol::BuildAuthenticationSaslContinue(s, "r=x,s=y,i=1"); }));
  EXPECT_EQ(verdict.outcome, Outcome::kClose);
  EXPECT_EQ(verdict.message, "unexpected SASL continue");
}

TEST_F(ServerLoginTest, ParametersKeyAndReadyForQueryEndTheLogin) {
  Start();
  const uint8_t secret[4] = {0xde, 0xad, 0xbe, 0xef};
  for (const std::string& message : {
           Build(
               [](StringSink& s) { protocol::BuildParameterStatus(s, "server_version", "16.2"); }),
           Build([](StringSink& s) { protocol::BuildParameterStatus(s, "search_path", "app"); }),
           Build([](StringSink& s) { protocol::BuildNoticeResponse(s, "NOTICE", "00000", "hi"); }),
           Build([&](StringSink& s) { protocol::BuildBackendKeyData(s, 4242, secret); }),
       }) {
    const LoginVerdict verdict = Feed(message);
    EXPECT_EQ(verdict.outcome, Outcome::kContinue) << verdict.message;
    EXPECT_TRUE(verdict.to_server.bytes().empty());
  }
  EXPECT_EQ(Feed(Build([](StringSink& s) { protocol::BuildReadyForQuery(s, 'I'); })).outcome,
            Outcome::kReady);
  const std::vector<std::pair<std::string, std::string>> expected = {{"server_version", "16.2"},
                                                                     {"search_path", "app"}};
  EXPECT_EQ(login_.login_params(), expected);
  const int slot = tracked_.Find("search_path");
  ASSERT_GE(slot, 0);
  EXPECT_TRUE(login_.params().IsSet(static_cast<size_t>(slot)));
  EXPECT_EQ(login_.params().Get(static_cast<size_t>(slot)), "app");
  EXPECT_EQ(login_.backend_pid(), 4242u);
  EXPECT_EQ(login_.backend_secret(), std::vector<uint8_t>(std::begin(secret), std::end(secret)));
}

TEST_F(ServerLoginTest, MalformedParameterStatusCloses) {
  Start();
  const LoginVerdict verdict = Feed(protocol::testing::Typed('S', "name-without-value"));
  EXPECT_EQ(verdict.outcome, Outcome::kClose);
  EXPECT_EQ(verdict.message, "unexpected message 'S' during login");
}

TEST_F(ServerLoginTest, ServerErrorsAreFatalForClientsOnlyWhenWaitingCannotHelp) {
  const struct {
    std::string_view sqlstate;
    bool fatal_for_clients;
  } cases[] = {
      {"28P01", true},   // wrong password
      {"28000", true},   // no pg_hba.conf entry
      {"3D000", true},   // no such database
      {"53300", false},  // too many connections: another server may get in later
      {"57P03", false},  // the server is starting up
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.sqlstate);
    ServerLogin login(credentials_, random_, tracked_);
    const std::string error = Build(
        [&](StringSink& s) { protocol::BuildErrorResponse(s, "FATAL", c.sqlstate, "refused"); });
    const LoginVerdict verdict = login.OnMessage('E', BodyOf(error));
    EXPECT_EQ(verdict.outcome, Outcome::kFailedByServer);
    EXPECT_EQ(verdict.to_clients.bytes(), error);  // passed on whole
    EXPECT_EQ(verdict.fatal_for_clients, c.fatal_for_clients);
    EXPECT_EQ(verdict.sqlstate, c.sqlstate);
    EXPECT_EQ(verdict.message, "refused");
  }
}

TEST_F(ServerLoginTest, MalformedErrorIsPassedOnAndNotFatal) {
  Start();
  const std::string error = protocol::testing::Typed('E', "garbage");
  const LoginVerdict verdict = Feed(error);
  EXPECT_EQ(verdict.outcome, Outcome::kFailedByServer);
  EXPECT_EQ(verdict.to_clients.bytes(), error);
  EXPECT_EQ(verdict.sqlstate, "");
  EXPECT_EQ(verdict.message, "malformed");
  EXPECT_FALSE(verdict.fatal_for_clients);
}

TEST_F(ServerLoginTest, AnOlderServerNegotiatesDownTo30) {
  Start();
  EXPECT_EQ(login_.protocol_version(), protocol::kProtocol32);  // asked for
  const LoginVerdict verdict = Feed(Build([](StringSink& s) {
    protocol::BuildNegotiateProtocolVersion(s, protocol::kProtocol30, {});
  }));
  EXPECT_EQ(verdict.outcome, Outcome::kContinue);
  EXPECT_TRUE(verdict.to_server.bytes().empty());
  EXPECT_EQ(login_.protocol_version(), protocol::kProtocol30);
}

TEST_F(ServerLoginTest, ANegotiationOutsideThreeZeroToThreeTwoCloses) {
  for (uint32_t version : {0u, protocol::kProtocol32 + 1, 4u << 16}) {
    Start();
    const LoginVerdict verdict = Feed(
        Build([&](StringSink& s) { protocol::BuildNegotiateProtocolVersion(s, version, {}); }));
    EXPECT_EQ(verdict.outcome, Outcome::kClose) << version;
  }
}

TEST_F(ServerLoginTest, UnexpectedMessageCloses) {
  Start();
  const LoginVerdict verdict = Feed(Build([](StringSink& s) { protocol::BuildQuery(s, "x"); }));
  EXPECT_EQ(verdict.outcome, Outcome::kClose);
  EXPECT_EQ(verdict.message, "unexpected message 'Q' during login");
}

TEST_F(ServerLoginTest, FailedByPgfleetIsAFatalForClients) {
  ExpectFailedByPgfleet(ServerLogin::FailedByPgfleet("server refused the TLS request"),
                        "server refused the TLS request");
}

// Every login asks PostgreSQL to watch the connection: the defaults, then each one turned off.
TEST(ServerLoginSettingsTest, WatchTheConnectionUnlessTurnedOff) {
  config::PoolConfig pool;
  using Settings = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ServerLoginSettings(pool), (Settings{{"client_connection_check_interval", "500ms"},
                                                 {"tcp_keepalives_idle", "20000ms"},
                                                 {"tcp_keepalives_interval", "5000ms"},
                                                 {"tcp_keepalives_count", "3"},
                                                 {"tcp_user_timeout", "35000ms"}}));
  pool.server_connection_check_interval = absl::ZeroDuration();
  pool.server_tcp_user_timeout = absl::ZeroDuration();
  pool.server_tcp_keepalive_count = 0;
  EXPECT_EQ(ServerLoginSettings(pool),
            (Settings{{"tcp_keepalives_idle", "20000ms"}, {"tcp_keepalives_interval", "5000ms"}}));
  pool.tcp_keepalive = false;  // no keepalive: none of its timings
  EXPECT_EQ(ServerLoginSettings(pool), Settings{});
}

}  // namespace server_login_test
}  // namespace pgfleet::pool
