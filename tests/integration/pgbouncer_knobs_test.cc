// PgBouncer's knobs that users set (issue 35, item 5), from a pgbouncer.ini as they have it:
// client limits per database and user (for the whole pod), per-user pool sizes and timeouts,
// query_wait_notify, application_name_add_host, server_round_robin, several listen addresses,
// the unix socket's mode and group, and log_stats.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace pgbouncer_knobs_test {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// `n` clients of `user` run `sql` at once, each on its own connection; how many succeeded.
int RunConcurrently(const PgfleetProcess& fleet, const std::string& user, const std::string& db,
                    int n, const std::string& sql) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      auto c = Connect(fleet.ConnString(user, db));
      if (Ok(c) && ResultOk(Exec(c, sql))) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  return ok.load();
}

class PgBouncerKnobsTest : public IntegrationTest {
 protected:
  // A pgbouncer.ini with trust auth (the shared server trusts loopback), two databases and
  // `extra` in [pgbouncer]; `users` is the [users] section.
  std::string Ini(const std::string& extra, const std::string& users = "",
                  const std::string& workers = "1") {
    return absl::StrCat("[databases]\nappdb = host=127.0.0.1 port=", pg().port(),
                        " dbname=postgres max_db_client_connections=3\notherdb = host=127.0.0.1 "
                        "port=",
                        pg().port(), " dbname=postgres\n[users]\n", users,
                        "\n[pgbouncer]\nauth_type = trust\nadmin_users = postgres\n"
                        "pool_mode = transaction\nquery_wait_timeout = 20\n",
                        extra, "\n[pgfleet]\nworkers = ", workers, "\n");
  }
};

