// Server connection: login and the server-to-client half of the relay.
#include "pooler/conn/server_conn.h"

#include <sys/epoll.h>

#include <cstring>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/connection_output.h"
#include "pooler/conn/linked_client.h"
#include "pooler/conn/pool_events.h"
#include "pooler/net/socket.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/stream_decoder.h"

namespace pgfleet::pool {
namespace {

net::KeepaliveTimings ServerKeepalive(const config::PoolConfig& pool) {
  return net::KeepaliveTimings{
      .idle_seconds = static_cast<int>(absl::ToInt64Seconds(pool.server_tcp_keepalive_idle)),
      .interval_seconds =
          static_cast<int>(absl::ToInt64Seconds(pool.server_tcp_keepalive_interval)),
      .count = pool.server_tcp_keepalive_count,
      .user_timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(pool.server_tcp_user_timeout)),
  };
}

}  // namespace

// Stats and logs for what the relay reports.
class ServerConn::Observer final : public RelayObserver {
 public:
  explicit Observer(ServerConn& server) : server_(server) {}
  void OnQueryAnswered() override {
    auto& stats = server_.pool_->stats();
    ++stats.queries;
    stats.RecordQuery(static_cast<uint64_t>(server_.loop_.now_us() -
                                            absl::ToUnixMicros(server_.relay_.query_started_at())));
  }
  void OnTransactionEnded() override {
    auto& stats = server_.pool_->stats();
    ++stats.transactions;
    stats.RecordTransaction(static_cast<uint64_t>(
        server_.loop_.now_us() - absl::ToUnixMicros(server_.relay_.transaction_started_at())));
  }
  void OnServerError(std::string_view sqlstate) override {
    ++server_.pool_->stats().errors;
    if (!sqlstate.empty()) server_.pool_->context().counters().CountError(sqlstate);
    if (sqlstate == protocol::sqlstate::kReadOnlySqlTransaction) {
      server_.pool_->OnReadOnlyError(&server_);
    }
  }
  void OnHotStandbyReport(bool in_hot_standby) override {
    server_.pool_->OnHotStandbyReport(&server_, in_hot_standby);
  }
  void OnHiddenQueryFailed(std::string_view message) override {
    PGFLEET_LOG(kWarning, "server_hidden_query_failed", "server=", server_.id_,
                " message=", base::LogQuote(message));
    // A failed SET or check leaves the server in a state we cannot vouch for.
    server_.MarkCloseOnRelease();
  }

 private:
  ServerConn& server_;
};

ServerConn::ServerConn(net::EventLoop& loop, int fd, PoolEvents* pool, uint64_t id,
                       config::HostAddress address)
    : net::Connection(loop, fd),
      pool_(pool),
      id_(id),
      address_(std::move(address)),
      relay_(pool->relay_settings()),
      login_(pool->credentials(), pool->context().random(), pool->context().tracked_params()),
      created_at_us_(loop.now_us()),
      last_used_at_us_(loop.now_us()) {}

ServerConn::ServerConn(net::EventLoop& loop, int fd, PoolEvents* pool, uint64_t id,
                       config::HostAddress address, const ServerHandoff& moved)
    : ServerConn(loop, fd, pool, id, std::move(address)) {
  state_ = ServerState::kIdle;
  login_.Adopt(moved.backend_pid, moved.backend_secret, moved.login_params);
  const TrackedParamNames& tracked = pool->context().tracked_params();
  for (const auto& [name, value] : moved.tracked_params) {
    const int slot = tracked.Find(name);
    if (slot >= 0) relay_.mutable_params().Set(static_cast<size_t>(slot), value);
  }
  // The server has these under names derived from their text and epoch, which this worker
  // derives alike.
  StatementRegistry& statements = pool->context().statements();
  auto epoch = moved.statement_epochs.begin();
  for (size_t i = 0; i < moved.statements.size(); ++i) {
    uint64_t statement_epoch = 0;
    if (epoch != moved.statement_epochs.end() && epoch->first == i)
      statement_epoch = (epoch++)->second;
    relay_.statements().Adopt(statements.InternAt(moved.statements[i], statement_epoch));
  }
  created_at_us_ = moved.created_at_us;
  last_used_at_us_ = moved.last_used_at_us;
}

ServerConn::~ServerConn() = default;

