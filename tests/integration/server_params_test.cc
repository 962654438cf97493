// Parameters that stay true (issue 16): what clients are told at login follows the server behind
// pgfleet (another major on the same address, a SIGHUP after the server's settings changed), and
// search_path, tracked by default, follows each client exactly on PostgreSQL 18.
#include <csignal>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::StartsWith;

// The repository root, from this file's path (CMake compiles it by absolute path).
std::string RepoRoot() {
  std::string file = __FILE__;
  return file.substr(0, file.rfind("/tests/integration/"));
}

// The bin directory of PostgreSQL `major` from scripts/install-test-servers.sh (16-18); empty,
// with a test failure saying how to get it, when it is not installed.
std::string MatrixBindir(int major) {
  const std::string out =
      RunCommandOutput(absl::StrCat(RepoRoot(), "/scripts/install-test-servers.sh --print"));
  const std::string key = absl::StrCat("PG", major, "_BINDIR=");
  const size_t at = out.find(key);
  std::string dir;
  if (at != std::string::npos) {
    dir = out.substr(at + key.size(), out.find('\n', at) - at - key.size());
  }
  if (dir.empty() || RunCommand(absl::StrCat("test -x ", dir, "/postgres")) != 0) {
    ADD_FAILURE() << "no PostgreSQL " << major << " at '" << dir
                  << "': run scripts/install-test-servers.sh";
    return "";
  }
  return dir;
}

std::string EntryConfig(int port, const std::string& pool_extra = "") {
  return absl::StrCat("workers: 1\ndatabases:\n  app: {host: 127.0.0.1, port: ", port,
                      ", dbname: postgres}\npool:\n  pool_mode: transaction\n",
                      "  default_pool_size: 2\n  query_wait_timeout: 30s\n", pool_extra);
}

std::string Reported(const ConnPtr& c, const char* name) {
  const char* value = PQparameterStatus(c.get(), name);
  return value == nullptr ? "(not reported)" : value;
}

class ServerParamsTest : public IntegrationTest {};

// PostgreSQL 17 is replaced by 18 on the same address: the next client is told 18's values.
// client_encoding as the client spelled it at startup is reported as PostgreSQL reports it: the
// encoding's canonical name.
TEST_F(ServerParamsTest, ClientEncodingIsReportedInPostgresSpelling) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  for (const std::string spelling : {"utf8", "UTF-8", "unicode"}) {
    auto direct = Connect(absl::StrCat(pg().ConnString(), " client_encoding=", spelling));
    ASSERT_TRUE(Ok(direct)) << ErrorOf(direct);
    auto c = Connect(
        fleet.ConnString("postgres", "postgres", absl::StrCat("client_encoding=", spelling)));
    ASSERT_TRUE(Ok(c)) << ErrorOf(c);
    ASSERT_STREQ(PQparameterStatus(direct.get(), "client_encoding"), "UTF8");
    EXPECT_STREQ(PQparameterStatus(c.get(), "client_encoding"), "UTF8") << spelling;
    EXPECT_EQ(Value(c, "SHOW client_encoding"), "UTF8");
    EXPECT_STREQ(PQparameterStatus(c.get(), "client_encoding"), "UTF8") << spelling;
  }
  // Another encoding, by an alias: what the client gets is that encoding's name.
  auto latin = Connect(fleet.ConnString("postgres", "postgres", "client_encoding=latin1"));
  ASSERT_TRUE(Ok(latin)) << ErrorOf(latin);
  EXPECT_STREQ(PQparameterStatus(latin.get(), "client_encoding"), "LATIN1");
  EXPECT_EQ(Value(latin, "SHOW client_encoding"), "LATIN1");
}

