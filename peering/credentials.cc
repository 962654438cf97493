// Token and mTLS credentials for peering and the controller.
#include "peering/credentials.h"

#include <openssl/crypto.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pooler/base/status_macros.h"

namespace pgfleet::peering {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::string> LoadToken(const std::string& path) {
  ASSIGN_OR_RETURN(std::string token, ReadFile(path, "peering.token_file"));
  absl::StripTrailingAsciiWhitespace(&token);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("peering.token_file: ", path, " is empty"));
  }
  return token;
}

absl::StatusOr<PeerCredentials> PeerCredentials::Load(const PeeringOptions& options) {
  PeerCredentials creds;
  if (!options.token_file.empty()) {
    ASSIGN_OR_RETURN(creds.token_, LoadToken(options.token_file));
  }
  if (options.tls.enabled()) {
    ASSIGN_OR_RETURN(creds.cert_pem_, ReadFile(options.tls.cert_file, "peering.tls.cert_file"));
    ASSIGN_OR_RETURN(creds.key_pem_, ReadFile(options.tls.key_file, "peering.tls.key_file"));
    ASSIGN_OR_RETURN(creds.ca_pem_, ReadFile(options.tls.ca_file, "peering.tls.ca_file"));
    creds.server_name_ = options.tls.server_name;
  }
  return creds;
}

PeerCredentials PeerCredentials::WithToken(std::string token) {
  PeerCredentials creds;
  creds.token_ = std::move(token);
  return creds;
}

std::shared_ptr<grpc::ServerCredentials> PeerCredentials::TcpServerCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = ca_pem_;
  ssl.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(ssl);
}

std::shared_ptr<grpc::Channel> PeerCredentials::CreateTcpChannel(const std::string& target) const {
  grpc::ChannelArguments args;
  // Peers are dialled by IP; their certificates name the fleet, not the pod.
  if (tls()) args.SetSslTargetNameOverride(server_name_);
  // Fail fast while a peer or the controller is down, so calls end at their deadline.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (tls()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca_pem_;
    ssl.pem_private_key = key_pem_;
    ssl.pem_cert_chain = cert_pem_;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

void PeerCredentials::Authorize(grpc::ClientContext* context) const {
  if (has_token()) context->AddMetadata(kAuthorization, absl::StrCat(kBearer, token_));
}

bool PeerCredentials::Check(const grpc::ServerContextBase& context) const {
  if (!has_token()) return true;
  const auto& metadata = context.client_metadata();
  const std::string expected = absl::StrCat(kBearer, token_);
  bool ok = false;
  for (auto [it, end] = metadata.equal_range(kAuthorization); it != end; ++it) {
    const grpc::string_ref& value = it->second;
    if (value.size() == expected.size() &&
        CRYPTO_memcmp(value.data(), expected.data(), expected.size()) == 0) {
      ok = true;
    }
  }
  return ok;
}

}  // namespace pgfleet::peering
