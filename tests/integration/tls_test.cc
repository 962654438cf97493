// TLS toward clients (each sslmode from libpq, client certificates, channel binding, hostssl,
// certificate rotation on SIGHUP) and toward PostgreSQL (ssl=on, verify-full, SCRAM-PLUS).
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/test_certs.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() {
  char tmpl[] = "/tmp/pgfleet-tls-XXXXXX";
  return mkdtemp(tmpl);
}

class TlsTest : public IntegrationTest {
 protected:
  const TestCerts& certs() { return TestCerts::Get(); }

  // A `tls:` section facing clients with the test server certificate.
  std::string ClientTls(const std::string& mode, const std::string& extra = "") {
    return absl::StrCat("tls:\n  client_tls_sslmode: ", mode,
                        "\n  client_tls_cert_file: ", certs().server_cert,
                        "\n  client_tls_key_file: ", certs().server_key,
                        "\n  client_tls_ca_file: ", certs().ca_cert, "\n", extra);
  }

  // The subject of the certificate pgfleet presents (openssl speaks PostgreSQL's SSLRequest).
  std::string PresentedSubject(const PgfleetProcess& fleet) {
    return RunCommandOutput(absl::StrCat(
        "timeout 10 openssl s_client -starttls postgres -connect 127.0.0.1:", fleet.port(),
        " </dev/null 2>/dev/null | openssl x509 -noout -subject 2>/dev/null"));
  }
};

TEST_F(TlsTest, RequireAcceptsTlsAndRefusesPlainText) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("require")));
  auto tls = Connect(fleet.ConnString("postgres", "postgres", "sslmode=require"));
  ASSERT_TRUE(Ok(tls)) << ErrorOf(tls) << fleet.Log();
  EXPECT_EQ(PQsslInUse(tls.get()), 1);
  EXPECT_EQ(std::string(PQsslAttribute(tls.get(), "protocol")), "TLSv1.3");
  EXPECT_EQ(Value(tls, "SELECT 'over tls'"), "over tls");

  auto plain = Connect(fleet.ConnString("postgres", "postgres", "sslmode=disable"));
  EXPECT_FALSE(Ok(plain));
  EXPECT_THAT(ErrorOf(plain), HasSubstr("SSL required"));
  // The refusal is a FATAL only for that client: the TLS session keeps working.
  EXPECT_EQ(Value(tls, "SELECT 2"), "2");
}

TEST_F(TlsTest, VerifyFullAgainstTheTestCa) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("prefer")));
  auto good = Connect(fleet.ConnString(
      "postgres", "postgres", absl::StrCat("sslmode=verify-full sslrootcert=", certs().ca_cert)));
  ASSERT_TRUE(Ok(good)) << ErrorOf(good) << fleet.Log();
  EXPECT_EQ(PQsslInUse(good.get()), 1);
  // A client trusting another CA does not accept pgfleet's certificate.
  auto wrong_ca = Connect(
      fleet.ConnString("postgres", "postgres",
                       absl::StrCat("sslmode=verify-full sslrootcert=", certs().rogue_ca_cert)));
  EXPECT_FALSE(Ok(wrong_ca));
  EXPECT_THAT(ErrorOf(wrong_ca), HasSubstr("certificate verify failed"));
  // prefer still serves plain-text clients.
  auto plain = Connect(fleet.ConnString("postgres", "postgres", "sslmode=disable"));
  ASSERT_TRUE(Ok(plain)) << ErrorOf(plain);
  EXPECT_EQ(PQsslInUse(plain.get()), 0);
}

TEST_F(TlsTest, VerifyCaDemandsAClientCertificateFromTheCa) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("verify-ca")));
  auto good = Connect(fleet.ConnString("postgres", "postgres",
                                       absl::StrCat("sslmode=require sslcert=", certs().client_cert,
                                                    " sslkey=", certs().client_key)));
  ASSERT_TRUE(Ok(good)) << ErrorOf(good) << fleet.Log();
  EXPECT_EQ(Value(good, "SELECT 1"), "1");

  auto rogue =
      Connect(fleet.ConnString("postgres", "postgres",
                               absl::StrCat("sslmode=require sslcert=", certs().rogue_client_cert,
                                            " sslkey=", certs().rogue_client_key)));
  EXPECT_FALSE(Ok(rogue));
  EXPECT_THAT(ErrorOf(rogue), HasSubstr("SSL"));
  auto none = Connect(fleet.ConnString("postgres", "postgres",
                                       "sslmode=require sslcert=/nonexistent sslkey=/nonexistent"));
  EXPECT_FALSE(Ok(none));
  EXPECT_THAT(fleet.Log(), HasSubstr("event=client_tls_handshake_failed"));
  EXPECT_EQ(Value(good, "SELECT 2"), "2");
}

