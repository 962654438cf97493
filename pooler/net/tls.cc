// OpenSSL contexts and non-blocking sessions.
#include "pooler/net/tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pooler/base/strings.h"

namespace pgfleet::net {
namespace {

// The OpenSSL errors queued on this thread, oldest first, then cleared.
std::string DrainErrors() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    if (!out.empty()) out += "; ";
    // "error:0A000086:SSL routines::certificate verify failed" -> the reason after the last ':'.
    std::string_view reason(text);
    if (size_t colon = reason.rfind(':'); colon != std::string_view::npos) {
      reason.remove_prefix(colon + 1);
    }
    out += reason;
  }
  return out.empty() ? "unknown TLS error" : out;
}

absl::Status TlsError(std::string_view what) {
  return absl::InvalidArgumentError(base::StrCat(what, ": ", DrainErrors()));
}

struct VersionRange {
  int min = TLS1_2_VERSION;
  int max = TLS1_3_VERSION;
};

absl::StatusOr<VersionRange> ParseProtocols(std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(base::Av(text));
  if (lower == "secure" || lower.empty()) return VersionRange{};
  if (lower == "all" || lower == "legacy") return VersionRange{TLS1_VERSION, TLS1_3_VERSION};
  VersionRange range{INT32_MAX, 0};
  for (absl::string_view piece : absl::StrSplit(lower, ',', absl::SkipWhitespace())) {
    const std::string_view item = base::Sv(absl::StripAsciiWhitespace(piece));
    int version = 0;
    if (item == "tlsv1.0" || item == "tlsv1") {
      version = TLS1_VERSION;
    } else if (item == "tlsv1.1") {
      version = TLS1_1_VERSION;
    } else if (item == "tlsv1.2") {
      version = TLS1_2_VERSION;
    } else if (item == "tlsv1.3") {
      version = TLS1_3_VERSION;
    } else {
      return absl::InvalidArgumentError(
          base::StrCat("unknown TLS protocol \"", item,
                       "\" (expected secure, all, legacy or a list of tlsv1.0..tlsv1.3)"));
    }
    range.min = std::min(range.min, version);
    range.max = std::max(range.max, version);
  }
  if (range.max == 0) return absl::InvalidArgumentError("no TLS protocol listed");
  return range;
}

bool IsIpLiteral(std::string_view host) {
  return !host.empty() && (host.find(':') != std::string_view::npos ||
                           std::all_of(host.begin(), host.end(),
                                       [](char c) { return (c >= '0' && c <= '9') || c == '.'; }));
}

}  // namespace

namespace {

// ALPN on the accepting side, as PostgreSQL 17+: a client that offers protocols must offer
// "postgresql" (the IANA name; anything else may be a cross-protocol attack, ALPACA), and one
// that offers none is accepted (the SSLRequest path; direct TLS checks for it after the
// handshake, ClientConn).
int SelectPostgresAlpn(SSL*, const unsigned char** out, unsigned char* outlen,
                       const unsigned char* in, unsigned int inlen, void*) {
  static constexpr unsigned char kPostgresql[] = {10,  'p', 'o', 's', 't', 'g',
                                                  'r', 'e', 's', 'q', 'l'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kPostgresql, sizeof(kPostgresql), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::Create(TlsContextOptions options) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(options.accept_side ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return TlsError("cannot create a TLS context");
  std::shared_ptr<const TlsContext> context(new TlsContext(ctx, options));

  auto range = ParseProtocols(options.protocols);
  if (!range.ok()) return range.status();
  if (SSL_CTX_set_min_proto_version(ctx, range->min) != 1 ||
      SSL_CTX_set_max_proto_version(ctx, range->max) != 1) {
    return TlsError("cannot set the TLS protocol range");
  }
  // Renegotiation would make a read need a write and back; PostgreSQL has never needed it.
  // An unexpected EOF is an ordinary disconnect for a pooler, not an attack to report.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                               SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // Connection buffers hand OpenSSL whatever is queued, which may have moved or grown since
  // the write that could not finish.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  if (!options.ciphers.empty() && absl::AsciiStrToLower(options.ciphers) != "default" &&
      SSL_CTX_set_cipher_list(ctx, options.ciphers.c_str()) != 1) {
    return TlsError(base::StrCat("invalid cipher list \"", options.ciphers, "\""));
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
      return TlsError(base::StrCat("cannot load certificate ", options.cert_file));
    }
    if (options.key_file.empty()) {
      return absl::InvalidArgumentError(
          base::StrCat("certificate ", options.cert_file, " has no key file"));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return TlsError(base::StrCat("cannot load private key ", options.key_file));
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return TlsError(
          base::StrCat("private key ", options.key_file, " does not match ", options.cert_file));
    }
  } else if (options.accept_side) {
    return absl::InvalidArgumentError("accepting TLS needs a certificate and key");
  }
  if (!options.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr) != 1) {
      return TlsError(base::StrCat("cannot load CA file ", options.ca_file));
    }
    if (options.accept_side) {
      // Tell clients which CAs we accept, as PostgreSQL does with ssl_ca_file.
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.ca_file.c_str())) {
        SSL_CTX_set_client_CA_list(ctx, names);
      }
    }
  } else if (options.verify_peer) {
    return absl::InvalidArgumentError("verifying the peer's certificate needs a CA file");
  }
  if (options.verify_peer) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  } else {
    // Accepting side: a client certificate is not asked for. Connecting side: the chain is
    // checked and the result ignored (require), as libpq does.
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (options.accept_side) {
    // Sessions are per connection; tickets would only cost a handshake message.
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_alpn_select_cb(ctx, SelectPostgresAlpn, nullptr);
  }
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

absl::StatusOr<std::unique_ptr<TlsSession>> TlsSession::Create(
    std::shared_ptr<const TlsContext> context, int fd, std::string_view verify_host) {
  ERR_clear_error();
  SSL* ssl = SSL_new(context->native());
  if (ssl == nullptr) return TlsError("cannot create a TLS session");
  std::unique_ptr<TlsSession> session(new TlsSession(std::move(context), ssl));
  if (SSL_set_fd(ssl, fd) != 1) return TlsError("cannot attach TLS to the socket");
  const auto& options = session->context_->options();
  if (options.accept_side) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
    const std::string host(verify_host);
    if (!host.empty() && !IsIpLiteral(host)) SSL_set_tlsext_host_name(ssl, host.c_str());
    if (options.verify_peer && !host.empty()) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      const int ok = IsIpLiteral(host) ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                                       : X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
      if (ok != 1) return TlsError(base::StrCat("cannot verify host name \"", host, "\""));
    }
  }
  return session;
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

