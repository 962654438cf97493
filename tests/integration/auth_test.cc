// Client and server authentication: md5 and SCRAM against the auth file, and auth_query.
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;

class AuthTest : public IntegrationTest {
 protected:
  std::string Config(const std::string& type, const std::string& extra_auth = "") {
    return absl::StrCat(PoolConfig("transaction", 2), "auth:\n  type: ", type,
                        "\n  file: userlist.txt\n", extra_auth);
  }
  std::string Userlist() {
    // md5user with its md5 hash as PostgreSQL stores it, scramuser with the SCRAM secret copied
    // from pg_authid, and a plain-text password for authuser.
    std::string md5 = pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'");
    std::string scram =
        pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='scramuser'");
    return absl::StrCat("\"md5user\" \"", md5, "\"\n\"scramuser\" \"", scram,
                        "\"\n\"authuser\" \"authpass\"\n\"postgres\" \"\"\n");
  }
};

TEST_F(AuthTest, Md5LoginWithStoredHashReachesMd5Server) {
  PgfleetProcess fleet(Config("md5"), Userlist());
  auto good = Connect(fleet.ConnString("md5user", "postgres", "password=md5pass"));
  ASSERT_TRUE(Ok(good)) << ErrorOf(good) << fleet.Log();
  EXPECT_EQ(Value(good, "SELECT current_user"), "md5user");
  auto bad = Connect(fleet.ConnString("md5user", "postgres", "password=wrong"));
  EXPECT_FALSE(Ok(bad));
  EXPECT_THAT(ErrorOf(bad), HasSubstr("password authentication failed for user \"md5user\""));
}

TEST_F(AuthTest, ScramLoginWithStoredSecretReachesScramServer) {
  PgfleetProcess fleet(Config("scram-sha-256"), Userlist());
  auto good = Connect(fleet.ConnString("scramuser", "postgres", "password=scrampass"));
  ASSERT_TRUE(Ok(good)) << ErrorOf(good) << fleet.Log();
  // The server login used the key recovered from the client's proof: no plain password known.
  EXPECT_EQ(Value(good, "SELECT current_user"), "scramuser");
  auto bad = Connect(fleet.ConnString("scramuser", "postgres", "password=nope"));
  EXPECT_FALSE(Ok(bad));
  EXPECT_THAT(ErrorOf(bad), HasSubstr("password authentication failed for user \"scramuser\""));
}

TEST_F(AuthTest, ScramLoginWithPlainPasswordInAuthFile) {
  PgfleetProcess fleet(Config("scram-sha-256"), Userlist());
  auto good = Connect(fleet.ConnString("authuser", "postgres", "password=authpass"));
  ASSERT_TRUE(Ok(good)) << ErrorOf(good) << fleet.Log();
  EXPECT_EQ(Value(good, "SELECT current_user"), "authuser");
}

TEST_F(AuthTest, UnknownUserLooksLikeWrongPassword) {
  PgfleetProcess fleet(Config("scram-sha-256"), Userlist());
  auto c = Connect(fleet.ConnString("ghost", "postgres", "password=x"));
  EXPECT_FALSE(Ok(c));
  EXPECT_THAT(ErrorOf(c), HasSubstr("password authentication failed for user \"ghost\""));
}

TEST_F(AuthTest, AuthQueryFindsUsersNotInAuthFile) {
  PgfleetProcess fleet(
      Config("md5",
             "  user: authuser\n  query: SELECT rolname, rolpassword FROM pg_authid WHERE "
             "rolname = $1\n"),
      Userlist());
  auto md5 = Connect(fleet.ConnString("aqmd5", "postgres", "password=aqmd5pass"));
  ASSERT_TRUE(Ok(md5)) << ErrorOf(md5) << fleet.Log();
  EXPECT_EQ(Value(md5, "SELECT current_user"), "aqmd5");
  auto scram = Connect(fleet.ConnString("aqscram", "postgres", "password=aqscrampass"));
  ASSERT_TRUE(Ok(scram)) << ErrorOf(scram) << fleet.Log();
  EXPECT_EQ(Value(scram, "SELECT current_user"), "aqscram");
  auto wrong = Connect(fleet.ConnString("aqscram", "postgres", "password=bad"));
  EXPECT_FALSE(Ok(wrong));
  EXPECT_THAT(ErrorOf(wrong), HasSubstr("password authentication failed"));
  auto missing = Connect(fleet.ConnString("nobody_here", "postgres", "password=bad"));
  EXPECT_FALSE(Ok(missing));
  EXPECT_THAT(ErrorOf(missing), HasSubstr("password authentication failed"));
}

// PgBouncer's per-database auth_user/auth_query (issue 35, item 4): only the database that has
// one looks its users up; the other knows only the userlist. From a pgbouncer.ini, with
// PgBouncer's default query.
TEST_F(AuthTest, APerDatabaseAuthUserLooksUpThatDatabasesUsersOnly) {
  const int port = pg().port();
  PgfleetProcess fleet(
      absl::StrCat("[databases]\nwithq = host=127.0.0.1 port=", port,
                   " dbname=postgres auth_user=authuser\nnoq = host=127.0.0.1 port=", port,
                   " dbname=postgres\n[pgbouncer]\nauth_type = md5\npool_mode = transaction\n",
                   "[pgfleet]\nworkers = 1\n"),
      Userlist());
  auto looked_up = Connect(fleet.ConnString("aqmd5", "withq", "password=aqmd5pass"));
  ASSERT_TRUE(Ok(looked_up)) << ErrorOf(looked_up) << fleet.Log();
  EXPECT_EQ(Value(looked_up, "SELECT current_user"), "aqmd5");
  auto not_here = Connect(fleet.ConnString("aqmd5", "noq", "password=aqmd5pass"));
  EXPECT_FALSE(Ok(not_here));
  EXPECT_THAT(ErrorOf(not_here), HasSubstr("password authentication failed"));
  auto listed = Connect(fleet.ConnString("md5user", "noq", "password=md5pass"));
  EXPECT_TRUE(Ok(listed)) << ErrorOf(listed);
}

TEST_F(AuthTest, LogsNeverContainPasswords) {
  PgfleetProcess fleet(Config("md5"), Userlist());
  (void)Connect(fleet.ConnString("md5user", "postgres", "password=md5pass"));
  (void)Connect(fleet.ConnString("md5user", "postgres", "password=wrongsecret"));
  std::string log = fleet.Log();
  EXPECT_THAT(log, ::testing::Not(HasSubstr("md5pass")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("wrongsecret")));
  EXPECT_THAT(log, HasSubstr("client_auth_failed"));
}

}  // namespace
}  // namespace pgfleet::testing

namespace pgfleet::testing {
namespace {

TEST_F(AuthTest, MissingServerCredentialsFailTheClientWithAClearError) {
  // Trust toward the client, but PostgreSQL wants md5 from md5user and no password is known.
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString("md5user"));
  EXPECT_FALSE(Ok(c));
  EXPECT_THAT(ErrorOf(c), ::testing::HasSubstr("pgfleet cannot log in to the server"));
}

}  // namespace
}  // namespace pgfleet::testing
