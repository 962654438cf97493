// One connection from pgfleet to PostgreSQL: connect, log in (md5/SCRAM), then relay responses to
// whichever client is linked, tracking what the transaction-release rule needs. The decisions are
// ServerLogin's and the Relay's; this class does their I/O, logs, counters and pool calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "pooler/base/intrusive_list.h"
#include "pooler/cancel/repeat_cancel.h"
#include "pooler/config/config.h"
#include "pooler/conn/connection_state.h"
#include "pooler/conn/linked_client.h"
#include "pooler/conn/server_login.h"
#include "pooler/conn/server_room.h"
#include "pooler/handoff/handoff_message.h"
#include "pooler/net/connection.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/startup_options.h"
#include "pooler/relay/param_sync.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class LinkedClient;
class PoolEvents;

class ServerConn final : public net::Connection, public base::ListNode {
 public:
  // Connecting to `address`, one of the pool's database's hosts.
  ServerConn(net::EventLoop& loop, int fd, PoolEvents* pool, uint64_t id,
             config::HostAddress address);
  // A server a sibling worker handed over (one pool per pod): logged in, idle, with what the
  // sibling knew of it.
  ServerConn(net::EventLoop& loop, int fd, PoolEvents* pool, uint64_t id,
             config::HostAddress address, const ServerHandoff& moved);
  ~ServerConn() override;

  void OnIoEvent(uint32_t events) override;

  uint64_t id() const { return id_; }
  PoolEvents* pool() const { return pool_; }
  ServerState state() const { return state_; }
  LinkedClient* client() const { return client_; }
  // The host it is connected to (cancels go there; SHOW SERVERS shows it).
  const config::HostAddress& address() const { return address_; }

  // Link bookkeeping (Pool::Link/Unlink are the only callers).
  void Attach(LinkedClient* client);
  void Detach();
  uint64_t link_generation() const { return link_generation_; }

  // Sends a query whose responses, up to and including its ReadyForQuery, are swallowed.
  [[nodiscard]] bool SendHiddenQuery(std::string_view sql);

  // The relay decides everything about the messages this server exchanges with its client.
  Relay& relay() { return relay_; }
  // The release rule (Relay::IsReleasable): this server may serve another client.
  bool IsReleasable() const { return relay_.IsReleasable(); }
  // Its client holds session state that lives on this server (temporary tables, SQL prepared
  // statements, advisory locks, cursors WITH HOLD, LISTEN): it keeps the server between
  // transactions until released (docs/architecture.md, "Session state in transaction pooling").
  bool pinned_to_client() const;
  // At a transaction's end: true when the client keeps this server (its pin is counted in
  // max_pinned_servers from now on).
  bool KeepForPinnedClient();
  bool in_transaction() const { return relay_.in_transaction(); }
  bool query_in_progress() const { return relay_.query_in_progress() || lookup_running_; }

  const ParamSet& params() const { return relay_.params(); }
  // Every ParameterStatus the server sent at login, in order, for welcoming clients.
  const std::vector<std::pair<std::string, std::string>>& login_params() const {
    return login_.login_params();
  }
  uint32_t backend_pid() const { return login_.backend_pid(); }
  const std::vector<uint8_t>& backend_secret() const { return login_.backend_secret(); }

  // Times are the loop's integer clock (net::EventLoop::now_us); the absl::Time forms are for
  // what runs once a sweep or a SHOW, not once a transaction.
  int64_t created_at_us() const { return created_at_us_; }
  int64_t last_used_at_us() const { return last_used_at_us_; }
  int64_t linked_at_us() const { return linked_at_us_; }
  absl::Time created_at() const { return absl::FromUnixMicros(created_at_us_); }
  absl::Time last_used_at() const { return absl::FromUnixMicros(last_used_at_us_); }
  void touch(int64_t now_us) { last_used_at_us_ = now_us; }
  absl::Time query_started_at() const { return relay_.query_started_at(); }
  absl::Time transaction_started_at() const { return relay_.transaction_started_at(); }

  // The room this server holds in the pod's and the worker's counts (ServerBudget).
  const ServerRoom& room() const { return room_; }
  void set_room(ServerRoom room) { room_ = std::move(room); }
  ServerRoom& mutable_room() { return room_; }

  // Logged in to a host that does not fit target_session_attrs: its close is no failed login.
  void MarkHostRejected() { host_rejected_ = true; }
  bool host_rejected() const { return host_rejected_; }

