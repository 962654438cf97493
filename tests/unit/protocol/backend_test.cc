// Tests for pooler/protocol/backend.h: parsing the server message bodies pgfleet reads.
#include "pooler/protocol/backend.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::protocol {
namespace {

using ::pgfleet::protocol::testing::AsBytes;
using ::pgfleet::protocol::testing::AsString;
using ::pgfleet::protocol::testing::I32;
using namespace std::string_literals;

TEST(ParseAuthenticationTest, Md5NeedsExactlyFourSaltBytes) {
  for (size_t salt_size : {0u, 3u, 5u, 8u}) {
    const std::string body = I32(5) + std::string(salt_size, 's');
    auto auth = ParseAuthentication(AsBytes(body));
    ASSERT_FALSE(auth.ok()) << salt_size;
    EXPECT_EQ(std::string(auth.status().message()), "malformed AuthenticationMD5Password message");
  }
  const std::string good = I32(5) + "salt";
  auto auth = ParseAuthentication(AsBytes(good));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(AsString(auth->data), "salt");
}

TEST(ParseAuthenticationTest, ShortBodyIsMalformed) {
  for (size_t n = 0; n < 4; ++n) {
    auto auth = ParseAuthentication(AsBytes(I32(0)).first(n));
    ASSERT_FALSE(auth.ok()) << n;
    EXPECT_EQ(std::string(auth.status().message()), "malformed Authentication message");
  }
}

TEST(ParseAuthenticationTest, UnknownCodeIsPassedThrough) {
  // GSS (7) and anything newer: the parser reports the code, the caller decides.
  const std::string body = I32(7) + "xyz";
  auto auth = ParseAuthentication(AsBytes(body));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, 7);
  EXPECT_EQ(AsString(auth->data), "xyz");
}

TEST(SaslOffersTest, FindsMechanismInList) {
  const std::string list = "SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"s;
  EXPECT_TRUE(SaslOffers(AsBytes(list), "SCRAM-SHA-256"));
  EXPECT_TRUE(SaslOffers(AsBytes(list), "SCRAM-SHA-256-PLUS"));
  EXPECT_FALSE(SaslOffers(AsBytes(list), "SCRAM"));
  EXPECT_FALSE(SaslOffers(AsBytes(list), ""));
}

TEST(SaslOffersTest, StopsAtEmptyNameAndIgnoresUnterminatedTail) {
  EXPECT_FALSE(SaslOffers(AsBytes("\0SCRAM-SHA-256\0\0"s), "SCRAM-SHA-256"));
  EXPECT_FALSE(SaslOffers(AsBytes("SCRAM-SHA-256"s), "SCRAM-SHA-256"));
  EXPECT_FALSE(SaslOffers({}, "SCRAM-SHA-256"));
  // A missing final list terminator still finds complete names.
  EXPECT_TRUE(SaslOffers(AsBytes("SCRAM-SHA-256\0"s), "SCRAM-SHA-256"));
}

TEST(ParseParameterStatusTest, Valid) {
  const std::string body =
      "server_version\0"
      "16.2\0"s;
  auto ps = ParseParameterStatus(AsBytes(body));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->name, "server_version");
  EXPECT_EQ(ps->value, "16.2");
}

TEST(ParseParameterStatusTest, MissingNulOrTrailingDataIsMalformed) {
  for (const std::string& body : {"server_version\0"
                                  "16.2"s,
                                  "server_version"s, ""s, "a\0b\0c"s, "a\0b\0\0"s}) {
    auto ps = ParseParameterStatus(AsBytes(body));
    ASSERT_FALSE(ps.ok()) << body.size();
    EXPECT_EQ(std::string(ps.status().message()), "malformed ParameterStatus message");
  }
}

TEST(ParseBackendKeyDataTest, AcceptsFourToTwoHundredFiftySixByteKeys) {
  for (size_t key_size : {4u, 32u, 256u}) {
    const std::string body = I32(0x80000001u) + std::string(key_size, 'k');
    auto key = ParseBackendKeyData(AsBytes(body));
    ASSERT_TRUE(key.ok()) << key_size;
    EXPECT_EQ(key->pid, 0x80000001u);
    EXPECT_EQ(key->secret.size(), key_size);
  }
}

