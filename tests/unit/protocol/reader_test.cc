// Tests for pooler/protocol/reader.h: every read fails cleanly at the end of the data.
#include "pooler/protocol/reader.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::protocol {
namespace {

using ::pgfleet::protocol::testing::AsBytes;
using ::pgfleet::protocol::testing::AsString;

TEST(ReaderTest, ReadsBigEndianIntegers) {
  const std::string data("\x01\x02\xff\xfe\x80\x00\x00\x01", 8);
  Reader r(AsBytes(data));
  int16_t a = 0;
  int16_t b = 0;
  int32_t c = 0;
  ASSERT_TRUE(r.ReadInt16(&a));
  ASSERT_TRUE(r.ReadInt16(&b));
  ASSERT_TRUE(r.ReadInt32(&c));
  EXPECT_EQ(a, 0x0102);
  EXPECT_EQ(b, -2);
  EXPECT_EQ(static_cast<uint32_t>(c), 0x80000001u);
  EXPECT_TRUE(r.empty());
}

TEST(ReaderTest, StoreAndLoadRoundTrip) {
  uint8_t b[4];
  for (uint32_t v : {0u, 1u, 0x7fffffffu, 0x80000000u, 0xdeadbeefu, 0xffffffffu}) {
    StoreBigEndian32(b, v);
    EXPECT_EQ(LoadBigEndian32(b), v);
  }
  const uint8_t sixteen[2] = {0xab, 0xcd};
  EXPECT_EQ(LoadBigEndian16(sixteen), 0xabcd);
}

TEST(ReaderTest, ShortReadsFailWithoutMoving) {
  const std::string data("\x01\x02\x03", 3);
  Reader r(AsBytes(data));
  int32_t i32 = 0;
  EXPECT_FALSE(r.ReadInt32(&i32));
  EXPECT_EQ(r.remaining(), 3u);
  std::span<const uint8_t> bytes;
  EXPECT_FALSE(r.ReadBytes(4, &bytes));
  EXPECT_EQ(r.remaining(), 3u);
  ASSERT_TRUE(r.ReadBytes(3, &bytes));
  EXPECT_EQ(AsString(bytes), data);
  uint8_t byte = 0;
  int16_t i16 = 0;
  std::string_view s;
  EXPECT_FALSE(r.ReadByte(&byte));
  EXPECT_FALSE(r.ReadInt16(&i16));
  EXPECT_FALSE(r.ReadCString(&s));
  EXPECT_TRUE(r.ReadBytes(0, &bytes));
}

TEST(ReaderTest, CStringExcludesNulAndStopsAtFirst) {
  const std::string data("ab\0\0c", 5);
  Reader r(AsBytes(data));
  std::string_view s;
  ASSERT_TRUE(r.ReadCString(&s));
  EXPECT_EQ(s, "ab");
  ASSERT_TRUE(r.ReadCString(&s));
  EXPECT_EQ(s, "");
  EXPECT_FALSE(r.ReadCString(&s));  // "c" has no terminator
  EXPECT_EQ(r.remaining(), 1u);
  EXPECT_EQ(AsString(r.Rest()), "c");
}

TEST(ReaderTest, EmptySpanFailsEveryRead) {
  Reader r(std::span<const uint8_t>{});
  std::string_view s;
  int32_t i = 0;
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.ReadCString(&s));
  EXPECT_FALSE(r.ReadInt32(&i));
  EXPECT_TRUE(r.Rest().empty());
}

}  // namespace
}  // namespace pgfleet::protocol
