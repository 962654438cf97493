// Test PostgreSQL server management.
#include "tests/integration/harness/pg_server.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/integration/harness/sanitizer_report.h"
#include "tests/integration/harness/wait.h"

namespace pgfleet::testing {
namespace {

// PG_BINDIR: a directory holding initdb, pg_ctl and postgres (such as a major of the server
// matrix from scripts/install-test-servers.sh, whose binaries find their lib/ and share/ next to
// bin/ by themselves); by default Debian's newest /usr/lib/postgresql/<major>/bin.
std::string FindBindir() {
  if (const char* env = std::getenv("PG_BINDIR"); env != nullptr && *env != '\0') {
    for (const char* tool : {"initdb", "pg_ctl", "postgres"}) {
      if (access(absl::StrCat(env, "/", tool).c_str(), X_OK) != 0) {
        std::fprintf(stderr, "test harness: PG_BINDIR=%s has no executable %s\n", env, tool);
        std::abort();
      }
    }
    return env;
  }
  for (int version : {18, 17, 16, 15}) {
    std::string dir = absl::StrCat("/usr/lib/postgresql/", version, "/bin");
    if (access((dir + "/postgres").c_str(), X_OK) == 0) return dir;
  }
  std::fprintf(stderr, "no PostgreSQL server binaries found (set PG_BINDIR)\n");
  std::abort();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void Die(const std::string& what) {
  std::fprintf(stderr, "test harness: %s\n", what.c_str());
  std::abort();
}

}  // namespace

int RunCommand(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string RunCommandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  pclose(pipe);
  // Such as `pgfleet --check-config ... 2>&1`: a report after the output a test looks for would
  // not fail it otherwise.
  if (const std::string report = SanitizerReport(out); !report.empty()) {
    ADD_FAILURE() << "sanitizer report in the output of: " << command << "\n" << report;
  }
  return out;
}

int FreePort() {
  // The kernel may give a port it handed out a moment ago (and that was closed since) to the
  // next bind to port 0. Two ports of one test must differ: pgfleet binds its client port and
  // gRPC its peering port with SO_REUSEPORT, so the same number twice would split connections
  // between the two listeners instead of failing.
  static absl::Mutex mu(absl::kConstInit);
  static auto* const handed_out = new absl::flat_hash_set<int>();
  absl::MutexLock lock(&mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    const int port = ntohs(addr.sin_port);
    if (handed_out->insert(port).second) return port;
  }
  ADD_FAILURE() << "FreePort: no port that this test process has not used yet";
  return 0;
}

PgServer& PgServer::Shared() {
  static PgServer* server = new PgServer();
  return *server;
}

PgServer::PgServer() : bindir_(FindBindir()), port_(FreePort()), shared_(true) {
  Init();
  Start();
  // Which server this run tests (the server matrix of scripts/test.sh runs the binary once per
  // major); PG_EXPECT_MAJOR, when set, must be its major.
  const std::string version = QueryValue("SELECT version()");
  const int major = std::stoi(QueryValue("SHOW server_version_num")) / 10000;
  std::fprintf(stderr, "test harness: %s (from %s)\n", version.c_str(), bindir_.c_str());
  if (const char* want = std::getenv("PG_EXPECT_MAJOR"); want != nullptr && *want != '\0') {
    if (std::to_string(major) != want) {
      Stop();  // Die() aborts: no atexit handler would stop it
      RunCommand(absl::StrCat("rm -rf '", dir_, "'"));
      Die(absl::StrCat("PG_EXPECT_MAJOR=", want, " but the server is ", version));
    }
  }
  std::atexit([] {
    PgServer& server = PgServer::Shared();
    server.Stop();
    // Leave nothing behind in /tmp: data directories add up over many runs.
    RunCommand(absl::StrCat("rm -rf '", server.socket_dir(), "'"));
  });
}

PgServer::PgServer(int port) : bindir_(FindBindir()), port_(port) { Init(); }

PgServer::PgServer(const PgServerOptions& options)
    : bindir_(options.bindir.empty() ? FindBindir() : options.bindir),
      port_(options.port != 0 ? options.port : FreePort()) {
  Init();
}

std::unique_ptr<PgServer> PgServer::StandbyOf(const PgServer& primary,
                                              const PgServerOptions& options) {
  // The private constructor runs no initdb: the base backup is the data directory.
  std::unique_ptr<PgServer> standby(new PgServer(primary.bindir_, options));
  standby->BaseBackupFrom(primary);
  standby->Start();
  standby->WaitForRecovery(true);
  return standby;
}

PgServer::PgServer(const std::string& default_bindir, const PgServerOptions& options)
    : bindir_(options.bindir.empty() ? default_bindir : options.bindir),
      port_(options.port != 0 ? options.port : FreePort()) {
  char tmpl[] = "/tmp/pgfleet-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  dir_ = tmpl;
  if (geteuid() == 0) RunCommand(absl::StrCat("chown postgres: ", dir_));
}

void PgServer::BaseBackupFrom(const PgServer& primary) {
  RunAsOwner(absl::StrCat("rm -rf ", dir_, "/data"));
  // -R writes standby.signal and primary_conninfo; -X stream brings the WAL the copy needs.
  RunAsOwner(absl::StrCat(bindir_, "/pg_basebackup -h 127.0.0.1 -p ", primary.port_,
                          " -U postgres -D ", dir_, "/data -R -X stream --no-sync >", dir_,
                          "/basebackup.log 2>&1"));
  // The copied postgresql.conf names the primary's port and socket directory: later lines win.
  WriteFile(absl::StrCat(dir_, "/data/postgresql.conf"),
            absl::StrCat(ReadFile(absl::StrCat(dir_, "/data/postgresql.conf")), "\nport = ", port_,
                         "\nunix_socket_directories = '", dir_, "'\nhot_standby = on\n"));
}

void PgServer::RebuildAsStandbyOf(const PgServer& new_primary) {
  Stop();
  BaseBackupFrom(new_primary);
  Start();
  WaitForRecovery(true);
}

void PgServer::Promote() {
  RunAsOwner(absl::StrCat(bindir_, "/pg_ctl -D ", dir_, "/data -w -t 60 promote >/dev/null"));
  WaitForRecovery(false);
}

bool PgServer::InRecovery() const { return TryQueryValue("SELECT pg_is_in_recovery()") == "t"; }

void PgServer::WaitForRecovery(bool in_recovery) const {
  const std::string want = in_recovery ? "t" : "f";
  if (!WaitFor([&] { return TryQueryValue("SELECT pg_is_in_recovery()") == want; },
               std::chrono::seconds(60), std::chrono::milliseconds(50))) {
    Die(absl::StrCat("PostgreSQL on port ", port_, " did not ", in_recovery ? "enter" : "leave",
                     " recovery in 60 s:\n", ReadFile(absl::StrCat(dir_, "/postgres.log"))));
  }
}

std::optional<std::string> PgServer::TryQueryValue(const std::string& sql) const {
  // Named, so that counts of server connections leave out the backends of earlier probes, which
  // PostgreSQL may still list for a moment after they disconnected.
  PGconn* conn =
      PQconnectdb(absl::StrCat(ConnString(), " application_name=", kProbeApplicationName).c_str());
  std::optional<std::string> value;
  if (PQstatus(conn) == CONNECTION_OK) {
    PGresult* res = PQexec(conn, sql.c_str());
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0) value = PQgetvalue(res, 0, 0);
    PQclear(res);
  }
  PQfinish(conn);
  return value;
}

void PgServer::Init() {
  char tmpl[] = "/tmp/pgfleet-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  dir_ = tmpl;
  if (geteuid() == 0) RunCommand(absl::StrCat("chown postgres: ", dir_));
  RunAsOwner(absl::StrCat(bindir_, "/initdb -D ", dir_, "/data -U postgres --auth=trust",
                          " --no-sync >", dir_, "/initdb.log 2>&1"));
  WriteFile(absl::StrCat(dir_, "/data/postgresql.conf"),
            absl::StrCat(ReadFile(absl::StrCat(dir_, "/data/postgresql.conf")),
                         "\nlisten_addresses = '127.0.0.1'\nport = ", port_,
                         "\nunix_socket_directories = '", dir_,
                         "'\nmax_connections = 300\nfsync = off\nsynchronous_commit = off\n",
                         "full_page_writes = off\n"));
  // Local connections trust, except the test users who must present passwords over TCP.
  WriteFile(absl::StrCat(dir_, "/data/pg_hba.conf"),
            "host all md5user 127.0.0.1/32 md5\n"
            "host all scramuser 127.0.0.1/32 scram-sha-256\n"
            "host all authuser 127.0.0.1/32 scram-sha-256\n"
            "host all aqmd5 127.0.0.1/32 md5\n"
            "host all aqscram 127.0.0.1/32 scram-sha-256\n"
            "local all all trust\n"
            "host all all 127.0.0.1/32 trust\n"
            // Standbys of tests (PgServer::StandbyOf) stream from loopback.
            "local replication all trust\n"
            "host replication all 127.0.0.1/32 trust\n");
}

PgServer::~PgServer() {
  Stop();
  if (!shared_) RunCommand(absl::StrCat("rm -rf '", dir_, "'"));
}

void PgServer::RunAsOwner(const std::string& command) const {
  std::string wrapped = geteuid() == 0
                            ? absl::StrCat("runuser -u postgres -- sh -c \"",
                                           absl::StrReplaceAll(command, {{"\"", "\\\""}}), "\"")
                            : command;
  if (RunCommand(wrapped) != 0) Die(absl::StrCat("command failed: ", command));
}

void PgServer::EnableTls(const std::string& cert_file, const std::string& key_file) {
  if (tls_enabled_) return;
  const std::string data = absl::StrCat(dir_, "/data");
  // PostgreSQL wants its key owned by itself and unreadable by others.
  RunCommand(absl::StrCat("cp ", cert_file, " ", data, "/server.crt && cp ", key_file, " ", data,
                          "/server.key && chmod 600 ", data, "/server.key"));
  if (geteuid() == 0) RunCommand(absl::StrCat("chown postgres: ", data, "/server.*"));
  WriteFile(
      absl::StrCat(data, "/postgresql.conf"),
      absl::StrCat(ReadFile(absl::StrCat(data, "/postgresql.conf")),
                   "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"));
  WriteFile(absl::StrCat(data, "/pg_hba.conf"),
            absl::StrCat("hostssl all tlsonly 127.0.0.1/32 scram-sha-256\n"
                         "host all tlsonly 127.0.0.1/32 reject\n",
                         ReadFile(absl::StrCat(data, "/pg_hba.conf"))));
  RunAsOwner(absl::StrCat(bindir_, "/pg_ctl -D ", data, " reload >/dev/null"));
  // Reload is asynchronous: wait until a TLS connection works.
  WaitFor(
      [&] {
        return RunCommand(absl::StrCat("psql -X -At 'host=127.0.0.1 port=", port_,
                                       " user=postgres dbname=postgres sslmode=require' -c "
                                       "'SELECT 1' >/dev/null 2>&1")) == 0;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50));
  Exec(
      "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tlsonly') THEN "
      "CREATE ROLE tlsonly LOGIN PASSWORD 'tlspass'; END IF; END $$");
  tls_enabled_ = true;
}

void PgServer::Start() {
  RunAsOwner(absl::StrCat(bindir_, "/pg_ctl -D ", dir_, "/data -l ", dir_,
                          "/postgres.log -w -t 60 start >/dev/null"));
  running_ = true;
}

void PgServer::Stop() {
  if (!running_) return;
  RunAsOwner(absl::StrCat(bindir_, "/pg_ctl -D ", dir_, "/data -m fast -w -t 60 stop >/dev/null"));
  running_ = false;
}

void PgServer::Restart() {
  Stop();
  Start();
}

std::string PgServer::ConnString(const std::string& dbname) const {
  return absl::StrCat("host=127.0.0.1 port=", port_, " user=postgres dbname=", dbname,
                      " connect_timeout=10");
}

void PgServer::Exec(const std::string& sql, const std::string& dbname) const {
  PGconn* conn = PQconnectdb(ConnString(dbname).c_str());
  if (PQstatus(conn) != CONNECTION_OK) Die(absl::StrCat("connect: ", PQerrorMessage(conn)));
  PGresult* res = PQexec(conn, sql.c_str());
  auto status = PQresultStatus(res);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    Die(absl::StrCat("exec '", sql, "': ", PQerrorMessage(conn)));
  }
  PQclear(res);
  PQfinish(conn);
}

std::string PgServer::QueryValue(const std::string& sql, const std::string& dbname) const {
  // Named as a probe: a test that samples pg_stat_activity in a loop (ServerConnectionsFor) must
  // not count the backend of its own previous sample, which may still be exiting.
  PGconn* conn = PQconnectdb(
      absl::StrCat(ConnString(dbname), " application_name=", kProbeApplicationName).c_str());
  if (PQstatus(conn) != CONNECTION_OK) Die(absl::StrCat("connect: ", PQerrorMessage(conn)));
  PGresult* res = PQexec(conn, sql.c_str());
  std::string value;
  if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0) {
    value = PQgetvalue(res, 0, 0);
  } else {
    Die(absl::StrCat("query '", sql, "': ", PQerrorMessage(conn)));
  }
  PQclear(res);
  PQfinish(conn);
  return value;
}

}  // namespace pgfleet::testing