TEST_F(TlsTest, ScramOverTlsOffersChannelBinding) {
  const std::string scram =
      pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='scramuser'");
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("require"),
                                    "auth:\n  type: scram-sha-256\n  file: userlist.txt\n"),
                       absl::StrCat("\"scramuser\" \"", scram, "\"\n"));
  // channel_binding=require makes libpq insist on SCRAM-SHA-256-PLUS and check the binding.
  auto bound = Connect(fleet.ConnString(
      "scramuser", "postgres", "sslmode=require channel_binding=require password=scrampass"));
  ASSERT_TRUE(Ok(bound)) << ErrorOf(bound) << fleet.Log();
  EXPECT_EQ(Value(bound, "SELECT current_user"), "scramuser");
  auto wrong = Connect(fleet.ConnString("scramuser", "postgres",
                                        "sslmode=require channel_binding=require password=nope"));
  EXPECT_FALSE(Ok(wrong));
  EXPECT_THAT(ErrorOf(wrong), HasSubstr("password authentication failed"));
  EXPECT_THAT(fleet.Log(), Not(HasSubstr("scrampass")));
}

TEST_F(TlsTest, HostsslRulesSeeTheClientsTls) {
  const std::string dir = TempDir();
  std::ofstream(dir + "/pg_hba.conf") << "hostssl all all 127.0.0.1/32 trust\n"
                                         "hostnossl all all 127.0.0.1/32 reject\n";
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("prefer"),
                                    "auth:\n  type: trust\n  hba_file: ", dir, "/pg_hba.conf\n"));
  auto tls = Connect(fleet.ConnString("postgres", "postgres", "sslmode=require"));
  EXPECT_TRUE(Ok(tls)) << ErrorOf(tls) << fleet.Log();
  auto plain = Connect(fleet.ConnString("postgres", "postgres", "sslmode=disable"));
  EXPECT_FALSE(Ok(plain));
  EXPECT_THAT(ErrorOf(plain), HasSubstr("no encryption"));
  RunCommand("rm -rf " + dir);
}

TEST_F(TlsTest, SighupRotatesTheCertificate) {
  const std::string dir = TempDir();
  const std::string cert = dir + "/rotating.crt";
  const std::string key = dir + "/rotating.key";
  certs().IssueServerCert("first-cert", cert, key);
  const std::string tls =
      absl::StrCat("tls:\n  client_tls_sslmode: prefer\n  client_tls_cert_file: ", cert,
                   "\n  client_tls_key_file: ", key, "\n");
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), tls));
  EXPECT_THAT(PresentedSubject(fleet), HasSubstr("CN = first-cert"));
  auto before = Connect(fleet.ConnString("postgres", "postgres", "sslmode=require"));
  ASSERT_TRUE(Ok(before)) << ErrorOf(before);

  certs().IssueServerCert("second-cert", cert, key);
  fleet.Signal(SIGHUP);
  const std::string subject =
      WaitFor([&] { return PresentedSubject(fleet); },
              [](const std::string& s) { return s.find("second-cert") != std::string::npos; });
  EXPECT_THAT(subject, HasSubstr("CN = second-cert")) << fleet.Log();
  // Sessions on the old certificate carry on.
  EXPECT_EQ(Value(before, "SELECT 'still here'"), "still here");

  // A broken certificate file keeps the last good one and says why.
  std::ofstream(cert) << "not a certificate\n";
  fleet.Signal(SIGHUP);
  WaitFor([&] { return fleet.Log().find("event=reload_failed") != std::string::npos; },
          std::chrono::seconds(5));
  EXPECT_THAT(fleet.Log(), HasSubstr("tls.client_tls_*: cannot load certificate"));
  EXPECT_THAT(PresentedSubject(fleet), HasSubstr("CN = second-cert"));
  RunCommand("rm -rf " + dir);
}

