// Tests for pooler/protocol/builders.h: each builder's bytes against the layout in PostgreSQL's
// protocol-message-formats documentation, and a parse back where pgfleet has a parser.
#include "pooler/protocol/builders.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/startup.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::protocol {
namespace {

using ::pgfleet::protocol::testing::AsBytes;
using ::pgfleet::protocol::testing::AsString;
using ::pgfleet::protocol::testing::BodyOf;
using ::pgfleet::protocol::testing::I16;
using ::pgfleet::protocol::testing::I32;
using ::pgfleet::protocol::testing::Typed;
using namespace std::string_literals;

template <typename F>
std::string Build(F&& build) {
  StringSink sink;
  build(sink);
  return sink.bytes();
}

// --- backend messages ---

TEST(BuildersTest, AuthenticationOk) {
  const std::string bytes = Build([](ByteSink& s) { BuildAuthenticationOk(s); });
  EXPECT_EQ(bytes, "R\0\0\0\x08\0\0\0\0"s);
  auto auth = ParseAuthentication(BodyOf(bytes));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, static_cast<int32_t>(AuthRequest::kOk));
  EXPECT_TRUE(auth->data.empty());
}

TEST(BuildersTest, AuthenticationCleartextParses) {
  // pgfleet never asks a client for a cleartext password; servers may ask pgfleet.
  const std::string bytes = "R\0\0\0\x08\0\0\0\x03"s;
  auto auth = ParseAuthentication(BodyOf(bytes));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, static_cast<int32_t>(AuthRequest::kCleartext));
}

TEST(BuildersTest, AuthenticationMd5) {
  constexpr std::array<uint8_t, 4> salt = {0x01, 0xff, 0x00, 0x7f};
  const std::string bytes = Build([&](ByteSink& s) { BuildAuthenticationMd5(s, salt); });
  EXPECT_EQ(bytes, "R\0\0\0\x0c\0\0\0\x05\x01\xff\0\x7f"s);
  auto auth = ParseAuthentication(BodyOf(bytes));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, static_cast<int32_t>(AuthRequest::kMd5));
  EXPECT_EQ(AsString(auth->data), "\x01\xff\0\x7f"s);
}

TEST(BuildersTest, AuthenticationSasl) {
  const std::array<std::string_view, 2> mechs = {"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"};
  const std::string bytes = Build([&](ByteSink& s) { BuildAuthenticationSasl(s, mechs); });
  EXPECT_EQ(bytes, Typed('R', I32(10) + "SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"s));
  auto auth = ParseAuthentication(BodyOf(bytes));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, static_cast<int32_t>(AuthRequest::kSasl));
  EXPECT_TRUE(SaslOffers(auth->data, "SCRAM-SHA-256"));
  EXPECT_TRUE(SaslOffers(auth->data, "SCRAM-SHA-256-PLUS"));
  EXPECT_FALSE(SaslOffers(auth->data, "SCRAM-SHA"));
}

TEST(BuildersTest, AuthenticationSaslContinueAndFinal) {
  const std::string cont =
      Build([](ByteSink& s) { BuildAuthenticationSaslContinue(s, "r=abc,s=c2FsdA==,i=4096"); });
  EXPECT_EQ(cont, Typed('R', I32(11) + "r=abc,s=c2FsdA==,i=4096"));
  auto auth = ParseAuthentication(BodyOf(cont));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, static_cast<int32_t>(AuthRequest::kSaslContinue));
  EXPECT_EQ(AsString(auth->data), "r=abc,s=c2FsdA==,i=4096");

  const std::string fin = Build([](ByteSink& s) { BuildAuthenticationSaslFinal(s, "v=xyz"); });
  EXPECT_EQ(fin, "R\0\0\0\x0d\0\0\0\x0cv=xyz"s);
  auth = ParseAuthentication(BodyOf(fin));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->code, static_cast<int32_t>(AuthRequest::kSaslFinal));
  EXPECT_EQ(AsString(auth->data), "v=xyz");
}

TEST(BuildersTest, ParameterStatus) {
  const std::string bytes = Build([](ByteSink& s) { BuildParameterStatus(s, "TimeZone", "UTC"); });
  EXPECT_EQ(bytes, "S\0\0\0\x11TimeZone\0UTC\0"s);
  auto ps = ParseParameterStatus(BodyOf(bytes));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->name, "TimeZone");
  EXPECT_EQ(ps->value, "UTC");
}

