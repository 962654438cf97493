// A throwaway PKI for TLS tests, made once per test process with the openssl command: a CA, a
// server certificate for 127.0.0.1 and localhost signed by it, a client certificate signed by
// it, and a second ("rogue") CA with a client certificate of its own that nobody trusts.
#pragma once

#include <string>

namespace pgfleet::testing {

struct TestCerts {
  std::string dir;
  std::string ca_cert;
  std::string server_cert;  // CN=localhost, SAN DNS:localhost, IP:127.0.0.1
  std::string server_key;
  std::string client_cert;  // CN=postgres
  std::string client_key;
  std::string rogue_ca_cert;
  std::string rogue_client_cert;
  std::string rogue_client_key;

  // Created on first use; aborts the test binary when openssl fails.
  static const TestCerts& Get();
  // Another server certificate from the same CA with subject CN=`common_name` (for rotation),
  // written to `cert_path` and `key_path`.
  void IssueServerCert(const std::string& common_name, const std::string& cert_path,
                       const std::string& key_path) const;
};

}  // namespace pgfleet::testing
