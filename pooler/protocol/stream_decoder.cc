#include "pooler/protocol/stream_decoder.h"

#include <algorithm>

namespace pgfleet::protocol {

StreamDecoder::Piece StreamDecoder::Peek(std::span<const uint8_t> data) const {
  Piece piece;
  if (data.empty()) return piece;
  if (remaining_ > 0) {
    piece.kind = Kind::kContinuation;
    piece.bytes = data.first(std::min(remaining_, data.size()));
    return piece;
  }
  switch (PeekHeader(data, max_length_, &piece.header)) {
    case FrameResult::kNeedMore:
      return piece;
    case FrameResult::kProtocolError:
      piece.kind = Kind::kProtocolError;
      return piece;
    case FrameResult::kMessage:
      break;
  }
  piece.kind = Kind::kMessage;
  piece.bytes = data.first(std::min(piece.header.total_size(), data.size()));
  return piece;
}

void StreamDecoder::Take(const Piece& piece) {
  if (piece.kind == Kind::kContinuation) {
    remaining_ -= piece.bytes.size();
  } else if (piece.kind == Kind::kMessage) {
    remaining_ = piece.header.total_size() - piece.bytes.size();
  }
}

FrameResult StreamDecoder::PeekWhole(std::span<const uint8_t> data, uint32_t max_length,
                                     Piece* out) {
  const StreamDecoder decoder(max_length);
  *out = decoder.Peek(data);
  if (out->kind == Kind::kProtocolError) return FrameResult::kProtocolError;
  if (!out->whole()) return FrameResult::kNeedMore;
  return FrameResult::kMessage;
}

}  // namespace pgfleet::protocol
