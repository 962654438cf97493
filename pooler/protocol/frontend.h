// Typed views over frontend (client -> server) message bodies the pooler itself consumes.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"

namespace pgfleet::protocol {

// PasswordMessage: a NUL-terminated password (cleartext or "md5...").
absl::StatusOr<std::string_view> ParsePasswordMessage(std::span<const uint8_t> body);

struct SaslInitialResponseView {
  std::string_view mechanism;
  std::string_view data;  // empty when the client sent length -1
};
absl::StatusOr<SaslInitialResponseView> ParseSaslInitialResponse(std::span<const uint8_t> body);

// Query: the SQL text.
absl::StatusOr<std::string_view> ParseQuery(std::span<const uint8_t> body);

}  // namespace pgfleet::protocol
