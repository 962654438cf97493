// Startup-class packet parser.
#include "pooler/protocol/startup.h"

#include "pooler/base/strings.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/reader.h"

namespace pgfleet::protocol {
namespace base = ::pgfleet::base;

absl::StatusOr<StartupPacket> ParseStartupPacket(std::span<const uint8_t> packet) {
  Reader reader(packet);
  int32_t length = 0;
  int32_t code = 0;
  if (!reader.ReadInt32(&length) || !reader.ReadInt32(&code) ||
      static_cast<size_t>(length) != packet.size()) {
    return absl::InvalidArgumentError("invalid startup packet length");
  }
  StartupPacket out;
  const uint32_t ucode = static_cast<uint32_t>(code);
  if (ucode == kSslRequestCode || ucode == kGssEncRequestCode) {
    if (!reader.empty()) return absl::InvalidArgumentError("invalid length of encryption request");
    out.kind = ucode == kSslRequestCode ? StartupKind::kSslRequest : StartupKind::kGssEncRequest;
    return out;
  }
  if (ucode == kCancelRequestCode) {
    int32_t pid = 0;
    // Protocol 3.0 keys are 4 bytes; 3.2 allows up to 256 (docs/architecture.md, "Cancel keys").
    if (!reader.ReadInt32(&pid) || reader.remaining() < 4 || reader.remaining() > 256) {
      return absl::InvalidArgumentError("invalid cancel request length");
    }
    out.kind = StartupKind::kCancelRequest;
    out.cancel_pid = static_cast<uint32_t>(pid);
    auto rest = reader.Rest();
    out.cancel_secret.assign(rest.begin(), rest.end());
    return out;
  }
  if (ProtocolMajor(ucode) != ProtocolMajor(kProtocolLatest)) {
    // PostgreSQL's words and SQLSTATE (0A000: the caller maps kUnimplemented to it).
    return absl::UnimplementedError(
        base::StrCat("unsupported frontend protocol ", ProtocolMajor(ucode), ".",
                     ProtocolMinor(ucode), ": server supports 3.0 to ",
                     ProtocolMajor(kProtocolLatest), ".", ProtocolMinor(kProtocolLatest)));
  }
  out.kind = StartupKind::kStartup;
  out.protocol_version = ucode;
  while (true) {
    std::string_view name;
    if (!reader.ReadCString(&name)) {
      return absl::InvalidArgumentError("invalid startup packet layout: missing terminator");
    }
    if (name.empty()) break;
    std::string_view value;
    if (!reader.ReadCString(&value)) {
      return absl::InvalidArgumentError(
          base::StrCat("invalid startup packet layout: missing value for \"", name, "\""));
    }
    out.parameters.emplace_back(std::string(name), std::string(value));
  }
  if (!reader.empty()) {
    return absl::InvalidArgumentError("invalid startup packet layout: data after terminator");
  }
  return out;
}

}  // namespace pgfleet::protocol