// A client that starts TLS at its first byte (libpq 17+'s sslnegotiation=direct): Python's ssl
// module, offering `alpn` (none when empty), then a StartupMessage inside TLS. Prints READY once
// logged in, CLOSED when pgfleet closed after the handshake, or HANDSHAKE_FAILED.
std::string DirectTls(int port, const std::string& alpn) {
  static const std::string script = [] {
    const std::string path = TempDir() + "/direct_tls.py";
    std::ofstream(path) << R"PY(import socket, ssl, struct, sys
port, alpn = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else ""
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
if alpn:
    ctx.set_alpn_protocols([alpn])
sock = socket.create_connection(("127.0.0.1", port), timeout=5)
try:
    tls = ctx.wrap_socket(sock)
except (ssl.SSLError, OSError) as e:
    print("HANDSHAKE_FAILED", type(e).__name__)
    sys.exit(0)
params = b"user\0postgres\0database\0postgres\0\0"
data = b""
try:
    tls.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
    while True:
        chunk = tls.recv(65536)
        if not chunk:
            break
        data += chunk
        at = 0
        while at + 5 <= len(data):
            kind, length = data[at:at + 1], struct.unpack("!i", data[at + 1:at + 5])[0]
            if kind == b"Z":
                print("READY", tls.selected_alpn_protocol())
                sys.exit(0)
            at += 1 + length
except (ssl.SSLError, OSError):
    pass
print("CLOSED")
)PY";
    return path;
  }();
  std::string out = RunCommandOutput(
      absl::StrCat("timeout 10 python3 ", script, " ", port, alpn.empty() ? "" : " " + alpn));
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST_F(TlsTest, DirectTlsWithAlpnPostgresqlLogsIn) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("require")));
  EXPECT_EQ(DirectTls(fleet.port(), "postgresql"), "READY postgresql") << fleet.Log();
  // The SSLRequest path still works beside it.
  auto tls = Connect(fleet.ConnString("postgres", "postgres", "sslmode=require"));
  ASSERT_TRUE(Ok(tls)) << ErrorOf(tls);
  EXPECT_EQ(Value(tls, "SELECT 1"), "1");
}

TEST_F(TlsTest, DirectTlsWithoutAlpnPostgresqlIsRefused) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2), ClientTls("require")));
  // No ALPN: the handshake completes, then pgfleet closes, as PostgreSQL does.
  EXPECT_EQ(DirectTls(fleet.port(), ""), "CLOSED");
  EXPECT_TRUE(WaitFor([&] { return fleet.Log().find("no ALPN postgresql") != std::string::npos; }))
      << fleet.Log();
  // Another protocol's name: the handshake itself fails (no_application_protocol).
  EXPECT_THAT(DirectTls(fleet.port(), "http/1.1"), HasSubstr("HANDSHAKE_FAILED"));
}

TEST_F(TlsTest, DirectTlsWithoutClientTlsConfiguredClosesAndSaysWhy) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  EXPECT_THAT(DirectTls(fleet.port(), "postgresql"), HasSubstr("HANDSHAKE_FAILED"));
  EXPECT_TRUE(WaitFor([&] {
    return fleet.Log().find("client TLS is not configured") != std::string::npos;
  })) << fleet.Log();
  // Plain clients are served as before.
  auto plain = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(plain)) << ErrorOf(plain);
  EXPECT_EQ(Value(plain, "SELECT 1"), "1");
}

TEST_F(TlsTest, CheckConfigNamesTheBrokenTlsFile) {
  const std::string dir = TempDir();
  const std::string path = dir + "/bad-tls.yaml";
  std::ofstream(path) << absl::StrCat(PoolConfig("transaction", 1),
                                      "tls:\n  client_tls_sslmode: require\n"
                                      "  client_tls_cert_file: /nonexistent/server.crt\n"
                                      "  client_tls_key_file: /nonexistent/server.key\n");
  const std::string out = RunCommandOutput(
      absl::StrCat(PgfleetBinary(), " --check-config ", path, " 2>&1; echo rc=$?"));
  EXPECT_THAT(out, HasSubstr(path + ": tls.client_tls_*: cannot load certificate "
                                    "/nonexistent/server.crt"));
  EXPECT_THAT(out, Not(HasSubstr("rc=0")));
  std::ofstream(path) << absl::StrCat(PoolConfig("transaction", 1),
                                      "tls:\n  client_tls_sslmode: verify-ca\n");
  const std::string missing = RunCommandOutput(
      absl::StrCat(PgfleetBinary(), " --check-config ", path, " 2>&1; echo rc=$?"));
  EXPECT_THAT(missing, HasSubstr("tls.client_tls_cert_file: client_tls_sslmode verify-ca needs"));
  EXPECT_THAT(missing, HasSubstr("tls.client_tls_ca_file"));
  RunCommand("rm -rf " + dir);
}

class ServerTlsTest : public TlsTest {
 protected:
  void SetUp() override {
    TlsTest::SetUp();
    pg().EnableTls(certs().server_cert, certs().server_key);
  }
  std::string ServerTls(const std::string& mode, const std::string& ca) {
    return absl::StrCat("tls:\n  server_tls_sslmode: ", mode, "\n  server_tls_ca_file: ", ca, "\n");
  }
  // `tlsonly` logs in to PostgreSQL only over TLS; pgfleet knows its password.
  static constexpr const char* kUserlist = "\"tlsonly\" \"tlspass\"\n\"postgres\" \"\"\n";
};

