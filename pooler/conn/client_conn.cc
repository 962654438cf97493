// Client connection: startup, login and the client-to-server half of the relay.
#include "pooler/conn/client_conn.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/cancel/queued_cancel.h"
#include "pooler/conn/admin_hook.h"
#include "pooler/conn/connection_output.h"
#include "pooler/conn/pool_events.h"
#include "pooler/conn/server_conn.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/stream_decoder.h"
#include "pooler/relay/idle_answer.h"

namespace pgfleet::pool {

using base::AsBytes;
namespace {

// While queued for a server a client may pipeline this much before we stop reading it.
constexpr size_t kMaxQueuedBytes = 1 << 20;

}  // namespace

ClientConn::ClientConn(WorkerContext& context, ClientHost& host, int fd, uint64_t id,
                       std::string peer_address)
    : LinkedClient(context.loop(), fd, id,
                   static_cast<uint32_t>(context.config().pool.max_packet_size),
                   context.tracked_params().size()),
      context_(context),
      host_(host),
      peer_address_(std::move(peer_address)),
      connected_at_(context.loop().now()),
      last_activity_at_(context.loop().now()) {}

ClientConn::~ClientConn() = default;

void ClientConn::OnIoEvent(uint32_t events) {
  if (closed()) return;
  if (tls() != nullptr && !tls_established()) {
    ContinueHandshake();
    return;
  }
  if (events & EPOLLOUT) {
    if (!Flush()) {
      Close("write to client failed");
      return;
    }
    if (!has_pending_output() && server_ != nullptr && !server_->read_enabled()) {
      server_->SetReadEnabled(true);
    }
    if (!notifications_.empty()) FlushNotifications();
  }
  if (closed()) return;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (!read_enabled_) {
      if (events & (EPOLLHUP | EPOLLERR)) Close("client socket error");
      return;
    }
    HandleReadable();
  }
}

void ClientConn::HandleReadable() {
  // A TLS ClientHello as the very first byte: libpq 17+'s sslnegotiation=direct, TLS without the
  // SSLRequest round trip. Peeked, so the bytes stay in the socket for OpenSSL to read.
  if (state_ == ClientState::kStartup && tls() == nullptr && bytes_received() == 0) {
    constexpr uint8_t kTlsHandshakeRecord = 0x16;
    uint8_t first = 0;
    if (recv(fd(), &first, 1, MSG_PEEK | MSG_DONTWAIT) == 1 && first == kTlsHandshakeRecord) {
      StartDirectTls();
      return;
    }
  }
  size_t n = 0;
  switch (ReadOnce(&n)) {
    case ReadResult::kWouldBlock:
      return;
    case ReadResult::kEof:
      // Half-closed inside a packet: the client can still read why it is dropped.
      if (EndsInsidePacket()) {
        ++context_.counters().protocol_errors;
        Fatal(protocol::sqlstate::kProtocolViolation, state_ == ClientState::kStartup
                                                          ? "incomplete startup packet"
                                                          : "incomplete message from client");
        return;
      }
      Close(state_ == ClientState::kActive ? "client disconnected with query in progress"
                                           : "client unexpected eof");
      return;
    case ReadResult::kError:
      Close("client read error");
      return;
    case ReadResult::kData:
      break;
  }
  last_activity_at_ = loop_.now();
  switch (state_) {
    // A client that logs in and then idles must not keep a buffer chunk (bench/idle_memory.sh:
    // 4 KiB resident per client without this).
    case ClientState::kStartup:
      HandleStartupData();
      if (!closed()) in_.ReleaseIfEmpty();
      return;
    case ClientState::kAuth:
      HandleAuthData();
      if (!closed()) in_.ReleaseIfEmpty();
      return;
    case ClientState::kAuthQuery:
    case ClientState::kSettingsCheck:
    case ClientState::kWelcome:
      // Early pipelined bytes wait in the buffer until login completes.
      if (in_.size() > kMaxQueuedBytes) SetReadEnabled(false);
      return;
    case ClientState::kAdmin:
      HandleAdminData();
      return;
    default:
      HandleLoggedInData();
      return;
  }
}

