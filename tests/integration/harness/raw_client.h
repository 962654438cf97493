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
  // Connects and logs in; false on failure (error text in error()).
  bool Connect(int port, const std::string& user, const std::string& database);
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

 private:
  bool ReadMessage(RawMessage* out);
  int fd_ = -1;
  std::string buffer_;
  std::string error_;
};

// The types of `messages` as a string, e.g. "12CZ".
std::string Types(const std::vector<RawMessage>& messages);

}  // namespace pgfleet::testing