TEST(BuildersTest, ParameterStatusWithEmptyValue) {
  const std::string bytes =
      Build([](ByteSink& s) { BuildParameterStatus(s, "application_name", ""); });
  auto ps = ParseParameterStatus(BodyOf(bytes));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->name, "application_name");
  EXPECT_EQ(ps->value, "");
}

TEST(BuildersTest, BackendKeyData) {
  constexpr std::array<uint8_t, 4> secret = {0xca, 0xfe, 0xba, 0xbe};
  const std::string bytes =
      Build([&](ByteSink& s) { BuildBackendKeyData(s, 0x01020304u, secret); });
  EXPECT_EQ(bytes, "K\0\0\0\x0c\x01\x02\x03\x04\xca\xfe\xba\xbe"s);
  auto key = ParseBackendKeyData(BodyOf(bytes));
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->pid, 0x01020304u);
  EXPECT_EQ(AsString(key->secret), "\xca\xfe\xba\xbe"s);
}

TEST(BuildersTest, ReadyForQuery) {
  for (char status : {'I', 'T', 'E'}) {
    const std::string bytes = Build([&](ByteSink& s) { BuildReadyForQuery(s, status); });
    EXPECT_EQ(bytes, "Z\0\0\0\x05"s + status);
    auto parsed = ParseReadyForQuery(BodyOf(bytes));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, status);
  }
}

TEST(BuildersTest, ErrorResponse) {
  const std::string bytes =
      Build([](ByteSink& s) { BuildErrorResponse(s, "FATAL", "08P01", "invalid message length"); });
  EXPECT_EQ(bytes, Typed('E', "SFATAL\0VFATAL\0C08P01\0Minvalid message length\0\0"s));
  auto fields = ParseErrorFields(BodyOf(bytes));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->severity, "FATAL");
  EXPECT_EQ(fields->sqlstate, "08P01");
  EXPECT_EQ(fields->message, "invalid message length");
  EXPECT_EQ(fields->detail, "");
}

TEST(BuildersTest, ErrorResponseWithDetailAndHint) {
  const std::string bytes = Build([](ByteSink& s) {
    BuildErrorResponse(s, "ERROR", "53300", "too many", "pool is full", "raise pool_size");
  });
  EXPECT_EQ(bytes, Typed('E',
                         "SERROR\0VERROR\0C53300\0Mtoo many\0Dpool is full\0"
                         "Hraise pool_size\0\0"s));
  auto fields = ParseErrorFields(BodyOf(bytes));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->detail, "pool is full");
}

TEST(BuildersTest, MessageFromTypeAndBody) {
  const std::string body = "SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed\0\0"s;
  const std::string bytes = Build([&](ByteSink& s) { BuildMessage(s, 'E', AsBytes(body)); });
  EXPECT_EQ(bytes, Typed('E', body));
  EXPECT_EQ(AsString(BodyOf(bytes)), body);
}

TEST(BuildersTest, NoticeResponse) {
  const std::string bytes =
      Build([](ByteSink& s) { BuildNoticeResponse(s, "WARNING", "01000", "careful"); });
  EXPECT_EQ(bytes, Typed('N', "SWARNING\0VWARNING\0C01000\0Mcareful\0\0"s));
  auto fields = ParseErrorFields(BodyOf(bytes));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->severity, "WARNING");
}

TEST(BuildersTest, NegotiateProtocolVersion) {
  // The whole version (3.2 = 196610), as PostgreSQL sends it: libpq 18 refuses a 0 ("server
  // requested downgrade to pre-3.0 protocol version").
  const std::vector<std::string> unknown = {"_pq_.a", "_pq_.b"};
  const std::string bytes =
      Build([&](ByteSink& s) { BuildNegotiateProtocolVersion(s, kProtocol32, unknown); });
  EXPECT_EQ(bytes, Typed('v', I32(196610) + I32(2) + "_pq_.a\0_pq_.b\0"s));
  const std::string none =
      Build([](ByteSink& s) { BuildNegotiateProtocolVersion(s, kProtocol30, {}); });
  EXPECT_EQ(none, "v\0\0\0\x0c\0\x03\0\0\0\0\0\0"s);
}

TEST(BuildersTest, CommandComplete) {
  const std::string bytes = Build([](ByteSink& s) { BuildCommandComplete(s, "SELECT 1"); });
  EXPECT_EQ(bytes, "C\0\0\0\x0dSELECT 1\0"s);
  auto tag = ParseCommandComplete(BodyOf(bytes));
  ASSERT_TRUE(tag.ok()) << tag.status();
  EXPECT_EQ(*tag, "SELECT 1");
}