TEST_F(ServerTlsTest, VerifyFullReachesPostgresOverTlsWithChannelBinding) {
  PgfleetProcess fleet(
      absl::StrCat(PoolConfig("transaction", 2), ServerTls("verify-full", certs().ca_cert),
                   "auth:\n  type: trust\n  file: userlist.txt\n"),
      kUserlist);
  auto c = Connect(fleet.ConnString("postgres"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c) << fleet.Log();
  EXPECT_EQ(Value(c, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), "t");
  // PostgreSQL offers SCRAM-SHA-256-PLUS over TLS; pgfleet binds to its certificate, and a wrong
  // binding would fail the login.
  auto tls_only = Connect(fleet.ConnString("tlsonly"));
  ASSERT_TRUE(Ok(tls_only)) << ErrorOf(tls_only) << fleet.Log();
  EXPECT_EQ(Value(tls_only, "SELECT current_user"), "tlsonly");

  // pgbench through TLS on both sides: partial TLS writes and reads under load.
  PgfleetProcess both(absl::StrCat(PoolConfig("transaction", 4),
                                   ClientTls("require", "  server_tls_sslmode: require\n")));
  const std::string out = RunCommandOutput(absl::StrCat(
      "PGSSLMODE=require timeout 60 pgbench -n -c 8 -j 2 -T 3 -h 127.0.0.1 -p ", both.port(),
      " -U postgres -f /dev/stdin postgres 2>&1 <<'EOF'\n"
      "SELECT repeat('x', 100000), ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid();\nEOF\n"
      "echo rc=$?"));
  EXPECT_THAT(out, HasSubstr("rc=0")) << out;
  EXPECT_THAT(out, HasSubstr("number of failed transactions: 0")) << out;
}

TEST_F(ServerTlsTest, ShowClientsAndServersReportTls) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("session", 2),
                                    ClientTls("prefer", "  server_tls_sslmode: prefer\n"),
                                    "admin:\n  users: [postgres]\n"));
  auto tls = Connect(fleet.ConnString("postgres", "postgres", "sslmode=require"));
  ASSERT_TRUE(Ok(tls)) << ErrorOf(tls) << fleet.Log();
  EXPECT_EQ(Value(tls, "SELECT 1"), "1");  // session mode: the server stays linked
  auto admin = Connect(fleet.ConnString("postgres", "pgfleet", "sslmode=disable"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  // The tls column of each row, as PgBouncer shows it.
  auto tls_column = [&](const std::string& command) {
    std::vector<std::string> values;
    for (const Row& row : RowsOf(Exec(admin, command))) values.push_back(row.at("tls"));
    return values;
  };
  // The TLS client, and the console itself over plain text; prefer toward a PostgreSQL with
  // ssl=on gives a TLS server connection.
  EXPECT_THAT(tls_column("SHOW CLIENTS"),
              ::testing::UnorderedElementsAre(HasSubstr("TLSv1.3/"), ""));
  EXPECT_THAT(tls_column("SHOW SERVERS"), ::testing::ElementsAre(HasSubstr("TLSv1.3/")));
}

TEST_F(ServerTlsTest, PlainTextOrAnUntrustedServerFailsTheLogin) {
  {
    // Without TLS toward the server, PostgreSQL's hba refuses tlsonly: the test can fail.
    PgfleetProcess fleet(
        absl::StrCat(PoolConfig("transaction", 2), "auth:\n  type: trust\n  file: userlist.txt\n"),
        kUserlist);
    auto c = Connect(fleet.ConnString("tlsonly"));
    EXPECT_FALSE(Ok(c));
    EXPECT_THAT(ErrorOf(c), HasSubstr("no encryption"));
  }
  PgfleetProcess fleet(
      absl::StrCat(PoolConfig("transaction", 2), ServerTls("verify-ca", certs().rogue_ca_cert),
                   "auth:\n  type: trust\n  file: userlist.txt\n"),
      kUserlist);
  auto c = Connect(fleet.ConnString("postgres"));
  EXPECT_FALSE(Ok(c));
  EXPECT_THAT(ErrorOf(c), HasSubstr("TLS handshake with the server failed"));
  EXPECT_THAT(ErrorOf(c), HasSubstr("certificate verify failed"));
}

}  // namespace
}  // namespace pgfleet::testing
