// A minimal PostgreSQL wire client for tests that need messages libpq 15 cannot send (protocol
// Close of a statement, hand-made pipelines). Trust authentication only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pgfleet::testing {

struct RawMessage {
  char type;
  std::string body;
};

class RawClient {
 public:
  RawClient() = default;
  ~RawClient();
  // Connects and logs in; false on failure (error text in error()). `version` is the protocol
  // version the StartupMessage asks for, `extra` more name/value pairs ("_pq_.x", "1").
  bool Connect(int port, const std::string& user, const std::string& database,
               uint32_t version = 196608,
               const std::vector<std::pair<std::string, std::string>>& extra = {});
  // Everything the server sent during login, up to its first ReadyForQuery.
  const std::vector<RawMessage>& login_messages() const { return login_messages_; }
  // From BackendKeyData: the ProcessID and the secret, whatever its length.
  uint32_t backend_pid() const { return backend_pid_; }
  const std::string& backend_secret() const { return backend_secret_; }
  // Sends a CancelRequest for (pid, secret) on a new connection to `port`.
  static bool SendCancel(int port, uint32_t pid, const std::string& secret);
  bool Send(const std::string& bytes);
  // Reads messages until `count` ReadyForQuery messages arrived (or 5 s pass).
  std::vector<RawMessage> ReadUntilReady(int count = 1);
  const std::string& error() const { return error_; }

  // Message encoders.
  static std::string Parse(const std::string& name, const std::string& sql);
  static std::string Bind(const std::string& statement);
  static std::string Execute();
  static std::string Close(char kind, const std::string& name);
  static std::string Describe(char kind, const std::string& name);
  static std::string Sync();
  static std::string Query(const std::string& sql);

 private:
  bool ReadMessage(RawMessage* out);
  int fd_ = -1;
  std::string buffer_;
  std::string error_;
  std::vector<RawMessage> login_messages_;
  uint32_t backend_pid_ = 0;
  std::string backend_secret_;
};

// The types of `messages` as a string, e.g. "12CZ".
std::string Types(const std::vector<RawMessage>& messages);

}  // namespace pgfleet::testing
