// Client authentication: md5 and SCRAM-SHA-256 challenges against the user's stored secret.
#include <sys/socket.h>

#include "pooler/auth/hba.h"
#include "pooler/auth/md5.h"
#include "pooler/auth/secret.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/pool/client_conn.h"
#include "pooler/pool/pool.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/stream_decoder.h"

namespace pgfleet::pool {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Password messages are tiny; anything bigger is not a login attempt.
constexpr uint32_t kMaxAuthMessage = 16 * 1024;

}  // namespace

void ClientConn::ContinueAuthWithSecret(const std::string& secret) {
  secret_ = secret;
  const auto kind = auth::ClassifySecret(secret);
  const auto type = EffectiveAuthType();
  protocol::StringSink sink;
  bool use_scram = type == config::AuthType::kScramSha256 ||
                   (type == config::AuthType::kMd5 && kind == auth::SecretKind::kScramSha256);
  if (kind == auth::SecretKind::kEmpty || (use_scram && kind == auth::SecretKind::kMd5)) {
    // Still run a challenge so a missing user looks like a wrong password; it cannot succeed.
    secret_.clear();
  }
  if (use_scram) {
    auth::ScramSecret scram_secret;
    if (kind == auth::SecretKind::kScramSha256) {
      auto parsed = auth::ParseScramSecret(secret);
      if (!parsed.ok()) {
        PGFLEET_LOG(kWarning, "auth_secret_invalid", "user=", base::LogQuote(user_));
        Fatal(protocol::sqlstate::kInvalidPassword,
              base::StrCat("password authentication failed for user \"", user_, "\""));
        return;
      }
      scram_secret = *parsed;
    } else {
      uint8_t salt[16];
      context_.random().Fill(salt);
      if (secret_.empty()) {
        // An unknown user gets random keys, so no proof can match. No PBKDF2 for them: 4096
        // rounds on the event loop per attempt would let unauthenticated clients stall the worker.
        scram_secret.iterations = auth::kDefaultScramIterations;
        scram_secret.salt.assign(salt, salt + sizeof(salt));
        context_.random().Fill(scram_secret.stored_key);
        context_.random().Fill(scram_secret.server_key);
      } else {
        scram_secret = auth::MakeScramSecret(secret_, salt, auth::kDefaultScramIterations);
      }
    }
    // Over TLS, offer channel binding too (PostgreSQL lists -PLUS first); libpq's
    // channel_binding=require then proves no one terminated TLS in between.
    std::optional<std::vector<uint8_t>> binding;
    if (tls_established()) binding = tls()->ServerEndPoint();
    const bool offer_plus = binding.has_value();
    scram_.emplace(std::move(scram_secret), context_.random(), std::move(binding));
    scram_first_done_ = false;
    std::vector<std::string_view> mechanisms;
    if (offer_plus) mechanisms.push_back(auth::kScramSha256Plus);
    mechanisms.push_back(auth::kScramSha256);
    protocol::BuildAuthenticationSasl(sink, mechanisms);
  } else {
    context_.random().Fill(md5_salt_);
    protocol::BuildAuthenticationMd5(sink, md5_salt_);
  }
  host_.MoveClient(this, ClientState::kAuth);
  if (!Send(AsBytes(sink.bytes()))) Close("write failed");
}

void ClientConn::HandleAuthData() {
  while (state_ == ClientState::kAuth && !in_.empty()) {
    const auto message = protocol::StreamDecoder(kMaxAuthMessage).Peek(in_.Readable());
    if (message.kind == protocol::StreamDecoder::Kind::kNeedMore) return;
    if (message.kind == protocol::StreamDecoder::Kind::kProtocolError ||
        message.header.type != 'p') {
      ++context_.counters().protocol_errors;
      Fatal(protocol::sqlstate::kProtocolViolation, "expected password response");
      return;
    }
    if (!message.whole()) return;
    std::string body(reinterpret_cast<const char*>(message.body().data()), message.body().size());
    in_.Consume(message.header.total_size());
    auto bytes = AsBytes(body);
    const std::string failed =
        base::StrCat("password authentication failed for user \"", user_, "\"");

    if (!scram_.has_value()) {
      auto password = protocol::ParsePasswordMessage(bytes);
      if (!password.ok()) {
        Fatal(protocol::sqlstate::kProtocolViolation, base::Sv(password.status().message()));
        return;
      }
      if (secret_.empty() || !auth::VerifyMd5Response(secret_, user_, md5_salt_, *password)) {
        ++context_.counters().login_failures;
        PGFLEET_LOG(kWarning, "client_auth_failed", "client=", id_, " addr=", peer_address_,
                    " user=", base::LogQuote(user_), " method=md5");
        Fatal(protocol::sqlstate::kInvalidPassword, failed);
        return;
      }
      FinishLogin();
      return;
    }

    protocol::StringSink sink;
    if (!scram_first_done_) {
      auto initial = protocol::ParseSaslInitialResponse(bytes);
      const bool plus = initial.ok() && initial->mechanism == auth::kScramSha256Plus;
      if (!initial.ok() || (initial->mechanism != auth::kScramSha256 && !plus)) {
        Fatal(protocol::sqlstate::kProtocolViolation,
              "client selected an invalid SASL authentication mechanism");
        return;
      }
      auto server_first = scram_->HandleClientFirst(initial->data, plus);
      if (!server_first.ok()) {
        Fatal(protocol::sqlstate::kProtocolViolation, base::Sv(server_first.status().message()));
        return;
      }
      scram_first_done_ = true;
      protocol::BuildAuthenticationSaslContinue(sink, *server_first);
      if (!Send(AsBytes(sink.bytes()))) return Close("write failed");
      continue;
    }
    auto server_final = scram_->HandleClientFinal(body);
    if (!server_final.ok() || secret_.empty()) {
      ++context_.counters().login_failures;
      PGFLEET_LOG(kWarning, "client_auth_failed", "client=", id_, " addr=", peer_address_,
                  " user=", base::LogQuote(user_), " method=scram-sha-256");
      Fatal(protocol::sqlstate::kInvalidPassword, failed);
      return;
    }
    protocol::BuildAuthenticationSaslFinal(sink, *server_final);
    if (!Send(AsBytes(sink.bytes()))) return Close("write failed");
    FinishLogin();
    return;
  }
}

void ClientConn::FinishLogin() {
  EndLogin();
  const auto& config = context_.config();
  if (admin_console_) {
    scram_.reset();
    secret_.clear();
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
  } else if (!secret_.empty()) {
    if (creds.secret != secret_) {
      creds.secret = secret_;
      creds.scram_client_key.reset();
    }
    if (scram_.has_value() && auth::ClassifySecret(secret_) == auth::SecretKind::kScramSha256) {
      creds.scram_client_key = scram_->client_key();
    }
  } else if (auto it = context_.userlist().find(user_); it != context_.userlist().end()) {
    creds.secret = it->second;  // trust toward clients, password toward the server
  }
  scram_.reset();
  secret_.clear();
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
