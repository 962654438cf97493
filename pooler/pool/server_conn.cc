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
#include "pooler/pool/pool.h"
#include "pooler/pool/pool_registry.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

std::string_view ServerStateName(ServerState state) {
  switch (state) {
    case ServerState::kConnecting:
      return "connecting";
    case ServerState::kLogin:
      return "login";
    case ServerState::kIdle:
      return "idle";
    case ServerState::kActive:
      return "active";
    case ServerState::kTesting:
      return "tested";
    case ServerState::kCanceling:
      return "being_canceled";
    case ServerState::kClosed:
      return "closed";
  }
  return "unknown";
}

ServerConn::ServerConn(net::EventLoop& loop, int fd, Pool* pool, uint64_t id)
    : net::Connection(loop, fd),
      pool_(pool),
      id_(id),
      params_(pool->registry()->tracked_params().size()),
      created_at_(loop.now()),
      last_used_at_(loop.now()) {}

ServerConn::~ServerConn() = default;

void ServerConn::Attach(ClientConn* client) {
  client_ = client;
  ++link_generation_;
  linked_at_ = loop_.now();
}

void ServerConn::Detach() { client_ = nullptr; }

bool ServerConn::IsReleasable() const {
  return expected_rfq_ == 0 && hidden_rfq_ == 0 && tx_status_ == 'I' && skip_remaining_ == 0 &&
         pending_.empty() &&
         (client_ == nullptr ||
          (!client_->in_copy_in() && !client_->unsynced() && !client_->mid_message()));
}

void ServerConn::CancelFinished() {
  if (cancels_in_flight_ > 0) --cancels_in_flight_;
  if (cancels_in_flight_ == 0 && state_ == ServerState::kCanceling) pool_->MakeIdle(this);
}

bool ServerConn::SendHiddenQuery(std::string_view sql) {
  protocol::StringSink sink;
  protocol::BuildQuery(sink, sql);
  ++hidden_rfq_;
  const auto& bytes = sink.bytes();
  return Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

bool ServerConn::StartAuthQuery(ClientConn* client, std::string_view query,
                                std::string_view username) {
  // Extended protocol with a parameter, so the user name is never spliced into SQL.
  protocol::StringSink sink;
  protocol::BuildParse(sink, "", query, {});
  // Bind: portal "", statement "", 0 param formats, 1 param, value, 0 result formats.
  std::string body;
  body.append("\0\0", 2);  // portal, statement names
  body.append("\0\0", 2);  // no parameter format codes (all text)
  body.append("\0\1", 2);  // one parameter
  uint8_t len[4];
  protocol::StoreBigEndian32(len, static_cast<uint32_t>(username.size()));
  body.append(reinterpret_cast<char*>(len), 4);
  body.append(username);
  body.append("\0\0", 2);  // result columns in text
  uint8_t header[5] = {'B'};
  protocol::StoreBigEndian32(header + 1, static_cast<uint32_t>(body.size() + 4));
  sink.Append(header, 5);
  sink.Append(body);
  sink.Append(std::string_view("E\0\0\0\x09\0\0\0\0\0", 10));  // Execute portal "", no limit
  protocol::BuildSync(sink);
  auth_query_client_ = client;
  auth_query_running_ = true;
  auth_query_found_ = false;
  auth_query_secret_.clear();
  auth_query_error_.clear();
  ++expected_rfq_;
  const auto& bytes = sink.bytes();
  return Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
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
  net::TuneSocket(fd_, pool_->registry()->config().pool.tcp_keepalive);
  state_ = ServerState::kLogin;
  UpdateInterest();
  pool_->OnServerConnected(this);
  // PostgreSQL answers 'N' on unix sockets, so asking there would only cost a round trip.
  const auto& tls = pool_->registry()->config().tls;
  if (ServerTlsWanted(tls.server_tls_sslmode) && pool_->registry()->tls().server != nullptr &&
      !pool_->db().host.starts_with('/')) {
    protocol::StringSink sink;
    protocol::BuildSslRequest(sink);
    const auto& bytes = sink.bytes();
    if (!Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()})) {
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
  const config::SslMode mode = pool_->registry()->config().tls.server_tls_sslmode;
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
  if (auto status = StartTls(pool_->registry()->tls().server, verify_host); !status.ok()) {
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
  const auto& bytes = sink.bytes();
  if (!Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()})) {
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
            auth::ScramClientExchange::WithPassword(creds.secret, pool_->registry()->random()));
      } else if (kind == auth::SecretKind::kScramSha256 && creds.scram_client_key.has_value()) {
        auto secret = auth::ParseScramSecret(creds.secret);
        if (!secret.ok()) {
          FailLogin("stored SCRAM secret is malformed");
          return;
        }
        scram_.emplace(auth::ScramClientExchange::WithClientKey(*creds.scram_client_key, *secret,
                                                                pool_->registry()->random()));
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
  const auto& bytes = sink.bytes();
  if (!Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()})) {
    Close("write failed during login");
  }
}