std::string TlsSession::alpn() const {
  const unsigned char* data = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl_, &data, &length);
  return data == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(data), length);
}

TlsSession::Result TlsSession::Classify(int ret) {
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      return Result::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Result::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Result::kEof;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Result::kWantRead;
        error_ = errno != 0 ? strerror(errno) : "connection closed";
        return errno != 0 ? Result::kError : Result::kEof;
      }
      [[fallthrough]];
    default: {
      error_ = DrainErrors();
      const long verify = SSL_get_verify_result(ssl_);
      if (verify != X509_V_OK) {
        error_ = base::StrCat(error_, " (", X509_verify_cert_error_string(verify), ")");
      }
      return Result::kError;
    }
  }
}

TlsSession::Result TlsSession::Handshake() {
  if (established_) return Result::kDone;
  ERR_clear_error();
  errno = 0;
  const int ret = SSL_do_handshake(ssl_);
  if (ret == 1) {
    established_ = true;
    return Result::kDone;
  }
  const Result result = Classify(ret);
  // A peer that hangs up mid-handshake did not finish it: that is a failure here.
  if (result == Result::kEof) {
    if (error_.empty()) error_ = "connection closed during the TLS handshake";
    return Result::kError;
  }
  return result;
}

TlsSession::Result TlsSession::Read(std::span<uint8_t> into, size_t* n) {
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  const int ret = SSL_read_ex(ssl_, into.data(), into.size(), &got);
  if (ret == 1) {
    *n = got;
    return Result::kDone;
  }
  return Classify(ret);
}

size_t TlsSession::pending() const { return static_cast<size_t>(SSL_pending(ssl_)); }

TlsSession::Result TlsSession::Write(std::span<const uint8_t> data, size_t* n) {
  ERR_clear_error();
  errno = 0;
  size_t written = 0;
  const int ret = SSL_write_ex(ssl_, data.data(), data.size(), &written);
  if (ret == 1) {
    *n = written;
    return Result::kDone;
  }
  *n = 0;
  return Classify(ret);
}

void TlsSession::Shutdown() {
  if (!established_) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

std::string TlsSession::Description() const {
  if (!established_) return "";
  return base::StrCat(SSL_get_version(ssl_), "/", SSL_get_cipher_name(ssl_));
}

std::optional<std::vector<uint8_t>> TlsSession::ServerEndPoint() const {
  X509* cert =
      context_->options().accept_side ? SSL_get_certificate(ssl_) : SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr) return std::nullopt;
  int md_nid = NID_undef;
  if (X509_get_signature_info(cert, &md_nid, nullptr, nullptr, nullptr) != 1) {
    return std::nullopt;
  }
  // RFC 5929 section 4.1: MD5 and SHA-1 are replaced by SHA-256.
  if (md_nid == NID_md5 || md_nid == NID_sha1) md_nid = NID_sha256;
  const EVP_MD* md = EVP_get_digestbynid(md_nid);
  if (md == nullptr) return std::nullopt;
  std::vector<uint8_t> hash(EVP_MAX_MD_SIZE);
  unsigned int size = 0;
  if (X509_digest(cert, md, hash.data(), &size) != 1) return std::nullopt;
  hash.resize(size);
  return hash;
}

std::string TlsSession::VerifiedPeerCommonName() const {
  if (!peer_verified()) return "";
  X509_NAME* subject = X509_get_subject_name(SSL_get0_peer_certificate(ssl_));
  if (subject == nullptr) return "";
  const int length = X509_NAME_get_text_by_NID(subject, NID_commonName, nullptr, 0);
  if (length <= 0) return "";
  std::string name(static_cast<size_t>(length) + 1, '\0');
  X509_NAME_get_text_by_NID(subject, NID_commonName, name.data(), length + 1);
  name.resize(static_cast<size_t>(length));
  // A name with a NUL inside would compare equal to a prefix of itself: never a user.
  return name.find('\0') == std::string::npos ? name : "";
}

bool TlsSession::peer_verified() const {
  return SSL_get0_peer_certificate(ssl_) != nullptr && SSL_get_verify_result(ssl_) == X509_V_OK;
}

}  // namespace pgfleet::net
