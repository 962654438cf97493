// Tests for pooler/protocol/startup.h: StartupMessage, SSLRequest, GSSENCRequest, CancelRequest.
#include "pooler/protocol/startup.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/negotiation.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::protocol {
namespace {

using ::pgfleet::protocol::testing::AsBytes;
using ::pgfleet::protocol::testing::I32;
using ::pgfleet::protocol::testing::Untyped;

using namespace std::string_literals;

// The value of `name` in a startup packet, empty when absent (pgfleet reads every pair in order,
// so the product has no lookup by name).
std::string_view Param(const StartupPacket& packet, std::string_view name) {
  for (const auto& [key, value] : packet.parameters) {
    if (key == name) return value;
  }
  return {};
}

TEST(ParseStartupPacketTest, StartupWithParameters) {
  const std::string packet =
      Untyped(kProtocol30, "user\0alice\0database\0app\0application_name\0psql\0\0"s);
  auto parsed = ParseStartupPacket(AsBytes(packet));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, StartupKind::kStartup);
  EXPECT_EQ(parsed->protocol_version, kProtocol30);
  ASSERT_EQ(parsed->parameters.size(), 3u);
  EXPECT_EQ(parsed->parameters[0], (std::pair<std::string, std::string>("user", "alice")));
  EXPECT_EQ(parsed->parameters[2].first, "application_name");
  EXPECT_EQ(Param(*parsed, "database"), "app");
  EXPECT_EQ(Param(*parsed, "application_name"), "psql");
  EXPECT_EQ(Param(*parsed, "options"), "");
  EXPECT_EQ(Param(*parsed, "USER"), "");  // names are case-sensitive on the wire
}

TEST(ParseStartupPacketTest, StartupWithNoParametersAndEmptyValues) {
  auto parsed = ParseStartupPacket(AsBytes(Untyped(kProtocol30, std::string("\0", 1))));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->parameters.empty());

  parsed = ParseStartupPacket(AsBytes(Untyped(kProtocol30, std::string("options\0\0\0", 10))));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->parameters.size(), 1u);
  EXPECT_EQ(parsed->parameters[0].second, "");
}

TEST(ParseStartupPacketTest, BuilderRoundTrip) {
  const std::vector<std::pair<std::string_view, std::string_view>> params = {
      {"user", "bob"}, {"database", "db"}, {"_pq_.x", "1"}};
  StringSink sink;
  BuildStartupMessage(sink, kProtocol30, params);
  uint32_t length = 0;
  ASSERT_EQ(PeekStartupLength(AsBytes(sink.bytes()), &length), FrameResult::kMessage);
  EXPECT_EQ(length, sink.bytes().size());
  auto parsed = ParseStartupPacket(AsBytes(sink.bytes()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->parameters.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(parsed->parameters[i].first, params[i].first);
    EXPECT_EQ(parsed->parameters[i].second, params[i].second);
  }
}

TEST(ParseStartupPacketTest, MinorProtocolVersionIsKept) {
  auto parsed = ParseStartupPacket(AsBytes(Untyped((3u << 16) | 2, std::string("\0", 1))));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->protocol_version, (3u << 16) | 2);
}

TEST(ParseStartupPacketTest, MissingTerminatorIsRejected) {
  // Every pair is whole but the list's final NUL is absent.
  auto parsed = ParseStartupPacket(AsBytes(Untyped(kProtocol30, std::string("user\0a\0", 7))));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(parsed.status().message()),
            "invalid startup packet layout: missing terminator");
  // A name without its NUL.
  parsed = ParseStartupPacket(AsBytes(Untyped(kProtocol30, "user")));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(std::string(parsed.status().message()),
            "invalid startup packet layout: missing terminator");
  // Nothing at all after the version.
  parsed = ParseStartupPacket(AsBytes(Untyped(kProtocol30, "")));
  EXPECT_FALSE(parsed.ok());
}

TEST(ParseStartupPacketTest, MissingValueIsRejected) {
  auto parsed = ParseStartupPacket(AsBytes(Untyped(kProtocol30, std::string("user\0bob", 8))));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(std::string(parsed.status().message()),
            "invalid startup packet layout: missing value for \"user\"");
}