bool ClientConn::EndsInsidePacket() const {
  if (stream_.mid_message()) return true;  // a message being relayed in pieces
  const auto data = in_.Readable();
  if (state_ == ClientState::kStartup) return !data.empty();
  size_t pos = 0;
  while (pos < data.size()) {
    protocol::StreamDecoder::Piece message;
    if (protocol::StreamDecoder::PeekWhole(data.subspan(pos), UINT32_MAX, &message) !=
        protocol::FrameResult::kMessage) {
      return true;
    }
    pos += message.header.total_size();
  }
  return false;
}

void ClientConn::HandleAdminData() {
  // The console speaks the simple query protocol only, as PgBouncer's does.
  while (state_ == ClientState::kAdmin && !in_.empty()) {
    protocol::StreamDecoder::Piece message;
    auto result = protocol::StreamDecoder::PeekWhole(in_.Readable(), 1 << 20, &message);
    if (result == protocol::FrameResult::kNeedMore) return;
    if (result == protocol::FrameResult::kProtocolError) {
      Fatal(protocol::sqlstate::kProtocolViolation, "invalid message length from client");
      return;
    }
    const protocol::FrameHeader header = message.header;
    std::string body(base::AsText(message.body()));
    in_.Consume(header.total_size());
    if (header.type == 'X') {
      Close("client close request");
      return;
    }
    if (header.type != 'Q') {
      Fatal(protocol::sqlstate::kFeatureNotSupported,
            "the admin console supports only the simple query protocol");
      return;
    }
    std::string_view sql(body);
    if (!sql.empty() && sql.back() == '\0') sql.remove_suffix(1);
    host_.admin_console()->HandleQuery(*this, sql);
  }
}

void ClientConn::OnLookupAnswer(const LookupAnswer& answer) {
  if (closed()) return;
  if (state_ != ClientState::kAuthQuery) {
    pool_->OnStartupSettingsChecked(this, answer);
    return;
  }
  if (!answer.error.empty()) {
    PGFLEET_LOG(kWarning, "auth_query_failed", "client=", id_, " user=", base::LogQuote(user_),
                " error=", base::LogQuote(answer.error));
    Fatal(protocol::sqlstate::kInvalidAuthorization, "authentication query failed");
    return;
  }
  ContinueAuthWithSecret(answer.found ? answer.secret : "");
}

void ClientConn::Close(std::string_view reason) {
  if (state_ == ClientState::kClosed) return;
  EndLogin();
  if (context_.config().log.log_disconnections) {
    PGFLEET_LOG(kInfo, "client_disconnect", "client=", id_, " addr=", peer_address_,
                " user=", base::LogQuote(user_), " db=", base::LogQuote(database_),
                " state=", ClientStateName(state_), " reason=", base::LogQuote(reason));
  }
  if (lookup_server_ != nullptr) {
    lookup_server_->AbandonLookup();
    lookup_server_ = nullptr;
  }
  CloseSocket();
  host_.DeleteClient(this);  // unlinks from pool and lists, sets kClosed, defers delete
  // After the pool let go of it: a client that left mid-query hands its key to the query's
  // server there (CancelHandler::KeepCancelKey), and this forgets nothing more then.
  if (cancel_key_registered_) {
    host_.cancels().ForgetCancelKey(cancel_key_);
    cancel_key_registered_ = false;
  }
}

void ClientConn::FatalRaw(std::span<const uint8_t> error_message) {
  if (closed()) return;
  (void)Send(error_message);
  DiscardPendingInput();
  Close("server login failed");
}

void ClientConn::Fatal(std::string_view sqlstate, std::string_view message) {
  if (closed()) return;
  context_.counters().CountError(sqlstate);
  protocol::StringSink sink;
  protocol::BuildErrorResponse(sink, "FATAL", sqlstate, message);
  (void)Send(AsBytes(sink.bytes()));
  DiscardPendingInput();
  Close(message);
}

void ClientConn::NoticeQueued() {
  if (closed() || wait_noticed_) return;
  wait_noticed_ = true;
  protocol::StringSink sink;
  // PgBouncer's words, which scripts may look for.
  protocol::BuildNoticeResponse(
      sink, "NOTICE", protocol::sqlstate::kSuccessfulCompletion,
      "No server connection available in postgres backend, client being queued");
  if (!Send(AsBytes(sink.bytes()))) Close("write failed");
}

