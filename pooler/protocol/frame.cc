// Header validation and the per-direction "needs whole body" tables.
#include "pooler/protocol/frame.h"

#include <array>

#include "absl/strings/str_cat.h"

#include "pooler/protocol/reader.h"

namespace pgfleet::protocol {
namespace {

constexpr std::array<bool, 256> MakeTable(std::initializer_list<char> types) {
  std::array<bool, 256> table{};
  for (char t : types) table[static_cast<uint8_t>(t)] = true;
  return table;
}

// Frontend: Parse, Bind, Close and Describe carry statement names (prepared statement renaming),
// Query is inspected for logging and statement-mode checks, 'p' is an auth response.
constexpr auto kFrontendNeedsBody =
    MakeTable({'P', 'B', 'C', 'D', 'Q', 'p', 'X', 'S', 'H', 'c', 'f'});
// Backend: ReadyForQuery, ParameterStatus, errors, CommandComplete tags, COPY mode switches,
// authentication and key data. Row data ('D') and CopyData ('d') stream through.
constexpr auto kBackendNeedsBody =
    MakeTable({'Z', 'S', 'E', 'C', 'G', 'H', 'W', 'R', 'K', 'v', '1', '2', '3', 'n', 'I', 's'});

}  // namespace

FrameResult PeekHeader(std::span<const uint8_t> data, uint32_t max_length, FrameHeader* out) {
  if (data.size() < kHeaderSize) return FrameResult::kNeedMore;
  out->type = data[0];
  out->length = LoadBigEndian32(data.data() + 1);
  if (out->length < 4 || out->length > max_length) return FrameResult::kProtocolError;
  return FrameResult::kMessage;
}

FrameResult PeekStartupLength(std::span<const uint8_t> data, uint32_t* length) {
  if (data.size() < 4) return FrameResult::kNeedMore;
  *length = LoadBigEndian32(data.data());
  if (*length < kStartupHeaderSize || *length > kMaxStartupPacketLength) {
    return FrameResult::kProtocolError;
  }
  return data.size() < *length ? FrameResult::kNeedMore : FrameResult::kMessage;
}

bool FrontendNeedsBody(uint8_t type) { return kFrontendNeedsBody[type]; }

absl::Status CheckFrontendHeader(const FrameHeader& header) {
  // PostgreSQL's PQ_SMALL_MESSAGE_LIMIT and PQ_LARGE_MESSAGE_LIMIT (src/include/libpq/libpq.h),
  // compared with the length word as pq_getmessage() does.
  constexpr uint32_t kSmall = 10000;
  constexpr uint32_t kLarge = 0x3fffffff - 1;
  uint32_t limit = 0;
  switch (header.type) {
    case 'B':
    case 'F':
    case 'P':
    case 'Q':
    case 'd':
      limit = kLarge;
      break;
    case 'C':
    case 'D':
    case 'E':
    case 'X':
    case 'f':
      limit = kSmall;
      break;
    case 'H':
    case 'S':
    case 'c':
      limit = 4;  // no body
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("invalid frontend message type ", static_cast<int>(header.type)));
  }
  if (header.length > limit) return absl::InvalidArgumentError("invalid message length");
  return absl::OkStatus();
}
bool BackendNeedsBody(uint8_t type) { return kBackendNeedsBody[type]; }

}  // namespace pgfleet::protocol