TEST(BuildersTest, EmptyQueryParseCompleteCloseComplete) {
  EXPECT_EQ(Build([](ByteSink& s) { BuildEmptyQueryResponse(s); }), "I\0\0\0\x04"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildParseComplete(s); }), "1\0\0\0\x04"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildCloseComplete(s); }), "3\0\0\0\x04"s);
}

TEST(BuildersTest, RowDescription) {
  const std::array<ColumnSpec, 2> cols = {ColumnSpec{"database", 25}, ColumnSpec{"n", 20}};
  const std::string bytes = Build([&](ByteSink& s) { BuildRowDescription(s, cols); });
  // Per field: name, table OID, column number, type OID, type size, type modifier, format code.
  const std::string field_tail = I32(0) + I16(0);
  EXPECT_EQ(bytes, Typed('T', I16(2) +                                                  //
                                  "database\0"s + field_tail + I32(25) + I16(0xffff) +  //
                                  I32(0xffffffff) + I16(0) +                            //
                                  "n\0"s + field_tail + I32(20) + I16(0xffff) +         //
                                  I32(0xffffffff) + I16(0)));
  EXPECT_EQ(Build([](ByteSink& s) { BuildRowDescription(s, {}); }), "T\0\0\0\x06\0\0"s);
}

TEST(BuildersTest, DataRowWithValuesAndNulls) {
  const std::array<std::string_view, 3> values = {"abc", "", "ignored"};
  const std::array<bool, 3> is_null = {false, false, true};
  const std::string bytes = Build([&](ByteSink& s) { BuildDataRow(s, values, is_null); });
  EXPECT_EQ(bytes, Typed('D', I16(3) + I32(3) + "abc" + I32(0) + I32(0xffffffff)));
  // Without null flags every value is sent.
  const std::string all = Build([&](ByteSink& s) { BuildDataRow(s, values); });
  EXPECT_EQ(all, Typed('D', I16(3) + I32(3) + "abc" + I32(0) + I32(7) + "ignored"));
}

// --- frontend messages ---