void ClientConn::SendWelcome(const std::vector<std::pair<std::string, std::string>>& server_params,
                             const ParamSet& server_defaults) {
  ParamSet& params = stream_.params;
  params.FillUnset(server_defaults);
  cancel_key_ =
      host_.cancels().MintCancelKey(this, protocol::CancelSecretSizeFor(protocol_version_));
  cancel_key_registered_ = true;
  protocol::StringSink sink;
  protocol::BuildAuthenticationOk(sink);
  const auto& names = context_.tracked_params();
  std::vector<bool> sent(names.size(), false);
  for (const auto& [name, value] : server_params) {
    int slot = names.Find(name);
    if (slot >= 0 && params.IsSet(static_cast<size_t>(slot))) {
      protocol::BuildParameterStatus(sink, name, params.Get(static_cast<size_t>(slot)));
      sent[static_cast<size_t>(slot)] = true;
    } else {
      protocol::BuildParameterStatus(sink, name, value);
    }
  }
  for (size_t slot = 0; slot < names.size(); ++slot) {
    if (!sent[slot] && params.IsSet(slot)) {
      protocol::BuildParameterStatus(sink, names.name(slot), params.Get(slot));
    }
  }
  protocol::BuildBackendKeyData(sink, cancel_key_.pid, cancel_key_.secret);
  protocol::BuildReadyForQuery(sink, 'I');
  if (!Send(AsBytes(sink.bytes()))) {
    Close("write failed");
    return;
  }
  if (context_.config().log.log_connections) {
    PGFLEET_LOG(kInfo, "client_login", "client=", id_, " addr=", peer_address_,
                " user=", base::LogQuote(user_), " db=", base::LogQuote(database_));
  }
}

void ClientConn::OnServerReleased() {
  FlushNotifications();
  if (closed()) return;
  if (!read_enabled_) SetReadEnabled(true);
  if (!in_.empty()) HandleLoggedInData();
}

bool ClientConn::CancelQueuedQuery() {
  if (state_ != ClientState::kWaiting || closed()) return false;
  // A queued client holds no server, so it is outside any transaction (transaction and statement
  // pooling; a session-mode client waits only for its first server).
  protocol::StringSink answer;
  const QueuedCancelVerdict verdict = pool::CancelQueuedQuery(stream_, in_.Readable(), 'I', answer);
  if (!verdict.cancelled) return false;
  context_.counters().CountError(protocol::sqlstate::kQueryCanceled);
  if (!ApplyCancelAnswer(answer, verdict.consumed, verdict.protocol_error)) return true;
  // Still dropping the query's rest (in_ holds at most a partial header), or nothing else queued:
  // no query waits. Otherwise the next one keeps the client's place in the queue.
  if (stream_.cancelled_rest != CancelledRest::kNone || in_.empty()) pool_->LeaveQueue(this);
  return true;
}

bool ClientConn::DropCancelledRest() {
  if (stream_.cancelled_rest == CancelledRest::kNone) return true;
  protocol::StringSink answer;
  const CancelledRestVerdict verdict =
      pool::DropCancelledRest(stream_, in_.Readable(), 'I', answer);
  if (!ApplyCancelAnswer(answer, verdict.consumed, verdict.protocol_error)) return false;
  return stream_.cancelled_rest == CancelledRest::kNone && !in_.empty();
}

bool ClientConn::ApplyCancelAnswer(const protocol::StringSink& answer, size_t consumed,
                                   bool protocol_error) {
  in_.Consume(consumed);
  in_.ReleaseIfEmpty();
  // Dropping made room: a queue that was full may be read again.
  if (!read_enabled_) SetReadEnabled(true);
  if (!answer.bytes().empty() && !Send(AsBytes(answer.bytes()))) {
    Close("write to client failed");
    return false;
  }
  if (protocol_error) {
    ++context_.counters().protocol_errors;
    Fatal(protocol::sqlstate::kProtocolViolation, "invalid message length from client");
    return false;
  }
  return true;
}

