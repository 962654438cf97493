// What the `tls:` section means for connections: the OpenSSL contexts it builds, and the sslmode
// decisions clients and servers take during the SSLRequest exchange.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "pooler/config/config.h"
#include "pooler/net/tls.h"

namespace pgfleet::pool {

struct TlsContexts {
  std::shared_ptr<const net::TlsContext> client;  // null when client_tls_sslmode is disable
  std::shared_ptr<const net::TlsContext> server;  // null when server_tls_sslmode is disable
};

// Reads the certificate, key and CA files now (at start and on every reload, which is how
// certificates rotate). Errors name the config file and the key: "/etc/pgfleet.yaml:
// tls.client_tls_cert_file: cannot load certificate /x.pem: no start line".
absl::StatusOr<TlsContexts> LoadTlsContexts(const config::Config& config);

// Toward clients: a client that did not negotiate TLS is refused under require and stronger.
inline bool ClientTlsRequired(config::SslMode mode) { return mode >= config::SslMode::kRequire; }
// Toward servers: whether to send an SSLRequest, and whether a server's 'N' ends the login.
inline bool ServerTlsWanted(config::SslMode mode) { return mode != config::SslMode::kDisable; }
inline bool ServerTlsRequired(config::SslMode mode) { return mode >= config::SslMode::kRequire; }

}  // namespace pgfleet::pool