ServerHandoff ServerConn::Describe() const {
  ServerHandoff out;
  out.backend_pid = backend_pid();
  out.backend_secret = backend_secret();
  out.created_at_us = created_at_us_;
  out.last_used_at_us = last_used_at_us_;
  out.host = address_.host;
  out.port = static_cast<uint32_t>(address_.port);
  out.login_params = login_params();
  const TrackedParamNames& tracked = pool_->context().tracked_params();
  const ParamSet& params = relay_.params();
  for (size_t slot = 0; slot < params.size(); ++slot) {
    if (params.IsSet(slot)) out.tracked_params.emplace_back(tracked.name(slot), params.Get(slot));
  }
  for (const StatementPtr& statement : relay_.statements().InLruOrder()) {
    if (statement->epoch != 0) {
      out.statement_epochs.emplace_back(static_cast<uint32_t>(out.statements.size()),
                                        statement->epoch);
    }
    out.statements.push_back(statement->parse_tail);
  }
  return out;
}

void ServerConn::HandedOver() {
  PGFLEET_LOG(kDebug, "server_handed_over", "server=", id_,
              " db=", base::LogQuote(pool_->db().name), " user=", base::LogQuote(pool_->user()));
  CloseSocket();
  pool_->ForgetHandedOver(this);
}

void ServerConn::Attach(LinkedClient* client) {
  client_ = client;
  relay_.Link(&client->stream());
  ++link_generation_;
  linked_at_us_ = loop_.now_us();
}

void ServerConn::Detach() {
  client_ = nullptr;
  relay_.Unlink();
}

void ServerConn::CancelFinished() {
  if (cancels_in_flight_ > 0) --cancels_in_flight_;
  if (cancels_in_flight_ > 0) return;
  if (state_ == ServerState::kCanceling) {
    pool_->MakeIdle(this);
  } else if (state_ == ServerState::kDraining) {
    repeat_cancel_.Ended(loop_.now());
    pool_->ContinueDrain(this);
  }
}

bool ServerConn::SendSink(const protocol::StringSink& sink) {
  const auto& bytes = sink.bytes();
  return Send(base::AsBytes(bytes));
}

bool ServerConn::SendHiddenQuery(std::string_view sql) {
  protocol::StringSink sink;
  relay_.AddHiddenQuery(sink, sql);
  return SendSink(sink);
}

bool ServerConn::StartAuthQuery(LinkedClient* client, std::string_view query,
                                std::string_view username) {
  // Extended protocol with a parameter, so the user name is never spliced into SQL.
  protocol::StringSink sink;
  protocol::BuildParse(sink, "", query, {});
  const std::string_view values[] = {username};
  protocol::BuildBindText(sink, "", "", values);
  protocol::BuildExecute(sink, "", 0);
  protocol::BuildSync(sink);
  BeginLookup(client, /*reads_secret=*/true);
  return SendSink(sink);
}

bool ServerConn::StartSettingsCheck(LinkedClient* client,
                                    std::span<const protocol::StartupSetting> settings) {
  // Extended protocol: names and values travel as parameters, never spliced into SQL, and every
  // Execute before the Sync runs in one implicit transaction, which the Sync ends (undoing the
  // local settings); after an error the server skips the rest up to the Sync.
  protocol::StringSink sink;
  protocol::BuildParse(sink, "", "SELECT pg_catalog.set_config($1, $2, true)", {});
  for (const auto& setting : settings) {
    const std::string_view values[] = {setting.name, setting.value};
    protocol::BuildBindText(sink, "", "", values);
    protocol::BuildExecute(sink, "", 0);
  }
  protocol::BuildSync(sink);
  BeginLookup(client, /*reads_secret=*/false);
  return SendSink(sink);
}

void ServerConn::BeginLookup(LinkedClient* client, bool reads_secret) {
  lookup_client_ = client;
  lookup_running_ = true;
  lookup_reads_secret_ = reads_secret;
  lookup_ = LookupAnswer();
}

void ServerConn::OnIoEvent(uint32_t events) {
  if (closed()) return;
  if (state_ == ServerState::kConnecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int err = net::PendingSocketError(fd_);
    if (err != 0) {
      PGFLEET_LOG(kWarning, "server_connect_failed", "server=", id_,
                  " db=", base::LogQuote(pool_->db().name), " host=", address_.host,
                  " port=", address_.port, " error=", base::LogQuote(strerror(err)));
      Close("connect failed");
      return;
    }
    OnConnected();
    return;
  }
  if (awaiting_ssl_answer_) {
    HandleSslAnswer(events);
    return;
  }
  if (tls() != nullptr && !tls_established()) {
    ContinueHandshake();
    return;
  }
  if (events & EPOLLOUT) {
    if (!Flush()) {
      Close("write failed");
      return;
    }
    // Output drained: let the client send more.
    if (!has_pending_output() && client_ != nullptr && !client_->read_enabled()) {
      client_->SetReadEnabled(true);
      if (!client_->RelayToServer()) return;
    }
  }
  if (closed()) return;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (!read_enabled_) {
      if (events & (EPOLLHUP | EPOLLERR)) Close("socket error while paused");
      return;
    }
    size_t n = 0;
    switch (ReadOnce(&n)) {
      case ReadResult::kWouldBlock:
        return;
      case ReadResult::kEof:
        Close("server closed the connection");
        return;
      case ReadResult::kError:
        Close("read error");
        return;
      case ReadResult::kData:
        break;
    }
    ProcessRelay();
  }
}

