// Tests for pooler/auth/userlist.h.
#include "pooler/auth/userlist.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pgfleet::auth {
namespace userlist_test {

// Keeps the test on plain gtest (no gmock dependency) while still printing the message.
::testing::AssertionResult MessageHas(const absl::Status& status, const std::string& part) {
  if (absl::StrContains(status.message(), part)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status << " lacks \"" << part << "\"";
}

TEST(ParseUserlistTest, ParsesEntriesCommentsAndBlankLines) {
  const std::string text =
      "; PgBouncer-style comment\n"
      "# hash comment\n"
      "\n"
      "   \t\n"
      "\"alice\" \"plain secret\"\n"
      "  \"bob\"\t\"md553f48b7c4b76a86ce72276c5755f217d\"  \n"
      "\"carol\" \"SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5\"\r\n"
      "\"dave\" \"\" \"ignored third field\"\n"
      "   ; indented comment\n";
  absl::StatusOr<Userlist> users = ParseUserlist(text, "users.txt");
  ASSERT_TRUE(users.ok()) << users.status();
  EXPECT_EQ(users->size(), 4u);
  EXPECT_EQ(users->at("alice"), "plain secret");
  EXPECT_EQ(users->at("bob"), "md553f48b7c4b76a86ce72276c5755f217d");
  EXPECT_EQ(users->at("carol"), "SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5");
  EXPECT_EQ(users->at("dave"), "");
}

TEST(ParseUserlistTest, UndoublesEscapedQuotes) {
  absl::StatusOr<Userlist> users =
      ParseUserlist("\"o\"\"brien\" \"pa\"\"ss\"\"\"\n\"\"\"\" \"x;#y\"", "users.txt");
  ASSERT_TRUE(users.ok()) << users.status();
  EXPECT_EQ(users->at("o\"brien"), "pa\"ss\"");
  EXPECT_EQ(users->at("\""), "x;#y");
}

TEST(ParseUserlistTest, EmptyTextIsEmptyList) {
  absl::StatusOr<Userlist> users = ParseUserlist("", "users.txt");
  ASSERT_TRUE(users.ok());
  EXPECT_TRUE(users->empty());
}

struct BadLine {
  std::string text;
  int line;
};

class ParseUserlistErrorTest : public ::testing::TestWithParam<BadLine> {};

TEST_P(ParseUserlistErrorTest, NamesSourceAndLineButNotThePassword) {
  const std::string text = absl::StrCat("; header\n\"ok\" \"fine\"\n\n", GetParam().text, "\n");
  absl::StatusOr<Userlist> users = ParseUserlist(text, "/etc/pgfleet/users.txt");
  ASSERT_FALSE(users.ok());
  EXPECT_EQ(users.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      MessageHas(users.status(), absl::StrCat("/etc/pgfleet/users.txt:", GetParam().line, ":")));
  EXPECT_FALSE(absl::StrContains(users.status().message(), "hunter2")) << users.status();
}

INSTANTIATE_TEST_SUITE_P(
    BadLines, ParseUserlistErrorTest,
    ::testing::Values(BadLine{"alice \"hunter2\"", 4},            // unquoted user
                      BadLine{"\"alice\" hunter2", 4},            // unquoted password
                      BadLine{"\"alice\"", 4},                    // no password
                      BadLine{"\"alice\" ", 4},                   // no password after blank
                      BadLine{"\"alice\"\"hunter2\"", 4},         // one field with a quote
                      BadLine{"\"alice\" \"hunter2", 4},          // unterminated password
                      BadLine{"\"alice \"hunter2\"", 4},          // unterminated user
                      BadLine{"\"\" \"hunter2\"", 4},             // empty user
                      BadLine{"\"alice\" \"hunter2\"x", 4},       // junk glued to password
                      BadLine{"\"ok\" \"hunter2\"", 4},           // duplicate of line 2
                      BadLine{"\n\n\"bob\" \"hunter2\n\"", 6}));  // quote does not span lines

TEST(ParseUserlistTest, DuplicateNamesBothLines) {
  absl::StatusOr<Userlist> users = ParseUserlist("\"a\" \"1\"\n\"b\" \"2\"\n\"a\" \"3\"", "f");
  ASSERT_FALSE(users.ok());
  EXPECT_TRUE(MessageHas(users.status(), "f:3:"));
  EXPECT_TRUE(MessageHas(users.status(), "line 1"));
}

class LoadUserlistFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/pgfleet_userlist_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override {
    std::remove(path().c_str());
    rmdir(dir_.c_str());
  }
  std::string path() const { return dir_ + "/users.txt"; }

  std::string dir_;
};

TEST_F(LoadUserlistFileTest, ReadsFile) {
  FILE* f = std::fopen(path().c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("\"alice\" \"secret\"\n", f);
  std::fclose(f);
  absl::StatusOr<Userlist> users = LoadUserlistFile(path());
  ASSERT_TRUE(users.ok()) << users.status();
  EXPECT_EQ(users->at("alice"), "secret");
}

TEST_F(LoadUserlistFileTest, ErrorsNameThePath) {
  FILE* f = std::fopen(path().c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("\"alice\" \"secret\"\nbroken\n", f);
  std::fclose(f);
  absl::StatusOr<Userlist> users = LoadUserlistFile(path());
  ASSERT_FALSE(users.ok());
  EXPECT_TRUE(MessageHas(users.status(), path() + ":2:"));
}

TEST_F(LoadUserlistFileTest, MissingFileIsNotFound) {
  absl::StatusOr<Userlist> users = LoadUserlistFile(path());
  ASSERT_FALSE(users.ok());
  EXPECT_EQ(users.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(users.status(), path()));
}

TEST_F(LoadUserlistFileTest, DirectoryIsAnErrorNotAnEmptyList) {
  absl::StatusOr<Userlist> users = LoadUserlistFile(dir_);
  EXPECT_FALSE(users.ok());
}

}  // namespace userlist_test
}  // namespace pgfleet::auth
