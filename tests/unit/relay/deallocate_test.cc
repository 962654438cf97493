// ParseDeallocate: which simple queries pgfleet answers itself for renamed statements.
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "pooler/relay/prepared_statements.h"

namespace pgfleet::pool {
namespace {

TEST(ParseDeallocateTest, NamesAsDriversSendThem) {
  EXPECT_EQ(ParseDeallocate("DEALLOCATE _pg3_0"), "_pg3_0");
  EXPECT_EQ(ParseDeallocate("  deallocate prepare S_1 ;\n"), "s_1");
  EXPECT_EQ(ParseDeallocate("DEALLOCATE \"MixedCase\""), "MixedCase");
  EXPECT_EQ(ParseDeallocate("DEALLOCATE \"a\"\"b\";"), "a\"b");
  EXPECT_EQ(ParseDeallocate("DEALLOCATE prepare"), "prepare");
}

TEST(ParseDeallocateTest, LeavesEverythingElseToTheServer) {
  for (const char* sql :
       {"DEALLOCATE ALL", "DEALLOCATE PREPARE ALL", "DEALLOCATE", "SELECT 1",
        "DEALLOCATE a; SELECT 1", "DEALLOCATE a b", "DEALLOCATEx a", "DEALLOCATE \"unterminated",
        "DEALLOCATE \"\"", "DEALLOCATE 1abc", "DEALLOCATE \"a\"b"}) {
    EXPECT_EQ(ParseDeallocate(sql), std::nullopt) << sql;
  }
}

}  // namespace
}  // namespace pgfleet::pool