TEST(ParseStartupPacketTest, TrailingGarbageIsRejected) {
  auto parsed =
      ParseStartupPacket(AsBytes(Untyped(kProtocol30, std::string("user\0a\0\0junk", 12))));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(std::string(parsed.status().message()),
            "invalid startup packet layout: data after terminator");
}

TEST(ParseStartupPacketTest, SslRequest) {
  const std::string packet = I32(8) + I32(80877103);  // protocol docs: 1234 << 16 | 5679
  auto parsed = ParseStartupPacket(AsBytes(packet));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, StartupKind::kSslRequest);
  EXPECT_EQ(kSslRequestCode, (1234u << 16) | 5679);
}

TEST(ParseStartupPacketTest, GssEncRequest) {
  const std::string packet = I32(8) + I32(80877104);  // 1234 << 16 | 5680
  auto parsed = ParseStartupPacket(AsBytes(packet));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, StartupKind::kGssEncRequest);
}

TEST(ParseStartupPacketTest, EncryptionRequestWithBodyIsRejected) {
  for (uint32_t code : {kSslRequestCode, kGssEncRequestCode}) {
    auto parsed = ParseStartupPacket(AsBytes(Untyped(code, "x")));
    ASSERT_FALSE(parsed.ok()) << code;
    EXPECT_EQ(std::string(parsed.status().message()), "invalid length of encryption request");
  }
}

TEST(ParseStartupPacketTest, CancelRequestWithFourByteKey) {
  const std::string packet =
      I32(16) + I32(80877102) + I32(0x12345678) + std::string("\xde\xad\xbe\xef", 4);
  auto parsed = ParseStartupPacket(AsBytes(packet));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, StartupKind::kCancelRequest);
  EXPECT_EQ(parsed->cancel_pid, 0x12345678u);
  EXPECT_EQ(parsed->cancel_secret, (std::vector<uint8_t>{0xde, 0xad, 0xbe, 0xef}));
  EXPECT_TRUE(parsed->parameters.empty());
}

TEST(ParseStartupPacketTest, CancelRequestWithThirtyTwoByteKey) {
  std::vector<uint8_t> secret(32);
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7 + 1);
  StringSink sink;
  BuildCancelRequest(sink, 0xfffffffeu, secret);
  ASSERT_EQ(sink.bytes().size(), 16u + 28u);
  auto parsed = ParseStartupPacket(AsBytes(sink.bytes()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, StartupKind::kCancelRequest);
  EXPECT_EQ(parsed->cancel_pid, 0xfffffffeu);
  EXPECT_EQ(parsed->cancel_secret, secret);
}

TEST(ParseStartupPacketTest, CancelRequestKeySizeLimits) {
  // Protocol 3.2 allows keys up to 256 bytes.
  auto parsed =
      ParseStartupPacket(AsBytes(Untyped(kCancelRequestCode, I32(1) + std::string(256, 'k'))));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->cancel_secret.size(), 256u);

  for (std::string rest : {std::string(), std::string(3, 'p'), I32(1), I32(1) + "abc",
                           I32(1) + std::string(257, 'k')}) {
    parsed = ParseStartupPacket(AsBytes(Untyped(kCancelRequestCode, rest)));
    ASSERT_FALSE(parsed.ok()) << rest.size();
    EXPECT_EQ(std::string(parsed.status().message()), "invalid cancel request length");
  }
}

TEST(ParseStartupPacketTest, ProtocolTwoIsUnsupported) {
  auto parsed = ParseStartupPacket(AsBytes(Untyped(2u << 16, std::string("\0", 1))));
  ASSERT_FALSE(parsed.ok());
  // 0A000, with the same text PostgreSQL 18's ProcessStartupPacket sends.
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(std::string(parsed.status().message()),
            "unsupported frontend protocol 2.0: server supports 3.0 to 3.2");
}

