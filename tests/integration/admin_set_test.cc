// SET key = value on the console (issue 35, item 2): PgBouncer's key names and meaning, on every
// worker of the pod, shown by SHOW CONFIG, refused where a restart is needed, and undone by
// RELOAD (the file wins, as in PgBouncer).
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace admin_set_test {

using ::testing::HasSubstr;

class AdminSetTest : public IntegrationTest {
 protected:
  static std::string ConfigValue(const ConnPtr& console, const std::string& key) {
    for (const Row& row : RowsOf(Exec(console, "SHOW CONFIG"))) {
      if (row.at("key") == key) return row.at("value");
    }
    return "(missing)";
  }
};

TEST_F(AdminSetTest, SetChangesEveryWorkerUntilReload) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), "admin:\n  users: [postgres]\n")
                           .replace(0, 10, "workers: 2"));
  ConnPtr console = Connect(fleet.ConnString("postgres", "pgbouncer"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  ASSERT_TRUE(WaitFor([&] { return RowsOf(Exec(console, "SHOW WORKERS")).size() == 2u; }));
  ASSERT_EQ(PQresultStatus(Exec(console, "SET query_timeout = 1").get()), PGRES_COMMAND_OK)
      << PQerrorMessage(console.get());
  EXPECT_EQ(ConfigValue(console, "query_timeout"), "1s");
  // Every worker runs with it: clients on both time out a long query (seconds, PgBouncer's unit).
  for (int i = 0; i < 4; ++i) {
    ConnPtr c = Connect(fleet.ConnString());
    ResultPtr r = Exec(c, "SELECT pg_sleep(3)");
    EXPECT_NE(PQresultStatus(r.get()), PGRES_TUPLES_OK) << "client " << i;
  }
  ResultPtr restart = Exec(console, "SET listen_port = 7777");
  EXPECT_EQ(PQresultStatus(restart.get()), PGRES_FATAL_ERROR);
  EXPECT_THAT(PQerrorMessage(console.get()),
              HasSubstr("SET failed: SET: listen_port: not changeable at run time"));
  ResultPtr unknown = Exec(console, "SET no_such_key = 1");
  EXPECT_EQ(PQresultStatus(unknown.get()), PGRES_FATAL_ERROR);
  EXPECT_THAT(PQerrorMessage(console.get()), HasSubstr("no_such_key: unknown key"));
  ResultPtr bad = Exec(console, "SET default_pool_size = lots");
  EXPECT_EQ(PQresultStatus(bad.get()), PGRES_FATAL_ERROR);
  EXPECT_THAT(PQerrorMessage(console.get()), HasSubstr("default_pool_size"));
  EXPECT_EQ(ConfigValue(console, "query_timeout"), "1s");  // a refused SET changed nothing
  ASSERT_EQ(PQresultStatus(Exec(console, "RELOAD").get()), PGRES_COMMAND_OK);
  EXPECT_EQ(ConfigValue(console, "query_timeout"), "0");
  ConnPtr c = Connect(fleet.ConnString());
  EXPECT_EQ(Value(c, "SELECT pg_sleep(1.2)::text"), "");
}

}  // namespace admin_set_test
}  // namespace pgfleet::testing