TEST(ParseBackendKeyDataTest, RejectsOtherSizes) {
  for (const std::string& body :
       {""s, "abc"s, I32(1), I32(1) + "abc", I32(1) + std::string(257, 'k')}) {
    auto key = ParseBackendKeyData(AsBytes(body));
    ASSERT_FALSE(key.ok()) << body.size();
    EXPECT_EQ(std::string(key.status().message()), "malformed BackendKeyData message");
  }
}

TEST(ParseReadyForQueryTest, AcceptsIdleTransactionAndFailed) {
  for (char status : {'I', 'T', 'E'}) {
    const std::string body(1, status);
    auto parsed = ParseReadyForQuery(AsBytes(body));
    ASSERT_TRUE(parsed.ok()) << status;
    EXPECT_EQ(*parsed, status);
  }
}

TEST(ParseReadyForQueryTest, RejectsBadStatusOrSize) {
  for (const std::string& body : {""s, "X"s, "i"s, "\0"s, "II"s}) {
    auto parsed = ParseReadyForQuery(AsBytes(body));
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(std::string(parsed.status().message()), "malformed ReadyForQuery message");
  }
}

TEST(ParseCommandCompleteTest, ReturnsTag) {
  for (const std::string& tag : {"SELECT 42"s, "INSERT 0 1"s, "BEGIN"s, ""s}) {
    const std::string body = tag + '\0';
    auto parsed = ParseCommandComplete(AsBytes(body));
    ASSERT_TRUE(parsed.ok()) << tag;
    EXPECT_EQ(*parsed, tag);
  }
}

TEST(ParseCommandCompleteTest, RejectsMissingNulAndTrailingData) {
  for (const std::string& body : {"SELECT 1"s, ""s, "SELECT 1\0x"s, "A\0\0"s}) {
    auto parsed = ParseCommandComplete(AsBytes(body));
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(std::string(parsed.status().message()), "malformed CommandComplete message");
  }
}

TEST(ParseErrorFieldsTest, PrefersNonLocalizedSeverity) {
  // A German server: S is localized, V is not (PostgreSQL 9.6+).
  const std::string german = "SFEHLER\0VERROR\0C42P01\0MRelation fehlt\0Dd\0\0"s;
  auto fields = ParseErrorFields(AsBytes(german));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->severity, "ERROR");
  EXPECT_EQ(fields->sqlstate, "42P01");
  EXPECT_EQ(fields->message, "Relation fehlt");
  EXPECT_EQ(fields->detail, "d");
  // V before S: still V.
  const std::string v_first = "VFATAL\0SFATAL-LOCAL\0\0"s;
  fields = ParseErrorFields(AsBytes(v_first));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->severity, "FATAL");
}

TEST(ParseErrorFieldsTest, FallsBackToSeverityWithoutV) {
  // Servers before 9.6 send no V field.
  const std::string body = "SERROR\0C57014\0Mcanceling statement\0\0"s;
  auto fields = ParseErrorFields(AsBytes(body));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->severity, "ERROR");
  EXPECT_EQ(fields->sqlstate, "57014");
  EXPECT_EQ(fields->message, "canceling statement");
  EXPECT_EQ(fields->detail, "");
}

TEST(ParseErrorFieldsTest, IgnoresUnknownFieldCodes) {
  const std::string body = "Pposition\0Wwhere\0Zfuture\0MM\0\0"s;
  auto fields = ParseErrorFields(AsBytes(body));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->message, "M");
  EXPECT_EQ(fields->severity, "");
}

TEST(ParseErrorFieldsTest, EmptyFieldListIsValid) {
  const std::string body = "\0"s;
  auto fields = ParseErrorFields(AsBytes(body));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->message, "");
}

TEST(ParseErrorFieldsTest, BadTerminatorsAreMalformed) {
  for (const std::string& body : {
           ""s,                    // no terminator at all
           "SERROR\0"s,            // field list not terminated
           "SERROR"s,              // field value not terminated
           "S"s,                   // code without value
           "SERROR\0\0trailing"s,  // data after the terminator
           "SERROR\0\0\0"s,        // two terminators
       }) {
    auto fields = ParseErrorFields(AsBytes(body));
    ASSERT_FALSE(fields.ok()) << body;
    EXPECT_EQ(std::string(fields.status().message()), "malformed ErrorResponse message");
  }
}

}  // namespace
}  // namespace pgfleet::protocol