// Every server login asks PostgreSQL to watch pgfleet's end (issue 34): a backend of a killed
// worker stops within the check interval, and one of a vanished node within its keepalive. A
// client's RESET ALL keeps them: they are the session's startup values.
TEST_F(ServerParamsTest, EveryServerLoginAsksPostgresToWatchTheConnection) {
  PgfleetProcess fleet(PoolConfig("transaction", 1,
                                  "  server_connection_check_interval: 700ms\n"
                                  "  server_tcp_keepalive_idle: 7s\n"
                                  "  server_tcp_keepalive_interval: 2s\n"
                                  "  server_tcp_keepalive_count: 4\n"
                                  "  server_tcp_user_timeout: 9s\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  EXPECT_EQ(Value(c, "SHOW client_connection_check_interval"), "700ms");
  // The socket's own values (PostgreSQL's show hooks read them back), without a unit.
  EXPECT_EQ(Value(c, "SHOW tcp_keepalives_idle"), "7");
  EXPECT_EQ(Value(c, "SHOW tcp_keepalives_interval"), "2");
  EXPECT_EQ(Value(c, "SHOW tcp_keepalives_count"), "4");
  EXPECT_EQ(Value(c, "SHOW tcp_user_timeout"), "9000");
  ASSERT_TRUE(ResultOk(Exec(c, "RESET ALL")));
  EXPECT_EQ(Value(c, "SHOW tcp_keepalives_idle"), "7");
  EXPECT_EQ(Value(c, "SHOW tcp_user_timeout"), "9000");
}

TEST_F(ServerParamsTest, StartupValuesFollowAnotherMajorOnTheSameAddress) {
  const std::string bin17 = MatrixBindir(17);
  const std::string bin18 = MatrixBindir(18);
  ASSERT_FALSE(bin17.empty() || bin18.empty());
  auto pg17 = std::make_unique<PgServer>(PgServerOptions{.bindir = bin17});
  pg17->Start();
  const int port = pg17->port();
  PgfleetProcess fleet(EntryConfig(port));
  {
    auto c = Connect(fleet.ConnString("postgres", "app"));
    ASSERT_TRUE(Ok(c)) << ErrorOf(c);
    EXPECT_THAT(Reported(c, "server_version"), StartsWith("17."));
    EXPECT_THAT(Value(c, "SHOW server_version"), StartsWith("17."));
  }
  pg17.reset();  // stopped, its directory removed
  PgServer pg18(PgServerOptions{.bindir = bin18, .port = port});
  pg18.Start();
  // pgfleet's idle server saw its PostgreSQL go; whatever it still holds, a new client is told
  // the values of the server it will use.
  auto c = Connect(fleet.ConnString("postgres", "app"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  const std::string told = Reported(c, "server_version");
  std::string runs;
  ASSERT_TRUE(WaitFor([&] {
    ResultPtr r = Exec(c, "SHOW server_version");
    if (!ResultOk(r)) {
      c = Connect(fleet.ConnString("postgres", "app"));  // its server was the old one's
      return false;
    }
    runs = PQgetvalue(r.get(), 0, 0);
    return true;
  })) << fleet.Log();
  EXPECT_THAT(runs, StartsWith("18."));
  EXPECT_THAT(Reported(c, "server_version"), StartsWith("18.")) << "first told " << told;
  // And so is the next client.
  auto next = Connect(fleet.ConnString("postgres", "app"));
  ASSERT_TRUE(Ok(next)) << ErrorOf(next);
  EXPECT_THAT(Reported(next, "server_version"), StartsWith("18."));
}

// A SIGHUP refreshes what new clients are told from a new login, without closing servers.
TEST_F(ServerParamsTest, SighupRefreshesStartupValues) {
  PgServer pg(PgServerOptions{});
  pg.Start();
  PgfleetProcess fleet(EntryConfig(pg.port()));
  auto first = Connect(fleet.ConnString("postgres", "app"));
  ASSERT_TRUE(Ok(first)) << ErrorOf(first);
  EXPECT_EQ(Reported(first, "default_transaction_read_only"), "off");
  const std::string pid = Value(first, "SELECT pg_backend_pid()::text");
  // The server's setting changes behind pgfleet's idle server.
  pg.Exec("ALTER SYSTEM SET default_transaction_read_only = on");
  pg.Exec("SELECT pg_reload_conf()");
  fleet.Signal(SIGHUP);
  EXPECT_TRUE(WaitFor([&] {
    auto c = Connect(fleet.ConnString("postgres", "app"));
    return Ok(c) && Reported(c, "default_transaction_read_only") == "on";
  })) << fleet.Log();
  // Nothing was closed for it: the first client's server is still there.
  EXPECT_EQ(pg.QueryValue("SELECT count(*)::text FROM pg_stat_activity WHERE pid = " + pid), "1");
}

// search_path (reported from PostgreSQL 18, tracked by default) with commas, quotes and $user in
// it follows its client to another server exactly, and never leaks to another client.
TEST_F(ServerParamsTest, SearchPathWithCommasQuotesAndUserSurvivesAServerSwitchOn18) {
  const std::string bin18 = MatrixBindir(18);
  ASSERT_FALSE(bin18.empty());
  PgServer pg(PgServerOptions{.bindir = bin18});
  pg.Start();
  pg.Exec(
      "CREATE SCHEMA \"my,schema\"; CREATE SCHEMA \"quo'te\"; "
      "CREATE TABLE \"my,schema\".t (x int); INSERT INTO \"my,schema\".t VALUES (42)");
  PgfleetProcess fleet(EntryConfig(pg.port()));  // no track_extra_parameters: the defaults
  auto a = Connect(fleet.ConnString("postgres", "app"));
  auto b = Connect(fleet.ConnString("postgres", "app"));
  ASSERT_TRUE(Ok(a) && Ok(b)) << ErrorOf(a) << ErrorOf(b);
  const std::string default_path = Value(b, "SHOW search_path");
  EXPECT_EQ(default_path, "\"$user\", public");
  ASSERT_TRUE(ResultOk(Exec(a, "SET search_path TO \"my,schema\", \"$user\", \"quo'te\", public")));
  const std::string wanted = Value(a, "SHOW search_path");
  EXPECT_EQ(wanted, "\"my,schema\", \"$user\", \"quo'te\", public");
  EXPECT_EQ(Reported(a, "search_path"), wanted);
  const std::string set_on = Value(a, "SELECT pg_backend_pid()::text");
  // b holds a server in a transaction: whichever it got, a runs on the other one next.
  ASSERT_TRUE(ResultOk(Exec(b, "BEGIN")));
  const std::string b_pid = Value(b, "SELECT pg_backend_pid()::text");
  EXPECT_EQ(Value(b, "SHOW search_path"), default_path) << "a's search_path leaked to b";
  const std::string a_pid = Value(a, "SELECT pg_backend_pid()::text");
  ASSERT_NE(a_pid, b_pid);
  EXPECT_EQ(Value(a, "SHOW search_path"), wanted);
  EXPECT_EQ(Value(a, "SELECT x::text FROM t"), "42") << "the unqualified table resolves";
  ASSERT_TRUE(ResultOk(Exec(b, "COMMIT")));
  if (b_pid == set_on) {
    // b had a's first server: a moved, and b's set_config took a's path back off it.
    EXPECT_NE(a_pid, set_on);
  }
  // RESET follows the client too.
  ASSERT_TRUE(ResultOk(Exec(a, "RESET search_path")));
  EXPECT_EQ(Value(a, "SHOW search_path"), default_path);
}

}  // namespace
}  // namespace pgfleet::testing
