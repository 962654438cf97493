// Tests for pooler/protocol/frame.h: typed headers, startup lengths and the needs-body tables,
// fed whole, byte by byte and concatenated.
#include "pooler/protocol/frame.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/byte_sink.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::protocol {
namespace {

using ::pgfleet::protocol::testing::AsBytes;
using ::pgfleet::protocol::testing::I32;
using ::pgfleet::protocol::testing::Typed;
using ::pgfleet::protocol::testing::Untyped;

constexpr uint32_t kMax = 1024;

TEST(PeekHeaderTest, NeedsMoreOnZeroToFourBytes) {
  const std::string msg = Typed('Q', std::string("select 1\0", 9));
  for (size_t n = 0; n < kHeaderSize; ++n) {
    FrameHeader header;
    EXPECT_EQ(PeekHeader(AsBytes(msg).first(n), kMax, &header), FrameResult::kNeedMore) << n;
  }
}

TEST(PeekHeaderTest, ReadsTypeAndLength) {
  const std::string msg = Typed('Q', std::string("select 1\0", 9));
  FrameHeader header;
  ASSERT_EQ(PeekHeader(AsBytes(msg), kMax, &header), FrameResult::kMessage);
  EXPECT_EQ(header.type, 'Q');
  EXPECT_EQ(header.length, 13u);
  EXPECT_EQ(header.body_size(), 9u);
  EXPECT_EQ(header.total_size(), msg.size());
}

TEST(PeekHeaderTest, HeaderAloneIsEnoughEvenWhenBodyIsMissing) {
  // The relay streams bodies, so a complete header is a message even before its body arrives.
  const std::string msg = Typed('D', std::string(100, 'x'));
  FrameHeader header;
  EXPECT_EQ(PeekHeader(AsBytes(msg).first(kHeaderSize), kMax, &header), FrameResult::kMessage);
  EXPECT_EQ(header.body_size(), 100u);
}

TEST(PeekHeaderTest, EmptyBodyIsLengthFour) {
  const std::string msg = Typed('S', "");
  FrameHeader header;
  ASSERT_EQ(PeekHeader(AsBytes(msg), kMax, &header), FrameResult::kMessage);
  EXPECT_EQ(header.length, 4u);
  EXPECT_EQ(header.body_size(), 0u);
  EXPECT_EQ(header.total_size(), kHeaderSize);
}

TEST(PeekHeaderTest, LengthBelowFourIsProtocolError) {
  for (uint32_t length : {0u, 1u, 2u, 3u}) {
    const std::string msg = "Q" + I32(length);
    FrameHeader header;
    EXPECT_EQ(PeekHeader(AsBytes(msg), kMax, &header), FrameResult::kProtocolError) << length;
  }
}

TEST(PeekHeaderTest, LengthAboveMaxIsProtocolError) {
  for (uint32_t length : {kMax + 1, 0x7fffffffu, 0x80000000u, 0xffffffffu}) {
    const std::string msg = "Q" + I32(length);
    FrameHeader header;
    EXPECT_EQ(PeekHeader(AsBytes(msg), kMax, &header), FrameResult::kProtocolError) << length;
  }
}

TEST(PeekHeaderTest, LengthExactlyMaxIsAccepted) {
  const std::string msg = "Q" + I32(kMax);
  FrameHeader header;
  EXPECT_EQ(PeekHeader(AsBytes(msg), kMax, &header), FrameResult::kMessage);
  EXPECT_EQ(header.length, kMax);
}

TEST(PeekHeaderTest, UnknownTypeIsFramedLikeAnyOther) {
  // The framer does not judge types; the relay forwards what it does not know.
  const std::string msg = Typed('\xfe', "abc");
  FrameHeader header;
  ASSERT_EQ(PeekHeader(AsBytes(msg), kMax, &header), FrameResult::kMessage);
  EXPECT_EQ(header.type, 0xfe);
  EXPECT_EQ(header.total_size(), msg.size());
}

// Splits `data` into whole typed messages the way the relay does; stops at the first incomplete
// one. Returns the types seen, or "!" appended on a protocol error.
std::string SplitTypes(std::span<const uint8_t> data, size_t* consumed) {
  std::string types;
  size_t pos = 0;
  while (true) {
    FrameHeader header;
    auto result = PeekHeader(data.subspan(pos), kMax, &header);
    if (result == FrameResult::kProtocolError) {
      types.push_back('!');
      break;
    }
    if (result == FrameResult::kNeedMore || data.size() - pos < header.total_size()) break;
    types.push_back(static_cast<char>(header.type));
    pos += header.total_size();
  }
  *consumed = pos;
  return types;
}

TEST(PeekHeaderTest, ConcatenatedMessagesSplitExactly) {
  StringSink sink;
  BuildParseComplete(sink);
  BuildCommandComplete(sink, "SELECT 1");
  BuildParameterStatus(sink, "TimeZone", "UTC");
  BuildReadyForQuery(sink, 'I');
  size_t consumed = 0;
  EXPECT_EQ(SplitTypes(AsBytes(sink.bytes()), &consumed), "1CSZ");
  EXPECT_EQ(consumed, sink.bytes().size());
}

TEST(PeekHeaderTest, ByteByByteInputYieldsEachMessageOnlyWhenWhole) {
  StringSink sink;
  BuildQuery(sink, "select 1");
  BuildSync(sink);
  sink.Append(std::string_view("X\0\0\0\x04", 5));  // Terminate
  const std::string& all = sink.bytes();
  const size_t query_end = kHeaderSize + 9;  // "select 1\0"
  const size_t sync_end = query_end + kHeaderSize;
  for (size_t n = 0; n <= all.size(); ++n) {
    size_t consumed = 0;
    std::string types = SplitTypes(AsBytes(all).first(n), &consumed);
    std::string expected;
    if (n >= query_end) expected += 'Q';
    if (n >= sync_end) expected += 'S';
    if (n == all.size()) expected += 'X';
    EXPECT_EQ(types, expected) << n;
  }
}

TEST(PeekHeaderTest, BadLengthInTheMiddleOfAStreamIsReported) {
  StringSink sink;
  BuildSync(sink);
  std::string data = sink.bytes() + "Q" + I32(2) + "garbage";
  size_t consumed = 0;
  EXPECT_EQ(SplitTypes(AsBytes(data), &consumed), "S!");
  EXPECT_EQ(consumed, kHeaderSize);
}

TEST(PeekStartupLengthTest, NeedsMoreUntilLengthWordIsComplete) {
  const std::string packet = Untyped(kSslRequestCode, "");
  for (size_t n = 0; n < 4; ++n) {
    uint32_t length = 0;
    EXPECT_EQ(PeekStartupLength(AsBytes(packet).first(n), &length), FrameResult::kNeedMore) << n;
  }
}

TEST(PeekStartupLengthTest, ShorterThanEightIsProtocolError) {
  for (uint32_t bad : {0u, 4u, 7u}) {
    const std::string packet = I32(bad) + I32(kSslRequestCode);
    uint32_t length = 0;
    EXPECT_EQ(PeekStartupLength(AsBytes(packet), &length), FrameResult::kProtocolError) << bad;
  }
}

TEST(PeekStartupLengthTest, LongerThanPostgresMaxIsProtocolError) {
  for (uint32_t bad : {kMaxStartupPacketLength + 1, 0x7fffffffu, 0xffffffffu}) {
    const std::string packet = I32(bad);
    uint32_t length = 0;
    EXPECT_EQ(PeekStartupLength(AsBytes(packet), &length), FrameResult::kProtocolError) << bad;
  }
}

TEST(PeekStartupLengthTest, PartialPacketNeedsMoreAndReportsLength) {
  const std::string packet = I32(kMaxStartupPacketLength) + I32(kProtocol30);
  uint32_t length = 0;
  EXPECT_EQ(PeekStartupLength(AsBytes(packet), &length), FrameResult::kNeedMore);
  EXPECT_EQ(length, kMaxStartupPacketLength);
}

TEST(PeekStartupLengthTest, WholePacketIsMessageEvenWithBytesAfterIt) {
  const std::string ssl = Untyped(kSslRequestCode, "");
  uint32_t length = 0;
  EXPECT_EQ(PeekStartupLength(AsBytes(ssl), &length), FrameResult::kMessage);
  EXPECT_EQ(length, 8u);
  // A client that pipelines its StartupMessage after SSLRequest: the first packet is still whole.
  const std::string both = ssl + Untyped(kProtocol30, std::string("\0", 1));
  EXPECT_EQ(PeekStartupLength(AsBytes(both), &length), FrameResult::kMessage);
  EXPECT_EQ(length, 8u);
}

TEST(NeedsBodyTest, FrontendTable) {
  for (char type : {'P', 'B', 'C', 'D', 'p', 'X', 'S', 'Q'}) {
    EXPECT_TRUE(FrontendNeedsBody(static_cast<uint8_t>(type))) << type;
  }
  for (char type : {'d', 'E', 'F', '\0'}) {
    EXPECT_FALSE(FrontendNeedsBody(static_cast<uint8_t>(type))) << type;
  }
  EXPECT_FALSE(FrontendNeedsBody(0xff));
}

TEST(NeedsBodyTest, BackendTable) {
  for (char type : {'Z', 'S', 'E', 'C', 'R', 'K', 'G', 'H', 'W', '1', '3'}) {
    EXPECT_TRUE(BackendNeedsBody(static_cast<uint8_t>(type))) << type;
  }
  // Row data and CopyData stream through in pieces.
  for (char type : {'D', 'd', 'T', '\0'}) {
    EXPECT_FALSE(BackendNeedsBody(static_cast<uint8_t>(type))) << type;
  }
  EXPECT_FALSE(BackendNeedsBody(0xff));
}

FrameHeader Header(char type, uint32_t length) {
  return FrameHeader{static_cast<uint8_t>(type), length};
}

TEST(CheckFrontendHeaderTest, AcceptsEveryMessageTypePostgresAcceptsAfterLogin) {
  for (char type : {'B', 'C', 'd', 'c', 'f', 'D', 'E', 'H', 'F', 'P', 'Q', 'S', 'X'}) {
    EXPECT_TRUE(CheckFrontendHeader(Header(type, 4)).ok()) << type;
  }
}

TEST(CheckFrontendHeaderTest, UnknownTypeIsRefusedInPostgresWords) {
  for (char type : {'z', 'p', 'R', 'Z', '\0'}) {
    absl::Status status = CheckFrontendHeader(Header(type, 8));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << type;
    EXPECT_EQ(status.message(), absl::StrCat("invalid frontend message type ",
                                             static_cast<int>(static_cast<uint8_t>(type))));
  }
  EXPECT_FALSE(CheckFrontendHeader(Header(static_cast<char>(0xff), 8)).ok());
}

TEST(CheckFrontendHeaderTest, SmallTypesStopAtPostgresSmallMessageLimit) {
  for (char type : {'C', 'D', 'E', 'X', 'f'}) {
    EXPECT_TRUE(CheckFrontendHeader(Header(type, 10000)).ok()) << type;
    EXPECT_EQ(CheckFrontendHeader(Header(type, 10001)).message(), "invalid message length") << type;
  }
  for (char type : {'B', 'F', 'P', 'Q', 'd'}) {
    EXPECT_TRUE(CheckFrontendHeader(Header(type, 0x3ffffffe)).ok()) << type;
    EXPECT_FALSE(CheckFrontendHeader(Header(type, 0x3fffffff)).ok()) << type;
  }
}

TEST(CheckFrontendHeaderTest, FlushSyncAndCopyDoneCarryNoBody) {
  for (char type : {'H', 'S', 'c'}) {
    EXPECT_TRUE(CheckFrontendHeader(Header(type, 4)).ok()) << type;
    EXPECT_FALSE(CheckFrontendHeader(Header(type, 5)).ok()) << type;
  }
}

}  // namespace
}  // namespace pgfleet::protocol
