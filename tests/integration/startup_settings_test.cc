// Startup settings (issue 35, item 3): `options` with -c switches (libpq's PGOPTIONS, pgjdbc's
// options) and any startup parameter that names a setting (pgx's RuntimeParams, asyncpg's
// server_settings) become the client's session settings, in every pool mode, and what
// PostgreSQL would refuse at login is refused at login with PostgreSQL's error.
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/raw_client.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;

class StartupSettingsTest : public IntegrationTest {};

std::string WithOptions(const PgfleetProcess& fleet, const std::string& options,
                        const std::string& user = "postgres") {
  return fleet.ConnString(user, "postgres", absl::StrCat("options='", options, "'"));
}

// With one server, a client with -c settings and one without take turns on it: each sees only
// its own values, RESET returns to the startup value (PostgreSQL's session default), and a SET
// is tracked over it as any SET.
TEST_F(StartupSettingsTest, OptionsSettingsAreTheSessionsAndNeverReachAnotherClient) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto with = Connect(WithOptions(
      // libpq unquotes the conninfo value once: PostgreSQL's escape reaches pgfleet as "\ ".
      fleet, R"(-c statement_timeout=1234 --work-mem=7MB -c application_name=with\\ options)"));
  ASSERT_TRUE(Ok(with)) << ErrorOf(with) << fleet.Log();
  auto without = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(without)) << ErrorOf(without);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(Value(with, "SHOW statement_timeout"), "1234ms");
    EXPECT_EQ(Value(with, "SHOW work_mem"), "7MB");
    EXPECT_EQ(Value(with, "SELECT current_setting('application_name')"), "with options");
    EXPECT_EQ(Value(without, "SHOW statement_timeout"), "0");
    EXPECT_EQ(Value(without, "SHOW work_mem"), pg().QueryValue("SHOW work_mem"));
  }
  ASSERT_TRUE(ResultOk(Exec(with, "SET statement_timeout = '5s'")));
  EXPECT_EQ(Value(without, "SHOW statement_timeout"), "0");
  EXPECT_EQ(Value(with, "SHOW statement_timeout"), "5s");
  ASSERT_TRUE(ResultOk(Exec(with, "RESET statement_timeout")));
  EXPECT_EQ(Value(without, "SHOW statement_timeout"), "0");
  EXPECT_EQ(Value(with, "SHOW statement_timeout"), "1234ms");
  ASSERT_TRUE(ResultOk(Exec(with, "RESET ALL")));
  EXPECT_EQ(Value(without, "SHOW work_mem"), pg().QueryValue("SHOW work_mem"));
  EXPECT_EQ(Value(with, "SHOW work_mem"), "7MB");
  // The setting works as a setting: the timeout ends a long query.
  auto slow = Exec(with, "SELECT pg_sleep(3)");
  EXPECT_EQ(SqlState(slow), "57014");
}

TEST_F(StartupSettingsTest, SessionPoolingCarriesThemTooAndTheNextClientGetsDefaults) {
  PgfleetProcess fleet(PoolConfig("session", 1));
  {
    auto with = Connect(WithOptions(fleet, "-c search_path=pg_catalog -c geqo=off"));
    ASSERT_TRUE(Ok(with)) << ErrorOf(with) << fleet.Log();
    EXPECT_EQ(Value(with, "SHOW geqo"), "off");
    EXPECT_EQ(Value(with, "SHOW search_path"), "pg_catalog");
  }
  auto next = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(next)) << ErrorOf(next);
  EXPECT_EQ(Value(next, "SHOW geqo"), "on");
  EXPECT_EQ(Value(next, "SHOW search_path"), pg().QueryValue("SHOW search_path"));
}

// A parameter of the startup packet itself that names a setting, as pgx sends RuntimeParams.
TEST_F(StartupSettingsTest, AStartupParameterThatNamesASettingIsTheSessions) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  RawClient raw;
  ASSERT_TRUE(raw.Connect(fleet.port(), "postgres", "postgres", 196608,
                          {{"client_min_messages", "error"}, {"lock_timeout", "4321"}}))
      << raw.error() << fleet.Log();
  ASSERT_TRUE(raw.Send(RawClient::Query(
      "SELECT current_setting('client_min_messages') || ',' || current_setting('lock_timeout')")));
  const auto answer = raw.ReadUntilReady();
  ASSERT_EQ(Types(answer), "TDCZ");
  EXPECT_THAT(answer[1].body, HasSubstr("error,4321ms"));
  auto other = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(other)) << ErrorOf(other);
  EXPECT_EQ(Value(other, "SHOW client_min_messages"), "notice");
}

// What PostgreSQL refuses at login is refused at login, with its SQLSTATE and message, for the
// first client and (from the pool's memory of the verdict) for the next one.
TEST_F(StartupSettingsTest, WhatPostgresWouldRefuseIsRefusedAtLoginWithItsError) {
  std::string md5 = pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'");
  PgfleetProcess fleet(
      absl::StrCat(PoolConfig("transaction", 2), "auth:\n  type: trust\n  file: userlist.txt\n"),
      absl::StrCat("\"md5user\" \"", md5, "\"\n"));
  struct Case {
    std::string user;
    std::string options;
    std::string message;
  };
  const Case cases[] = {
      // A superuser-only setting for a user who is not one.
      {"md5user", "-c log_min_duration_statement=0",
       "permission denied to set parameter \"log_min_duration_statement\""},
      {"postgres", "-c statement_timeout=soon",
       "invalid value for parameter \"statement_timeout\""},
      {"postgres", "-c no_such_setting=1", "unrecognized configuration parameter"},
      // Fixed at connection start: a pooler cannot give it to one client.
      {"postgres", "-c log_connections=on", "cannot be"},
      {"postgres", "-e", "only -c name=value and --name=value are supported"},
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const Case& c : cases) {
      auto conn = Connect(WithOptions(fleet, c.options, c.user));
      EXPECT_FALSE(Ok(conn)) << c.options;
      EXPECT_THAT(ErrorOf(conn), HasSubstr(c.message)) << c.options << " attempt " << attempt;
    }
  }
  // The superuser may set what md5user may not; the refusals disturbed nobody.
  auto allowed = Connect(WithOptions(fleet, "-c log_min_duration_statement=0"));
  ASSERT_TRUE(Ok(allowed)) << ErrorOf(allowed);
  EXPECT_EQ(Value(allowed, "SHOW log_min_duration_statement"), "0");
  auto plain = Connect(fleet.ConnString("md5user"));
  ASSERT_TRUE(Ok(plain)) << ErrorOf(plain);
  EXPECT_EQ(Value(plain, "SELECT 1"), "1");
}

// pool.ignore_startup_parameters keeps PgBouncer's meaning: a listed name is dropped, and with
// `options` listed so is any setting inside options.
TEST_F(StartupSettingsTest, IgnoredParametersAreDroppedAsPgBouncerDrops) {
  PgfleetProcess fleet(
      PoolConfig("transaction", 1, "  ignore_startup_parameters: [extra_float_digits, options]\n"));
  auto c = Connect(fleet.ConnString("postgres", "postgres", "options='-c geqo=off -x'"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  EXPECT_EQ(Value(c, "SHOW geqo"), "on");
}

}  // namespace
}  // namespace pgfleet::testing
