// Framing of PostgreSQL v3 messages: the 5-byte typed header and the untyped startup packets.
// Validates lengths before anything is consumed (docs/architecture.md, "The wire codec").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace pgfleet::protocol {

inline constexpr size_t kHeaderSize = 5;         // type byte + Int32 length
inline constexpr size_t kStartupHeaderSize = 8;  // Int32 length + Int32 code
// PostgreSQL's MAX_STARTUP_PACKET_LENGTH (src/include/libpq/pqcomm.h).
inline constexpr uint32_t kMaxStartupPacketLength = 10000;
inline constexpr uint32_t kProtocol30 = 196608;  // 3 << 16
inline constexpr uint32_t kCancelRequestCode = 80877102;
inline constexpr uint32_t kSslRequestCode = 80877103;
inline constexpr uint32_t kGssEncRequestCode = 80877104;

enum class FrameResult { kNeedMore, kMessage, kProtocolError };

struct FrameHeader {
  uint8_t type = 0;
  uint32_t length = 0;  // as on the wire: includes itself, excludes the type byte
  size_t total_size() const { return size_t{length} + 1; }
  size_t body_size() const { return size_t{length} - 4; }
};

// Reads a typed header from the front of `data`. kProtocolError when the length is below 4 or
// above `max_length` (the configured max_packet_size).
FrameResult PeekHeader(std::span<const uint8_t> data, uint32_t max_length, FrameHeader* out);

// Reads the length of an untyped startup-class packet from the front of `data`; kProtocolError
// when it is shorter than 8 bytes or longer than kMaxStartupPacketLength.
FrameResult PeekStartupLength(std::span<const uint8_t> data, uint32_t* length);

// Which message bodies the relay must see whole (all others stream through in pieces). One
// constant table per direction, shared by every connection (docs/architecture.md, "The wire
// codec").
bool FrontendNeedsBody(uint8_t type);

// What PostgreSQL itself accepts from a logged-in client (postgres.c SocketBackend): a known type
// (Bind, Close, CopyData/Done/Fail, Describe, Execute, Flush, FunctionCall, Parse, Query, Sync,
// Terminate), within that type's length limit (PQ_SMALL_MESSAGE_LIMIT = 10000 for the small
// ones), and no body for Flush, Sync and CopyDone. InvalidArgument (the text PostgreSQL uses) for
// anything else. The relay checks every header with it: a message the server would answer with a
// FATAL or an ERROR that needs no reply must never reach a server that is shared, or the answer
// lands on the next client given that server.
absl::Status CheckFrontendHeader(const FrameHeader& header);
bool BackendNeedsBody(uint8_t type);

}  // namespace pgfleet::protocol
