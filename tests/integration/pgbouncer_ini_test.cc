// An existing pgbouncer.ini runs as PgBouncer would run it (issue 35, item 1): its defaults
// (session pooling, md5, max_client_conn 100), its [databases] and [users] connection strings,
// and keys whose meaning differs from pgfleet's YAML (server_lifetime = 0 uses a server once).
#include <signal.h>
#include <stdlib.h>

#include <string>

#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class PgBouncerIniTest : public IntegrationTest {
 protected:
  std::string Userlist() {
    const std::string md5 =
        pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'");
    return absl::StrCat("\"md5user\" \"", md5, "\"\n\"postgres\" \"pgpass\"\n");
  }
  std::string Ini(const std::string& extra = "") {
    return absl::StrCat(
        "; as a PgBouncer user has it\n[databases]\nappdb = host=127.0.0.1 port=", pg().port(),
        " dbname=postgres\n\n[users]\nmd5user = pool_mode=transaction\n\n"
        "[pgbouncer]\nadmin_users = postgres\ndefault_pool_size = 2\nquery_wait_timeout = 10\n",
        extra, "\n[pgfleet]\nworkers = 1\n");
  }
  // The row of SHOW POOLS for `user`, as "column=value" pairs joined by spaces.
  static std::string PoolRow(const ConnPtr& console, const std::string& user) {
    auto result = Exec(console, "SHOW POOLS");
    std::string row;
    for (int r = 0; r < PQntuples(result.get()); ++r) {
      if (std::string(PQgetvalue(result.get(), r, PQfnumber(result.get(), "user"))) != user) {
        continue;
      }
      for (int c = 0; c < PQnfields(result.get()); ++c) {
        absl::StrAppend(&row, PQfname(result.get(), c), "=", PQgetvalue(result.get(), r, c), " ");
      }
    }
    return row;
  }
};

TEST_F(PgBouncerIniTest, AnExistingPgbouncerIniServesWithPgBouncersMeaning) {
  PgfleetProcess fleet(Ini(), Userlist());
  // auth_type is md5 unless the file says otherwise, against the userlist.
  auto app = Connect(fleet.ConnString("md5user", "appdb", "password=md5pass"));
  ASSERT_TRUE(Ok(app)) << ErrorOf(app) << fleet.Log();
  EXPECT_EQ(Value(app, "SELECT current_user"), "md5user");
  auto wrong = Connect(fleet.ConnString("md5user", "appdb", "password=nope"));
  EXPECT_FALSE(Ok(wrong));
  EXPECT_THAT(ErrorOf(wrong), HasSubstr("password authentication failed"));
  auto session = Connect(fleet.ConnString("postgres", "appdb", "password=pgpass"));
  ASSERT_TRUE(Ok(session)) << ErrorOf(session);
  EXPECT_EQ(Value(session, "SELECT 1"), "1");

  // The console as `pgbouncer`: session pooling (PgBouncer's default) for postgres, the [users]
  // entry's transaction pooling for md5user, and max_client_conn at PgBouncer's 100.
  auto console = Connect(fleet.ConnString("postgres", "pgbouncer", "password=pgpass"));
  ASSERT_TRUE(Ok(console)) << ErrorOf(console);
  EXPECT_THAT(PoolRow(console, "postgres"), HasSubstr("pool_mode=session"));
  EXPECT_THAT(PoolRow(console, "md5user"), HasSubstr("pool_mode=transaction"));
  auto config = Exec(console, "SHOW CONFIG");
  bool found = false;
  for (int r = 0; r < PQntuples(config.get()); ++r) {
    if (std::string(PQgetvalue(config.get(), r, 0)) == "max_client_conn") {
      EXPECT_STREQ(PQgetvalue(config.get(), r, 1), "100");
      found = true;
    }
  }
  EXPECT_TRUE(found);

  // --print-config shows the YAML it runs.
  const std::string printed = RunCommandOutput(
      absl::StrCat(PgfleetBinary(), " --config ", fleet.config_path(), " --print-config"));
  EXPECT_THAT(printed, HasSubstr("pool_mode: session"));
  EXPECT_THAT(printed, HasSubstr("appdb:"));
}

// server_lifetime = 0 is PgBouncer's "use each server once": the next client gets a new backend
// (pgfleet's YAML 0 would keep the first).
TEST_F(PgBouncerIniTest, ServerLifetimeZeroUsesEachServerOnce) {
  PgfleetProcess fleet(Ini("server_lifetime = 0\n"), Userlist());
  std::string previous;
  for (int i = 0; i < 3; ++i) {
    auto c = Connect(fleet.ConnString("postgres", "appdb", "password=pgpass"));
    ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
    const std::string pid = Value(c, "SELECT pg_backend_pid()");
    EXPECT_NE(pid, previous) << "client " << i;
    previous = pid;
  }
}

