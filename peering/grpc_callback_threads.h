// Keeps gRPC's callback threads alive for the life of the process.
//
// Debian's gRPC (1.51) runs the callbacks of the callback API on a few shared "nexting" threads
// that poll one process-wide completion queue. Channels and servers reference-count that queue.
// When a callback drops the last reference (it destroys the last ClientContext holding a
// channel, e.g. a call that finishes after its stub was destroyed at shutdown), gRPC shuts the
// queue down from that very thread, "joins" itself, deletes the queue, and then polls it once
// more: a double free that aborted workers at exit.
//
// Every class that makes callback calls pins the queue first, so its reference count never
// reaches zero and the threads end with the process.
#pragma once

namespace pgfleet::peering {

// Idempotent and thread-safe; the first call starts an in-process gRPC server without ports.
void PinGrpcCallbackThreads();

}  // namespace pgfleet::peering
