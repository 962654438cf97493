#include "pooler/protocol/startup_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pgfleet::protocol {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(StartupOptionsTest, ReadsEveryFormOfASettingSwitch) {
  auto settings = ParseStartupOptions(
      "  -c statement_timeout=5s -cwork_mem=64MB --search-path=app,public\t-c geqo=off ");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(
      *settings,
      ElementsAre(StartupSetting{"statement_timeout", "5s"}, StartupSetting{"work_mem", "64MB"},
                  StartupSetting{"search_path", "app,public"}, StartupSetting{"geqo", "off"}));
}

TEST(StartupOptionsTest, ABackslashKeepsTheNextByteInItsWord) {
  auto settings = ParseStartupOptions(R"(-c application_name=my\ app\\x -c a.b=\=)");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings, ElementsAre(StartupSetting{"application_name", R"(my app\x)"},
                                     StartupSetting{"a.b", "="}));
}

TEST(StartupOptionsTest, EmptyOptionsHoldNoSetting) {
  auto settings = ParseStartupOptions(" \t ");
  ASSERT_TRUE(settings.ok());
  EXPECT_THAT(*settings, IsEmpty());
}

TEST(StartupOptionsTest, OtherSwitchesAndMissingValuesAreRefusedByName) {
  auto other = ParseStartupOptions("-c work_mem=1MB -e");
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(),
              HasSubstr("only -c name=value and --name=value are supported, not \"-e\""));
  auto no_value = ParseStartupOptions("-c work_mem");
  ASSERT_FALSE(no_value.ok());
  EXPECT_THAT(no_value.status().message(), HasSubstr("-c work_mem requires a value"));
  EXPECT_FALSE(ParseStartupOptions("-c").ok());
  EXPECT_FALSE(ParseStartupOptions("--geqo").ok());
  auto bad_name = ParseStartupOptions("-c bad;name=1");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_THAT(bad_name.status().message(), HasSubstr("invalid setting name"));
}

TEST(StartupOptionsTest, SettingNamesAreIdentifiers) {
  EXPECT_TRUE(IsSettingName("statement_timeout"));
  EXPECT_TRUE(IsSettingName("pg_stat_statements.track"));
  EXPECT_FALSE(IsSettingName(""));
  EXPECT_FALSE(IsSettingName("a b"));
  EXPECT_FALSE(IsSettingName("x'"));
  EXPECT_FALSE(IsSettingName(std::string(64, 'a')));
}

}  // namespace
}  // namespace pgfleet::protocol