// The YAML key's 0 keeps the server: the test above would pass for any other reason.
TEST_F(PgBouncerIniTest, WithoutServerLifetimeTheServerIsReused) {
  PgfleetProcess fleet(Ini(), Userlist());
  std::string first;
  for (int i = 0; i < 3; ++i) {
    auto c = Connect(fleet.ConnString("postgres", "appdb", "password=pgpass"));
    ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
    const std::string pid = Value(c, "SELECT pg_backend_pid()");
    if (i == 0) first = pid;
    EXPECT_EQ(pid, first) << "client " << i;
  }
}

// A key pgfleet does not implement stops the start with the key and file named.
TEST_F(PgBouncerIniTest, AnUnimplementedKeyIsRefusedNamingKeyAndFile) {
  PgfleetProcess fleet(Ini("dns_zone_check_period = 60\n"), Userlist());
  EXPECT_TRUE(WaitFor([&] { return !fleet.Running(); }, std::chrono::seconds(10),
                      std::chrono::milliseconds(50)));
  EXPECT_THAT(fleet.Log(),
              HasSubstr("pgbouncer.ini: dns_zone_check_period: not supported by pgfleet "
                        "with \\\"60\\\""));
}

// logfile and pidfile as PgBouncer writes them: the pid of the process started, every process's
// lines in the file (besides stderr), a new file after a rotation and SIGHUP, no pidfile after.
TEST_F(PgBouncerIniTest, LogfileAndPidfileAsPgBouncerWritesThem) {
  char tmpl[] = "/tmp/pgfleet-logfile-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string log = dir + "/pgbouncer.log";
  const std::string pid = dir + "/pgbouncer.pid";
  PgfleetProcess fleet(Ini(absl::StrCat("logfile = ", log, "\npidfile = ", pid, "\n")), Userlist());
  auto c = Connect(fleet.ConnString("postgres", "appdb", "password=pgpass"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  EXPECT_EQ(RunCommandOutput("cat " + pid), absl::StrCat(fleet.pid(), "\n"));
  EXPECT_TRUE(WaitFor(
      [&] { return CountInLog(RunCommandOutput("cat " + log), "event=worker_ready") > 0; }));
  ASSERT_EQ(RunCommand(absl::StrCat("mv ", log, " ", log, ".1")), 0);
  fleet.Signal(SIGHUP);
  EXPECT_TRUE(WaitFor([&] {
    return CountInLog(RunCommandOutput("cat " + log + " 2>/dev/null"), "event=reloaded") > 0;
  })) << fleet.Log();
  EXPECT_EQ(fleet.Stop(), 0);
  EXPECT_NE(RunCommand("test -e " + pid), 0);
  RunCommand("rm -rf " + dir);
}

// tcp_keepidle, tcp_keepintvl, tcp_keepcnt and tcp_user_timeout reach the client sockets: the
// kernel's keepalive timer of an accepted connection runs from 7 s, not the system's 2 hours.
TEST_F(PgBouncerIniTest, ClientTcpKeepaliveKnobsReachTheClientSockets) {
  PgfleetProcess fleet(
      Ini("tcp_keepidle = 7\ntcp_keepintvl = 3\ntcp_keepcnt = 2\ntcp_user_timeout = 9000\n"),
      Userlist());
  auto c = Connect(fleet.ConnString("postgres", "appdb", "password=pgpass"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  // The keepalive timer shows once nothing sent waits for its ACK (the retransmit timer first).
  std::string sockets;
  WaitFor([&] {
    sockets = RunCommandOutput(
        absl::StrCat("ss -tnoH state established '( sport = :", fleet.port(), " )'"));
    return sockets.find("timer:(keepalive,") != std::string::npos;
  });
  const size_t at = sockets.find("timer:(keepalive,");
  ASSERT_NE(at, std::string::npos) << sockets;
  const std::string timer = sockets.substr(at + 17, sockets.find(')', at) - at - 17);
  // Seconds left before the first probe ("6.820ms,0" or "6.8sec,0" by ss's version); the
  // system's 2 hours would read "119min".
  EXPECT_THAT(timer, Not(HasSubstr("min"))) << timer;
  double left = 0;
  const size_t number_end = timer.find_first_not_of("0123456789.");
  ASSERT_TRUE(absl::SimpleAtod(timer.substr(0, number_end), &left)) << timer;
  EXPECT_LE(left, 7.0);
}

}  // namespace
}  // namespace pgfleet::testing
