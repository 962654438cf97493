// What workers of one pod tell each other to share a pool (docs/architecture.md, "One pool per
// pod"): a request for an idle server, a server handed over (its socket travels beside the message
// with SCM_RIGHTS), word that room was freed, and a new client connection passed on (docs/
// architecture.md, "Client balance"). Pure: encoded to and decoded from bytes, so unit
// tests and a fuzzer drive it; a malformed message is an error, never a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pgfleet::pool {

// Everything pgfleet knows of a server connection, so the receiving worker serves it exactly as
// the sender would have.
struct ServerHandoff {
  uint32_t backend_pid = 0;
  std::vector<uint8_t> backend_secret;
  // Monotonic times in microseconds (CLOCK_MONOTONIC is the same clock in every process of the
  // machine): server_lifetime and server_idle_timeout keep counting across the move.
  int64_t created_at_us = 0;
  int64_t last_used_at_us = 0;
  // Which of the database's hosts it is connected to (cancels go there; its role is that host's).
  std::string host;
  uint32_t port = 0;
  // Every ParameterStatus of the login, in order (welcomes new clients).
  std::vector<std::pair<std::string, std::string>> login_params;
  // The tracked parameters as the server has them now, by name (only those set).
  std::vector<std::pair<std::string, std::string>> tracked_params;
  // The Parse tails (query, NUL, parameter types) of the prepared statements the server has,
  // least recently used first; their server-side names derive from the tails.
  std::vector<std::string> statements;
  // The schema epoch of each statement not of epoch 0 (PreparedStatement::epoch), as (index into
  // `statements`, epoch), by increasing index: the server has it under that epoch's name.
  std::vector<std::pair<uint32_t, uint64_t>> statement_epochs;
  // False when the statements did not fit in one message and were left out: the receiver must
  // DEALLOCATE ALL before it uses the server (its names would collide with a re-Parse).
  bool statements_complete = true;

  bool operator==(const ServerHandoff&) const = default;
};

struct HandoffMessage {
  enum class Kind : uint8_t {
    kRequest = 1,  // `from` has a client waiting for a server of the pool and the pod is full
    kServer = 2,   // a server of the pool, from `from`; its socket is attached
    kRoom = 3,     // `from` closed a server of the pool it could not hand over: room is free
    // `from` has clients waiting and the pod's budget of `database` (when not empty) and of the
    // server user `user` (when not empty) is full, not the pool: close an idle server of a pool
    // that shares it, then answer kRoom.
    kEvict = 4,
    // A client connection `from` accepted and passes on before reading a byte of it (even
    // client balance); its socket is attached, and `peer_address` is what accept() said.
    kClient = 5,
  };
  Kind kind = Kind::kRequest;
  uint32_t from = 0;  // the sender's local peer id
  std::string database;
  std::string user;
  ServerHandoff server;      // kServer only
  std::string peer_address;  // kClient only

  bool operator==(const HandoffMessage&) const = default;
};

// The most bytes one encoded message may take (one SOCK_SEQPACKET datagram). A server whose
// statements would not fit is encoded without them and with statements_complete = false.
inline constexpr size_t kMaxHandoffMessageBytes = 64 * 1024;

// `server` is encoded for kServer only and `peer_address` for kClient only (the other kinds
// decode with defaults). The result is
// at most kMaxHandoffMessageBytes unless the login and tracked parameters alone exceed it.
std::string EncodeHandoff(const HandoffMessage& message);
// InvalidArgumentError for anything EncodeHandoff could not have written: another version, an
// unknown kind, a truncation, a count or length past the end, trailing bytes, or more than
// kMaxHandoffMessageBytes. What decodes re-encodes to the same bytes.
absl::StatusOr<HandoffMessage> DecodeHandoff(std::string_view bytes);

}  // namespace pgfleet::pool
