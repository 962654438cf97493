// Tests for pooler/auth/scram.h: RFC 7677's vector, exchanges whose expected messages were
// computed independently with Python's hashlib/hmac, a verifier made by PostgreSQL 15, round trips
// and malformed input.
#include "pooler/auth/scram.h"

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pooler/auth/scram_primitives.h"

namespace pgfleet::auth {
namespace {

using internal::Base64Decode;
using internal::Base64Encode;

// Yields 0, 1, 2, ... (wrapping), so an 18-byte nonce is always "AAECAwQFBgcICQoLDA0ODxAR".
class CountingRandom final : public base::RandomSource {
 public:
  void Fill(std::span<uint8_t> out) override {
    for (uint8_t& b : out) b = next_++;
  }

 private:
  uint8_t next_ = 0;
};

// Plain char arrays rather than std::string_view: Debian's absl::StrCat takes only its own
// absl::string_view.
constexpr char kFirstNonce[] = "AAECAwQFBgcICQoLDA0ODxAR";

// RFC 7677 section 3.
constexpr char kRfcSalt[] = "W22ZaJ0SNY7soEsUEjb6gQ==";
constexpr std::string_view kRfcAuthMessage =
    "n=user,r=rOprNGfwEbeRWgbNEkqO,"
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
constexpr char kRfcProof[] = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
constexpr char kRfcServerSignature[] = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
// The verifier for "pencil" with the RFC's salt, from Python (pbkdf2_hmac + hmac).
constexpr std::string_view kRfcSecret =
    "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
    "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";
// pg_authid.rolpassword after `CREATE ROLE pencil_user PASSWORD 'pencil'` on PostgreSQL 15.
constexpr std::string_view kPostgresSecret =
    "SCRAM-SHA-256$4096:9/VorCDbKqo94z7ZSOo6Lg==$2lFDLgY1Hj1XEKx086Gvp0zG1+k2Fcp5G86dQ3laFOY=:"
    "UbIkxSgVJAhln1KLLy19RgL7D82Y3f2crDalXuO1h5o=";

std::vector<uint8_t> Decode(std::string_view text) {
  std::optional<std::vector<uint8_t>> bytes = Base64Decode(text);
  EXPECT_TRUE(bytes.has_value()) << text;
  return bytes.value_or(std::vector<uint8_t>{});
}

ScramSecret RfcSecret() { return MakeScramSecret("pencil", Decode(kRfcSalt), 4096); }

// Runs a whole exchange (with -PLUS when `plus`); returns the first failure.
absl::Status RunExchange(ScramClientExchange& client, ScramServerExchange& server,
                         ScramClientBinding binding = {}, bool plus = false) {
  absl::StatusOr<std::string> server_first =
      server.HandleClientFirst(client.ClientFirst(std::move(binding)), plus);
  if (!server_first.ok()) return server_first.status();
  absl::StatusOr<std::string> client_final = client.HandleServerFirst(*server_first);
  if (!client_final.ok()) return client_final.status();
  absl::StatusOr<std::string> server_final = server.HandleClientFinal(*client_final);
  if (!server_final.ok()) return server_final.status();
  return client.VerifyServerFinal(*server_final);
}

TEST(Base64Test, RoundTripsAllLengths) {
  std::vector<uint8_t> data;
  for (int n = 0; n < 40; ++n) {
    std::optional<std::vector<uint8_t>> back = Base64Decode(Base64Encode(data));
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, data);
    data.push_back(static_cast<uint8_t>(n * 37 + 200));
  }
}

TEST(Base64Test, KnownValues) {
  const std::string_view text = "foobar";
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  EXPECT_EQ(Base64Encode(bytes.first(0)), "");
  EXPECT_EQ(Base64Encode(bytes.first(1)), "Zg==");
  EXPECT_EQ(Base64Encode(bytes.first(2)), "Zm8=");
  EXPECT_EQ(Base64Encode(bytes.first(3)), "Zm9v");
  EXPECT_EQ(Base64Encode(bytes), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::vector<uint8_t>{0xfb, 0xff}), "+/8=");
}

TEST(Base64Test, RejectsMalformedText) {
  for (std::string_view bad : {"Zg", "Zg=", "Zm9v=", "Z===", "====", "Zg==Zg==", "Zm 9", "Zm9!",
                               "=Zm9", "Zm=v", "Zm9v\n"}) {
    EXPECT_FALSE(Base64Decode(bad).has_value()) << bad;
  }
}

