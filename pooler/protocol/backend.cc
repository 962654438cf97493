// Backend message body parsers.
#include "pooler/protocol/backend.h"

#include "pooler/base/strings.h"
#include "pooler/protocol/reader.h"

namespace pgfleet::protocol {
namespace base = ::pgfleet::base;
namespace {
absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(base::StrCat("malformed ", what, " message"));
}
}  // namespace

absl::StatusOr<AuthenticationView> ParseAuthentication(std::span<const uint8_t> body) {
  Reader r(body);
  AuthenticationView out;
  if (!r.ReadInt32(&out.code)) return Malformed("Authentication");
  out.data = r.Rest();
  if (out.code == static_cast<int32_t>(AuthRequest::kMd5) && out.data.size() != 4) {
    return Malformed("AuthenticationMD5Password");
  }
  return out;
}

bool SaslOffers(std::span<const uint8_t> mechanisms, std::string_view mechanism) {
  Reader r(mechanisms);
  std::string_view name;
  while (r.ReadCString(&name) && !name.empty()) {
    if (name == mechanism) return true;
  }
  return false;
}

absl::StatusOr<ParameterStatusView> ParseParameterStatus(std::span<const uint8_t> body) {
  Reader r(body);
  ParameterStatusView out;
  if (!r.ReadCString(&out.name) || !r.ReadCString(&out.value) || !r.empty()) {
    return Malformed("ParameterStatus");
  }
  return out;
}

absl::StatusOr<BackendKeyDataView> ParseBackendKeyData(std::span<const uint8_t> body) {
  Reader r(body);
  int32_t pid = 0;
  if (!r.ReadInt32(&pid) || r.remaining() < 4 || r.remaining() > 256) {
    return Malformed("BackendKeyData");
  }
  return BackendKeyDataView{static_cast<uint32_t>(pid), r.Rest()};
}

absl::StatusOr<char> ParseReadyForQuery(std::span<const uint8_t> body) {
  if (body.size() != 1 || (body[0] != 'I' && body[0] != 'T' && body[0] != 'E')) {
    return Malformed("ReadyForQuery");
  }
  return static_cast<char>(body[0]);
}

absl::StatusOr<std::string_view> ParseCommandComplete(std::span<const uint8_t> body) {
  Reader r(body);
  std::string_view tag;
  if (!r.ReadCString(&tag) || !r.empty()) return Malformed("CommandComplete");
  return tag;
}

absl::StatusOr<ErrorFields> ParseErrorFields(std::span<const uint8_t> body) {
  Reader r(body);
  ErrorFields out;
  while (true) {
    uint8_t code = 0;
    if (!r.ReadByte(&code)) return Malformed("ErrorResponse");
    if (code == 0) break;
    std::string_view value;
    if (!r.ReadCString(&value)) return Malformed("ErrorResponse");
    switch (code) {
      case 'S':
        if (out.severity.empty()) out.severity = value;
        break;
      case 'V':
        out.severity = value;
        break;
      case 'C':
        out.sqlstate = value;
        break;
      case 'M':
        out.message = value;
        break;
      case 'D':
        out.detail = value;
        break;
      case 'R':
        out.routine = value;
        break;
      default:
        break;
    }
  }
  if (!r.empty()) return Malformed("ErrorResponse");
  return out;
}

}  // namespace pgfleet::protocol
