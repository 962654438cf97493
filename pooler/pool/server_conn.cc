// Server connection: login and the server-to-client half of the relay.
#include "pooler/pool/server_conn.h"

#include <sys/epoll.h>

#include <cstring>

#include "pooler/auth/md5.h"
#include "pooler/auth/secret.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/net/socket.h"
#include "pooler/pool/client_conn.h"
#include "pooler/pool/connection_output.h"
#include "pooler/pool/pool.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/stream_decoder.h"

namespace pgfleet::pool {

// Stats and logs for what the relay reports.
class ServerConn::Observer final : public RelayObserver {
 public:
  explicit Observer(ServerConn& server) : server_(server) {}
  void OnQueryAnswered() override {
    auto& stats = server_.pool_->stats();
    ++stats.queries;
    stats.RecordQuery(static_cast<uint64_t>(
        absl::ToInt64Microseconds(server_.loop_.now() - server_.relay_.query_started_at())));
  }
  void OnServerError(std::string_view sqlstate) override {
    ++server_.pool_->stats().errors;
    if (!sqlstate.empty()) server_.pool_->context().counters().CountError(sqlstate);
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

ServerConn::ServerConn(net::EventLoop& loop, int fd, Pool* pool, uint64_t id)
    : net::Connection(loop, fd),
      pool_(pool),
      id_(id),
      relay_(pool->relay_settings()),
      created_at_(loop.now()),
      last_used_at_(loop.now()) {}

ServerConn::~ServerConn() = default;

void ServerConn::Attach(ClientConn* client) {
  client_ = client;
  relay_.Link(&client->stream());
  ++link_generation_;
  linked_at_ = loop_.now();
}

void ServerConn::Detach() {
  client_ = nullptr;
  relay_.Unlink();
}

void ServerConn::CancelFinished() {
  if (cancels_in_flight_ > 0) --cancels_in_flight_;
  if (cancels_in_flight_ == 0 && state_ == ServerState::kCanceling) pool_->MakeIdle(this);
}

bool ServerConn::SendSink(const protocol::StringSink& sink) {
  const auto& bytes = sink.bytes();
  return Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

bool ServerConn::SendHiddenQuery(std::string_view sql) {
  protocol::StringSink sink;
  relay_.AddHiddenQuery(sink, sql);
  return SendSink(sink);
}

bool ServerConn::StartAuthQuery(ClientConn* client, std::string_view query,
                                std::string_view username) {
  // Extended protocol with a parameter, so the user name is never spliced into SQL.
  protocol::StringSink sink;
  protocol::BuildParse(sink, "", query, {});
  const std::string_view values[] = {username};
  protocol::BuildBindText(sink, "", "", values);
  protocol::BuildExecute(sink, "", 0);
  protocol::BuildSync(sink);
  auth_query_client_ = client;
  auth_query_running_ = true;
  auth_query_found_ = false;
  auth_query_secret_.clear();
  auth_query_error_.clear();
  return SendSink(sink);
}

void ServerConn::OnIoEvent(uint32_t events) {
  if (closed()) return;
  if (state_ == ServerState::kConnecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int err = net::PendingSocketError(fd_);
    if (err != 0) {
      PGFLEET_LOG(kWarning, "server_connect_failed", "server=", id_,
                  " db=", base::LogQuote(pool_->db().name), " host=", pool_->db().host,
                  " port=", pool_->db().port, " error=", base::LogQuote(strerror(err)));
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
  net::TuneSocket(fd_, pool_->context().config().pool.tcp_keepalive);
  pool_->OnServerConnected(this);  // kLogin
  UpdateInterest();
  // PostgreSQL answers 'N' on unix sockets, so asking there would only cost a round trip.
  const auto& tls = pool_->context().config().tls;
  if (ServerTlsWanted(tls.server_tls_sslmode) && pool_->context().tls().server != nullptr &&
      !pool_->db().host.starts_with('/')) {
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
      mode == config::SslMode::kVerifyFull ? pool_->db().host : std::string();
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
  std::vector<std::pair<std::string_view, std::string_view>> params = {
      {"user", pool_->server_user()}, {"database", db.dbname}};
  if (!db.application_name.empty()) params.emplace_back("application_name", db.application_name);
  protocol::StringSink sink;
  protocol::BuildStartupMessage(sink, params);
  if (!SendSink(sink)) {
    Close("write failed during login");
  }
}

void ServerConn::HandleAuthRequest(std::span<const uint8_t> body) {
  auto auth = protocol::ParseAuthentication(body);
  if (!auth.ok()) {
    Close("malformed authentication request");
    return;
  }
  const auto& creds = pool_->credentials();
  auto kind = auth::ClassifySecret(creds.secret);
  protocol::StringSink sink;
  switch (static_cast<protocol::AuthRequest>(auth->code)) {
    case protocol::AuthRequest::kOk:
      return;
    case protocol::AuthRequest::kCleartext:
      if (kind != auth::SecretKind::kPlain) {
        FailLogin("server asked for a cleartext password and none is configured");
        return;
      }
      protocol::BuildPasswordMessage(sink, creds.secret);
      break;
    case protocol::AuthRequest::kMd5: {
      std::string hash;
      if (kind == auth::SecretKind::kPlain) {
        hash = auth::Md5PasswordHash(pool_->server_user(), creds.secret);
      } else if (kind == auth::SecretKind::kMd5) {
        hash = creds.secret;
      } else {
        FailLogin("server asked for md5 and no plain or md5 password is known for the user");
        return;
      }
      std::span<const uint8_t, 4> salt(auth->data.data(), 4);
      protocol::BuildPasswordMessage(sink, auth::Md5SaltedResponse(hash, salt));
      break;
    }
    case protocol::AuthRequest::kSasl: {
      // Over TLS, bind the exchange to the server's certificate when the server offers it, as
      // libpq's default channel_binding=prefer does.
      std::optional<std::vector<uint8_t>> end_point;
      if (tls_established() && protocol::SaslOffers(auth->data, auth::kScramSha256Plus)) {
        end_point = tls()->ServerEndPoint();
      }
      if (!end_point.has_value() && !protocol::SaslOffers(auth->data, auth::kScramSha256)) {
        FailLogin("server offers no supported SASL mechanism");
        return;
      }
      auth::ScramClientBinding binding;
      if (end_point.has_value()) {
        binding.flag = auth::ScramClientBinding::Flag::kTlsServerEndPoint;
        binding.data = *std::move(end_point);
      } else if (tls_established() && !protocol::SaslOffers(auth->data, auth::kScramSha256Plus)) {
        binding.flag = auth::ScramClientBinding::Flag::kSupportedNotUsed;
      }
      const std::string_view mechanism =
          binding.flag == auth::ScramClientBinding::Flag::kTlsServerEndPoint
              ? auth::kScramSha256Plus
              : auth::kScramSha256;
      if (kind == auth::SecretKind::kPlain) {
        scram_.emplace(
            auth::ScramClientExchange::WithPassword(creds.secret, pool_->context().random()));
      } else if (kind == auth::SecretKind::kScramSha256 && creds.scram_client_key.has_value()) {
        auto secret = auth::ParseScramSecret(creds.secret);
        if (!secret.ok()) {
          FailLogin("stored SCRAM secret is malformed");
          return;
        }
        scram_.emplace(auth::ScramClientExchange::WithClientKey(*creds.scram_client_key, *secret,
                                                                pool_->context().random()));
      } else {
        FailLogin("server asked for SCRAM and no usable password is known for the user");
        return;
      }
      protocol::BuildSaslInitialResponse(sink, mechanism, scram_->ClientFirst(std::move(binding)));
      break;
    }
    case protocol::AuthRequest::kSaslContinue: {
      if (!scram_.has_value()) {
        Close("unexpected SASL continue");
        return;
      }
      auto final_msg = scram_->HandleServerFirst(
          std::string_view(reinterpret_cast<const char*>(auth->data.data()), auth->data.size()));
      if (!final_msg.ok()) {
        FailLogin(base::StrCat("SCRAM: ", final_msg.status().message()));
        return;
      }
      protocol::BuildSaslResponse(sink, *final_msg);
      break;
    }
    case protocol::AuthRequest::kSaslFinal: {
      if (!scram_.has_value() ||
          !scram_
               ->VerifyServerFinal(std::string_view(
                   reinterpret_cast<const char*>(auth->data.data()), auth->data.size()))
               .ok()) {
        FailLogin("server's SCRAM signature did not verify");
        return;
      }
      scram_.reset();
      return;
    }
    default:
      FailLogin(base::StrCat("unsupported server authentication method ", auth->code));
      return;
  }
  if (!SendSink(sink)) Close("write failed during login");
}

void ServerConn::FailLogin(std::string_view message) {
  PGFLEET_LOG(kWarning, "server_login_failed", "server=", id_,
              " db=", base::LogQuote(pool_->db().name), " user=", base::LogQuote(pool_->user()),
              " message=", base::LogQuote(message));
  ++pool_->context().counters().server_login_failures;
  protocol::StringSink sink;
  protocol::BuildErrorResponse(sink, "FATAL", protocol::sqlstate::kInvalidAuthorization,
                               base::StrCat("pgfleet cannot log in to the server: ", message));
  const auto& bytes = sink.bytes();
  pool_->OnServerLoginFailed(this, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                             /*fatal_for_clients=*/true);
  Close("login failed");
}

void ServerConn::HandleLoginError(std::span<const uint8_t> body) {
  auto fields = protocol::ParseErrorFields(body);
  std::string code = fields.ok() ? std::string(fields->sqlstate) : "";
  PGFLEET_LOG(kWarning, "server_login_failed", "server=", id_,
              " db=", base::LogQuote(pool_->db().name), " user=", base::LogQuote(pool_->user()),
              " sqlstate=", code,
              " message=", base::LogQuote(fields.ok() ? fields->message : "malformed"));
  ++pool_->context().counters().server_login_failures;
  // Rebuild the whole message so it can go to clients as is.
  std::vector<uint8_t> whole(body.size() + 5);
  whole[0] = 'E';
  protocol::StoreBigEndian32(whole.data() + 1, static_cast<uint32_t>(body.size() + 4));
  std::memcpy(whole.data() + 5, body.data(), body.size());
  // Auth and missing-database errors cannot get better by waiting; connection-limit errors can.
  bool fatal_for_clients = code.rfind("28", 0) == 0 || code == "3D000";
  pool_->OnServerLoginFailed(this, whole, fatal_for_clients);
  Close("login failed");
}

void ServerConn::HandleLoginMessage(uint8_t type, std::span<const uint8_t> body) {
  switch (type) {
    case 'R':
      HandleAuthRequest(body);
      return;
    case 'S': {
      auto ps = protocol::ParseParameterStatus(body);
      if (!ps.ok()) break;
      login_params_.emplace_back(std::string(ps->name), std::string(ps->value));
      int slot = pool_->context().tracked_params().Find(ps->name);
      if (slot >= 0) relay_.mutable_params().Set(static_cast<size_t>(slot), ps->value);
      return;
    }
    case 'K': {
      auto key = protocol::ParseBackendKeyData(body);
      if (!key.ok()) break;
      backend_pid_ = key->pid;
      backend_secret_.assign(key->secret.begin(), key->secret.end());
      return;
    }
    case 'Z':
      last_used_at_ = loop_.now();
      PGFLEET_LOG(kDebug, "server_login", "server=", id_, " db=", base::LogQuote(pool_->db().name),
                  " user=", base::LogQuote(pool_->user()), " backend_pid=", backend_pid_);
      pool_->OnServerReady(this);
      return;
    case 'E':
      HandleLoginError(body);
      return;
    case 'N':
    case 'v':  // NegotiateProtocolVersion: we asked for 3.0 only, nothing to adjust
      return;
    default:
      break;
  }
  Close(base::StrCat("unexpected message '", std::string(1, static_cast<char>(type)),
                     "' during login"));
}

void ServerConn::OnAuthQueryMessage(uint8_t type, std::span<const uint8_t> body) {
  if (type == 'D') {
    protocol::Reader r(body);
    int16_t columns = 0;
    int32_t len = 0;
    std::span<const uint8_t> value;
    // Columns: usename, passwd (NULL passwd = user without password).
    if (!r.ReadInt16(&columns) || columns < 2 || !r.ReadInt32(&len) || len < 0 ||
        !r.ReadBytes(static_cast<size_t>(len), &value) || !r.ReadInt32(&len)) {
      auth_query_error_ = "auth_query returned an unexpected row";
      return;
    }
    auth_query_found_ = true;
    if (len >= 0 && r.ReadBytes(static_cast<size_t>(len), &value)) {
      auth_query_secret_.assign(reinterpret_cast<const char*>(value.data()), value.size());
    }
  } else if (type == 'E') {
    auto fields = protocol::ParseErrorFields(body);
    Observer(*this).OnServerError(fields.ok() ? fields->sqlstate : std::string_view());
    auth_query_error_ = fields.ok() ? std::string(fields->message) : "auth_query failed";
  }
}

void ServerConn::FinishAuthQuery() {
  auth_query_running_ = false;
  ClientConn* client = auth_query_client_;
  auth_query_client_ = nullptr;
  if (client != nullptr) {
    client->set_auth_query_server(nullptr);
    client->OnAuthQueryResult(auth_query_found_, auth_query_secret_, auth_query_error_);
  }
  auth_query_secret_.clear();
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
                      HandleLoginMessage(message.header.type, message.body());
                    });
}

void ServerConn::ProcessAuthQuery() {
  const bool open = ReadWholeMessages([this] { return auth_query_running_; },
                                      [this](const protocol::StreamDecoder::Piece& message) {
                                        if (message.header.type == 'Z') {
                                          FinishAuthQuery();  // ends the loop
                                        } else {
                                          OnAuthQueryMessage(message.header.type, message.body());
                                        }
                                      });
  if (!open) return;
  in_.ReleaseIfEmpty();
  AfterRelayChunk();
}

void ServerConn::ProcessRelay() {
  if (state_ == ServerState::kLogin) return ProcessLogin();
  if (auth_query_running_) return ProcessAuthQuery();
  ClientConn* client = client_;
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
}

void ServerConn::AfterRelayChunk() {
  if (state_ == ServerState::kTesting && !relay_.hidden_in_flight() &&
      !relay_.query_in_progress() && !auth_query_running_) {
    if (close_on_release_) {
      Close("server check or reset failed");
    } else {
      pool_->MakeIdle(this);
    }
    return;
  }
  if (client_ == nullptr) {
    if (state_ == ServerState::kIdle && !in_.empty()) Close("unexpected data from idle server");
    return;
  }
  if (pool_->mode() == config::PoolMode::kSession) return;
  if (pool_->mode() == config::PoolMode::kStatement && relay_.TransactionLeftOpen()) {
    // Closing the client closes this server too: it is inside a transaction.
    client_->Fatal(protocol::sqlstate::kFeatureNotSupported,
                   "transaction blocks not allowed in statement pooling mode");
    return;
  }
  if (relay_.IsReleasable()) pool_->ReleaseServer(this);
}

void ServerConn::Close(std::string_view reason) {
  if (closed() && state_ == ServerState::kClosed) return;
  PGFLEET_LOG(kInfo, "server_disconnect", "server=", id_, " db=", base::LogQuote(pool_->db().name),
              " user=", base::LogQuote(pool_->user()), " state=", ServerStateName(state_),
              " reason=", base::LogQuote(reason));
  CloseSocket();
  ClientConn* auth_client = auth_query_client_;
  auth_query_client_ = nullptr;
  if (auth_client != nullptr) {
    auth_client->set_auth_query_server(nullptr);
    auth_client->OnAuthQueryResult(false, "", "auth_query connection failed");
  }
  pool_->RemoveServer(this);  // sets kClosed, unlinks, schedules deletion
}

}  // namespace pgfleet::pool