void ServerConn::OnConnected() {
  connecting_ = false;
  const auto& pool_config = pool_->context().config().pool;
  net::TuneSocket(fd_, pool_config.tcp_keepalive, ServerKeepalive(pool_config));
  pool_->OnServerConnected(this);  // kLogin
  UpdateInterest();
  // PostgreSQL answers 'N' on unix sockets, so asking there would only cost a round trip.
  const auto& tls = pool_->context().config().tls;
  if (ServerTlsWanted(tls.server_tls_sslmode) && pool_->context().tls().server != nullptr &&
      !address_.host.starts_with('/')) {
    protocol::StringSink sink;
    protocol::BuildSslRequest(sink);
    if (!SendSink(sink)) {
      Close("write failed during login");
      return;
    }
    awaiting_ssl_answer_ = true;
    return;
  }
  SendStartup();
}

void ServerConn::HandleSslAnswer(uint32_t events) {
  if (events & EPOLLOUT) {
    if (!Flush()) return Close("write failed during login");
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) return;
  size_t n = 0;
  switch (ReadOnce(&n)) {
    case ReadResult::kWouldBlock:
      return;
    case ReadResult::kEof:
    case ReadResult::kError:
      Close("server closed the connection during the TLS request");
      return;
    case ReadResult::kData:
      break;
  }
  const uint8_t answer = in_.Readable()[0];
  // One byte and nothing after it: anything more was injected before the handshake
  // (CVE-2021-23222, the client side).
  if (answer == 'S' && in_.size() > 1) {
    FailLogin("unexpected data after the server's TLS answer");
    return;
  }
  awaiting_ssl_answer_ = false;
  const config::SslMode mode = pool_->context().config().tls.server_tls_sslmode;
  if (answer == 'N') {
    in_.Consume(1);
    if (ServerTlsRequired(mode)) {
      FailLogin(base::StrCat(
          "server does not support TLS (server_tls_sslmode=", config::SslModeName(mode), ")"));
      return;
    }
    SendStartup();
    return;
  }
  if (answer != 'S') {
    // An old server's ErrorResponse to a request it does not know; never shown to clients
    // (CVE-2024-10977).
    FailLogin("server refused the TLS request");
    return;
  }
  in_.Consume(1);
  const std::string verify_host =
      mode == config::SslMode::kVerifyFull ? address_.host : std::string();
  if (auto status = StartTls(pool_->context().tls().server, verify_host); !status.ok()) {
    FailLogin(base::StrCat("cannot start TLS: ", base::Sv(status.message())));
    return;
  }
  ContinueHandshake();
}

void ServerConn::ContinueHandshake() {
  switch (ContinueTlsHandshake()) {
    case HandshakeStatus::kInProgress:
      return;
    case HandshakeStatus::kFailed:
      FailLogin(base::StrCat("TLS handshake with the server failed: ", tls()->error()));
      return;
    case HandshakeStatus::kDone:
      PGFLEET_LOG(kDebug, "server_tls", "server=", id_, " tls=", tls()->Description());
      SendStartup();
      return;
  }
}

void ServerConn::SendStartup() {
  const auto& db = pool_->db();
  ServerLoginOptions options;
  options.user = pool_->server_user();
  options.database = db.dbname;
  options.application_name = db.application_name;
  options.settings = ServerLoginSettings(pool_->context().config().pool);
  options.settings.insert(options.settings.end(), db.server_settings.begin(),
                          db.server_settings.end());
  options.tls = tls_established();
  if (options.tls) options.server_end_point = [this] { return tls()->ServerEndPoint(); };
  protocol::StringSink sink;
  login_.Start(std::move(options), sink);
  if (!SendSink(sink)) {
    Close("write failed during login");
  }
}