TEST(ScramMathTest, Rfc7677Vector) {
  const ScramKey salted = internal::SaltedPassword("pencil", Decode(kRfcSalt), 4096);
  const ScramKey client_key = internal::ClientKeyFromSalted(salted);
  const ScramKey server_key = internal::ServerKeyFromSalted(salted);
  EXPECT_EQ(Base64Encode(internal::ClientProof(client_key, kRfcAuthMessage)), kRfcProof);
  EXPECT_EQ(Base64Encode(internal::ServerSignature(server_key, kRfcAuthMessage)),
            kRfcServerSignature);
}

TEST(ScramMathTest, SecretFromRfc7677VerifiesItsProof) {
  const ScramSecret secret = RfcSecret();
  EXPECT_EQ(FormatScramSecret(secret), kRfcSecret);
  std::vector<uint8_t> proof_bytes = Decode(kRfcProof);
  ASSERT_EQ(proof_bytes.size(), 32u);
  ScramKey proof;
  std::copy(proof_bytes.begin(), proof_bytes.end(), proof.begin());
  const ScramKey client_key = internal::RecoverClientKey(secret.stored_key, proof, kRfcAuthMessage);
  EXPECT_EQ(internal::Sha256(client_key), secret.stored_key);
  EXPECT_EQ(Base64Encode(internal::ServerSignature(secret.server_key, kRfcAuthMessage)),
            kRfcServerSignature);
}

TEST(ParseScramSecretTest, ParsesVerifierMadeByPostgres) {
  absl::StatusOr<ScramSecret> secret = ParseScramSecret(kPostgresSecret);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(secret->iterations, 4096);
  EXPECT_EQ(secret->salt, Decode("9/VorCDbKqo94z7ZSOo6Lg=="));
  const ScramSecret derived = MakeScramSecret("pencil", secret->salt, secret->iterations);
  EXPECT_EQ(derived.stored_key, secret->stored_key);
  EXPECT_EQ(derived.server_key, secret->server_key);
  EXPECT_EQ(FormatScramSecret(*secret), kPostgresSecret);
}

