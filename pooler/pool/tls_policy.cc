// Builds the client- and server-facing TLS contexts from `tls:`.
#include "pooler/pool/tls_policy.h"

#include "pooler/base/strings.h"

namespace pgfleet::pool {
namespace {

bool Verifies(config::SslMode mode) {
  return mode == config::SslMode::kVerifyCa || mode == config::SslMode::kVerifyFull;
}

absl::Status Prefixed(const config::Config& config, std::string_view side,
                      const absl::Status& status) {
  return absl::InvalidArgumentError(
      base::StrCat(config.source_path, ": tls.", side, "_tls_*: ", base::Sv(status.message())));
}

}  // namespace

absl::StatusOr<TlsContexts> LoadTlsContexts(const config::Config& config) {
  const config::TlsConfig& tls = config.tls;
  TlsContexts contexts;
  if (tls.client_tls_sslmode != config::SslMode::kDisable) {
    net::TlsContextOptions options;
    options.accept_side = true;
    options.cert_file = tls.client_tls_cert_file;
    options.key_file = tls.client_tls_key_file;
    options.ca_file = tls.client_tls_ca_file;
    options.protocols = tls.client_tls_protocols;
    options.ciphers = tls.client_tls_ciphers;
    // verify-full checks a client certificate exactly as verify-ca does, as in PgBouncer.
    options.verify_peer = Verifies(tls.client_tls_sslmode);
    auto context = net::TlsContext::Create(std::move(options));
    if (!context.ok()) return Prefixed(config, "client", context.status());
    contexts.client = *std::move(context);
  }
  if (tls.server_tls_sslmode != config::SslMode::kDisable) {
    net::TlsContextOptions options;
    options.accept_side = false;
    options.cert_file = tls.server_tls_cert_file;
    options.key_file = tls.server_tls_key_file;
    options.ca_file = tls.server_tls_ca_file;
    options.protocols = tls.server_tls_protocols;
    options.ciphers = tls.server_tls_ciphers;
    options.verify_peer = Verifies(tls.server_tls_sslmode);
    auto context = net::TlsContext::Create(std::move(options));
    if (!context.ok()) return Prefixed(config, "server", context.status());
    contexts.server = *std::move(context);
  }
  return contexts;
}

}  // namespace pgfleet::pool
