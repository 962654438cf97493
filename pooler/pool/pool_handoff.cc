// Pool: one pool per pod. A worker with waiting clients and no room in the pod takes an idle
// server from a sibling; a worker whose server went idle while a sibling's clients wait gives it
// (docs/architecture.md, "One pool per pod").
#include <unistd.h>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/pool_host.h"

namespace pgfleet::pool {

namespace {
// One request at a time per pool: a sibling answers within microseconds, or it had nothing
// (its idle server was taken meanwhile) and the next ServeWaiting asks again.
constexpr absl::Duration kAskAgainAfter = absl::Milliseconds(20);
// A released server goes to a sibling only when the sibling's oldest client has waited more than
// twice as long as this worker's, plus this: queues that move at the same pace (a balanced load,
// however busy) move no servers, while a queue stuck behind long queries gets servers within
// milliseconds. Well above a hand-off's cost, well below what a user notices.
constexpr absl::Duration kYieldAfter = absl::Milliseconds(5);
// An idle server moves to a sibling once it has been idle this long: a server released a moment
// ago usually serves its own worker's next transaction (a client's next query follows its last
// answer within tens of microseconds), and moving it would only have it move back. Short enough
// that a queued client still gets a sibling's server within a millisecond (issue 13's goal),
// which the event loop's microsecond timers make possible.
constexpr absl::Duration kSettle = absl::Microseconds(250);
}  // namespace

void Pool::AskSiblingForRoom() {
  ServerMover* mover = host_->server_mover();
  // Clients queued for a server, or logged in and waiting for the pool's first server to learn
  // what to welcome them with (a server that moves brings its login's parameters).
  const bool wanted = !clients_[ClientState::kWaiting].empty() ||
                      (!welcome_known_ && !clients_[ClientState::kWelcome].empty());
  if (mover == nullptr || !wanted) return;
  const absl::Time now = context_.loop().now();
  if (now - sibling_asked_at_ < kAskAgainAfter) return;
  const auto keys = PodKeysOf();
  if (!keys.has_value()) return;
  budget::PodServerCounts& pod = host_->budget().pod();
  const ServerBudget::FullBudgets full = host_->budget().BudgetsFullFor(*this);
  const bool pool_full = !full.database && !full.user;
  // The pool itself at its size in the pod: a sibling's idle server of it serves here. The
  // database's or the user's budget full: a sibling with an idle server in it (pools publish "has
  // an idle server" under their database's and user's keys too) closes one. Looked up before the
  // request is built: with no such sibling (always, in a one-worker pod) this runs on every
  // queued transaction.
  const std::optional<uint32_t> sibling =
      pod.SiblingWithIdle(pool_full ? keys->pool : (full.database ? keys->database : keys->user));
  if (!sibling.has_value()) return;
  HandoffMessage request;
  request.from = pod.worker();
  if (pool_full) {
    request.kind = HandoffMessage::Kind::kRequest;
    request.database = db_.name;
    request.user = user_;
  } else {
    request.kind = HandoffMessage::Kind::kEvict;
    if (full.database) request.database = db_.name;
    if (full.user) request.user = server_user();
  }
  if (mover->Send(*sibling, request, -1)) sibling_asked_at_ = now;
}

void Pool::OfferIdleServerToSibling() {
  if (host_->server_mover() == nullptr || servers_[ServerState::kIdle].empty() ||
      !clients_[ClientState::kWaiting].empty()) {
    return;
  }
  const auto keys = PodKeysOf();
  if (!keys.has_value()) return;
  budget::PodServerCounts& pod = host_->budget().pod();
  // One load in the common case: nobody in the pod waits for this pool.
  if (pod.WaitingTotal(keys->pool) <= 0) return;
  if (const auto oldest = pod.OldestWaitingSibling(keys->pool)) GiveIdleServer(oldest->worker);
}

void Pool::GiveIdleServer(uint32_t to) {
  ServerConn* server = servers_[ServerState::kIdle].front();  // the warmest
  if (server == nullptr || !clients_[ClientState::kWaiting].empty()) return;
  const absl::Time now = context_.loop().now();
  if (now - server->last_used_at() < kSettle) {
    // Just released: this worker's clients are likely about to use it again, and moving it now
    // would only have it move back. Give it if it is still idle a moment later.
    if (give_timer_ == 0) {
      give_timer_ = context_.loop().RunAfter(kSettle, [this, to] {
        give_timer_ = 0;
        GiveIdleServer(to);
      });
    }
    return;
  }
  HandOver(server, to);
}

bool Pool::YieldToSibling(ServerConn* server) {
  if (host_->server_mover() == nullptr) return false;
  const auto keys = PodKeysOf();
  if (!keys.has_value()) return false;
  budget::PodServerCounts& pod = host_->budget().pod();
  // Nobody else in the pod waits: the common case, one load.
  if (pod.WaitingTotal(keys->pool) <= published_waiting_) return false;
  // Every worker's clients wait for the pod's busy servers. A released server stays for this
  // worker's queue unless a sibling's client has waited clearly longer (kYieldAfter).
  const auto oldest = pod.OldestWaitingSibling(keys->pool);
  if (!oldest.has_value()) return false;
  const ClientConn* mine = clients_[ClientState::kWaiting].front();
  const absl::Time now = context_.loop().now();
  const absl::Duration my_wait =
      mine != nullptr ? now - mine->wait_started_at() : absl::ZeroDuration();
  const absl::Duration their_wait = now - absl::FromUnixMicros(oldest->since_us);
  if (their_wait <= 2 * my_wait + kYieldAfter) return false;
  return HandOver(server, oldest->worker);
}

bool Pool::HandOver(ServerConn* server, uint32_t to) {
  ServerMover* mover = host_->server_mover();
  if (mover == nullptr) return false;
  HandoffMessage message;
  message.from = host_->budget().pod().worker();
  message.database = db_.name;
  message.user = user_;
  if (server->tls_established() || server->has_pending_output() || !server->in().empty() ||
      !server->relay().applied_settings().empty()) {
    // A TLS session cannot move between processes: close it, so the sibling opens its own. Nor
    // do the settings clients left on it (the sibling would not know to reset them).
    server->Close(
        server->tls_established()      ? "closed to free room for a sibling worker (TLS)"
        : server->has_pending_output() ? "closed to free room for a sibling worker (output pending)"
        : !server->in().empty()        ? "closed to free room for a sibling worker (input pending)"
                                : "closed to free room for a sibling worker (client settings)");
    message.kind = HandoffMessage::Kind::kRoom;
    mover->Send(to, message, -1);
    return true;
  }
  message.kind = HandoffMessage::Kind::kServer;
  message.server = server->Describe();
  ServerBudget& budget = host_->budget();
  // The count moves first: if this worker dies right after the send, the supervisor must not
  // give the room of a server the sibling now holds back to the pod.
  budget.MovedOut(server->room(), to);
  if (!mover->Send(to, message, server->fd())) {
    budget.MoveFailed(server->room(), to);
    return false;
  }
  ++stats_.servers_handed_over;
  ++context_.counters().servers_handed_over;
  server->HandedOver();
  return true;
}

void Pool::ForgetHandedOver(ServerConn* server) {
  MoveServer(server, ServerState::kClosed);
  host_->DeleteServer(server);
}

void Pool::AdoptServer(int fd, const ServerHandoff& moved) {
  ServerConn* server = host_->AdoptServer(this, fd, moved);
  if (server == nullptr) {
    // Not registered: the sibling moved the room to us, give it back to the pod.
    if (const auto keys = PodKeysOf()) {
      host_->budget().pod().Release({keys->pool, keys->database, keys->user});
    }
    return;
  }
  // The request (if any) is answered: the next one may go at once, not after kAskAgainAfter.
  sibling_asked_at_ = absl::InfinitePast();
  const auto keys = PodKeysOf();
  ServerRoom room;
  if (keys.has_value()) room.keys = *keys;
  room.database = db_.name;
  room.server_user = server_user();
  host_->budget().MovedIn(room, server->backend_pid());
  server->set_room(std::move(room));
  servers_.Add(server);  // kIdle
  ++stats_.servers_adopted;
  ++context_.counters().servers_adopted;
  if (!HostOf(server).has_value()) {
    // A reload here removed its host before it arrived.
    server->Close("its host is no longer listed for the database");
    return;
  }
  LearnWelcome(server);
  if (!moved.statements_complete) {
    // Its statements did not fit in the message: the server has names this worker would Parse
    // again. Forget them all before anyone uses it.
    MoveServer(server, ServerState::kTesting);
    if (!server->SendHiddenQuery("DEALLOCATE ALL")) server->Close("write failed");
    return;
  }
  PublishPodCounts();
  ServeWaiting();
  ServeWelcomedClients();
}

}  // namespace pgfleet::pool
