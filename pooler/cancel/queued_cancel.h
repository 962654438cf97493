// A CancelRequest for a client whose query still waits in pgfleet for a server, decided without
// sockets: the query is answered as PostgreSQL answers a cancelled one (ERROR 57014, then
// ReadyForQuery) and its messages are dropped, so it never runs. What the client queued after the
// query stays queued, in its place (docs/architecture.md, "Cancel keys").
//
// The query is what PostgreSQL would be running when the cancel came: the simple Query (or
// FunctionCall) at the front of the queue, or the extended-protocol batch at the front up to and
// including its Sync. As in PostgreSQL, the error goes out at once, and the ReadyForQuery once the
// query's last message (the Sync of a batch) has arrived; bytes of it that arrive later are dropped
// then (ClientStream::cancelled_rest), so they can never run as a query of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pooler/protocol/byte_sink.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

struct QueuedCancelVerdict {
  // The query was answered as cancelled: the error (and, once it was whole, ReadyForQuery) went
  // to `to_client`. False: there was no query to cancel (nothing whole enough at the front to tell
  // what it is, a lone Sync or Terminate, COPY messages outside COPY, or a query already cancelled
  // and still being dropped), and nothing was written or consumed.
  bool cancelled = false;
  size_t consumed = 0;          // leading bytes of the queue dropped
  bool protocol_error = false;  // a bad length while dropping: FATAL 08P01 and close the client
};

// `queued` is what the client sent that no server has seen (its input buffer); `tx_status` is the
// transaction status its ReadyForQuery reports ('I' for a queued client: it holds no server, so it
// is outside any transaction). Appends the answers to `to_client` and sets
// `client.cancelled_rest` when the query's end has not arrived yet.
QueuedCancelVerdict CancelQueuedQuery(ClientStream& client, std::span<const uint8_t> queued,
                                      char tx_status, protocol::ByteSink& to_client);

struct CancelledRestVerdict {
  size_t consumed = 0;          // leading bytes of `data` dropped
  bool protocol_error = false;  // a bad length: FATAL 08P01 and close the client
};

// Drops the front of `data` that still belongs to a cancelled query (client.cancelled_rest), and
// appends ReadyForQuery to `to_client` when its end arrives (cancelled_rest is then kNone and the
// rest of `data` is the client's next query). Consumes nothing when nothing is being dropped.
CancelledRestVerdict DropCancelledRest(ClientStream& client, std::span<const uint8_t> data,
                                       char tx_status, protocol::ByteSink& to_client);

}  // namespace pgfleet::pool
