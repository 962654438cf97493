// One connection from pgfleet to PostgreSQL: connect, log in (md5/SCRAM), then relay responses to
// whichever client is linked, tracking what the transaction-release rule needs.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "pooler/auth/scram.h"
#include "pooler/base/intrusive_list.h"
#include "pooler/net/connection.h"
#include "pooler/pool/param_sync.h"
#include "pooler/pool/prepared_statements.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/byte_sink.h"

namespace pgfleet::pool {

class ClientConn;
class Pool;

enum class ServerState {
  kConnecting,  // TCP/unix connect in progress
  kLogin,       // startup and authentication
  kIdle,        // in the pool, unlinked
  kActive,      // linked to a client
  kTesting,     // running server_check_query or server_reset_query, unlinked
  kCanceling,   // released while a cancel it was sent is still in flight; not reusable yet
  kClosed,
};
std::string_view ServerStateName(ServerState state);

class ServerConn final : public net::Connection, public base::ListNode {
 public:
  ServerConn(net::EventLoop& loop, int fd, Pool* pool, uint64_t id);
  ~ServerConn() override;

  void OnIoEvent(uint32_t events) override;

  uint64_t id() const { return id_; }
  Pool* pool() const { return pool_; }
  ServerState state() const { return state_; }
  void set_state(ServerState state) { state_ = state; }
  ClientConn* client() const { return client_; }

  // Link bookkeeping (Pool::Link/Unlink are the only callers).
  void Attach(ClientConn* client);
  void Detach();
  uint64_t link_generation() const { return link_generation_; }

  // Sends a query whose responses, up to and including its ReadyForQuery, are swallowed.
  [[nodiscard]] bool SendHiddenQuery(std::string_view sql);

  // True when everything sent has been answered and the server is outside a transaction, so it
  // may serve another client (DESIGN.md "Transaction pooling rules").
  bool IsReleasable() const;
  bool in_transaction() const { return tx_status_ != 'I'; }
  bool query_in_progress() const { return expected_rfq_ > 0; }

  // Counts one client message expecting a ReadyForQuery (Query, Sync, FunctionCall).
  void ExpectReadyForQuery() { ++expected_rfq_; }

  const ParamSet& params() const { return params_; }
  // Every ParameterStatus the server sent at login, in order, for welcoming clients.
  const std::vector<std::pair<std::string, std::string>>& login_params() const {
    return login_params_;
  }
  uint32_t backend_pid() const { return backend_pid_; }
  const std::vector<uint8_t>& backend_secret() const { return backend_secret_; }

  absl::Time created_at() const { return created_at_; }
  absl::Time last_used_at() const { return last_used_at_; }
  void touch(absl::Time now) { last_used_at_ = now; }
  absl::Time linked_at() const { return linked_at_; }
  absl::Time query_started_at() const { return query_started_at_; }
  void set_query_started_at(absl::Time t) { query_started_at_ = t; }

  // Close instead of returning to the pool at the next release (reload, RECONNECT, lifetime).
  void MarkCloseOnRelease() { close_on_release_ = true; }
  bool close_on_release() const { return close_on_release_; }

  int cancels_in_flight() const { return cancels_in_flight_; }
  void AddCancelInFlight() { ++cancels_in_flight_; }
  void CancelFinished();

  // Runs auth_query for `client` on this idle server (its state becomes kTesting).
  [[nodiscard]] bool StartAuthQuery(ClientConn* client, std::string_view query,
                                    std::string_view username);
  // The client waiting for this server's auth_query answer went away.
  void AbandonAuthQuery() { auth_query_client_ = nullptr; }

  // Prepared statements (transaction/statement mode): what this server has, and the responses
  // it owes for extended-protocol messages in flight.
  ServerStatementCache& statements() { return statements_; }
  void PushPending(const Pending& pending) { pending_.push_back(pending); }
  bool has_pending() const { return !pending_.empty(); }
  // Sends stand-in responses that are due now straight to the client (when nothing the server
  // owes comes before them). False when the client write failed.
  bool FlushReadyFakesToClient();

  // Closes the socket, unlinks, and leaves the pool. `reason` is logged.
  void Close(std::string_view reason);

 private:
  void OnConnected();
  // server_tls_sslmode: the one-byte answer to our SSLRequest, then the handshake.
  void HandleSslAnswer(uint32_t events);
  void ContinueHandshake();
  void HandleLoginMessage(uint8_t type, std::span<const uint8_t> body);
  void HandleAuthRequest(std::span<const uint8_t> body);
  void HandleLoginError(std::span<const uint8_t> body);
  // Login cannot succeed (no usable credentials): waiting clients get `message` as a FATAL.
  void FailLogin(std::string_view message);
  void SendStartup();
  void ProcessRelay();
  // Returns false when the message must not reach the client.
  bool OnBackendMessage(uint8_t type, std::span<const uint8_t> body);
  void TrackParameterStatus(std::span<const uint8_t> body);
  void AfterRelayChunk();
  // Pops what `type` answers; returns false when the response must be hidden.
  bool OnPendingResponse(uint8_t type);
  // Appends ParseComplete/CloseComplete for leading stand-in entries, popping them.
  bool TakeReadyFakes(protocol::StringSink& sink);
  void OnAuthQueryMessage(uint8_t type, std::span<const uint8_t> body);
  void FinishAuthQuery();

  Pool* pool_;
  uint64_t id_;
  ServerState state_ = ServerState::kConnecting;
  ClientConn* client_ = nullptr;
  uint64_t link_generation_ = 0;

  int expected_rfq_ = 0;
  int hidden_rfq_ = 0;
  char tx_status_ = 'I';
  size_t skip_remaining_ = 0;  // bytes of a streamed message still to relay
  bool skip_hidden_ = false;   // ...and whether they are swallowed
  bool close_on_release_ = false;
  bool awaiting_ssl_answer_ = false;
  int cancels_in_flight_ = 0;

  ParamSet params_;
  ServerStatementCache statements_;
  std::deque<Pending> pending_;
  bool pipeline_failed_ = false;  // an error: the server skips to the next Sync
  std::vector<std::pair<std::string, std::string>> login_params_;
  uint32_t backend_pid_ = 0;
  std::vector<uint8_t> backend_secret_;
  std::optional<auth::ScramClientExchange> scram_;
  // auth_query in progress: who waits, and what the answer held so far.
  ClientConn* auth_query_client_ = nullptr;
  bool auth_query_running_ = false;
  bool auth_query_found_ = false;
  std::string auth_query_secret_;
  std::string auth_query_error_;

  absl::Time created_at_;
  absl::Time last_used_at_;
  absl::Time linked_at_;
  absl::Time query_started_at_;
};

}  // namespace pgfleet::pool
