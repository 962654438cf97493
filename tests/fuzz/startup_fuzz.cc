// Fuzzes the untyped packets a client opens with (StartupMessage, SSLRequest, GSSENCRequest,
// CancelRequest): PeekStartupLength then ParseStartupPacket, as ClientConn::HandleStartupData
// drives them. A packet that parses must survive a build/parse round trip unchanged.
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "pooler/protocol/builders.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/startup.h"
#include "tests/fuzz/fuzz_check.h"

namespace pgfleet::protocol {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void CheckRoundTrip(const StartupPacket& packet) {
  StringSink sink;
  if (packet.kind == StartupKind::kStartup) {
    std::vector<std::pair<std::string_view, std::string_view>> params;
    for (const auto& [name, value] : packet.parameters) params.emplace_back(name, value);
    BuildStartupMessage(sink, packet.protocol_version, params);
  } else if (packet.kind == StartupKind::kCancelRequest) {
    BuildCancelRequest(sink, packet.cancel_pid, packet.cancel_secret);
  } else {
    return;
  }
  auto again = ParseStartupPacket(Bytes(sink.bytes()));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->kind == packet.kind);
  FUZZ_CHECK(again->parameters == packet.parameters);
  FUZZ_CHECK(again->cancel_pid == packet.cancel_pid);
  FUZZ_CHECK(again->cancel_secret == packet.cancel_secret);
}

}  // namespace
}  // namespace pgfleet::protocol

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pgfleet::protocol;
  std::span<const uint8_t> input(data, size);
  // The parser alone, on whatever it is given (it must check the length word itself).
  auto direct = ParseStartupPacket(input);
  if (direct.ok()) {
    FUZZ_CHECK(size >= kStartupHeaderSize);
    CheckRoundTrip(*direct);
  }
  // As the client connection drives it: packets back to back until one is bad or incomplete.
  while (!input.empty()) {
    uint32_t length = 0;
    const FrameResult result = PeekStartupLength(input, &length);
    if (result != FrameResult::kMessage) break;
    FUZZ_CHECK(length >= kStartupHeaderSize && length <= kMaxStartupPacketLength);
    FUZZ_CHECK(length <= input.size());
    auto packet = ParseStartupPacket(input.subspan(0, length));
    if (!packet.ok()) break;
    for (const auto& [name, value] : packet->parameters) FUZZ_CHECK(!name.empty());
    CheckRoundTrip(*packet);
    input = input.subspan(length);
  }
  return 0;
}
