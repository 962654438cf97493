// Typed views over backend (server -> client) message bodies. `body` is the message without its
// 5-byte header; views point into it and live no longer than it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"

namespace pgfleet::protocol {

enum class AuthRequest : int32_t {
  kOk = 0,
  kCleartext = 3,
  kMd5 = 5,
  kSasl = 10,
  kSaslContinue = 11,
  kSaslFinal = 12,
};

struct AuthenticationView {
  int32_t code = 0;
  std::span<const uint8_t> data;  // md5: 4-byte salt; SASL: mechanisms or exchange data
};
absl::StatusOr<AuthenticationView> ParseAuthentication(std::span<const uint8_t> body);
// True when the NUL-separated mechanism list of an AuthenticationSASL body names `mechanism`.
bool SaslOffers(std::span<const uint8_t> mechanisms, std::string_view mechanism);

struct ParameterStatusView {
  std::string_view name;
  std::string_view value;
};
absl::StatusOr<ParameterStatusView> ParseParameterStatus(std::span<const uint8_t> body);

struct BackendKeyDataView {
  uint32_t pid = 0;
  std::span<const uint8_t> secret;
};
absl::StatusOr<BackendKeyDataView> ParseBackendKeyData(std::span<const uint8_t> body);

// 'I', 'T' or 'E'; error for anything else.
absl::StatusOr<char> ParseReadyForQuery(std::span<const uint8_t> body);

absl::StatusOr<std::string_view> ParseCommandComplete(std::span<const uint8_t> body);

// The fields of an ErrorResponse/NoticeResponse that pgfleet uses.
struct ErrorFields {
  std::string_view severity;  // V (non-localized) when present, else S
  std::string_view sqlstate;  // C
  std::string_view message;   // M
  std::string_view detail;    // D
  std::string_view routine;   // R: the server's source routine, never translated
};
absl::StatusOr<ErrorFields> ParseErrorFields(std::span<const uint8_t> body);

}  // namespace pgfleet::protocol
