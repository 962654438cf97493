// One client connection: the I/O shell around its startup, its authentication (trust/md5/SCRAM,
// auth_file or auth_query) and its half of the relay (relay.h decides what passes to the server).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "pooler/auth/scram.h"
#include "pooler/base/intrusive_list.h"
#include "pooler/config/config.h"
#include "pooler/conn/client_cancels.h"
#include "pooler/conn/client_password.h"
#include "pooler/conn/connection_state.h"
#include "pooler/conn/linked_client.h"
#include "pooler/conn/worker_context.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/cancel_key.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/startup.h"
#include "pooler/protocol/startup_options.h"
#include "pooler/relay/param_sync.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class ClientConn;
class PoolEvents;
class ServerConn;

class AdminConsoleHandler;

// What a client needs from its worker beyond the context: pools, the auth query, the worker's
// client states (before a pool and on the console), login slots, the console and cancels.
// PoolRegistry implements it.
class ClientHost {
 public:
  virtual ~ClientHost() = default;
  // The pool for (database config, user), created on first use.
  virtual PoolEvents* GetOrCreatePool(const config::DatabaseConfig& db,
                                      const std::string& user) = 0;
  // Queues `client` for an auth_query of `db`'s auth.user.
  virtual void RunAuthQuery(ClientConn* client, const config::DatabaseConfig& db) = 0;
  // Moves a client among the worker's states (startup, auth, auth query, admin).
  virtual void MoveClient(ClientConn* client, ClientState state) = 0;
  // The client is gone: off every list, its slot returned, deleted after the event batch.
  virtual void DeleteClient(ClientConn* client) = 0;
  [[nodiscard]] virtual bool TryBeginLogin() = 0;
  virtual void EndLogin() = 0;
  virtual AdminConsoleHandler* admin_console() const = 0;
  virtual ClientCancels& cancels() = 0;
  // False for a database the console disabled (DISABLE db): its new clients are refused.
  virtual bool AcceptsClients(const std::string& database) const = 0;
  // Counts `client` under its database's and user's client limits (pod-wide): the name of the
  // limit that is full, or empty when it may stay. DeleteClient gives back what it counted.
  virtual std::string_view CountClient(ClientConn* client) = 0;
};

class ClientConn final : public LinkedClient, public base::ListNode {
 public:
  ClientConn(WorkerContext& context, ClientHost& host, int fd, uint64_t id,
             std::string peer_address);
  ~ClientConn() override;

  void OnIoEvent(uint32_t events) override;

  ClientState state() const { return state_; }
  PoolEvents* pool() const { return pool_; }
  ServerConn* server() const { return server_; }
  const std::string& user() const { return user_; }
  const std::string& database() const { return database_; }
  const std::string& peer_address() const { return peer_address_; }
  const protocol::CancelKey& cancel_key() const { return cancel_key_; }
  const ParamSet& params() const { return stream_.params; }

  void Attach(ServerConn* server) { server_ = server; }
  void Detach() { server_ = nullptr; }

  // Relays queued client bytes to the linked server; false when the client was closed.
  bool RelayToServer() override;
  // Continues after the answer to its auth_query (kAuthQuery) or the check of its startup
  // settings (Pool::StartupSettingsKnownGood).
  void OnLookupAnswer(const LookupAnswer& answer) override;
  void set_lookup_server(ServerConn* server) override { lookup_server_ = server; }
  // The settings its startup packet gave (`options` -c switches, or parameters that name a
  // setting): the pool checks them on a server, then they become the session's.
  const std::vector<protocol::StartupSetting>& startup_settings() const {
    return startup_settings_;
  }
  // Sends AuthenticationOk, ParameterStatus, BackendKeyData and ReadyForQuery.
  void SendWelcome(const std::vector<std::pair<std::string, std::string>>& server_params,
                   const ParamSet& server_defaults);
  // Processes messages that arrived while unlinked (after welcome or release).
  void OnServerReleased();
  // A CancelRequest for this client: when its query waits for a server, answers it as cancelled
  // and drops it (queued_cancel.h), leaving the queue if nothing else is queued. True when it did
  // (the client may have been closed meanwhile); false when no query waits.
  bool CancelQueuedQuery();