// max_db_client_connections and max_user_client_connections hold for the pod, whichever worker
// a client reaches: one more client is refused with PgBouncer's words and 53300, and a client
// leaving makes room.
TEST_F(PgBouncerKnobsTest, ClientLimitsHoldForThePodAndNameTheLimit) {
  PgfleetProcess fleet(Ini("", "otheruser = max_user_client_connections=2\n", "2"));
  std::vector<ConnPtr> app;
  for (int i = 0; i < 3; ++i) {
    app.push_back(Connect(fleet.ConnString("postgres", "appdb")));
    ASSERT_TRUE(Ok(app.back())) << ErrorOf(app.back()) << fleet.Log();
  }
  // The third and fourth client may reach either worker: the count is the pod's.
  for (int i = 0; i < 3; ++i) {
    auto over = Connect(fleet.ConnString("postgres", "appdb"));
    EXPECT_FALSE(Ok(over));
    EXPECT_THAT(ErrorOf(over),
                HasSubstr("no more connections allowed (max_db_client_connections)"));
  }
  // otherdb has no limit of its own.
  auto other_db = Connect(fleet.ConnString("postgres", "otherdb"));
  EXPECT_TRUE(Ok(other_db)) << ErrorOf(other_db);
  app.pop_back();
  EXPECT_TRUE(WaitFor([&] { return Ok(Connect(fleet.ConnString("postgres", "appdb"))); }))
      << "a client that left makes room";

  std::vector<ConnPtr> other;
  for (int i = 0; i < 2; ++i) {
    other.push_back(Connect(fleet.ConnString("otheruser", "otherdb")));
    ASSERT_TRUE(Ok(other.back())) << ErrorOf(other.back());
  }
  auto over_user = Connect(fleet.ConnString("otheruser", "otherdb"));
  EXPECT_FALSE(Ok(over_user));
  EXPECT_THAT(ErrorOf(over_user),
              HasSubstr("no more connections allowed (max_user_client_connections)"));

  auto console = Connect(fleet.ConnString("postgres", "pgbouncer"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  bool shown = false;
  for (const Row& row : RowsOf(Exec(console, "SHOW DATABASES"))) {
    if (row.at("name") != "appdb") continue;
    EXPECT_EQ(row.at("max_client_connections"), "3");
    shown = true;
  }
  EXPECT_TRUE(shown);
  auto users = Exec(console, "SHOW USERS");
  for (int r = 0; r < PQntuples(users.get()); ++r) {
    if (std::string(PQgetvalue(users.get(), r, 0)) != "otheruser") continue;
    EXPECT_STREQ(PQgetvalue(users.get(), r, PQfnumber(users.get(), "max_user_client_connections")),
                 "2");
    // A user without its own pool_size: NULL, as PgBouncer shows it.
    EXPECT_TRUE(PQgetisnull(users.get(), r, PQfnumber(users.get(), "pool_size")));
  }
}

// A [users] entry's pool_size and query_timeout hold for that user's pools only.
TEST_F(PgBouncerKnobsTest, AUsersPoolSizeAndTimeoutsHoldForItsPoolsOnly) {
  PgfleetProcess fleet(Ini("default_pool_size = 4\n", "otheruser = pool_size=1 query_timeout=1\n"));
  EXPECT_EQ(RunConcurrently(fleet, "otheruser", "otherdb", 3, "SELECT pg_sleep(0.3)"), 3);
  EXPECT_EQ(ServerConnections("otheruser"), 1) << "the user's pool_size is 1";

  auto slow = Connect(fleet.ConnString("otheruser", "otherdb"));
  ASSERT_TRUE(Ok(slow)) << ErrorOf(slow);
  EXPECT_FALSE(ResultOk(Exec(slow, "SELECT pg_sleep(5)")));
  EXPECT_THAT(ErrorOf(slow), HasSubstr("query_timeout"));
  // postgres has no query_timeout.
  auto other = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(other)) << ErrorOf(other);
  EXPECT_TRUE(ResultOk(Exec(other, "SELECT pg_sleep(1.5)"))) << ErrorOf(other);
}

// query_wait_notify: a client queued that long is told so with a NOTICE (PgBouncer's words); a
// client that did not wait is not.
TEST_F(PgBouncerKnobsTest, AClientQueuedPastQueryWaitNotifyGetsANotice) {
  PgfleetProcess fleet(Ini("default_pool_size = 1\nquery_wait_notify = 1\n"));
  auto busy = Connect(fleet.ConnString("postgres", "otherdb"));
  auto queued = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(busy) && Ok(queued)) << ErrorOf(busy) << ErrorOf(queued);
  std::string busy_notices;
  std::string queued_notices;
  const auto collect = [](void* arg, const char* text) { *static_cast<std::string*>(arg) += text; };
  PQsetNoticeProcessor(busy.get(), collect, &busy_notices);
  PQsetNoticeProcessor(queued.get(), collect, &queued_notices);
  ASSERT_EQ(PQsendQuery(busy.get(), "SELECT pg_sleep(3)"), 1);
  // The busy client holds the one server before the other asks.
  ASSERT_TRUE(WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE query = "
               "'SELECT pg_sleep(3)' AND state = 'active'") == "1";
  }));
  EXPECT_EQ(Value(queued, "SELECT 'served'"), "served");
  ResultPtr busy_result(PQgetResult(busy.get()));
  EXPECT_TRUE(ResultOk(busy_result));
  while (ResultPtr(PQgetResult(busy.get()))) {
  }
  EXPECT_THAT(queued_notices, HasSubstr("No server connection available in postgres backend, "
                                        "client being queued"));
  EXPECT_EQ(busy_notices, "");
}

// application_name_add_host: PostgreSQL sees the client's address after its application_name
// ("app" when it sent none), set at login only.
TEST_F(PgBouncerKnobsTest, ApplicationNameAddHostAppendsTheClientsAddress) {
  PgfleetProcess fleet(Ini("application_name_add_host = 1\n"));
  const std::string on_server =
      "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()";
  auto named = Connect(fleet.ConnString("postgres", "otherdb", "application_name=billing"));
  ASSERT_TRUE(Ok(named)) << ErrorOf(named);
  EXPECT_THAT(Value(named, on_server), MatchesRegex("billing - 127\\.0\\.0\\.1:[0-9]+"));
  auto unnamed = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(unnamed)) << ErrorOf(unnamed);
  EXPECT_THAT(Value(unnamed, on_server), MatchesRegex("app - 127\\.0\\.0\\.1:[0-9]+"));
  // A later SET is the client's own.
  ASSERT_TRUE(ResultOk(Exec(named, "SET application_name = 'plain'")));
  EXPECT_EQ(Value(named, on_server), "plain");
}

