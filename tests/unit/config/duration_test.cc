// ParseDuration: every unit, bare seconds, and the inputs it must refuse.
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/config/config.h"

namespace pgfleet::config {
namespace {

using ::testing::HasSubstr;

TEST(ParseDurationTest, AcceptsEachUnit) {
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("5m"), absl::Minutes(5));
  EXPECT_EQ(*ParseDuration("5min"), absl::Minutes(5));
  EXPECT_EQ(*ParseDuration("1h"), absl::Hours(1));
  EXPECT_EQ(*ParseDuration("2d"), absl::Hours(48));
  EXPECT_EQ(*ParseDuration("250us"), absl::Microseconds(250));
}

TEST(ParseDurationTest, BareNumberIsSeconds) {
  EXPECT_EQ(*ParseDuration("120"), absl::Seconds(120));
  EXPECT_EQ(*ParseDuration("0"), absl::ZeroDuration());
  EXPECT_EQ(*ParseDuration("0s"), absl::ZeroDuration());
}

TEST(ParseDurationTest, AcceptsFractionsAndSurroundingSpace) {
  EXPECT_EQ(*ParseDuration("1.5s"), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseDuration("0.25"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDuration(" 10s "), absl::Seconds(10));
}

TEST(ParseDurationTest, RejectsJunk) {
  for (const char* text : {"", "abc", "s", "10x", "10 s", "1.s", ".5s", "1e3", "inf", "nan",
                           "10sec", "1h30m", "+5s", "5S"}) {
    auto result = ParseDuration(text);
    ASSERT_FALSE(result.ok()) << text;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("\"" + std::string(text) + "\""))
        << text;
  }
}

TEST(ParseDurationTest, RejectsNegative) {
  auto result = ParseDuration("-5s");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("must not be negative"));
  EXPECT_FALSE(ParseDuration("-0").ok());
}

TEST(ParseDurationTest, RejectsValuesTooLargeToRepresent) {
  auto result = ParseDuration("99999999999999999999999d");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("too large"));
}

}  // namespace
}  // namespace pgfleet::config
