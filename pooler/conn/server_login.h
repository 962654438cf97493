// pgfleet logging in to a PostgreSQL server, without sockets: fed each whole message the server
// sends during login, it decides what pgfleet answers (password, md5 hash, SCRAM messages) and
// whether the login goes on, is done, or failed and what waiting clients are told. ServerConn is
// the I/O shell around it (sending, logging, counting, telling the pool), as it is around the
// Relay once logged in; unit tests drive it with built messages.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pooler/auth/scram.h"
#include "pooler/base/random.h"
#include "pooler/config/config.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/relay/param_sync.h"

namespace pgfleet::pool {

// How pgfleet logs in to PostgreSQL as this pool's user.
struct ServerCredentials {
  std::string secret;  // plain, md5 hash or SCRAM secret (from config, auth_file or auth_query)
  std::optional<auth::ScramKey> scram_client_key;  // recovered from a client's SCRAM login
};

// What the StartupMessage asks for and what the connection offers SCRAM, known once the connection
// (and its TLS handshake, if any) is up.
struct ServerLoginOptions {
  std::string user;
  std::string database;
  std::string application_name;  // not sent when empty
  // Settings sent as startup parameters (ServerLoginSettings).
  std::vector<std::pair<std::string, std::string>> settings;
  bool tls = false;  // the login runs over an established TLS session
  // Over TLS: the tls-server-end-point hash of the server's certificate for SCRAM-SHA-256-PLUS,
  // asked for only when the server offers it (hashing the certificate costs); nullopt when it
  // cannot be computed.
  std::function<std::optional<std::vector<uint8_t>>()> server_end_point;
};

// The settings every server login sends, so that PostgreSQL finds out soon that pgfleet's end of a
// connection is gone (docs/architecture.md, "Connection budget"): client_connection_check_interval
// for a closed connection, TCP keepalive and tcp_user_timeout for a node that vanished. A zero
// duration is not sent.
std::vector<std::pair<std::string, std::string>> ServerLoginSettings(
    const config::PoolConfig& pool);

// What to do after one login message.
struct LoginVerdict {
  enum class Outcome {
    kContinue,         // send `to_server` (when not empty) and wait for the next message
    kReady,            // ReadyForQuery: logged in
    kFailedByPgfleet,  // pgfleet cannot go on (no usable password, SCRAM failed)
    kFailedByServer,   // the server sent an ErrorResponse
    kClose,            // the server broke the protocol: close, `message` is the reason
  };
  Outcome outcome = Outcome::kContinue;
  protocol::StringSink to_server;
  // Failures: the whole ErrorResponse for the clients waiting for this pool's servers, and
  // whether they should give up rather than wait for another server.
  protocol::StringSink to_clients;
  bool fatal_for_clients = false;
  std::string sqlstate;  // kFailedByServer: the server's SQLSTATE ("" when malformed)
  std::string message;   // failures: what went wrong; kClose: the reason
};

class ServerLogin {
 public:
  // `credentials` is read when the server asks, so a secret learned meanwhile (auth_query, a
  // client's SCRAM keys) is used; it must outlive the login, as `random` and `tracked` must.
  ServerLogin(const ServerCredentials& credentials, base::RandomSource& random,
              const TrackedParamNames& tracked);

  // Opens the login: appends the StartupMessage to `to_server`.
  void Start(ServerLoginOptions options, protocol::ByteSink& to_server);
  // One whole message the server sent during login.
  LoginVerdict OnMessage(uint8_t type, std::span<const uint8_t> body);
  // pgfleet gives up before or during the login (TLS refused, no usable password): waiting clients
  // get a FATAL saying why.
  static LoginVerdict FailedByPgfleet(std::string_view message);

  // The login a sibling worker did, for a server it handed over (one pool per pod).
  void Adopt(uint32_t backend_pid, std::vector<uint8_t> backend_secret,
             std::vector<std::pair<std::string, std::string>> login_params) {
    backend_pid_ = backend_pid;
    backend_secret_ = std::move(backend_secret);
    login_params_ = std::move(login_params);
  }

  // Every ParameterStatus the server sent at login, in order, for welcoming clients.
  const std::vector<std::pair<std::string, std::string>>& login_params() const {
    return login_params_;
  }
  // The tracked parameters among them, as the server has them after login.
  const ParamSet& params() const { return params_; }
  uint32_t backend_pid() const { return backend_pid_; }
  const std::vector<uint8_t>& backend_secret() const { return backend_secret_; }
  // The protocol the server speaks: 3.2 (196610), or what it negotiated down to.
  uint32_t protocol_version() const { return protocol_version_; }

 private:
  LoginVerdict OnAuthRequest(std::span<const uint8_t> body);
  LoginVerdict OnSasl(std::span<const uint8_t> mechanisms);
  static LoginVerdict OnServerError(std::span<const uint8_t> body);

  const ServerCredentials& credentials_;
  base::RandomSource& random_;
  const TrackedParamNames& tracked_;
  ServerLoginOptions options_;
  std::optional<auth::ScramClientExchange> scram_;
  std::vector<std::pair<std::string, std::string>> login_params_;
  ParamSet params_;
  uint32_t backend_pid_ = 0;
  std::vector<uint8_t> backend_secret_;
  uint32_t protocol_version_ = 0;
};

}  // namespace pgfleet::pool
