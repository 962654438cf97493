// Parsing of the untyped packets a client may open with: StartupMessage, SSLRequest,
// GSSENCRequest and CancelRequest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pgfleet::protocol {

enum class StartupKind { kStartup, kSslRequest, kGssEncRequest, kCancelRequest };

struct StartupPacket {
  StartupKind kind = StartupKind::kStartup;
  uint32_t protocol_version = 0;  // kStartup only
  // kStartup: every name/value pair in order ("user", "database", "options", GUCs, "_pq_.*").
  std::vector<std::pair<std::string, std::string>> parameters;
  // kCancelRequest: the key as sent (ProcessID and secret).
  uint32_t cancel_pid = 0;
  std::vector<uint8_t> cancel_secret;
};

// `packet` is one whole startup-class packet including its length word (see PeekStartupLength).
// Errors describe what is wrong for a FATAL to the client: InvalidArgument for 08P01, and
// Unimplemented (a protocol major other than 3) for 0A000, as PostgreSQL answers.
absl::StatusOr<StartupPacket> ParseStartupPacket(std::span<const uint8_t> packet);

}  // namespace pgfleet::protocol
