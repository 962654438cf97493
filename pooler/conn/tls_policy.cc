// Builds the client- and server-facing TLS contexts from `tls:`.
#include "pooler/conn/tls_policy.h"

#include "pooler/base/status_macros.h"
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

// One side's context, or null when its sslmode is disable.
absl::StatusOr<std::shared_ptr<const net::TlsContext>> LoadSide(
    const config::Config& config, std::string_view side, bool accept_side, config::SslMode mode,
    const std::string& cert_file, const std::string& key_file, const std::string& ca_file,
    const std::string& protocols, const std::string& ciphers) {
  if (mode == config::SslMode::kDisable) return nullptr;
  net::TlsContextOptions options;
  options.accept_side = accept_side;
  options.cert_file = cert_file;
  options.key_file = key_file;
  options.ca_file = ca_file;
  options.protocols = protocols;
  options.ciphers = ciphers;
  // Toward clients verify-full checks a certificate exactly as verify-ca does (PgBouncer's
  // meaning); toward servers the host name check comes with the session (TlsSession::Create).
  options.verify_peer = Verifies(mode);
  auto context = net::TlsContext::Create(std::move(options));
  if (!context.ok()) return Prefixed(config, side, context.status());
  return *std::move(context);
}

}  // namespace

absl::StatusOr<TlsContexts> LoadTlsContexts(const config::Config& config) {
  const config::TlsConfig& tls = config.tls;
  TlsContexts contexts;
  ASSIGN_OR_RETURN(contexts.client, LoadSide(config, "client", /*accept_side=*/true,
                                             tls.client_tls_sslmode, tls.client_tls_cert_file,
                                             tls.client_tls_key_file, tls.client_tls_ca_file,
                                             tls.client_tls_protocols, tls.client_tls_ciphers));
  ASSIGN_OR_RETURN(contexts.server, LoadSide(config, "server", /*accept_side=*/false,
                                             tls.server_tls_sslmode, tls.server_tls_cert_file,
                                             tls.server_tls_key_file, tls.server_tls_ca_file,
                                             tls.server_tls_protocols, tls.server_tls_ciphers));
  return contexts;
}

}  // namespace pgfleet::pool
