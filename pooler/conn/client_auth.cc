// Client authentication, the I/O side: admission (hba, login slots), the frame loop of the
// password exchange (client_password.h decides) and what a login's end means for the client.
#include <utility>

#include "pooler/auth/hba.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/client_password.h"
#include "pooler/conn/pool_events.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/stream_decoder.h"

namespace pgfleet::pool {

using base::AsBytes;
namespace {

// Password messages are tiny; anything bigger is not a login attempt.
constexpr uint32_t kMaxAuthMessage = 16 * 1024;

}  // namespace

void ClientConn::ContinueAuthWithSecret(const std::string& secret) {
  ClientPasswordOptions options;
  options.user = user_;
  options.secret = secret;
  options.method = EffectiveAuthType();
  // Hashing the certificate is cheap next to the handshake; md5 logins just leave it unused.
  if (tls_established()) options.tls_server_end_point = tls()->ServerEndPoint();
  password_.emplace(std::move(options), context_.random());
  const PasswordVerdict verdict = password_->Start();
  if (verdict.outcome == PasswordVerdict::Outcome::kContinue) {
    host_.MoveClient(this, ClientState::kAuth);
  }
  ApplyPasswordVerdict(verdict);
}

void ClientConn::HandleAuthData() {
  while (state_ == ClientState::kAuth && !in_.empty()) {
    const auto message = protocol::StreamDecoder(kMaxAuthMessage).Peek(in_.Readable());
    if (message.kind == protocol::StreamDecoder::Kind::kNeedMore) return;
    if (message.kind == protocol::StreamDecoder::Kind::kProtocolError ||
        !ClientPasswordExchange::Expects(message.header.type)) {
      ApplyPasswordVerdict(ClientPasswordExchange::UnexpectedMessage());
      return;
    }
    if (!message.whole()) return;
    // The verdict owns what it sends, so the message can go before it is applied.
    const PasswordVerdict verdict = password_->OnMessage(message.header.type, message.body());
    in_.Consume(message.header.total_size());
    ApplyPasswordVerdict(verdict);
  }
}

void ClientConn::ApplyPasswordVerdict(const PasswordVerdict& verdict) {
  using Outcome = PasswordVerdict::Outcome;
  switch (verdict.outcome) {
    case Outcome::kContinue:
    case Outcome::kAuthenticated: {
      if (!verdict.to_client.bytes().empty() && !Send(AsBytes(verdict.to_client.bytes()))) {
        Close("write failed");
        return;
      }
      if (verdict.outcome == Outcome::kContinue) return;
      const std::string secret = password_->secret();
      password_.reset();
      FinishLogin(secret, verdict.scram_client_key);
      return;
    }
    case Outcome::kFailed:
      if (verdict.bad_stored_secret) {
        PGFLEET_LOG(kWarning, "auth_secret_invalid", "user=", base::LogQuote(user_));
      } else {
        ++context_.counters().login_failures;
        PGFLEET_LOG(kWarning, "client_auth_failed", "client=", id_, " addr=", peer_address_,
                    " user=", base::LogQuote(user_), " method=", verdict.method);
      }
      Fatal(verdict.sqlstate, verdict.message);
      return;
    case Outcome::kProtocolError:
      if (verdict.unexpected_message) ++context_.counters().protocol_errors;
      Fatal(protocol::sqlstate::kProtocolViolation, verdict.message);
      return;
  }
}

void ClientConn::FinishLogin(const std::string& secret,
                             const std::optional<auth::ScramKey>& scram_client_key) {
  EndLogin();
  const auto& config = context_.config();
  if (admin_console_) {
    host_.MoveClient(this, ClientState::kAdmin);
    ParamSet defaults(context_.tracked_params().size());
    SendWelcome({{"server_version", "15.0 (pgfleet)"},
                 {"client_encoding", "UTF8"},
                 {"server_encoding", "UTF8"},
                 {"DateStyle", "ISO"},
                 {"standard_conforming_strings", "on"},
                 {"integer_datetimes", "on"}},
                defaults);
    if (!closed() && !in_.empty()) HandleAdminData();
    return;
  }
  auto db = config.FindDatabase(database_);
  if (!db.has_value()) {
    Fatal(protocol::sqlstate::kInvalidCatalogName, base::StrCat("no such database: ", database_));
    return;
  }
  pool_ = host_.GetOrCreatePool(*db, user_);
  auto& creds = pool_->credentials();
  if (!db->user.empty()) {
    // A forced server user logs in with the database entry's password or its userlist entry.
    if (!db->password.empty()) {
      creds.secret = db->password;
    } else if (auto it = context_.userlist().find(db->user); it != context_.userlist().end()) {
      creds.secret = it->second;
    }
  } else if (!secret.empty()) {
    if (creds.secret != secret) {
      creds.secret = secret;
      creds.scram_client_key.reset();
    }
    if (scram_client_key.has_value()) creds.scram_client_key = scram_client_key;
  } else if (auto it = context_.userlist().find(user_); it != context_.userlist().end()) {
    creds.secret = it->second;  // trust toward clients, password toward the server
  }
  pool_->AddClient(this);
}

bool ClientConn::AdmitLogin() {
  if (const auth::HbaRules* hba = context_.hba()) {
    auth::HbaClient client;
    client.database = database_;
    client.user = user_;
    client.tls = tls_established();
    // An address the listener never writes matches no rule, so it is refused.
    const auth::HbaRule* rule =
        auth::ParsePeerAddress(peer_address_, &client) ? hba->Match(client) : nullptr;
    if (rule == nullptr || rule->method == auth::HbaMethod::kReject) {
      ++context_.counters().clients_rejected_hba;
      PGFLEET_LOG(kWarning, "client_hba_rejected", "client=", id_, " addr=", peer_address_,
                  " user=", base::LogQuote(user_), " db=", base::LogQuote(database_),
                  " rule_line=", rule != nullptr ? rule->line : 0);
      Fatal(protocol::sqlstate::kInvalidAuthorization, auth::HbaRefusalMessage(client, rule));
      return false;
    }
    switch (rule->method) {
      case auth::HbaMethod::kTrust:
        hba_auth_type_ = config::AuthType::kTrust;
        break;
      case auth::HbaMethod::kMd5:
        hba_auth_type_ = config::AuthType::kMd5;
        break;
      case auth::HbaMethod::kCert:
        hba_auth_type_ = config::AuthType::kCert;
        break;
      case auth::HbaMethod::kPeer:
        hba_auth_type_ = config::AuthType::kPeer;
        break;
      case auth::HbaMethod::kPassword:
        hba_auth_type_ = config::AuthType::kPlain;
        break;
      case auth::HbaMethod::kScramSha256:
      case auth::HbaMethod::kReject:
        hba_auth_type_ = config::AuthType::kScramSha256;
        break;
    }
  }
  if (!host_.TryBeginLogin()) {
    Fatal(protocol::sqlstate::kTooManyConnections,
          "too many logins in progress (max_concurrent_logins)");
    return false;
  }
  holds_login_slot_ = true;
  return true;
}

void ClientConn::EndLogin() {
  if (!holds_login_slot_) return;
  holds_login_slot_ = false;
  host_.EndLogin();
}

config::AuthType ClientConn::EffectiveAuthType() const {
  return hba_auth_type_.value_or(context_.config().auth.type);
}

}  // namespace pgfleet::pool