void ServerConn::ApplyLoginVerdict(const LoginVerdict& verdict) {
  using Outcome = LoginVerdict::Outcome;
  switch (verdict.outcome) {
    case Outcome::kContinue:
      if (!verdict.to_server.bytes().empty() && !SendSink(verdict.to_server)) {
        Close("write failed during login");
      }
      return;
    case Outcome::kReady:
      last_used_at_us_ = loop_.now_us();
      relay_.mutable_params() = login_.params();
      PGFLEET_LOG(kDebug, "server_login", "server=", id_, " db=", base::LogQuote(pool_->db().name),
                  " user=", base::LogQuote(pool_->user()), " backend_pid=", backend_pid());
      pool_->OnServerReady(this);
      return;
    case Outcome::kFailedByPgfleet:
      PGFLEET_LOG(kWarning, "server_login_failed", "server=", id_,
                  " db=", base::LogQuote(pool_->db().name), " user=", base::LogQuote(pool_->user()),
                  " message=", base::LogQuote(verdict.message));
      break;
    case Outcome::kFailedByServer:
      PGFLEET_LOG(kWarning, "server_login_failed", "server=", id_,
                  " db=", base::LogQuote(pool_->db().name), " user=", base::LogQuote(pool_->user()),
                  " sqlstate=", verdict.sqlstate, " message=", base::LogQuote(verdict.message));
      break;
    case Outcome::kClose:
      Close(verdict.message);
      return;
  }
  ++pool_->context().counters().server_login_failures;
  const auto& bytes = verdict.to_clients.bytes();
  pool_->OnServerLoginFailed(this, base::AsBytes(bytes), verdict.fatal_for_clients);
  Close("login failed");
}

void ServerConn::OnLookupMessage(uint8_t type, std::span<const uint8_t> body) {
  if (type == 'D' && lookup_reads_secret_) {
    protocol::Reader r(body);
    int16_t columns = 0;
    int32_t len = 0;
    std::span<const uint8_t> value;
    // Columns: usename, passwd (NULL passwd = user without password).
    if (!r.ReadInt16(&columns) || columns < 2 || !r.ReadInt32(&len) || len < 0 ||
        !r.ReadBytes(static_cast<size_t>(len), &value) || !r.ReadInt32(&len)) {
      lookup_.error = "auth_query returned an unexpected row";
      return;
    }
    lookup_.found = true;
    if (len >= 0 && r.ReadBytes(static_cast<size_t>(len), &value)) {
      lookup_.secret.assign(base::AsText(value));
    }
  } else if (type == 'D') {
    lookup_.found = true;
  } else if (type == 'E') {
    auto fields = protocol::ParseErrorFields(body);
    Observer(*this).OnServerError(fields.ok() ? fields->sqlstate : std::string_view());
    lookup_.error = fields.ok() ? std::string(fields->message) : "lookup query failed";
    if (fields.ok()) lookup_.sqlstate = std::string(fields->sqlstate);
  }
}

void ServerConn::FinishLookup() {
  lookup_running_ = false;
  LinkedClient* client = lookup_client_;
  lookup_client_ = nullptr;
  if (client != nullptr) {
    client->set_lookup_server(nullptr);
    client->OnLookupAnswer(lookup_);
  }
  lookup_ = LookupAnswer();  // the secret goes
}

template <typename More, typename Handle>
bool ServerConn::ReadWholeMessages(More more, Handle handle) {
  const auto max_packet = static_cast<uint32_t>(pool_->context().config().pool.max_packet_size);
  size_t pos = 0;
  while (more()) {
    protocol::StreamDecoder::Piece message;
    auto result =
        protocol::StreamDecoder::PeekWhole(in_.Readable().subspan(pos), max_packet, &message);
    if (result == protocol::FrameResult::kNeedMore) break;
    if (result == protocol::FrameResult::kProtocolError) {
      Close("protocol error from server");
      return false;
    }
    pos += message.header.total_size();
    handle(message);
    if (closed()) return false;
  }
  in_.Consume(pos);
  return true;
}

void ServerConn::ProcessLogin() {
  // Anything after the login's ReadyForQuery stays unread: an idle server must send nothing.
  ReadWholeMessages([this] { return state_ == ServerState::kLogin; },
                    [this](const protocol::StreamDecoder::Piece& message) {
                      ApplyLoginVerdict(login_.OnMessage(message.header.type, message.body()));
                    });
}

void ServerConn::ProcessLookup() {
  const bool open = ReadWholeMessages([this] { return lookup_running_; },
                                      [this](const protocol::StreamDecoder::Piece& message) {
                                        if (message.header.type == 'Z') {
                                          FinishLookup();  // ends the loop
                                        } else {
                                          OnLookupMessage(message.header.type, message.body());
                                        }
                                      });
  if (!open) return;
  in_.ReleaseIfEmpty();
  AfterRelayChunk();
}

