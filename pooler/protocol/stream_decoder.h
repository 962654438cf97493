// The one frame loop: walks a chunk of a typed message stream (either direction) that may begin or
// end inside a message. A message is reported with as much of it as has arrived; the caller either
// waits for the rest (nothing taken) or takes what is here, and the remainder is then reported as
// continuation bytes in later steps. Relayed messages stream through in pieces this way, so a
// 1 GiB DataRow or CopyData never needs 1 GiB of buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pooler/protocol/frame.h"

namespace pgfleet::protocol {

class StreamDecoder {
 public:
  enum class Kind {
    kNeedMore,       // not even a whole header (or nothing) at the front
    kMessage,        // a message begins here: `header`, and `bytes` from its type byte on
    kContinuation,   // `bytes` continue a message begun in an earlier step
    kProtocolError,  // a length below 4 or above the limit
  };
  struct Piece {
    Kind kind = Kind::kNeedMore;
    FrameHeader header;              // kMessage only
    std::span<const uint8_t> bytes;  // as much of the message (or its rest) as is here
    bool whole() const { return kind == Kind::kMessage && bytes.size() == header.total_size(); }
    // The message body; only for whole messages.
    std::span<const uint8_t> body() const { return bytes.subspan(kHeaderSize); }
  };

  explicit StreamDecoder(uint32_t max_length) : max_length_(max_length) {}

  // What comes first in `data` (the unconsumed input); takes nothing.
  Piece Peek(std::span<const uint8_t> data) const;
  // Takes all of `piece.bytes`: a whole message, the part of one that is here (the rest will be
  // continuation), or a continuation.
  void Take(const Piece& piece);

  // True between the first and the last piece of a message taken in parts.
  bool mid_message() const { return remaining_ > 0; }
  void set_max_length(uint32_t max_length) { max_length_ = max_length; }

  // Convenience for callers that only handle whole messages (login, auth, admin console): the
  // first message of `data` when it is complete; kNeedMore otherwise.
  static FrameResult PeekWhole(std::span<const uint8_t> data, uint32_t max_length, Piece* out);

 private:
  uint32_t max_length_;
  size_t remaining_ = 0;  // bytes of the current message not yet taken
};

}  // namespace pgfleet::protocol
