// Helpers shared by the protocol tests: byte spans over strings, and a writer for hand-made
// packets.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/reader.h"

namespace pgfleet::protocol::testing {

inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

inline std::string_view AsString(std::span<const uint8_t> s) {
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

// Big-endian Int32 / Int16 as wire bytes.
inline std::string I32(uint32_t v) {
  uint8_t b[4];
  StoreBigEndian32(b, v);
  return std::string(reinterpret_cast<const char*>(b), 4);
}
inline std::string I16(uint16_t v) {
  return std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
}

// A typed message: type byte, Int32 length (including itself), body.
inline std::string Typed(char type, std::string_view body) {
  return std::string(1, type) + I32(static_cast<uint32_t>(body.size() + 4)) + std::string(body);
}

// An untyped startup-class packet: Int32 length (including itself), Int32 code, rest.
inline std::string Untyped(uint32_t code, std::string_view rest) {
  return I32(static_cast<uint32_t>(rest.size() + 8)) + I32(code) + std::string(rest);
}

// The body of the single whole typed message `message` (after checking its header is exact).
inline std::span<const uint8_t> BodyOf(const std::string& message) {
  FrameHeader header;
  if (PeekHeader(AsBytes(message), 1u << 30, &header) != FrameResult::kMessage ||
      header.total_size() != message.size()) {
    return {};
  }
  return AsBytes(message).subspan(kHeaderSize);
}

// The bytes a builder writes: Build([&](ByteSink& sink) { BuildSync(sink); }).
template <typename Fn>
std::string Build(Fn fn) {
  StringSink sink;
  fn(sink);
  return sink.bytes();
}

}  // namespace pgfleet::protocol::testing