void ServerConn::ProcessListen() {
  const bool open =
      ReadWholeMessages([this] { return state_ == ServerState::kListening; },
                        [this](const protocol::StreamDecoder::Piece& message) {
                          pool_->OnHubServerMessage(message.header.type, message.body());
                        });
  if (!open) return;
  in_.ReleaseIfEmpty();
  // The hub gave the server back after UNLISTEN *: nothing may follow its ReadyForQuery.
  if (state_ == ServerState::kIdle && !in_.empty()) Close("unexpected data from idle server");
}

void ServerConn::ProcessRelay() {
  if (state_ == ServerState::kLogin) return ProcessLogin();
  if (lookup_running_) return ProcessLookup();
  if (state_ == ServerState::kListening) return ProcessListen();
  LinkedClient* client = client_;
  const auto data = in_.Readable();
  ConnectionOutput to_client(client, data);
  Observer observer(*this);
  const BackendVerdict verdict = relay_.FromServer(data, to_client, observer);
  const bool delivered = to_client.Finish();
  pool_->stats().sent_bytes += to_client.passed();
  in_.Consume(verdict.consumed);
  in_.ReleaseIfEmpty();
  if (!delivered) {
    client->Close("write to client failed");
    return;
  }
  if (verdict.protocol_error) {
    Close("protocol error from server");
    return;
  }
  if (client != nullptr && client->has_pending_output()) {
    // The client is slower than the server: stop reading until it drains (bounded memory).
    SetReadEnabled(false);
  }
  AfterRelayChunk();
  // The client's input waited for answers (Relay::client_waits): these may be them. Released
  // instead, the server left it to the client (ClientConn::OnServerReleased).
  if (!closed() && client != nullptr && client_ == client && relay_.client_waits() &&
      !client->closed()) {
    client->SetReadEnabled(true);
    client->RelayToServer();
  }
}

void ServerConn::AfterRelayChunk() {
  if (state_ == ServerState::kTesting && !relay_.hidden_in_flight() &&
      !relay_.query_in_progress() && !lookup_running_) {
    if (close_on_release_) {
      Close("server check or reset failed");
    } else {
      pool_->MakeIdle(this);
    }
    return;
  }
  if (client_ == nullptr) {
    if (state_ == ServerState::kDraining) {
      pool_->ContinueDrain(this);
    } else if (state_ == ServerState::kIdle && !in_.empty()) {
      Close("unexpected data from idle server");
    }
    return;
  }
  if (pool_->mode() == config::PoolMode::kSession) return;
  if (pool_->mode() == config::PoolMode::kStatement && relay_.TransactionLeftOpen()) {
    // Closing the client closes this server too: it is inside a transaction.
    client_->Fatal(protocol::sqlstate::kFeatureNotSupported,
                   "transaction blocks not allowed in statement pooling mode");
    return;
  }
  if (!relay_.IsReleasable()) return;
  LinkedClient* client = client_;
  if (KeepForPinnedClient()) {
    // Between transactions, the client keeping its server: what it UNLISTENed through its
    // server stops the hub's deliveries too, and notifications held for it go out now.
    if (!client->stream().session.unlistened.empty()) pool_->ApplyRelayedUnlistens(client);
    if (!client->closed()) client->FlushNotifications();
    return;
  }
  pool_->ReleaseServer(this);
}

bool ServerConn::KeepForPinnedClient() {
  if (!pinned_to_client()) return false;
  ClientSession& session = client_->stream().session;
  if (!session.pin_counted) {
    session.pin_counted = true;
    pool_->pinned_servers_limit().OnPinChanged(true, session.pin_mask());
  }
  return true;
}

bool ServerConn::pinned_to_client() const {
  return client_ != nullptr && client_->stream().session.pinned();
}

void ServerConn::Close(std::string_view reason) {
  if (closed() && state_ == ServerState::kClosed) return;
  PGFLEET_LOG(kInfo, "server_disconnect", "server=", id_, " db=", base::LogQuote(pool_->db().name),
              " user=", base::LogQuote(pool_->user()), " state=", ServerStateName(state_),
              " reason=", base::LogQuote(reason));
  CloseSocket();
  LinkedClient* lookup_client = lookup_client_;
  lookup_client_ = nullptr;
  if (lookup_client != nullptr) {
    lookup_client->set_lookup_server(nullptr);
    lookup_client->OnLookupAnswer(LookupAnswer::Failed("the server connection failed"));
  }
  pool_->RemoveServer(this);  // sets kClosed, unlinks, schedules deletion
}

}  // namespace pgfleet::pool
