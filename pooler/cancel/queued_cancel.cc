// Cancelling a query that waits for a server: what is dropped and what the client is answered.
#include "pooler/cancel/queued_cancel.h"

#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/stream_decoder.h"

namespace pgfleet::pool {

QueuedCancelVerdict CancelQueuedQuery(ClientStream& client, std::span<const uint8_t> queued,
                                      char tx_status, protocol::ByteSink& to_client) {
  QueuedCancelVerdict verdict;
  // A second cancel while the first one's query is still being dropped has nothing to stop, as in
  // PostgreSQL, which ignores a cancel while it skips to the Sync. A queued client is always
  // between messages (the release rule), so the front of `queued` starts one.
  if (client.cancelled_rest != CancelledRest::kNone || client.mid_message()) return verdict;
  const auto front = client.decoder.Peek(queued);
  // Without a whole header there is no telling what the query is; PostgreSQL too ignores a cancel
  // while it reads a command. A bad header is the relay's to reject when the client is served.
  if (front.kind != protocol::StreamDecoder::Kind::kMessage ||
      !protocol::CheckFrontendHeader(front.header).ok()) {
    return verdict;
  }
  switch (front.header.type) {
    case 'Q':
    case 'F':
      client.cancelled_rest = CancelledRest::kMessage;
      break;
    case 'S':  // a batch with nothing in it: nothing runs
    case 'X':
    case 'd':  // COPY messages outside COPY, which PostgreSQL ignores
    case 'c':
    case 'f':
      return verdict;
    default:  // Parse, Bind, Describe, Execute, Close, Flush: an extended-protocol batch
      client.cancelled_rest = CancelledRest::kThroughSync;
      break;
  }
  verdict.cancelled = true;
  protocol::BuildErrorResponse(to_client, "ERROR", protocol::sqlstate::kQueryCanceled,
                               "canceling statement due to user request");
  const CancelledRestVerdict dropped = DropCancelledRest(client, queued, tx_status, to_client);
  verdict.consumed = dropped.consumed;
  verdict.protocol_error = dropped.protocol_error;
  return verdict;
}

CancelledRestVerdict DropCancelledRest(ClientStream& client, std::span<const uint8_t> data,
                                       char tx_status, protocol::ByteSink& to_client) {
  CancelledRestVerdict verdict;
  size_t pos = 0;
  // Pieces stream through the client's decoder, so a large message is dropped as it arrives
  // instead of being buffered whole.
  while (client.cancelled_rest != CancelledRest::kNone && pos < data.size()) {
    const auto piece = client.decoder.Peek(data.subspan(pos));
    if (piece.kind == protocol::StreamDecoder::Kind::kNeedMore) break;
    if (piece.kind == protocol::StreamDecoder::Kind::kProtocolError ||
        (piece.kind == protocol::StreamDecoder::Kind::kMessage &&
         !protocol::CheckFrontendHeader(piece.header).ok())) {
      verdict.protocol_error = true;
      break;
    }
    // A Sync has no body, so it is whole once its header is here.
    const bool sync = piece.kind == protocol::StreamDecoder::Kind::kMessage &&
                      piece.header.type == 'S' && piece.whole();
    client.decoder.Take(piece);
    pos += piece.bytes.size();
    const bool ended =
        client.cancelled_rest == CancelledRest::kMessage ? !client.decoder.mid_message() : sync;
    if (ended) {
      protocol::BuildReadyForQuery(to_client, tx_status);
      client.cancelled_rest = CancelledRest::kNone;
    }
  }
  verdict.consumed = pos;
  return verdict;
}

}  // namespace pgfleet::pool
