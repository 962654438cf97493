// Frontend message body parsers.
#include "pooler/protocol/frontend.h"

#include "pooler/base/strings.h"
#include "pooler/protocol/reader.h"

namespace pgfleet::protocol {

absl::StatusOr<std::string_view> ParsePasswordMessage(std::span<const uint8_t> body) {
  Reader r(body);
  std::string_view password;
  if (!r.ReadCString(&password) || !r.empty()) {
    return absl::InvalidArgumentError("malformed password message");
  }
  return password;
}

absl::StatusOr<SaslInitialResponseView> ParseSaslInitialResponse(std::span<const uint8_t> body) {
  Reader r(body);
  SaslInitialResponseView out;
  int32_t length = 0;
  if (!r.ReadCString(&out.mechanism) || !r.ReadInt32(&length)) {
    return absl::InvalidArgumentError("malformed SASLInitialResponse message");
  }
  // -1 means "no data"; like PostgreSQL (pq_getmsgend), nothing may follow in either case.
  std::span<const uint8_t> data;
  if (length < -1 || (length >= 0 && !r.ReadBytes(static_cast<size_t>(length), &data)) ||
      !r.empty()) {
    return absl::InvalidArgumentError("malformed SASLInitialResponse message");
  }
  out.data = base::AsText(data);
  return out;
}

absl::StatusOr<std::string_view> ParseQuery(std::span<const uint8_t> body) {
  Reader r(body);
  std::string_view sql;
  if (!r.ReadCString(&sql) || !r.empty()) {
    return absl::InvalidArgumentError("malformed Query message");
  }
  return sql;
}

}  // namespace pgfleet::protocol
