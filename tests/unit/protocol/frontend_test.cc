// Tests for pooler/protocol/frontend.h: parsing the client message bodies pgfleet consumes.
#include "pooler/protocol/frontend.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::protocol {
namespace {

using ::pgfleet::protocol::testing::AsBytes;
using ::pgfleet::protocol::testing::I32;
using namespace std::string_literals;

TEST(ParsePasswordMessageTest, ReturnsPassword) {
  const std::string body = "s3cr3t\0"s;
  auto pw = ParsePasswordMessage(AsBytes(body));
  ASSERT_TRUE(pw.ok()) << pw.status();
  EXPECT_EQ(*pw, "s3cr3t");
  const std::string empty = "\0"s;
  pw = ParsePasswordMessage(AsBytes(empty));
  ASSERT_TRUE(pw.ok()) << pw.status();
  EXPECT_EQ(*pw, "");
}

TEST(ParsePasswordMessageTest, RejectsMissingNulAndTrailingData) {
  for (const std::string& body : {""s, "s3cr3t"s, "s3cr3t\0x"s, "a\0\0"s}) {
    auto pw = ParsePasswordMessage(AsBytes(body));
    ASSERT_FALSE(pw.ok()) << body;
    EXPECT_EQ(std::string(pw.status().message()), "malformed password message");
  }
}

TEST(ParseSaslInitialResponseTest, ReturnsMechanismAndData) {
  const std::string body = "SCRAM-SHA-256\0"s + I32(4) + "n,,x";
  auto parsed = ParseSaslInitialResponse(AsBytes(body));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->mechanism, "SCRAM-SHA-256");
  EXPECT_EQ(parsed->data, "n,,x");
}

TEST(ParseSaslInitialResponseTest, ZeroLengthDataIsEmpty) {
  const std::string body = "SCRAM-SHA-256\0"s + I32(0);
  auto parsed = ParseSaslInitialResponse(AsBytes(body));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data, "");
}

TEST(ParseSaslInitialResponseTest, LengthMinusOneMeansNoData) {
  const std::string body = "SCRAM-SHA-256\0"s + I32(0xffffffffu);
  auto parsed = ParseSaslInitialResponse(AsBytes(body));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->mechanism, "SCRAM-SHA-256");
  EXPECT_TRUE(parsed->data.empty());
}

TEST(ParseSaslInitialResponseTest, RejectsBadLengths) {
  for (const std::string& body : {
           "SCRAM-SHA-256\0"s + I32(0xfffffffeu),          // -2
           "SCRAM-SHA-256\0"s + I32(0x80000000u) + "abc",  // INT32_MIN
           "SCRAM-SHA-256\0"s + I32(5) + "abc",            // longer than the body
           "SCRAM-SHA-256\0"s + I32(0x7fffffffu) + "abc",  // far longer than the body
           "SCRAM-SHA-256\0"s + I32(2) + "abc",            // shorter: data after it
           "SCRAM-SHA-256\0"s + I32(0xffffffffu) + "abc",  // -1 followed by data
       }) {
    auto parsed = ParseSaslInitialResponse(AsBytes(body));
    EXPECT_FALSE(parsed.ok()) << body.size();
  }
}

TEST(ParseSaslInitialResponseTest, RejectsMissingMechanismTerminatorOrLength) {
  for (const std::string& body : {""s, "SCRAM-SHA-256"s, "SCRAM-SHA-256\0"s, "SCRAM\0\0\0"s}) {
    auto parsed = ParseSaslInitialResponse(AsBytes(body));
    ASSERT_FALSE(parsed.ok()) << body.size();
    EXPECT_EQ(std::string(parsed.status().message()), "malformed SASLInitialResponse message");
  }
}

TEST(ParseQueryTest, ReturnsSql) {
  const std::string body = "select 1;\0"s;
  auto sql = ParseQuery(AsBytes(body));
  ASSERT_TRUE(sql.ok()) << sql.status();
  EXPECT_EQ(*sql, "select 1;");
  const std::string empty = "\0"s;  // empty query string
  sql = ParseQuery(AsBytes(empty));
  ASSERT_TRUE(sql.ok()) << sql.status();
  EXPECT_EQ(*sql, "");
}

TEST(ParseQueryTest, RejectsMissingNulAndTrailingData) {
  for (const std::string& body : {""s, "select 1"s, "select 1\0select 2\0"s}) {
    auto sql = ParseQuery(AsBytes(body));
    ASSERT_FALSE(sql.ok()) << body;
    EXPECT_EQ(std::string(sql.status().message()), "malformed Query message");
  }
}

}  // namespace
}  // namespace pgfleet::protocol