  // The LISTEN hub (listen_hub.h). A LISTEN that waited for the hub's server is answered; the
  // client reads again.
  void OnListenAnswered(std::span<const uint8_t> answer) override;
  // A notification for a channel the client listens on through the hub: written now when the
  // client is between transactions with nothing owed to it, else queued (NotificationQueue).
  void OnNotification(std::string_view channel, std::span<const uint8_t> message) override;
  // Writes the queued notifications if the client may get them now (idle, or between
  // transactions on the server it keeps, its LISTEN answered, its output drained enough).
  void FlushNotifications() override;

  // Whether this client counts against max_client_conn (false = over the limit, refused at
  // startup with 53300).
  bool holds_client_slot() const { return holds_client_slot_; }
  void set_holds_client_slot(bool v) { holds_client_slot_ = v; }
  // The keys of the pod's counts it holds a unit of (ClientHost::CountClient).
  struct CountedKeys {
    std::optional<uint32_t> database;
    std::optional<uint32_t> user;
  };
  CountedKeys& counted_keys() { return counted_keys_; }
  // The console's user pgbouncer over the unix socket from pgfleet's own OS user: an admin
  // without a password, as in PgBouncer.
  bool local_console_admin() const { return local_console_admin_; }

  absl::Time connected_at() const { return connected_at_; }
  // Since when it waits for a server, on the loop's integer clock (net::EventLoop::now_us).
  int64_t wait_started_at_us() const { return wait_started_at_us_; }
  absl::Time wait_started_at() const { return absl::FromUnixMicros(wait_started_at_us_); }
  void set_wait_started_at(int64_t now_us) {
    wait_started_at_us_ = now_us;
    wait_noticed_ = false;
  }
  // Tells the client, once per wait, that its query is queued for a server (PgBouncer's
  // query_wait_notify).
  void NoticeQueued();
  absl::Time last_activity_at() const { return last_activity_at_; }

  // Queues bytes for the client (admin console answers); false when the socket failed.
  bool SendBytes(std::span<const uint8_t> bytes) { return Send(bytes); }

  // Sends an ErrorResponse (FATAL or ERROR) and closes. Never throws away other clients.
  void Fatal(std::string_view sqlstate, std::string_view message) override;
  // Sends a whole error packet already built (a server's FATAL at login) and closes.
  void FatalRaw(std::span<const uint8_t> error_message);
  // Closes without a message; logs `reason`.
  void Close(std::string_view reason) override;