void ClientConn::HandleLoggedInData() {
  if (in_.empty() || listen_pending_) return;
  // The rest of a query cancelled while queued never reaches a server. Only an idle client drops
  // it: a cancelled client leaves the queue until the rest has arrived.
  if (state_ == ClientState::kIdle && !DropCancelledRest()) return;
  if (state_ == ClientState::kActive) {
    RelayToServer();
    return;
  }
  if (state_ == ClientState::kWaiting) {
    if (in_.size() > kMaxQueuedBytes) SetReadEnabled(false);
    return;
  }
  if (state_ != ClientState::kIdle) return;
  // A Terminate from an idle client needs no server.
  auto data = in_.Readable();
  if (data[0] == 'X' && !stream_.mid_message()) {
    Close("client close request");
    return;
  }
  if (!stream_.mid_message() && MayAnswerIdle(data) && (AnswerDeallocate() || AnswerListen())) {
    if (!closed() && !in_.empty()) HandleLoggedInData();
    return;
  }
  pool_->RequestServer(this);  // links now (and relays) or queues
}

bool ClientConn::AnswerListen() {
  // A reload may have turned session_state off the hub: a client that still listens through it
  // can still UNLISTEN there (its LISTEN goes to a server as the new setting says).
  if (!pool_->listen_hub_enabled() && !pool_->listen_hub().HasChannels(this)) return false;
  IdleListen request = ReadIdleListen(
      stream_, in_.Readable(), static_cast<uint32_t>(context_.config().pool.max_packet_size));
  if (request.kind == IdleListen::Kind::kNone ||
      (request.kind == IdleListen::Kind::kListen && !pool_->listen_hub_enabled())) {
    return false;
  }
  in_.Consume(request.consumed);
  in_.ReleaseIfEmpty();
  ListenHub& hub = pool_->listen_hub();
  protocol::StringSink answer;
  answer.Append(request.prefix);  // the extended protocol's answers before the statement's
  switch (request.kind) {
    case IdleListen::Kind::kListen:
      if (!hub.Listen(this, request.channel, answer)) {
        // Answered when the hub's server listens (OnListenAnswered); until then the client's
        // next messages wait, as they would behind PostgreSQL's answer.
        listen_pending_ = true;
        SetReadEnabled(false);
      }
      break;
    case IdleListen::Kind::kUnlisten:
      hub.Unlisten(this, request.channel);
      BuildListenAnswer(answer, request.kind);
      break;
    case IdleListen::Kind::kUnlistenAll:
      hub.UnlistenAll(this);
      BuildListenAnswer(answer, request.kind);
      break;
    case IdleListen::Kind::kNone:
      break;
  }
  if (!answer.bytes().empty() && !Send(AsBytes(answer.bytes()))) {
    Close("write to client failed");
    return true;
  }
  pool_->SettleHub();
  return true;
}

void ClientConn::OnListenAnswered(std::span<const uint8_t> answer) {
  if (closed() || !listen_pending_) return;
  listen_pending_ = false;
  if (!Send(answer)) {
    Close("write to client failed");
    return;
  }
  FlushNotifications();
  if (closed()) return;
  if (!read_enabled_) SetReadEnabled(true);
  if (!in_.empty()) HandleLoggedInData();
}

bool ClientConn::NotificationsDeliverable() const {
  // Past this much unread output the client is not reading: notifications queue (and the
  // oldest are dropped once the queue is full) instead of growing the socket's buffer.
  constexpr size_t kMaxUnreadOutput = 256 * 1024;
  if (closed() || listen_pending_ || out_.size() > kMaxUnreadOutput) return false;
  // Between messages as PostgreSQL sends them: an idle client, or one between transactions on
  // the server it keeps (after the ReadyForQuery that ended its transaction).
  return state_ == ClientState::kIdle ||
         (state_ == ClientState::kActive && server_ != nullptr && server_->IsReleasable());
}