TEST(ParseScramSecretTest, RejectsMalformedSecretsWithoutEchoingThem) {
  const std::string key = "2lFDLgY1Hj1XEKx086Gvp0zG1+k2Fcp5G86dQ3laFOY=";
  const std::string short_key = Base64Encode(std::vector<uint8_t>(31, 7));
  const std::vector<std::string> bad = {
      "",
      "SCRAM-SHA-256",
      "SCRAM-SHA-1$4096:c2FsdA==$" + key + ":" + key,
      "scram-sha-256$4096:c2FsdA==$" + key + ":" + key,
      "SCRAM-SHA-256$4096:c2FsdA==$" + key,
      "SCRAM-SHA-256$4096:c2FsdA==$" + key + ":" + key + "$",
      "SCRAM-SHA-256$4096:c2FsdA==:x$" + key + ":" + key,
      "SCRAM-SHA-256$:c2FsdA==$" + key + ":" + key,
      "SCRAM-SHA-256$0:c2FsdA==$" + key + ":" + key,
      "SCRAM-SHA-256$-1:c2FsdA==$" + key + ":" + key,
      "SCRAM-SHA-256$40x6:c2FsdA==$" + key + ":" + key,
      "SCRAM-SHA-256$99999999999:c2FsdA==$" + key + ":" + key,
      "SCRAM-SHA-256$4096:$" + key + ":" + key,
      "SCRAM-SHA-256$4096:c2FsdA=$" + key + ":" + key,
      "SCRAM-SHA-256$4096:c2FsdA==$" + short_key + ":" + key,
      "SCRAM-SHA-256$4096:c2FsdA==$" + key + ":" + short_key,
      "SCRAM-SHA-256$4096:c2FsdA==$" + key + ":" + key.substr(1),
  };
  for (const std::string& text : bad) {
    absl::StatusOr<ScramSecret> secret = ParseScramSecret(text);
    ASSERT_FALSE(secret.ok()) << text;
    EXPECT_EQ(secret.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_FALSE(absl::StrContains(secret.status().message(), key)) << secret.status();
  }
}

TEST(ScramClientExchangeTest, ClientFirstUsesEmptyUserAndRandomNonce) {
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
  EXPECT_EQ(client.ClientFirst(), absl::StrCat("n,,n=,r=", kFirstNonce));
}

TEST(ScramClientExchangeTest, MatchesIndependentlyComputedMessages) {
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
  (void)client.ClientFirst();
  absl::StatusOr<std::string> client_final = client.HandleServerFirst(
      absl::StrCat("r=", kFirstNonce, "3rfcNHYJY1ZVvWVs7j,s=", kRfcSalt, ",i=4096"));
  ASSERT_TRUE(client_final.ok()) << client_final.status();
  EXPECT_EQ(*client_final,
            absl::StrCat("c=biws,r=", kFirstNonce,
                         "3rfcNHYJY1ZVvWVs7j,p=3k1aY+9UjlSQDaSJrOXCFztEwh3dsdxmUoa6sSeDdpk="));
  EXPECT_TRUE(client.VerifyServerFinal("v=94saffunXrrLiWxN2tb7lucV2Ai0nkAhF/k763JZ+bk=").ok());
}

TEST(ScramClientExchangeTest, WithClientKeyProducesSameProofAsPassword) {
  const ScramSecret secret = RfcSecret();
  const ScramKey client_key = internal::ClientKeyFromSalted(
      internal::SaltedPassword("pencil", secret.salt, secret.iterations));
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithClientKey(client_key, secret, random);
  (void)client.ClientFirst();
  absl::StatusOr<std::string> client_final = client.HandleServerFirst(
      absl::StrCat("r=", kFirstNonce, "3rfcNHYJY1ZVvWVs7j,s=", kRfcSalt, ",i=4096"));
  ASSERT_TRUE(client_final.ok()) << client_final.status();
  EXPECT_TRUE(absl::EndsWith(*client_final, ",p=3k1aY+9UjlSQDaSJrOXCFztEwh3dsdxmUoa6sSeDdpk="));
  EXPECT_TRUE(client.VerifyServerFinal("v=94saffunXrrLiWxN2tb7lucV2Ai0nkAhF/k763JZ+bk=").ok());
}

TEST(ScramClientExchangeTest, RejectsWrongServerSignature) {
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
  (void)client.ClientFirst();
  ASSERT_TRUE(client
                  .HandleServerFirst(
                      absl::StrCat("r=", kFirstNonce, "3rfcNHYJY1ZVvWVs7j,s=", kRfcSalt, ",i=4096"))
                  .ok());
  absl::Status status = client.VerifyServerFinal(absl::StrCat("v=", kRfcServerSignature));
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
}

TEST(ScramClientExchangeTest, RejectsMalformedServerFirst) {
  const std::string good_tail = absl::StrCat(",s=", kRfcSalt, ",i=4096");
  const std::string nonce = absl::StrCat(kFirstNonce, "srv");
  const std::vector<std::string> bad = {
      "",
      ",,",
      "r=",
      absl::StrCat("r=", nonce),
      absl::StrCat("r=", nonce, ",s=", kRfcSalt),
      absl::StrCat("r=", kFirstNonce, good_tail),                        // not extended
      absl::StrCat("r=", "AAECAwQFBgcICQoLDA0ODxAx", "srv", good_tail),  // not ours
      absl::StrCat("r=", nonce, "\x01", good_tail),
      absl::StrCat("s=", kRfcSalt, ",r=", nonce, ",i=4096"),
      absl::StrCat("r=", nonce, ",s=,i=4096"),
      absl::StrCat("r=", nonce, ",s=W22ZaJ0SNY7soEsUEjb6gQ=,i=4096"),
      absl::StrCat("r=", nonce, ",s=", kRfcSalt, ",i=0"),
      absl::StrCat("r=", nonce, ",s=", kRfcSalt, ",i=-1"),
      absl::StrCat("r=", nonce, ",s=", kRfcSalt, ",i="),
      absl::StrCat("r=", nonce, ",s=", kRfcSalt, ",i=4096x"),
      absl::StrCat("r=", nonce, good_tail, ","),
      absl::StrCat("r=", nonce, good_tail, ",junk"),
      absl::StrCat("m=ext,r=", nonce, good_tail),
      "e=other-error",
  };
  for (const std::string& server_first : bad) {
    CountingRandom random;
    ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
    (void)client.ClientFirst();
    EXPECT_FALSE(client.HandleServerFirst(server_first).ok()) << server_first;
  }
}

TEST(ScramClientExchangeTest, RejectsMalformedServerFinal) {
  for (std::string_view server_final :
       {"", "v=", "v=94saffunXrrLiWxN2tb7lucV2Ai0nkAhF/k763JZ+b", "x=1", "v=!!!!",
        "e=invalid-proof", "v=94saffunXrrLiWxN2tb7lucV2Ai0nkAhF/k763JZ+bk=,junk"}) {
    CountingRandom random;
    ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
    (void)client.ClientFirst();
    ASSERT_TRUE(client
                    .HandleServerFirst(absl::StrCat("r=", kFirstNonce,
                                                    "3rfcNHYJY1ZVvWVs7j,s=", kRfcSalt, ",i=4096"))
                    .ok());
    EXPECT_FALSE(client.VerifyServerFinal(server_final).ok()) << server_final;
  }
}

TEST(ScramClientExchangeTest, ServerErrorIsPermissionDenied) {
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
  (void)client.ClientFirst();
  ASSERT_TRUE(
      client.HandleServerFirst(absl::StrCat("r=", kFirstNonce, "x,s=", kRfcSalt, ",i=4096")).ok());
  absl::Status status = client.VerifyServerFinal("e=invalid-proof");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(status.message(), "invalid-proof")) << status;
}