TEST(ParseStartupPacketTest, UnknownCodeIsUnsupportedProtocol) {
  auto parsed = ParseStartupPacket(AsBytes(Untyped((1234u << 16) | 1, "")));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(std::string(parsed.status().message()),
            "unsupported frontend protocol 1234.1: server supports 3.0 to 3.2");
  parsed = ParseStartupPacket(AsBytes(Untyped(4u << 16, std::string("\0", 1))));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(std::string(parsed.status().message()),
            "unsupported frontend protocol 4.0: server supports 3.0 to 3.2");
}

// Negotiation answers as PostgreSQL 18 does (raw packets, as clients send them).
ProtocolAnswer Answer(uint32_t version, const std::string& params) {
  auto parsed = ParseStartupPacket(AsBytes(Untyped(version, params)));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? NegotiateProtocol(parsed->protocol_version, parsed->parameters)
                     : ProtocolAnswer{};
}

TEST(NegotiateProtocolTest, ThreeZeroAndThreeTwoAreSpokenAsAsked) {
  ProtocolAnswer answer = Answer(kProtocol30, "user\0a\0\0"s);
  EXPECT_EQ(answer.version, kProtocol30);
  EXPECT_FALSE(answer.negotiate);
  EXPECT_EQ(CancelSecretSizeFor(answer.version), 4u);
  answer = Answer(kProtocol32, "user\0a\0\0"s);
  EXPECT_EQ(answer.version, kProtocol32);
  EXPECT_FALSE(answer.negotiate);
  EXPECT_EQ(CancelSecretSizeFor(answer.version), 32u);
  // 3.1 was skipped by PostgreSQL: spoken like 3.0, no negotiation (PostgreSQL 18 does the same).
  answer = Answer((3u << 16) | 1, "user\0a\0\0"s);
  EXPECT_FALSE(answer.negotiate);
  EXPECT_EQ(CancelSecretSizeFor(answer.version), 4u);
}

TEST(NegotiateProtocolTest, ANewerMinorGetsThreeTwoAndEveryUnknownOption) {
  // libpq 19's grease: 3.9999 with _pq_.test_protocol_negotiation.
  ProtocolAnswer answer =
      Answer((3u << 16) | 9999, "user\0a\0_pq_.test_protocol_negotiation\0\0_pq_.b\0x\0\0"s);
  EXPECT_EQ(answer.version, kProtocol32);
  EXPECT_TRUE(answer.negotiate);
  EXPECT_EQ(answer.unrecognized,
            (std::vector<std::string>{"_pq_.test_protocol_negotiation", "_pq_.b"}));
}

TEST(NegotiateProtocolTest, UnknownOptionsOnThreeZeroAreListedAtThreeZero) {
  ProtocolAnswer answer = Answer(kProtocol30, "_pq_.a\0\0user\0a\0\0"s);
  EXPECT_EQ(answer.version, kProtocol30);
  EXPECT_TRUE(answer.negotiate);
  EXPECT_EQ(answer.unrecognized, std::vector<std::string>{"_pq_.a"});
}

TEST(ParseStartupPacketTest, LengthFieldMustMatchSpan) {
  const std::string good = Untyped(kProtocol30, std::string("user\0a\0\0", 8));
  // Span longer than the length field says.
  std::string longer = good + "x";
  // Span shorter than the length field says.
  std::string shorter = good.substr(0, good.size() - 1);
  // Length field negative.
  std::string negative = I32(0xfffffff0u) + good.substr(4);
  for (const std::string& packet : {longer, shorter, negative}) {
    auto parsed = ParseStartupPacket(AsBytes(packet));
    ASSERT_FALSE(parsed.ok()) << packet.size();
    EXPECT_EQ(std::string(parsed.status().message()), "invalid startup packet length");
  }
}

TEST(ParseStartupPacketTest, TooShortForHeaderIsRejected) {
  const std::string packet = I32(8) + I32(kSslRequestCode);
  for (size_t n = 0; n < packet.size(); ++n) {
    auto parsed = ParseStartupPacket(AsBytes(packet).first(n));
    ASSERT_FALSE(parsed.ok()) << n;
    EXPECT_EQ(std::string(parsed.status().message()), "invalid startup packet length");
  }
}

}  // namespace
}  // namespace pgfleet::protocol
