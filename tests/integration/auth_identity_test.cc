// Authentication without a password (issue 35, item 4): auth type cert (the client certificate's
// CommonName is the user, as PgBouncer's cert), and hba `cert` and `peer` lines (the unix socket
// peer's operating-system user), with PostgreSQL's refusals.
#include <pwd.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/test_certs.h"

namespace pgfleet::testing {
namespace auth_identity_test {

using ::testing::HasSubstr;

std::string OwnUserName() {
  const struct passwd* entry = getpwuid(geteuid());
  return entry != nullptr ? entry->pw_name : "";
}

std::string TempDir() {
  char tmpl[] = "/tmp/pgfleet-ident-XXXXXX";
  return mkdtemp(tmpl);
}

class AuthIdentityTest : public IntegrationTest {
 protected:
  const TestCerts& certs() { return TestCerts::Get(); }
  std::string ClientTls(const std::string& mode) {
    return absl::StrCat("tls:\n  client_tls_sslmode: ", mode,
                        "\n  client_tls_cert_file: ", certs().server_cert,
                        "\n  client_tls_key_file: ", certs().server_key,
                        "\n  client_tls_ca_file: ", certs().ca_cert, "\n");
  }
  std::string WithClientCert() {
    return absl::StrCat("sslmode=require sslcert=", certs().client_cert,
                        " sslkey=", certs().client_key);
  }
};

TEST_F(AuthIdentityTest, CertAuthTakesTheUserFromTheClientCertificate) {
  PgfleetProcess fleet(
      absl::StrCat(PoolConfig("transaction", 2), ClientTls("verify-ca"), "auth:\n  type: cert\n"));
  // The test client certificate is CN=postgres.
  auto good = Connect(fleet.ConnString("postgres", "postgres", WithClientCert()));
  ASSERT_TRUE(Ok(good)) << ErrorOf(good) << fleet.Log();
  EXPECT_EQ(Value(good, "SELECT current_user"), "postgres");
  auto other = Connect(fleet.ConnString("md5user", "postgres", WithClientCert()));
  EXPECT_FALSE(Ok(other));
  EXPECT_THAT(ErrorOf(other), HasSubstr("certificate authentication failed for user \"md5user\""));
  // Without a certificate the handshake itself fails (verify-ca demands one).
  auto none = Connect(fleet.ConnString("postgres", "postgres", "sslmode=require"));
  EXPECT_FALSE(Ok(none));
}

TEST_F(AuthIdentityTest, CertWithoutVerifiedClientCertificatesIsAConfigError) {
  PgfleetProcess fleet(
      absl::StrCat(PoolConfig("transaction", 2), ClientTls("require"), "auth:\n  type: cert\n"));
  EXPECT_TRUE(WaitFor([&] { return !fleet.Running(); }));
  EXPECT_THAT(fleet.Log(), HasSubstr("\\\"cert\\\" needs tls.client_tls_sslmode verify-ca"));
}

// hba: `hostssl ... cert` for TCP, `local ... peer` for the unix socket.
TEST_F(AuthIdentityTest, HbaCertAndPeerLinesCheckWhoIsConnecting) {
  const std::string me = OwnUserName();
  ASSERT_FALSE(me.empty());
  // The operating-system user needs a role of that name for pgfleet's server login.
  pg().Exec(absl::StrCat("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '", me,
                         "') THEN CREATE ROLE \"", me, "\" LOGIN; END IF; END $$"));
  const std::string other = me == "postgres" ? "md5user" : "postgres";
  const std::string dir = TempDir();
  std::ofstream(dir + "/pg_hba.conf") << "local all all peer\n"
                                         "hostssl all all 127.0.0.1/32 cert\n"
                                         "host all all 127.0.0.1/32 reject\n";
  PgfleetProcess fleet(
      absl::StrCat(PoolConfig("transaction", 2), ClientTls("verify-ca"),
                   "auth:\n  type: md5\n  file: userlist.txt\n  hba_file: ", dir, "/pg_hba.conf\n"),
      "\"md5user\" \"md5pass\"\n", "  unix_socket_dir: " + dir + "\n");
  const auto over_socket = [&](const std::string& user) {
    return Connect(absl::StrCat("host=", dir, " port=", fleet.port(), " user=", user,
                                " dbname=postgres connect_timeout=10"));
  };
  auto mine = over_socket(me);
  ASSERT_TRUE(Ok(mine)) << ErrorOf(mine) << fleet.Log();
  EXPECT_EQ(Value(mine, "SELECT current_user"), me);
  auto someone_else = over_socket(other);
  EXPECT_FALSE(Ok(someone_else));
  EXPECT_THAT(ErrorOf(someone_else),
              HasSubstr(absl::StrCat("Peer authentication failed for user \"", other, "\"")));
  auto cert = Connect(fleet.ConnString("postgres", "postgres", WithClientCert()));
  EXPECT_TRUE(Ok(cert)) << ErrorOf(cert);
  RunCommand("rm -rf " + dir);
}

}  // namespace auth_identity_test
}  // namespace pgfleet::testing