 private:
  void HandleReadable();
  void HandleStartupData();
  void HandleStartupPacket(const protocol::StartupPacket& packet);
  // A startup parameter, or a setting of `options`, that is neither user nor database: a
  // tracked parameter's value, dropped (pool.ignore_startup_parameters), or a startup setting.
  // False when the client was refused.
  [[nodiscard]] bool TakeStartupSetting(const std::string& name, const std::string& value,
                                        bool from_options);
  bool IgnoresStartupParameter(std::string_view name) const;
  // Drives the TLS handshake that follows our 'S'; reads the startup packet once it is done.
  // TLS from the first byte (sslnegotiation=direct): refused without client TLS.
  void StartDirectTls();
  void ContinueHandshake();
  void HandleAuthData();
  void BeginAuth();
  // Auth type cert or peer: "" when the connection proves the client is user_, else PostgreSQL's
  // refusal. client_identity.cc.
  std::string CheckIdentity() const;
  // The client is on the unix socket as the OS user pgfleet runs as (SO_PEERCRED).
  bool IsOwnUserOnUnixSocket() const;
  // auth.hba_file and pool.max_concurrent_logins, once user and database are known: false when
  // the client was refused (and closed). client_auth.cc.
  [[nodiscard]] bool AdmitLogin();
  // Gives back the login slot AdmitLogin took (FinishLogin and Close call it).
  void EndLogin();
  // The method this client authenticates with: its hba rule's, else auth.type.
  config::AuthType EffectiveAuthType() const;
  // True when the bytes received so far end inside a packet (a startup packet or message cut
  // short, or one being relayed in pieces): at EOF such a client gets a FATAL, not silence.
  bool EndsInsidePacket() const;
  void ContinueAuthWithSecret(const std::string& secret);
  // Sends the verdict's bytes and acts on its outcome: wait for more, log the client in, or
  // count, log and FATAL a failure. client_auth.cc.
  void ApplyPasswordVerdict(const PasswordVerdict& verdict);
  // The client is in: the console, or its pool. `secret` is the stored secret it proved to know
  // ("" under trust) and `scram_client_key` what its SCRAM proof gave, for the pool's server
  // logins.
  void FinishLogin(const std::string& secret = {},
                   const std::optional<auth::ScramKey>& scram_client_key = std::nullopt);
  void HandleLoggedInData();
  void HandleAdminData();
  // An idle client's DEALLOCATE of a renamed statement, answered without a server
  // (Relay::AnswerIdleDeallocate). True when done.
  bool AnswerDeallocate();
  // An idle client's LISTEN/UNLISTEN, answered by the pool's LISTEN hub (ReadIdleListen). True
  // when done (the answer may wait: listen_pending_).
  bool AnswerListen();
  bool NotificationsDeliverable() const;
  // Drops what arrived of a query cancelled while queued (DropCancelledRest). True when the
  // client's next query may go on; false while still dropping, or when the client was closed.
  bool DropCancelledRest();
  // Sends `answer` and consumes `consumed` input bytes; FATAL 08P01 on `protocol_error`. False
  // when the client was closed.
  bool ApplyCancelAnswer(const protocol::StringSink& answer, size_t consumed, bool protocol_error);

  // Only the state lists change the state (connection_state.h).
  template <typename, typename, size_t>
  friend class StateLists;
  void set_state(ClientState state) { state_ = state; }

  WorkerContext& context_;
  ClientHost& host_;
  std::string peer_address_;
  ClientState state_ = ClientState::kStartup;
  PoolEvents* pool_ = nullptr;
  ServerConn* server_ = nullptr;

  std::string user_;
  std::string database_;
  std::vector<protocol::StartupSetting> startup_settings_;
  protocol::CancelKey cancel_key_;
  uint32_t protocol_version_ = 0;  // negotiated at startup (protocol/negotiation.h)
  bool direct_tls_ = false;        // TLS from the first byte (no SSLRequest)
  bool cancel_key_registered_ = false;

  // Authentication in progress.
  std::optional<ClientPasswordExchange> password_;
  ServerConn* lookup_server_ = nullptr;  // running our auth_query or settings check, if any

  bool holds_client_slot_ = false;
  bool holds_login_slot_ = false;                  // pool.max_concurrent_logins
  std::optional<config::AuthType> hba_auth_type_;  // the matching hba rule's method
  bool admin_console_ = false;
  // Its LISTEN waits for the hub's server: nothing more is read or answered until it is.
  bool listen_pending_ = false;
  NotificationQueue notifications_;
  bool notifications_drop_logged_ = false;  // one log line per client, the count in the stats

  absl::Time connected_at_;
  bool wait_noticed_ = false;
  CountedKeys counted_keys_;
  bool local_console_admin_ = false;
  int64_t wait_started_at_us_ = 0;
  absl::Time last_activity_at_;
};

using ClientLists = StateLists<ClientConn, ClientState, kClientStateCount>;

}  // namespace pgfleet::pool
