// Pool: the I/O of its LISTEN hub (listen_hub.h decides): the one server per worker and pool that
// listens for the pool's idle clients, taken from the pool the normal way (it counts in every
// budget and shows in SHOW SERVERS as "listening") and given back once nobody listens.
#include <utility>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/pool.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

void Pool::SettleHub() {
  if (hub_server_ != nullptr) {
    protocol::StringSink sink;
    sink.mutable_bytes() = hub_.TakeOutput();
    // A failed write closes the server: RemoveServer tells the hub, which asks for another.
    if (!sink.bytes().empty() && !hub_server_->SendSink(sink)) {
      hub_server_->Close("write to the LISTEN hub's server failed");
    }
  }
  if (hub_server_ != nullptr && hub_.TakeServerBack()) {
    // UNLISTEN * was answered: the server listens on nothing and may serve anyone. (Its
    // settings are as the hub got it: the hub sends nothing but LISTEN and UNLISTEN.)
    ServerConn* server = std::exchange(hub_server_, nullptr);
    server->touch(context_.loop().now_us());
    if (server->close_on_release()) {
      server->Close("closed on release");
    } else {
      MoveServer(server, ServerState::kIdle, /*front=*/true);
      ScheduleServeWaiting();
    }
  }
  if (hub_.wants_server()) {
    if (hub_wait_started_ == absl::InfinitePast()) hub_wait_started_ = context_.loop().now();
    ScheduleServeWaiting();
  } else {
    hub_wait_started_ = absl::InfinitePast();
  }
  for (auto& [listener, answer] : hub_.TakeAnswers()) {
    static_cast<ClientConn*>(listener)->OnListenAnswered(base::AsBytes(answer));
  }
}

void Pool::GiveHubServer(ServerConn* server) {
  MoveServer(server, ServerState::kListening);
  hub_server_ = server;
  server->touch(context_.loop().now_us());
  server->SetReadEnabled(true);
  PGFLEET_LOG(kDebug, "listen_hub_server", "server=", server->id(),
              " db=", base::LogQuote(db_.name), " user=", base::LogQuote(user_),
              " channels=", hub_.channel_count());
  hub_.OnServer();
  SettleHub();
}

void Pool::OnHubServerLost() {
  hub_server_ = nullptr;
  hub_.OnServerLost();
  if (hub_.channel_count() > 0) {
    PGFLEET_LOG(kWarning, "listen_hub_server_lost", "db=", base::LogQuote(db_.name),
                " user=", base::LogQuote(user_), " channels=", hub_.channel_count());
  }
  SettleHub();
}

void Pool::OnHubServerMessage(uint8_t type, std::span<const uint8_t> body) {
  hub_.OnServerMessage(type, body);
  SettleHub();
}

void Pool::ApplyRelayedUnlistens(LinkedClient* client) {
  std::vector<std::string> unlistened = std::move(client->stream().session.unlistened);
  client->stream().session.unlistened.clear();
  hub_.ApplyUnlistened(client, unlistened);
  SettleHub();
}

void Pool::ExpireHubWaiters(absl::Time now, absl::Duration limit) {
  if (!hub_.wants_server() || limit <= absl::ZeroDuration() || now - hub_wait_started_ <= limit) {
    return;
  }
  for (NotificationListener* listener : hub_.TakeWaiting()) {
    static_cast<ClientConn*>(listener)->Fatal(
        protocol::sqlstate::kConnectionFailure,
        "query_wait_timeout: no server connection became available in time");
  }
  SettleHub();
}

}  // namespace pgfleet::pool
