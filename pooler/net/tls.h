// TLS over a non-blocking socket with OpenSSL: a context built from files (certificate, key, CA,
// protocol range, ciphers) and one session per connection. The PostgreSQL side of the story (the
// SSLRequest exchange, sslmode policy) lives with the connections in pooler/pool.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;

namespace pgfleet::net {

struct TlsContextOptions {
  // True for the accepting side (pgfleet facing its clients), false for pgfleet connecting.
  bool accept_side = true;
  std::string cert_file;  // PEM chain; required on the accepting side
  std::string key_file;
  std::string ca_file;  // trusted roots for verifying the peer's certificate
  // PgBouncer's tls_protocols: "secure" (TLS 1.2 and 1.3), "all", "legacy", or a comma list of
  // tlsv1.0 ... tlsv1.3.
  std::string protocols = "secure";
  // OpenSSL cipher list for TLS 1.2 and below; "default" keeps OpenSSL's.
  std::string ciphers = "default";
  // Require the peer's certificate and verify it against ca_file (a client certificate on the
  // accepting side, the server's chain on the connecting side).
  bool verify_peer = false;
};

// An SSL_CTX and the options it was built from. Connections keep a shared_ptr, so a reload can
// swap in a new context while sessions on the old one finish.
class TlsContext {
 public:
  // Errors name the file and OpenSSL's reason ("cannot load certificate /x.pem: no start line").
  static absl::StatusOr<std::shared_ptr<const TlsContext>> Create(TlsContextOptions options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* native() const { return ctx_; }
  const TlsContextOptions& options() const { return options_; }

 private:
  TlsContext(SSL_CTX* ctx, TlsContextOptions options) : ctx_(ctx), options_(std::move(options)) {}
  SSL_CTX* ctx_;
  TlsContextOptions options_;
};

// One TLS session on a connected non-blocking socket.
class TlsSession {
 public:
  enum class Result { kDone, kWantRead, kWantWrite, kEof, kError };

  // `verify_host`: on the connecting side with verify_peer, the name (or IP literal) the server's
  // certificate must match; empty = chain only (verify-ca).
  static absl::StatusOr<std::unique_ptr<TlsSession>> Create(
      std::shared_ptr<const TlsContext> context, int fd, std::string_view verify_host);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Drives the handshake; kDone once established. On kError, error() says why.
  Result Handshake();
  bool established() const { return established_; }
  // The application protocol agreed with ALPN ("postgresql"), empty when the peer offered none.
  std::string alpn() const;

  // Reads decrypted bytes (kDone with *n > 0), or says what to wait for.
  Result Read(std::span<uint8_t> into, size_t* n);
  // Decrypted bytes OpenSSL holds that the socket will not signal.
  size_t pending() const;
  // Writes (part of) `data`; kDone with *n written, which may be less than data.size(). A retry
  // after kWantWrite/kWantRead must start with the same bytes (partial and moving-buffer writes
  // are enabled, so more may follow them).
  Result Write(std::span<const uint8_t> data, size_t* n);
  // Sends close_notify (best effort, never blocks).
  void Shutdown();

  // Why the last kError happened (OpenSSL's reason, or the verification result).
  const std::string& error() const { return error_; }
  // "TLSv1.3/TLS_AES_256_GCM_SHA384", as PgBouncer's SHOW CLIENTS tls column.
  std::string Description() const;
  // Channel binding data for SCRAM-SHA-256-PLUS (RFC 5929 tls-server-end-point): the hash of the
  // server's certificate (ours on the accepting side, the peer's when connecting), with SHA-256
  // standing in for MD5 and SHA-1. nullopt when there is no certificate or its hash is unknown.
  std::optional<std::vector<uint8_t>> ServerEndPoint() const;
  // The peer presented a certificate that verified (verify_peer contexts only).
  bool peer_verified() const;
  // The CommonName of the peer's certificate when it was verified (auth type cert), else empty.
  std::string VerifiedPeerCommonName() const;

 private:
  TlsSession(std::shared_ptr<const TlsContext> context, SSL* ssl)
      : context_(std::move(context)), ssl_(ssl) {}
  Result Classify(int ret);

  std::shared_ptr<const TlsContext> context_;
  SSL* ssl_;
  bool established_ = false;
  std::string error_;
};

}  // namespace pgfleet::net