// The idle servers one client gets in turn, after two were opened at once.
std::set<std::string> BackendsSeenInTurn(const PgfleetProcess& fleet) {
  RunConcurrently(fleet, "postgres", "otherdb", 2, "SELECT pg_sleep(0.3)");
  std::set<std::string> pids;
  auto c = Connect(fleet.ConnString("postgres", "otherdb"));
  for (int i = 0; i < 6 && Ok(c); ++i) pids.insert(Value(c, "SELECT pg_backend_pid()"));
  return pids;
}

// server_round_robin takes the idle server used longest ago, so one client's transactions go
// round both servers; without it the most recently used one serves every time (PgBouncer's LIFO).
TEST_F(PgBouncerKnobsTest, ServerRoundRobinSpreadsTransactionsOverTheIdleServers) {
  PgfleetProcess round_robin(Ini("default_pool_size = 2\nserver_round_robin = 1\n"));
  EXPECT_EQ(BackendsSeenInTurn(round_robin).size(), 2u);
  PgfleetProcess lifo(Ini("default_pool_size = 2\n"));
  EXPECT_EQ(BackendsSeenInTurn(lifo).size(), 1u);
}

// server_fast_close: in session pooling, a RECONNECT closes the session's server between its
// transactions, and the client with it, instead of at the session's end; never inside one.
TEST_F(PgBouncerKnobsTest, ServerFastCloseEndsASessionBetweenTransactionsAfterReconnect) {
  PgfleetProcess fleet(Ini("pool_mode = session\nserver_fast_close = 1\n"));
  auto c = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  ASSERT_TRUE(ResultOk(Exec(c, "BEGIN")));
  auto console = Connect(fleet.ConnString("postgres", "pgbouncer"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  ASSERT_TRUE(ResultOk(Exec(console, "RECONNECT otherdb"))) << ErrorOf(console);
  // The janitor looks every second: the transaction outlives a few of its sweeps.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Value(c, "SELECT 'in transaction', pg_sleep(0.5)"), "in transaction");
  }
  ASSERT_TRUE(ResultOk(Exec(c, "COMMIT"))) << ErrorOf(c);
  EXPECT_TRUE(WaitFor([&] { return !ResultOk(Exec(c, "SELECT 1")); }, seconds(10)));
  // libpq may report only the closed connection, when it sees the end before the FATAL; the log
  // says why the client was closed.
  EXPECT_THAT(fleet.Log(), HasSubstr("reason=\"server_fast_close: database configuration changed"));
  auto next = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(next)) << ErrorOf(next);
  EXPECT_EQ(Value(next, "SELECT 'new session'"), "new session");
}

