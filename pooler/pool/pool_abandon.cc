// Pool: a server whose client went away mid-query (docs/architecture.md, "Abandoned queries").
// PostgreSQL gets a CancelRequest for it at once, and another while the abandoned work still runs,
// and the server stays open and counted against every budget until it has answered everything it
// owes; then it is rolled back if a transaction is open and serves again, or it is closed if it is
// not clean within server_connect_timeout.
// Closing its socket instead would leave the backend running the query while pgfleet opened a new
// server in its place, beyond max_db_connections.
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/pool_host.h"

namespace pgfleet::pool {

void Pool::AbandonServer(ServerConn* server, ClientConn* client) {
  const absl::Time now = context_.loop().now();
  protocol::StringSink ending;
  const bool reusable = server->relay().Abandon(now, ending);
  CancelHandler& cancels = host_->cancels();
  // Its key keeps naming the query while the server runs it: a cancel the client sent just before
  // it left may reach this worker only now, forwarded by a sibling or another pod, and PostgreSQL
  // may have missed the one sent below (a backend not yet reading the query ignores it).
  if (reusable) cancels.KeepCancelKey(*client, *server);
  server->Detach();
  client->Detach();
  MoveClient(client, ClientState::kClosed);
  WorkerCounters& counters = context_.counters();
  if (!reusable) {
    // Left inside a message: nothing can complete it, so the socket closes, and the cancel goes
    // first so that the backend does not run on until it next writes.
    if (server->query_in_progress() && cancels.CancelAbandonedQuery(*server)) {
      ++counters.cancels_abandoned;
    }
    server->Close("client disconnected inside a message");
    return;
  }
  MoveServer(server, ServerState::kDraining);
  server->BeginDrain(now);
  if (!ending.bytes().empty() && !server->SendSink(ending)) {
    server->Close("write failed");
    return;
  }
  // Not reused before the cancel has landed (kCanceling's rule), so it never hits the ROLLBACK or
  // the next client's query.
  if (server->query_in_progress() && cancels.CancelQuery(*server, "abandoned")) {
    ++counters.cancels_abandoned;
    server->repeat_cancel().Sent(server->relay().batches_owed());
  }
  PGFLEET_LOG(kInfo, "server_draining", "server=", server->id(), " db=", base::LogQuote(db_.name),
              " user=", base::LogQuote(user_),
              " cancel_sent=", server->cancels_in_flight() > 0 ? "true" : "false");
  ContinueDrain(server);
}

void Pool::ContinueDrain(ServerConn* server) {
  if (server->state() != ServerState::kDraining || server->cancels_in_flight() > 0) return;
  switch (server->relay().NextDrainStep()) {
    case Relay::DrainStep::kWait:
      return;
    case Relay::DrainStep::kRollBack:
      if (server->close_on_release()) {
        // Closing rolls back too, and nothing runs any more.
        server->Close("closed after its client left");
        return;
      }
      if (!server->SendHiddenQuery("ROLLBACK")) server->Close("write failed");
      return;
    case Relay::DrainStep::kClean:
      PGFLEET_LOG(kDebug, "server_drained", "server=", server->id(), " after_ms=",
                  absl::ToInt64Milliseconds(context_.loop().now() - server->drain_started_at()));
      ReturnServer(server);
      return;
  }
}

void Pool::ExpireDraining(absl::Time now) {
  const absl::Duration limit = context_.config().pool.server_connect_timeout;
  for (ServerConn* server : servers_.In({ServerState::kDraining})) {
    if (now - server->drain_started_at() > limit) {
      // Its backend may still be running: one last cancel, sent whatever happens to the socket.
      if (server->query_in_progress()) (void)host_->cancels().CancelAbandonedQuery(*server);
      server->Close("not clean within server_connect_timeout after its client left");
      continue;
    }
    // Another cancel while the abandoned work still runs (RepeatCancel says when): only for the
    // client's work (pgfleet's own ROLLBACK is not cancelled), one at a time, and CancelQuery
    // checks again at connect that the same work still runs. The janitor looks every 100 ms.
    const size_t owed = server->relay().batches_owed();
    if (server->query_in_progress() && server->cancels_in_flight() == 0 &&
        server->repeat_cancel().Due(now, owed) &&
        host_->cancels().CancelQuery(*server, "abandoned_again")) {
      server->repeat_cancel().Sent(owed);
      ++context_.counters().cancels_repeated;
      PGFLEET_LOG(kInfo, "cancel_repeated", "server=", server->id(),
                  " draining_ms=", absl::ToInt64Milliseconds(now - server->drain_started_at()));
    }
  }
}

}  // namespace pgfleet::pool