  // Close instead of returning to the pool at the next release (reload, RECONNECT, lifetime).
  void MarkCloseOnRelease() { close_on_release_ = true; }
  bool close_on_release() const { return close_on_release_; }

  // Its client left mid-query (Pool::AbandonServer): from `now` it drains what it owes.
  void BeginDrain(absl::Time now) {
    drain_started_at_ = now;
    repeat_cancel_ = RepeatCancel(now);
    SetReadEnabled(true);
  }
  absl::Time drain_started_at() const { return drain_started_at_; }
  // When its abandoned work gets its next cancel (Pool::ExpireDraining).
  RepeatCancel& repeat_cancel() { return repeat_cancel_; }

  // Sends bytes pgfleet made (the relay accounted for them); false when the socket failed.
  [[nodiscard]] bool SendSink(const protocol::StringSink& sink);

  int cancels_in_flight() const { return cancels_in_flight_; }
  void AddCancelInFlight() { ++cancels_in_flight_; }
  void CancelFinished();

  // Runs auth_query for `client` on this idle server (its state becomes kTesting).
  [[nodiscard]] bool StartAuthQuery(LinkedClient* client, std::string_view query,
                                    std::string_view username);
  // Tries `settings` (a client's startup settings) with set_config(..., true) in one implicit
  // transaction, which undoes them: the answer's error is PostgreSQL's for the first that fails.
  [[nodiscard]] bool StartSettingsCheck(LinkedClient* client,
                                        std::span<const protocol::StartupSetting> settings);
  // The client waiting for this server's lookup went away.
  void AbandonLookup() { lookup_client_ = nullptr; }

  // Everything a sibling needs to serve this idle server as this worker would.
  ServerHandoff Describe() const;
  // The socket went to a sibling: closes this process's copy (the connection stays open in the
  // sibling) and leaves the pool without giving its room back (it moved with the server).
  void HandedOver();

  // Closes the socket, unlinks, and leaves the pool. `reason` is logged.
  void Close(std::string_view reason);

 private:
  // Only the state lists change the state (connection_state.h).
  template <typename, typename, size_t>
  friend class StateLists;
  void set_state(ServerState state) { state_ = state; }

  class Observer;
  void OnConnected();
  // server_tls_sslmode: the one-byte answer to our SSLRequest, then the handshake.
  void HandleSslAnswer(uint32_t events);
  void ContinueHandshake();
  void ProcessLogin();
  // Carries out what the login decided: sends, logs, counts, tells the pool, closes.
  void ApplyLoginVerdict(const LoginVerdict& verdict);
  // Login cannot succeed (TLS refused or failed): waiting clients get `message` as a FATAL.
  void FailLogin(std::string_view message) {
    ApplyLoginVerdict(ServerLogin::FailedByPgfleet(message));
  }
  void SendStartup();
  // Hands each whole message in the input to `handle` while `more()` holds, then consumes what
  // it handled. False when the server was closed (a bad length, or by a handler).
  template <typename More, typename Handle>
  bool ReadWholeMessages(More more, Handle handle);
  void ProcessRelay();
  void ProcessLookup();
  // The LISTEN hub's server: every message goes to the pool's hub (listen_hub.h).
  void ProcessListen();
  void AfterRelayChunk();
  void BeginLookup(LinkedClient* client, bool reads_secret);
  void OnLookupMessage(uint8_t type, std::span<const uint8_t> body);
  void FinishLookup();

  PoolEvents* pool_;
  uint64_t id_;
  config::HostAddress address_;
  ServerState state_ = ServerState::kConnecting;
  LinkedClient* client_ = nullptr;
  uint64_t link_generation_ = 0;

  ServerRoom room_;
  bool close_on_release_ = false;
  bool host_rejected_ = false;
  bool awaiting_ssl_answer_ = false;
  int cancels_in_flight_ = 0;

  Relay relay_;
  // Kept after login: SHOW SERVERS, metrics and cancel requests read what the server sent then.
  ServerLogin login_;
  // A lookup in progress: who waits, and what the answer holds so far.
  LinkedClient* lookup_client_ = nullptr;
  bool lookup_running_ = false;
  bool lookup_reads_secret_ = false;  // auth_query: rows carry (usename, passwd)
  LookupAnswer lookup_;

  int64_t created_at_us_;
  int64_t last_used_at_us_;
  int64_t linked_at_us_ = 0;
  absl::Time drain_started_at_;
  RepeatCancel repeat_cancel_;
};

using ServerLists = StateLists<ServerConn, ServerState, kServerStateCount>;

}  // namespace pgfleet::pool
