// Authentication between pods and with pgfleet-controller: a shared token (from a file, e.g. a
// Kubernetes Secret) sent as "authorization: Bearer <token>" on every call and checked by every
// handler, and/or mutual TLS with certificates from files. Unix-socket peering inside a pod uses
// the same token when one is configured. The token is never logged.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "peering/fleet_options.h"

namespace pgfleet::peering {

class PeerCredentials {
 public:
  // No token, no TLS: what a pod without a TCP peering port uses between its workers.
  PeerCredentials() = default;
  // Reads the token file and the certificates named by `options`. Errors name the file.
  static absl::StatusOr<PeerCredentials> Load(const PeeringOptions& options);
  // For tests: a token given directly.
  static PeerCredentials WithToken(std::string token);

  bool has_token() const { return !token_.empty(); }
  bool tls() const { return !cert_pem_.empty(); }

  // Credentials for a TCP listening port (TLS requiring a client certificate when configured).
  std::shared_ptr<grpc::ServerCredentials> TcpServerCredentials() const;
  // A channel to a TCP peer or the controller ("host:port"), with TLS when configured.
  std::shared_ptr<grpc::Channel> CreateTcpChannel(const std::string& target) const;
  // Adds the token to an outgoing call.
  void Authorize(grpc::ClientContext* context) const;
  // True when the call carries the token (or none is configured). Constant-time comparison.
  bool Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
  std::string cert_pem_;
  std::string key_pem_;
  std::string ca_pem_;
  std::string server_name_;
};

// The file's content without trailing whitespace; an empty token is an error.
absl::StatusOr<std::string> LoadToken(const std::string& path);

}  // namespace pgfleet::peering