void ServerConn::FailLogin(std::string_view message) {
  PGFLEET_LOG(kWarning, "server_login_failed", "server=", id_,
              " db=", base::LogQuote(pool_->db().name), " user=", base::LogQuote(pool_->user()),
              " message=", base::LogQuote(message));
  ++pool_->registry()->counters().server_login_failures;
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
  ++pool_->registry()->counters().server_login_failures;
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
      int slot = pool_->registry()->tracked_params().Find(ps->name);
      if (slot >= 0) params_.Set(static_cast<size_t>(slot), ps->value);
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
      state_ = ServerState::kIdle;
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

void ServerConn::TrackParameterStatus(std::span<const uint8_t> body) {
  auto ps = protocol::ParseParameterStatus(body);
  if (!ps.ok()) return;
  int slot = pool_->registry()->tracked_params().Find(ps->name);
  if (slot < 0) return;
  params_.Set(static_cast<size_t>(slot), ps->value);
  // A SET by the client (not one we injected) changes what the client wants from now on.
  if (client_ != nullptr && hidden_rfq_ == 0) {
    client_->mutable_params().Set(static_cast<size_t>(slot), ps->value);
  }
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

bool ServerConn::OnPendingResponse(uint8_t type) {
  switch (type) {
    case '1':    // ParseComplete
    case '2':    // BindComplete
    case '3':    // CloseComplete
    case 'n': {  // NoData (Describe)
      if (pending_.empty()) return true;
      Pending head = pending_.front();
      pending_.pop_front();
      return head.action != PendingAction::kHide;
    }
    case 'T':  // RowDescription: ends a Describe; inside a Query it belongs to the Query
      if (!pending_.empty() && pending_.front().kind == PendingKind::kDescribe)
        pending_.pop_front();
      return true;
    case 'C':
    case 'I':
    case 's':
      if (!pending_.empty() && pending_.front().kind == PendingKind::kExecute) pending_.pop_front();
      return true;
    case 'E':
      // The failing message is the head (unless it is a simple Query, answered by its 'Z').
      // Errors always reach the client: a failed re-Parse reports for the message that needed it.
      if (!pending_.empty() && pending_.front().kind != PendingKind::kSync) {
        Pending head = pending_.front();
        pending_.pop_front();
        if (head.kind == PendingKind::kParse && head.statement_id != 0) {
          statements_.Remove(head.statement_id);
        }
        pipeline_failed_ = true;
      }
      return true;
    case 'Z':
      if (pipeline_failed_) {
        // Everything up to the Sync was skipped: statements it would have created do not exist.
        while (!pending_.empty() && pending_.front().kind != PendingKind::kSync) {
          Pending skipped = pending_.front();
          pending_.pop_front();
          if (skipped.kind == PendingKind::kParse && skipped.statement_id != 0) {
            statements_.Remove(skipped.statement_id);
          }
        }
        pipeline_failed_ = false;
      }
      if (!pending_.empty() && pending_.front().kind == PendingKind::kSync) pending_.pop_front();
      return true;
    default:
      return true;
  }
}

bool ServerConn::TakeReadyFakes(protocol::StringSink& sink) {
  bool any = false;
  while (!pipeline_failed_ && !pending_.empty()) {
    const auto action = pending_.front().action;
    if (action == PendingAction::kFakeParseComplete) {
      protocol::BuildParseComplete(sink);
    } else if (action == PendingAction::kFakeCloseComplete) {
      protocol::BuildCloseComplete(sink);
    } else {
      break;
    }
    pending_.pop_front();
    any = true;
  }
  return any;
}

bool ServerConn::FlushReadyFakesToClient() {
  if (client_ == nullptr || skip_remaining_ > 0) return true;
  protocol::StringSink sink;
  if (!TakeReadyFakes(sink)) return true;
  const auto& bytes = sink.bytes();
  return client_->Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

bool ServerConn::OnBackendMessage(uint8_t type, std::span<const uint8_t> body) {
  const bool hidden = hidden_rfq_ > 0 || auth_query_running_;
  const bool pass =
      hidden || (pending_.empty() && !pipeline_failed_) ? true : OnPendingResponse(type);
  if (type == 'C' && !body.empty()) {
    // DISCARD ALL / DEALLOCATE ALL drop every prepared statement on the server.
    auto tag = protocol::ParseCommandComplete(body);
    if (tag.ok() && (*tag == "DISCARD ALL" || *tag == "DEALLOCATE ALL")) {
      statements_.Clear();
      if (client_ != nullptr && !hidden) client_->ForgetPreparedStatements();
    }
  }
  switch (type) {
    case 'Z': {
      auto status = protocol::ParseReadyForQuery(body);
      if (status.ok()) tx_status_ = *status;
      if (hidden_rfq_ > 0) {
        --hidden_rfq_;
        return false;
      }
      if (expected_rfq_ > 0) --expected_rfq_;
      if (auth_query_running_) {
        FinishAuthQuery();
        return false;
      }
      if (client_ != nullptr) {
        auto& stats = pool_->stats();
        ++stats.queries;
        stats.RecordQuery(
            static_cast<uint64_t>(absl::ToInt64Microseconds(loop_.now() - query_started_at_)));
      }
      return client_ != nullptr && pass;
    }
    case 'S':
      TrackParameterStatus(body);
      return !hidden && client_ != nullptr;
    case 'G':
      if (client_ != nullptr && !hidden) client_->set_in_copy_in(true);
      break;
    case 'E':
      if (hidden && !auth_query_running_) {
        auto fields = protocol::ParseErrorFields(body);
        PGFLEET_LOG(kWarning, "server_hidden_query_failed", "server=", id_,
                    " message=", base::LogQuote(fields.ok() ? fields->message : "malformed"));
        // A failed SET or check leaves the server in a state we cannot vouch for.
        MarkCloseOnRelease();
        return false;
      }
      ++pool_->stats().errors;
      if (auto fields = protocol::ParseErrorFields(body); fields.ok()) {
        pool_->registry()->counters().CountError(fields->sqlstate);
      }
      break;
    default:
      break;
  }
  if (auth_query_running_) {
    OnAuthQueryMessage(type, body);
    return false;
  }
  return !hidden && client_ != nullptr && pass;
}

void ServerConn::ProcessRelay() {
  const uint32_t max_packet =
      static_cast<uint32_t>(pool_->registry()->config().pool.max_packet_size);
  auto data = in_.Readable();
  size_t pos = 0;
  size_t forward_start = 0;
  ClientConn* client = client_;
  auto forward = [&](size_t end) -> bool {
    if (end > forward_start && client != nullptr && client_ == client) {
      pool_->stats().sent_bytes += end - forward_start;
      if (!client->Send(data.subspan(forward_start, end - forward_start))) {
        client->Close("write to client failed");
        return false;
      }
    }
    forward_start = end;
    return true;
  };
  // Stand-in responses go out right after the message that made them due.
  auto emit_fakes = [&](size_t end) -> bool {
    if (pending_.empty() || client == nullptr || client_ != client) return true;
    protocol::StringSink fakes;
    if (!TakeReadyFakes(fakes)) return true;
    if (!forward(end)) return false;
    const auto& bytes = fakes.bytes();
    if (!client->Send({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()})) {
      client->Close("write to client failed");
      return false;
    }
    return true;
  };
  const bool login = state_ == ServerState::kLogin;
  while (pos < data.size()) {
    if (skip_remaining_ > 0) {
      size_t n = std::min(skip_remaining_, data.size() - pos);
      if (skip_hidden_) {
        if (!forward(pos)) return;
        forward_start = pos + n;
      }
      pos += n;
      skip_remaining_ -= n;
      if (skip_remaining_ == 0 && !emit_fakes(pos)) return;
      continue;
    }
    protocol::FrameHeader header;
    auto result = protocol::PeekHeader(data.subspan(pos), max_packet, &header);
    if (result == protocol::FrameResult::kNeedMore) break;
    if (result == protocol::FrameResult::kProtocolError) {
      forward(pos);
      Close("protocol error from server");
      return;
    }
    const bool whole = login || auth_query_running_ || protocol::BackendNeedsBody(header.type);
    if (whole) {
      if (data.size() - pos < header.total_size()) break;
      auto body = data.subspan(pos + protocol::kHeaderSize, header.body_size());
      if (login) {
        HandleLoginMessage(header.type, body);
        if (closed()) return;
        pos += header.total_size();
        forward_start = pos;
        if (state_ != ServerState::kLogin) {
          // Login finished inside this chunk; anything after it is unexpected.
          in_.Consume(pos);
          return;
        }
        continue;
      }
      bool to_client = OnBackendMessage(header.type, body);
      if (closed()) return;
      if (!to_client) {
        if (!forward(pos)) return;
        forward_start = pos + header.total_size();
      }
      pos += header.total_size();
      if (!emit_fakes(pos)) return;
    } else {
      // Streamed (DataRow, CopyData, ...): relay what is here, the rest as it comes.
      bool to_client = OnBackendMessage(header.type, {});
      size_t n = std::min(header.total_size(), data.size() - pos);
      skip_remaining_ = header.total_size() - n;
      skip_hidden_ = !to_client;
      if (!to_client) {
        if (!forward(pos)) return;
        forward_start = pos + n;
      }
      pos += n;
      if (skip_remaining_ == 0 && !emit_fakes(pos)) return;
    }
  }
  if (!forward(pos)) return;
  if (closed()) return;
  in_.Consume(pos);
  in_.ReleaseIfEmpty();
  if (client != nullptr && client_ == client && client->has_pending_output()) {
    // The client is slower than the server: stop reading until it drains (bounded memory).
    SetReadEnabled(false);
  }
  AfterRelayChunk();
}

void ServerConn::AfterRelayChunk() {
  if (state_ == ServerState::kTesting && hidden_rfq_ == 0 && expected_rfq_ == 0 &&
      !auth_query_running_) {
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
  if (expected_rfq_ == 0 && hidden_rfq_ == 0 && tx_status_ != 'I' &&
      pool_->mode() == config::PoolMode::kStatement) {
    // Closing the client closes this server too: it is inside a transaction.
    client_->Fatal(protocol::sqlstate::kFeatureNotSupported,
                   "transaction blocks not allowed in statement pooling mode");
    return;
  }
  if (IsReleasable()) pool_->ReleaseServer(this);
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