void ClientConn::OnNotification(std::string_view channel, std::span<const uint8_t> message) {
  if (closed()) return;
  // LISTENed inside a transaction too: its own server delivers that channel.
  if (stream_.session.ListensOnServer(channel)) return;
  if (notifications_.empty() && NotificationsDeliverable()) {
    ++pool_->stats().notifications_sent;
    if (!Send(message)) Close("write to client failed");
    return;
  }
  const size_t dropped = notifications_.Push(message);
  if (dropped > 0) {
    pool_->stats().notifications_dropped += dropped;
    if (notifications_drop_logged_) return;
    notifications_drop_logged_ = true;
    PGFLEET_LOG(kWarning, "notifications_dropped", "client=", id_, " count=", dropped,
                " reason=", base::LogQuote("client does not read its notifications"));
  }
}

void ClientConn::FlushNotifications() {
  if (notifications_.empty() || !NotificationsDeliverable()) return;
  pool_->stats().notifications_sent += notifications_.size();
  protocol::StringSink sink;
  notifications_.TakeAll(sink);
  if (!Send(AsBytes(sink.bytes()))) Close("write to client failed");
}

bool ClientConn::AnswerDeallocate() {
  if (!pool_->tracks_prepared_statements()) return false;
  protocol::StringSink answer;
  const size_t answered = Relay::AnswerIdleDeallocate(stream_, in_.Readable(), answer);
  if (answered == 0) return false;
  in_.Consume(answered);
  in_.ReleaseIfEmpty();
  if (!Send(AsBytes(answer.bytes()))) Close("write failed");
  return true;
}

bool ClientConn::RelayToServer() {
  if (server_ == nullptr || closed()) return !closed();
  ServerConn* server = server_;
  const auto data = in_.Readable();
  if (pool_->tracks_prepared_statements() && server->relay().QuietInTransaction() &&
      !stream_.mid_message() && MayAnswerIdle(data)) {
    // psycopg evicts statements from its cache with SQL DEALLOCATE inside transactions: the name
    // is pgfleet's alone, so pgfleet answers (the server's copy stays for the cache to decide).
    protocol::StringSink answer;
    const size_t answered = Relay::AnswerIdleDeallocate(stream_, data, answer, 'T');
    if (answered > 0) {
      in_.Consume(answered);
      in_.ReleaseIfEmpty();
      if (!Send(AsBytes(answer.bytes()))) {
        Close("write to client failed");
        return false;
      }
      return in_.empty() ? true : RelayToServer();
    }
  }
  ConnectionOutput to_server(server, data);
  protocol::StringSink answers;
  const FrontendVerdict verdict = server->relay().FromClient(data, loop_.now(), to_server, answers);
  // What the relay accounted for before a rejected message goes out, so that what the server owes
  // matches what it got when the client is closed and its server drained.
  const bool delivered = to_server.Finish();
  if (verdict.kind == FrontendVerdict::Kind::kReject) {
    // Nothing more reaches the server: it is released or drained with this client.
    if (verdict.protocol_error) ++context_.counters().protocol_errors;
    Fatal(verdict.sqlstate, verdict.message);
    return false;
  }
  pool_->stats().received_bytes += to_server.passed();
  if (!delivered) {
    server->Close("write to server failed");
    return !closed();
  }
  if (verdict.kind == FrontendVerdict::Kind::kTerminate) {
    in_.Consume(in_.size());
    Close("client close request");
    return false;
  }
  in_.Consume(verdict.consumed);
  in_.ReleaseIfEmpty();
  if (!answers.bytes().empty() && !Send(AsBytes(answers.bytes()))) {
    Close("write to client failed");
    return false;
  }
  // Its next message waits for the server's answers (ServerConn::ProcessRelay feeds it again):
  // read no more meanwhile.
  if (server->has_pending_output() || server->relay().client_waits()) SetReadEnabled(false);
  // PostgreSQL ends a failed COPY FROM STDIN itself (ErrorResponse, ReadyForQuery) and drops the
  // rest of the stream: when its ReadyForQuery came first, the server waited for this CopyDone or
  // CopyFail and nothing else will release it.
  if (verdict.copy_ended && pool_->mode() != config::PoolMode::kSession && server->IsReleasable() &&
      !server->KeepForPinnedClient()) {
    pool_->ReleaseServer(server);
  }
  return true;
}

}  // namespace pgfleet::pool