TEST(ScramClientExchangeTest, RejectsMessagesOutOfOrder) {
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
  const std::string server_first = absl::StrCat("r=", kFirstNonce, "x,s=", kRfcSalt, ",i=4096");
  EXPECT_EQ(client.HandleServerFirst(server_first).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.VerifyServerFinal("v=94saffunXrrLiWxN2tb7lucV2Ai0nkAhF/k763JZ+bk=").code(),
            absl::StatusCode::kFailedPrecondition);
  (void)client.ClientFirst();
  ASSERT_TRUE(client.HandleServerFirst(server_first).ok());
  EXPECT_EQ(client.HandleServerFirst(server_first).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ScramServerExchangeTest, MatchesIndependentlyComputedMessages) {
  CountingRandom random;
  ScramServerExchange server(RfcSecret(), random);
  absl::StatusOr<std::string> server_first =
      server.HandleClientFirst("n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
  ASSERT_TRUE(server_first.ok()) << server_first.status();
  EXPECT_EQ(*server_first,
            absl::StrCat("r=rOprNGfwEbeRWgbNEkqO", kFirstNonce, ",s=", kRfcSalt, ",i=4096"));
  absl::StatusOr<std::string> server_final =
      server.HandleClientFinal(absl::StrCat("c=biws,r=rOprNGfwEbeRWgbNEkqO", kFirstNonce,
                                            ",p=3nZwh66eFopJBU64+VnKix0ymn5pXztJcS//L2F7JSo="));
  ASSERT_TRUE(server_final.ok()) << server_final.status();
  EXPECT_EQ(*server_final, "v=7tmrOCYcuefy9w1AUzXStMNVtjzpnNmWSOEogDkIKAg=");
  EXPECT_EQ(server.client_key(), internal::ClientKeyFromSalted(
                                     internal::SaltedPassword("pencil", Decode(kRfcSalt), 4096)));
}

TEST(ScramServerExchangeTest, AcceptsYFlagWhenBindingIsEchoed) {
  CountingRandom random;
  const ScramSecret secret = RfcSecret();
  ScramServerExchange server(secret, random);
  const std::string client_first_bare = "n=,r=abc";
  absl::StatusOr<std::string> server_first =
      server.HandleClientFirst(absl::StrCat("y,,", client_first_bare));
  ASSERT_TRUE(server_first.ok()) << server_first.status();
  // "eSws" is base64("y,,").
  const std::string without_proof = absl::StrCat("c=eSws,r=abc", kFirstNonce);
  const ScramKey client_key = internal::ClientKeyFromSalted(
      internal::SaltedPassword("pencil", secret.salt, secret.iterations));
  const ScramKey proof = internal::ClientProof(
      client_key, absl::StrCat(client_first_bare, ",", *server_first, ",", without_proof));
  EXPECT_TRUE(
      server.HandleClientFinal(absl::StrCat(without_proof, ",p=", Base64Encode(proof))).ok());
}

TEST(ScramServerExchangeTest, ChannelBindingWithoutPlusIsMalformed) {
  CountingRandom random;
  ScramServerExchange server(RfcSecret(), random, std::vector<uint8_t>{1, 2, 3});
  absl::StatusOr<std::string> server_first =
      server.HandleClientFirst("p=tls-server-end-point,,n=,r=abc", /*plus=*/false);
  ASSERT_FALSE(server_first.ok());
  EXPECT_EQ(server_first.status().code(), absl::StatusCode::kInvalidArgument);
}

// Runs a -PLUS exchange: the client binds to `client_sees`, the server to `server_has`.
absl::Status RunPlusExchange(std::vector<uint8_t> client_sees, std::vector<uint8_t> server_has) {
  CountingRandom client_random;
  CountingRandom server_random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", client_random);
  ScramServerExchange server(RfcSecret(), server_random, std::move(server_has));
  ScramClientBinding binding;
  binding.flag = ScramClientBinding::Flag::kTlsServerEndPoint;
  binding.data = std::move(client_sees);
  return RunExchange(client, server, std::move(binding), /*plus=*/true);
}

TEST(ScramChannelBindingTest, PlusExchangeSucceedsWhenBothSeeTheSameCertificate) {
  EXPECT_TRUE(RunPlusExchange({0xde, 0xad, 0xbe, 0xef}, {0xde, 0xad, 0xbe, 0xef}).ok());
}

TEST(ScramChannelBindingTest, PlusExchangeFailsWhenTheCertificatesDiffer) {
  // What a TLS-terminating man in the middle produces: each side sees a different certificate.
  absl::Status status = RunPlusExchange({0xde, 0xad, 0xbe, 0xef}, {0xde, 0xad, 0xbe, 0xee});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
}

TEST(ScramChannelBindingTest, YFlagIsADowngradeWhenPlusWasOffered) {
  CountingRandom random;
  ScramServerExchange server(RfcSecret(), random, std::vector<uint8_t>{1});
  absl::StatusOr<std::string> server_first = server.HandleClientFirst("y,,n=,r=abc");
  ASSERT_FALSE(server_first.ok());
  EXPECT_EQ(server_first.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(server_first.status().message(), "negotiation error"));
}

TEST(ScramChannelBindingTest, PlusNeedsAnOfferAndTheKnownBindingType) {
  CountingRandom random;
  ScramServerExchange not_offered(RfcSecret(), random);
  EXPECT_EQ(not_offered.HandleClientFirst("p=tls-server-end-point,,n=,r=abc", true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ScramServerExchange other_type(RfcSecret(), random, std::vector<uint8_t>{1});
  EXPECT_EQ(other_type.HandleClientFirst("p=tls-unique,,n=,r=abc", true).status().code(),
            absl::StatusCode::kUnimplemented);
  ScramServerExchange no_flag(RfcSecret(), random, std::vector<uint8_t>{1});
  EXPECT_EQ(no_flag.HandleClientFirst("n,,n=,r=abc", true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ScramChannelBindingTest, ClientSendsYOverTlsWithoutPlus) {
  CountingRandom random;
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", random);
  ScramClientBinding binding;
  binding.flag = ScramClientBinding::Flag::kSupportedNotUsed;
  EXPECT_TRUE(absl::StartsWith(client.ClientFirst(binding), "y,,n=,r="));
}

TEST(ScramServerExchangeTest, RejectsMalformedClientFirst) {
  for (std::string_view client_first : {
           "",
           "n",
           "n,,",
           "n,,n=",
           "n,,,",
           "x,,n=,r=abc",
           "nn,,n=,r=abc",
           "n=,,n=,r=abc",
           "n,a=admin,n=,r=abc",
           "n,,r=abc",
           "n,,r=abc,n=",
           "n,,n=,r=",
           "n,,n=,x=abc",
           "n,,n=,r=a\x01z",
           "n,,n=,r=a z",
           "n,,n=,r=a\x80z",
           "n,,m=ext,n=,r=abc",
           "n,,n=,r=abc,",
           "n,,n=,r=abc,junk",
           "y,,n=,r=abc,=x",
       }) {
    CountingRandom random;
    ScramServerExchange server(RfcSecret(), random);
    EXPECT_FALSE(server.HandleClientFirst(client_first).ok()) << client_first;
  }
}

TEST(ScramServerExchangeTest, AcceptsUserNameAndExtensions) {
  CountingRandom random;
  ScramServerExchange server(RfcSecret(), random);
  EXPECT_TRUE(server.HandleClientFirst("n,,n=some=2Cuser,r=abc,x=ext").ok());
}

TEST(ScramServerExchangeTest, RejectsMalformedClientFinal) {
  const std::string nonce = absl::StrCat("abc", kFirstNonce);
  const std::string proof = "3nZwh66eFopJBU64+VnKix0ymn5pXztJcS//L2F7JSo=";
  const std::vector<std::string> bad = {
      "",
      "c=biws",
      absl::StrCat("c=biws,r=", nonce),
      absl::StrCat("c=biws,r=", nonce, ",p="),
      absl::StrCat("c=biws,r=", nonce, ",p=", proof.substr(4)),
      absl::StrCat("c=biws,r=", nonce, ",p=3nZwh66eFopJBU64+VnKix0ymn5pXztJcS//L2F7JSo"),
      absl::StrCat("c=biws,r=", nonce, ",p=!nZwh66eFopJBU64+VnKix0ymn5pXztJcS//L2F7JSo="),
      absl::StrCat("c=biws,r=", nonce, ",p=", proof, ",x=1"),
      absl::StrCat("c=biws,r=", nonce, ",junk,p=", proof),
      absl::StrCat("r=", nonce, ",c=biws,p=", proof),
      absl::StrCat("c=biw,r=", nonce, ",p=", proof),
      absl::StrCat("c=eSws,r=", nonce, ",p=", proof),  // "y,," but the client sent "n,,"
      absl::StrCat("c=cD10bHMtc2VydmVyLWVuZC1wb2ludCws,r=", nonce, ",p=", proof),
      absl::StrCat("c=biws,r=abc,p=", proof),           // nonce without our part
      absl::StrCat("c=biws,r=", nonce, "x,p=", proof),  // tampered nonce
      absl::StrCat("c=biws,r=", nonce, ",p=", proof),   // wrong proof
  };
  for (const std::string& client_final : bad) {
    CountingRandom random;
    ScramServerExchange server(RfcSecret(), random);
    ASSERT_TRUE(server.HandleClientFirst("n,,n=,r=abc").ok());
    EXPECT_FALSE(server.HandleClientFinal(client_final).ok()) << client_final;
  }
}

TEST(ScramServerExchangeTest, RejectsMessagesOutOfOrder) {
  CountingRandom random;
  ScramServerExchange server(RfcSecret(), random);
  EXPECT_EQ(server.HandleClientFinal("c=biws,r=abc,p=x").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The exchange is over after any failure.
  EXPECT_FALSE(server.HandleClientFirst("n,,n=,r=abc").ok());

  ScramServerExchange second(RfcSecret(), random);
  ASSERT_TRUE(second.HandleClientFirst("n,,n=,r=abc").ok());
  EXPECT_EQ(second.HandleClientFirst("n,,n=,r=abc").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ScramRoundTripTest, PlainPasswordAgainstFreshSecret) {
  std::array<uint8_t, 16> salt;
  base::SystemRandom().Fill(salt);
  ScramServerExchange server(MakeScramSecret("correct horse", salt, kDefaultScramIterations),
                             base::SystemRandom());
  ScramClientExchange client =
      ScramClientExchange::WithPassword("correct horse", base::SystemRandom());
  absl::Status status = RunExchange(client, server);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(ScramRoundTripTest, PlainPasswordAgainstPostgresSecret) {
  absl::StatusOr<ScramSecret> secret = ParseScramSecret(kPostgresSecret);
  ASSERT_TRUE(secret.ok());
  ScramServerExchange server(*secret, base::SystemRandom());
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil", base::SystemRandom());
  absl::Status status = RunExchange(client, server);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(ScramRoundTripTest, WrongPasswordIsDenied) {
  ScramServerExchange server(RfcSecret(), base::SystemRandom());
  ScramClientExchange client = ScramClientExchange::WithPassword("pencil2", base::SystemRandom());
  absl::Status status = RunExchange(client, server);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(server.client_key(), ScramKey{});
}

TEST(ScramRoundTripTest, ClientKeyRecoveredByServerLogsInElsewhere) {
  absl::StatusOr<ScramSecret> secret = ParseScramSecret(kPostgresSecret);
  ASSERT_TRUE(secret.ok());
  // A client logs in to the pooler with its password...
  ScramServerExchange pooler(*secret, base::SystemRandom());
  ScramClientExchange app = ScramClientExchange::WithPassword("pencil", base::SystemRandom());
  ASSERT_TRUE(RunExchange(app, pooler).ok());
  // ...and the pooler reuses the recovered ClientKey to log in to a server with the same secret.
  ScramServerExchange postgres(*secret, base::SystemRandom());
  ScramClientExchange pooler_client =
      ScramClientExchange::WithClientKey(pooler.client_key(), *secret, base::SystemRandom());
  absl::Status status = RunExchange(pooler_client, postgres);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(ScramRoundTripTest, ClientKeyNeedsTheSameSaltAndIterations) {
  const ScramSecret secret = RfcSecret();
  const ScramKey client_key = internal::ClientKeyFromSalted(
      internal::SaltedPassword("pencil", secret.salt, secret.iterations));

  ScramSecret other_salt = secret;
  other_salt.salt.back() ^= 1;
  ScramSecret other_count = secret;
  other_count.iterations = 4097;
  for (const ScramSecret& server_secret : {other_salt, other_count}) {
    ScramServerExchange server(
        MakeScramSecret("pencil", server_secret.salt, server_secret.iterations),
        base::SystemRandom());
    ScramClientExchange client =
        ScramClientExchange::WithClientKey(client_key, secret, base::SystemRandom());
    absl::Status status = RunExchange(client, server);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  }
}

TEST(ScramRoundTripTest, ClientKeyMustBelongToSecret) {
  const ScramSecret secret = RfcSecret();
  ScramKey wrong_key{};
  wrong_key[0] = 1;
  ScramServerExchange server(secret, base::SystemRandom());
  ScramClientExchange client =
      ScramClientExchange::WithClientKey(wrong_key, secret, base::SystemRandom());
  EXPECT_EQ(RunExchange(client, server).code(), absl::StatusCode::kFailedPrecondition);
}

// Garbage and mutated messages must only ever produce errors; run under ASan to catch overreads.
TEST(ScramFuzzTest, RandomAndMutatedInputNeverCrashes) {
  std::mt19937 rng(20240607);
  auto random_text = [&](size_t max_len) {
    std::string text(rng() % (max_len + 1), '\0');
    for (char& c : text) {
      // Mostly the characters SCRAM uses, so that parsing gets past the first checks.
      static constexpr std::string_view kAlphabet = "nyprcvsime=,abAZ09+/\x01\x80";
      c = kAlphabet[rng() % kAlphabet.size()];
    }
    return text;
  };
  const ScramSecret secret = RfcSecret();
  for (int i = 0; i < 2000; ++i) {
    CountingRandom random;
    ScramServerExchange server(secret, random);
    (void)server.HandleClientFirst(random_text(40));
    ScramServerExchange server2(secret, random);
    ASSERT_TRUE(server2.HandleClientFirst("n,,n=,r=abc").ok());
    EXPECT_FALSE(server2.HandleClientFinal(random_text(80)).ok());

    ScramClientExchange client = ScramClientExchange::WithClientKey({}, secret, random);
    (void)client.ClientFirst();
    (void)client.HandleServerFirst(random_text(60));
    (void)client.VerifyServerFinal(random_text(60));
  }

  // Every truncation of a valid client-final-message fails.
  const std::string client_final = absl::StrCat("c=biws,r=rOprNGfwEbeRWgbNEkqO", kFirstNonce,
                                                ",p=3nZwh66eFopJBU64+VnKix0ymn5pXztJcS//L2F7JSo=");
  for (size_t len = 0; len < client_final.size(); ++len) {
    CountingRandom random;
    ScramServerExchange server(secret, random);
    ASSERT_TRUE(server.HandleClientFirst("n,,n=user,r=rOprNGfwEbeRWgbNEkqO").ok());
    EXPECT_FALSE(server.HandleClientFinal(client_final.substr(0, len)).ok()) << len;
  }
}

}  // namespace
}  // namespace pgfleet::auth