// listen_addr with several addresses listens on each; the unix socket gets unix_socket_mode and
// unix_socket_group; a group that does not exist stops the start, naming it.
TEST_F(PgBouncerKnobsTest, SeveralListenAddressesAndTheUnixSocketsModeAndGroup) {
  char tmpl[] = "/tmp/pgfleet-sock-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const group* own = getgrgid(getgid());
  ASSERT_NE(own, nullptr);
  const std::string group_name = own->gr_name;
  PgfleetProcess fleet(
      PoolConfig("transaction", 2), "",
      absl::StrCat("  unix_socket_dir: ", dir,
                   "\n  unix_socket_mode: \"0700\"\n  unix_socket_group: ", group_name, "\n"),
      "127.0.0.1,127.0.0.3");
  for (const std::string& host : {std::string("127.0.0.1"), std::string("127.0.0.3"), dir}) {
    auto c = Connect(absl::StrCat("host=", host, " port=", fleet.port(),
                                  " user=postgres dbname=postgres connect_timeout=10"));
    EXPECT_TRUE(Ok(c)) << host << ": " << ErrorOf(c) << fleet.Log();
  }
  struct stat st = {};
  ASSERT_EQ(stat(absl::StrCat(dir, "/.s.PGSQL.", fleet.port()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_gid, own->gr_gid);

  PgfleetProcess bad(
      PoolConfig("transaction", 2), "",
      absl::StrCat("  unix_socket_dir: ", dir, "\n  unix_socket_group: no_such_group_here\n"));
  EXPECT_TRUE(WaitFor([&] { return !bad.Running(); }, seconds(10)));
  EXPECT_THAT(bad.Log(), HasSubstr("listen.unix_socket_group: no such group: no_such_group_here"));
  RunCommand("rm -rf " + dir);
}

// Server host names are looked up off the event loop, once per dns_max_ttl; a name that does not
// resolve fails its database's clients with the resolver's words, and other databases are served
// meanwhile.
TEST_F(PgBouncerKnobsTest, HostNamesAreResolvedOffTheLoopAndKeptForDnsMaxTtl) {
  PgfleetProcess fleet(absl::StrCat(
      "[databases]\nnamed = host=localhost port=", pg().port(),
      " dbname=postgres\nnowhere = host=no-such-host.invalid port=5432 dbname=postgres\n"
      "[pgbouncer]\nauth_type = trust\npool_mode = transaction\nquery_wait_timeout = 3\n"
      "dns_max_ttl = 30\ndefault_pool_size = 4\n"));
  auto bad = Connect(fleet.ConnString("postgres", "nowhere"));
  EXPECT_FALSE(Ok(bad) && ResultOk(Exec(bad, "SELECT 1")));
  EXPECT_THAT(ErrorOf(bad), HasSubstr("no-such-host.invalid")) << fleet.Log();
  EXPECT_EQ(RunConcurrently(fleet, "postgres", "named", 4, "SELECT pg_sleep(0.2)"), 4)
      << fleet.Log();
  EXPECT_EQ(CountInLog(fleet.Log(), "event=server_host_address_changed"), 0u);
}

// A database's connect_query runs once on each new server before clients get it; a database's
// server_lifetime retires its servers sooner than the global one.
TEST_F(PgBouncerKnobsTest, ConnectQueryAndADatabasesServerLifetime) {
  PgfleetProcess fleet(absl::StrCat(
      "[databases]\nwarm = host=127.0.0.1 port=", pg().port(),
      " dbname=postgres connect_query='set enable_seqscan=off; set enable_nestloop=off'\n"
      "short = host=127.0.0.1 port=",
      pg().port(),
      " dbname=postgres server_lifetime=1 timezone=Asia/Tokyo\n[pgbouncer]\nauth_type = trust\n"
      "pool_mode = transaction\ntcp_socket_buffer = 4096\n"));
  auto warm = Connect(fleet.ConnString("postgres", "warm"));
  ASSERT_TRUE(Ok(warm)) << ErrorOf(warm) << fleet.Log();
  EXPECT_EQ(Value(warm, "SHOW enable_seqscan"), "off");
  EXPECT_EQ(Value(warm, "SHOW enable_nestloop"), "off");
  auto plain = Connect(fleet.ConnString("postgres", "short"));
  ASSERT_TRUE(Ok(plain)) << ErrorOf(plain);
  EXPECT_EQ(Value(plain, "SHOW enable_seqscan"), "on");
  // The database's timezone is its servers' default, and what a client that sets none is told.
  EXPECT_EQ(Value(plain, "SHOW timezone"), "Asia/Tokyo");
  EXPECT_STREQ(PQparameterStatus(plain.get(), "TimeZone"), "Asia/Tokyo");
  const std::string first = Value(plain, "SELECT pg_backend_pid()");
  EXPECT_TRUE(
      WaitFor([&] { return Value(plain, "SELECT pg_backend_pid()") != first; }, seconds(10)))
      << "short's servers live 1 s";
}

// PgBouncer's console rule: the user pgbouncer, over the unix socket from the pooler's own OS
// user, is the console's admin without a password; over TCP it is an ordinary name. SET verbose
// is PgBouncer's way to turn on debug logs.
TEST_F(PgBouncerKnobsTest, PgbouncerOverTheUnixSocketIsTheConsolesAdmin) {
  char tmpl[] = "/tmp/pgfleet-adm-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string md5 =
      pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'");
  PgfleetProcess fleet(absl::StrCat("[databases]\nappdb = host=127.0.0.1 port=", pg().port(),
                                    " dbname=postgres\n[pgbouncer]\nauth_type = md5\n"
                                    "[pgfleet]\nlisten.unix_socket_dir = ",
                                    dir, "\n"),
                       absl::StrCat("\"md5user\" \"", md5, "\"\n"));
  auto local = Connect(absl::StrCat("host=", dir, " port=", fleet.port(),
                                    " user=pgbouncer dbname=pgbouncer connect_timeout=10"));
  ASSERT_TRUE(Ok(local)) << ErrorOf(local) << fleet.Log();
  EXPECT_TRUE(ResultOk(Exec(local, "SET verbose = 2"))) << ErrorOf(local);
  bool debug = false;
  for (const Row& row : RowsOf(Exec(local, "SHOW CONFIG"))) {
    if (row.at("key") == "log_level") debug = row.at("value") == "debug";
  }
  EXPECT_TRUE(debug);
  EXPECT_TRUE(ResultOk(Exec(local, "RELOAD"))) << ErrorOf(local);
  auto tcp = Connect(fleet.ConnString("pgbouncer", "pgbouncer"));
  EXPECT_FALSE(Ok(tcp));
  RunCommand("rm -rf " + dir);
}

// SHOW STATS counts transactions in session pooling too, as PgBouncer does: each autocommit
// statement and each BEGIN ... COMMIT is one (before, only a server's release counted one).
TEST_F(PgBouncerKnobsTest, SessionPoolingCountsEachTransactionInShowStats) {
  PgfleetProcess fleet(Ini("pool_mode = session\n"));
  auto c = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Value(c, "SELECT 1"), "1");
  for (int t = 0; t < 2; ++t) {
    ASSERT_TRUE(ResultOk(Exec(c, "BEGIN")));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(Value(c, "SELECT 1"), "1");
    ASSERT_TRUE(ResultOk(Exec(c, "COMMIT")));
  }
  auto console = Connect(fleet.ConnString("postgres", "pgbouncer"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  std::string xacts;
  EXPECT_TRUE(WaitFor([&] {
    for (const Row& row : RowsOf(Exec(console, "SHOW STATS"))) {
      if (row.at("database") == "otherdb") xacts = row.at("total_xact_count");
    }
    return xacts == "6";
  })) << "total_xact_count "
      << xacts;
}

// log_stats: each worker logs its rates every stats_period.
TEST_F(PgBouncerKnobsTest, LogStatsWritesTheRatesEveryStatsPeriod) {
  PgfleetProcess fleet(Ini("log_stats = 1\nstats_period = 1\n"));
  auto c = Connect(fleet.ConnString("postgres", "otherdb"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  EXPECT_TRUE(WaitFor(
      [&] {
        Exec(c, "SELECT 1");
        return fleet.Log().find("event=stats xacts_per_s=") != std::string::npos;
      },
      seconds(10)))
      << fleet.Log();
  EXPECT_THAT(fleet.Log(), MatchesRegex("(.|\n)*event=stats xacts_per_s=[1-9](.|\n)*"));
}

}  // namespace pgbouncer_knobs_test
}  // namespace pgfleet::testing
