// PgBouncer's auth_type plain and any (issue 35, item 4), from a pgbouncer.ini as users have it.
// plain: the password in clear text, checked against the userlist's plain, md5 or SCRAM entry;
// any: the user name is not checked, every database logs in as its own user, and the console
// lets every user in.
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace auth_plain_any_test {

using std::chrono::seconds;
using ::testing::HasSubstr;

class AuthPlainAnyTest : public IntegrationTest {
 protected:
  std::string Database(const std::string& name, const std::string& extra = "") {
    return absl::StrCat(name, " = host=127.0.0.1 port=", pg().port(), " dbname=postgres ", extra,
                        "\n");
  }
};

TEST_F(AuthPlainAnyTest, PlainChecksTheClearTextPasswordAgainstEveryKindOfUserlistEntry) {
  const std::string md5 =
      pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'");
  const std::string scram =
      pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='scramuser'");
  ASSERT_THAT(scram, HasSubstr("SCRAM-SHA-256$"));
  PgfleetProcess fleet(absl::StrCat("[databases]\n", Database("appdb"),
                                    "[pgbouncer]\nauth_type = plain\npool_mode = transaction\n"),
                       absl::StrCat("\"md5user\" \"", md5, "\"\n\"scramuser\" \"", scram, "\"\n"));
  // The pool logs in to PostgreSQL as each user: with the md5 hash, and with the ClientKey the
  // clear-text password derives from the SCRAM entry.
  auto with_md5 = Connect(fleet.ConnString("md5user", "appdb", "password=md5pass"));
  ASSERT_TRUE(Ok(with_md5)) << ErrorOf(with_md5) << fleet.Log();
  EXPECT_EQ(Value(with_md5, "SELECT current_user"), "md5user");
  auto with_scram = Connect(fleet.ConnString("scramuser", "appdb", "password=scrampass"));
  ASSERT_TRUE(Ok(with_scram)) << ErrorOf(with_scram) << fleet.Log();
  EXPECT_EQ(Value(with_scram, "SELECT current_user"), "scramuser");
  for (const std::string user : {"md5user", "scramuser", "nosuchuser"}) {
    auto wrong = Connect(fleet.ConnString(user, "appdb", "password=guess"));
    EXPECT_FALSE(Ok(wrong)) << user;
    EXPECT_THAT(ErrorOf(wrong), HasSubstr("password authentication failed for user \"" + user))
        << user;
  }
}

TEST_F(AuthPlainAnyTest, AnyIgnoresTheUserNameAndLogsInAsTheDatabasesUser) {
  PgfleetProcess fleet(absl::StrCat("[databases]\n", Database("appdb", "user=postgres"),
                                    "[pgbouncer]\nauth_type = any\npool_mode = transaction\n"));
  auto c = Connect(fleet.ConnString("whoever", "appdb"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  EXPECT_EQ(Value(c, "SELECT current_user"), "postgres");
  // PgBouncer: under any, the console lets every user in as admin.
  auto console = Connect(fleet.ConnString("whoever", "pgbouncer"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  EXPECT_TRUE(ResultOk(Exec(console, "RELOAD"))) << ErrorOf(console);

  // A database without its own user would log in as whoever the client claims: refused.
  PgfleetProcess unsafe(
      absl::StrCat("[databases]\n", Database("appdb"), "[pgbouncer]\nauth_type = any\n"));
  EXPECT_TRUE(WaitFor([&] { return !unsafe.Running(); }, seconds(10)));
  EXPECT_THAT(unsafe.Log(), HasSubstr("databases.appdb.user: auth.type \\\"any\\\" needs every "
                                      "database to log in as its own user"));
}

}  // namespace auth_plain_any_test
}  // namespace pgfleet::testing