TEST(BuildersTest, StartupMessage) {
  const std::array<std::pair<std::string_view, std::string_view>, 2> params = {
      std::pair<std::string_view, std::string_view>{"user", "u"}, {"database", "d"}};
  const std::string bytes =
      Build([&](ByteSink& s) { BuildStartupMessage(s, kProtocol32, params); });
  EXPECT_EQ(bytes, "\0\0\0\x1b\0\x03\0\x02user\0u\0database\0d\0\0"s);
  auto parsed = ParseStartupPacket(AsBytes(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::vector<std::pair<std::string, std::string>> expected = {{"user", "u"},
                                                                     {"database", "d"}};
  EXPECT_EQ(parsed->parameters, expected);
}

TEST(BuildersTest, PasswordMessage) {
  const std::string bytes =
      Build([](ByteSink& s) { BuildPasswordMessage(s, "md5bb41a296aab6baccb36ff243a562abff"); });
  EXPECT_EQ(bytes, Typed('p', "md5bb41a296aab6baccb36ff243a562abff\0"s));
  auto pw = ParsePasswordMessage(BodyOf(bytes));
  ASSERT_TRUE(pw.ok()) << pw.status();
  EXPECT_EQ(*pw, "md5bb41a296aab6baccb36ff243a562abff");
}

TEST(BuildersTest, SaslInitialResponse) {
  const std::string bytes =
      Build([](ByteSink& s) { BuildSaslInitialResponse(s, "SCRAM-SHA-256", "n,,n=,r=nonce"); });
  EXPECT_EQ(bytes, Typed('p', "SCRAM-SHA-256\0"s + I32(13) + "n,,n=,r=nonce"));
  auto parsed = ParseSaslInitialResponse(BodyOf(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->mechanism, "SCRAM-SHA-256");
  EXPECT_EQ(parsed->data, "n,,n=,r=nonce");
}

TEST(BuildersTest, SaslResponse) {
  EXPECT_EQ(Build([](ByteSink& s) { BuildSaslResponse(s, "c=biws,r=x,p=y"); }),
            Typed('p', "c=biws,r=x,p=y"));
}

TEST(BuildersTest, Query) {
  const std::string bytes = Build([](ByteSink& s) { BuildQuery(s, "SET TimeZone='UTC';"); });
  EXPECT_EQ(bytes, "Q\0\0\0\x18SET TimeZone='UTC';\0"s);
  auto sql = ParseQuery(BodyOf(bytes));
  ASSERT_TRUE(sql.ok()) << sql.status();
  EXPECT_EQ(*sql, "SET TimeZone='UTC';");
}

TEST(BuildersTest, Sync) {
  EXPECT_EQ(Build([](ByteSink& s) { BuildSync(s); }), "S\0\0\0\x04"s);
}

TEST(BuildersTest, CancelRequest) {
  constexpr std::array<uint8_t, 4> secret = {0x11, 0x22, 0x33, 0x44};
  const std::string bytes = Build([&](ByteSink& s) { BuildCancelRequest(s, 0x7fff8001u, secret); });
  // Int32 16, Int32 80877102 (1234 << 16 | 5678), ProcessID, secret key.
  EXPECT_EQ(bytes, "\0\0\0\x10\x04\xd2\x16\x2e\x7f\xff\x80\x01\x11\x22\x33\x44"s);
  auto parsed = ParseStartupPacket(AsBytes(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, StartupKind::kCancelRequest);
  EXPECT_EQ(parsed->cancel_pid, 0x7fff8001u);
  EXPECT_EQ(parsed->cancel_secret, (std::vector<uint8_t>{0x11, 0x22, 0x33, 0x44}));
}

TEST(BuildersTest, Parse) {
  const std::array<uint32_t, 2> types = {23, 25};
  const std::string bytes =
      Build([&](ByteSink& s) { BuildParse(s, "s1", "select $1, $2", types); });
  EXPECT_EQ(bytes, Typed('P', "s1\0select $1, $2\0"s + I16(2) + I32(23) + I32(25)));
  EXPECT_EQ(Build([](ByteSink& s) { BuildParse(s, "", "select 1", {}); }),
            Typed('P', "\0select 1\0\0\0"s));
}

TEST(BuildersTest, Close) {
  EXPECT_EQ(Build([](ByteSink& s) { BuildClose(s, 'S', "s1"); }), "C\0\0\0\x08Ss1\0"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildClose(s, 'P', ""); }), "C\0\0\0\x06P\0"s);
}

TEST(BuildersTest, BuildersAppendWholeMessagesToOneSink) {
  StringSink sink;
  BuildParseComplete(sink);
  BuildCommandComplete(sink, "SET");
  BuildReadyForQuery(sink, 'I');
  EXPECT_EQ(sink.bytes(), "1\0\0\0\x04"s + "C\0\0\0\x08SET\0"s + "Z\0\0\0\x05I"s);
}

}  // namespace
TEST(BuildersTest, ExtendedProtocolMessages) {
  EXPECT_EQ(Build([](ByteSink& s) { BuildBindComplete(s); }), "2\0\0\0\x04"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildNoData(s); }), "n\0\0\0\x04"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildParameterDescription(s, {}); }), "t\0\0\0\x06\0\0"s);
  const uint32_t int4 = 23;
  EXPECT_EQ(Build([&](ByteSink& s) {
              BuildParameterDescription(s, {&int4, 1});
            }),
            "t\0\0\0\x0a\0\x01\0\0\0\x17"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildExecute(s, "", 0); }), "E\0\0\0\x09\0\0\0\0\0"s);
  EXPECT_EQ(Build([](ByteSink& s) { BuildDescribe(s, 'S', "a"); }), "D\0\0\0\x07Sa\0"s);
  const std::string_view values[] = {"bob"};
  EXPECT_EQ(Build([&](ByteSink& s) { BuildBindText(s, "", "", values); }),
            "B\0\0\0\x13\0\0\0\0\0\x01\0\0\0\x03"
            "bob\0\0"s);
  const std::string tail = "select 1\0\0\0"s;
  EXPECT_EQ(
      Build([&](ByteSink& s) {
        BuildParseWithTail(s, "p1", {reinterpret_cast<const uint8_t*>(tail.data()), tail.size()});
      }),
      "P\0\0\0\x12p1\0select 1\0\0\0"s);
  // The head of a renamed Bind counts the parameter bytes relayed after it.
  EXPECT_EQ(Build([](ByteSink& s) { BuildBindHead(s, "", "s1", 6); }), "B\0\0\0\x0e\0s1\0"s);
}

}  // namespace pgfleet::protocol
