// Test PKI generation with the openssl command line (P-256 keys: quick to make).
#include "tests/integration/harness/test_certs.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/integration/harness/pg_server.h"

namespace pgfleet::testing {
namespace {

void Run(const std::string& command) {
  if (RunCommand(absl::StrCat(command, " >/dev/null 2>&1")) != 0) {
    std::fprintf(stderr, "test certs: command failed: %s\n", command.c_str());
    std::abort();
  }
}

constexpr const char* kNewKey = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

void MakeCa(const std::string& dir, const std::string& name, const std::string& cn) {
  Run(absl::StrCat("openssl req -x509 ", kNewKey, " -days 2 -subj '/CN=", cn, "' -keyout ", dir,
                   "/", name, ".key -out ", dir, "/", name, ".crt"));
}

// A certificate for `cn` signed by the CA `ca` (files <dir>/<ca>.crt/.key), with `san` if set.
void Issue(const std::string& dir, const std::string& ca, const std::string& cn,
           const std::string& san, const std::string& cert, const std::string& key) {
  const std::string csr = cert + ".csr";
  Run(absl::StrCat("openssl req ", kNewKey, " -subj '/CN=", cn, "' -keyout ", key, " -out ", csr));
  std::string ext;
  if (!san.empty()) {
    const std::string ext_file = cert + ".ext";
    std::ofstream(ext_file) << "subjectAltName=" << san << "\n";
    ext = absl::StrCat(" -extfile ", ext_file);
  }
  Run(absl::StrCat("openssl x509 -req -days 2 -in ", csr, " -CA ", dir, "/", ca, ".crt -CAkey ",
                   dir, "/", ca, ".key -CAcreateserial -out ", cert, ext));
  // libpq refuses a client key that others can read.
  Run(absl::StrCat("chmod 600 ", key));
}

}  // namespace

const TestCerts& TestCerts::Get() {
  static const TestCerts* certs = [] {
    char tmpl[] = "/tmp/pgfleet-certs-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    auto* c = new TestCerts;
    c->dir = tmpl;
    Run(absl::StrCat("chmod 755 ", c->dir));
    MakeCa(c->dir, "ca", "pgfleet test CA");
    MakeCa(c->dir, "rogue-ca", "rogue CA");
    c->ca_cert = c->dir + "/ca.crt";
    c->rogue_ca_cert = c->dir + "/rogue-ca.crt";
    c->server_cert = c->dir + "/server.crt";
    c->server_key = c->dir + "/server.key";
    Issue(c->dir, "ca", "localhost", "DNS:localhost,IP:127.0.0.1", c->server_cert, c->server_key);
    c->client_cert = c->dir + "/client.crt";
    c->client_key = c->dir + "/client.key";
    Issue(c->dir, "ca", "postgres", "", c->client_cert, c->client_key);
    c->rogue_client_cert = c->dir + "/rogue-client.crt";
    c->rogue_client_key = c->dir + "/rogue-client.key";
    Issue(c->dir, "rogue-ca", "postgres", "", c->rogue_client_cert, c->rogue_client_key);
    std::atexit([] { RunCommand(absl::StrCat("rm -rf '", TestCerts::Get().dir, "'")); });
    return c;
  }();
  return *certs;
}

void TestCerts::IssueServerCert(const std::string& common_name, const std::string& cert_path,
                                const std::string& key_path) const {
  Issue(dir, "ca", common_name, "DNS:localhost,IP:127.0.0.1", cert_path, key_path);
}

}  // namespace pgfleet::testing
