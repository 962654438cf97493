// Client connection: the startup packet, TLS (SSLRequest or direct) and the start of
// authentication, up to the client's pool or the console.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/admin_hook.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/pool_events.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/protocol/startup_options.h"

namespace pgfleet::pool {

using base::AsBytes;

void ClientConn::HandleStartupData() {
  while (state_ == ClientState::kStartup && !in_.empty()) {
    uint32_t length = 0;
    auto result = protocol::PeekStartupLength(in_.Readable(), &length);
    if (result == protocol::FrameResult::kNeedMore) return;
    if (result == protocol::FrameResult::kProtocolError) {
      ++context_.counters().protocol_errors;
      Fatal(protocol::sqlstate::kProtocolViolation, "invalid startup packet layout");
      return;
    }
    auto packet = protocol::ParseStartupPacket(in_.Readable().subspan(0, length));
    in_.Consume(length);
    if (!packet.ok()) {
      ++context_.counters().protocol_errors;
      Fatal(packet.status().code() == absl::StatusCode::kUnimplemented
                ? protocol::sqlstate::kFeatureNotSupported
                : protocol::sqlstate::kProtocolViolation,
            base::Sv(packet.status().message()));
      return;
    }
    if (packet->kind == protocol::StartupKind::kSslRequest ||
        packet->kind == protocol::StartupKind::kGssEncRequest) {
      // Bytes sent before our answer would be a buffer-stuffing attempt (CVE-2021-23222), and a
      // second request inside TLS makes no sense.
      if (!in_.empty() || tls() != nullptr) {
        ++context_.counters().protocol_errors;
        Fatal(protocol::sqlstate::kProtocolViolation, "unexpected data after encryption request");
        return;
      }
      // GSS encryption is never offered; TLS when client_tls_sslmode is not disable. After 'N'
      // the client may continue in plain text (or try the other kind).
      const auto& context = context_.tls().client;
      const bool tls = packet->kind == protocol::StartupKind::kSslRequest && context != nullptr;
      const uint8_t answer = tls ? 'S' : 'N';
      if (!Send({&answer, 1})) return Close("write failed");
      if (!tls) continue;
      if (has_pending_output()) return Close("write to client stalled");
      if (auto status = StartTls(context); !status.ok()) {
        PGFLEET_LOG(kWarning, "client_tls_failed", "client=", id_, " addr=", peer_address_,
                    " error=", base::LogQuote(base::Sv(status.message())));
        return Close("cannot start TLS");
      }
      ContinueHandshake();
      return;
    }
    if (packet->kind == protocol::StartupKind::kCancelRequest) {
      ++context_.counters().cancels_received;
      if (!host_.cancels().AllowCancelFrom(peer_address_)) {
        Close("cancel request rate limited");
        return;
      }
      // Any length from 4 to 256 bytes (the parser checked): a 3.0 client's 4-byte key or a
      // 3.2 client's 32-byte one; a length pgfleet never mints matches no key.
      protocol::CancelKey key;
      key.pid = packet->cancel_pid;
      key.secret.assign(packet->cancel_secret.begin(), packet->cancel_secret.end());
      (void)host_.cancels().HandleCancel(key, /*forwarded=*/false);
      Close("cancel request");
      return;
    }
    HandleStartupPacket(*packet);
  }
}

void ClientConn::StartDirectTls() {
  const auto& context = context_.tls().client;
  if (context == nullptr || peer_address_ == "unix") {
    // The client cannot read a plain-text error inside its TLS handshake: close, and say why
    // here.
    ++context_.counters().tls_handshake_failures;
    PGFLEET_LOG(kWarning, "client_direct_tls_refused", "client=", id_, " addr=", peer_address_,
                " reason=",
                base::LogQuote(context == nullptr
                                   ? "direct TLS (sslnegotiation=direct) but client TLS is not "
                                     "configured (tls.client_tls_cert_file, client_tls_key_file)"
                                   : "TLS is not used on unix sockets"));
    Close("direct TLS refused");
    return;
  }
  if (auto status = StartTls(context); !status.ok()) {
    PGFLEET_LOG(kWarning, "client_tls_failed", "client=", id_, " addr=", peer_address_,
                " error=", base::LogQuote(base::Sv(status.message())));
    Close("cannot start TLS");
    return;
  }
  direct_tls_ = true;
  ContinueHandshake();
}

void ClientConn::ContinueHandshake() {
  switch (ContinueTlsHandshake()) {
    case HandshakeStatus::kInProgress:
      return;
    case HandshakeStatus::kFailed:
      // A TLS client cannot read a plain-text FATAL; the alert OpenSSL sent says what failed.
      ++context_.counters().tls_handshake_failures;
      PGFLEET_LOG(kWarning, "client_tls_handshake_failed", "client=", id_, " addr=", peer_address_,
                  " error=", base::LogQuote(tls()->error()));
      Close("TLS handshake failed");
      return;
    case HandshakeStatus::kDone:
      PGFLEET_LOG(kDebug, "client_tls", "client=", id_, " tls=", tls()->Description());
      if (direct_tls_ && tls()->alpn() != "postgresql") {
        // As PostgreSQL: direct TLS must name the protocol, or it could be another protocol's
        // client talked into this port (ALPACA).
        ++context_.counters().tls_handshake_failures;
        PGFLEET_LOG(kWarning, "client_direct_tls_refused", "client=", id_, " addr=", peer_address_,
                    " reason=\"no ALPN postgresql\"");
        Close("direct TLS without ALPN postgresql");
        return;
      }
      // The startup packet may have come with the last handshake flight.
      HandleReadable();
      return;
  }
}

void ClientConn::HandleStartupPacket(const protocol::StartupPacket& packet) {
  const auto& config = context_.config();
  const protocol::ProtocolAnswer protocol =
      protocol::NegotiateProtocol(packet.protocol_version, packet.parameters);
  protocol_version_ = protocol.version;
  for (const auto& [name, value] : packet.parameters) {
    if (name == "user") {
      user_ = value;
    } else if (name == "database") {
      database_ = value;
    } else if (absl::StartsWith(name, "_pq_.")) {
      continue;  // listed in NegotiateProtocolVersion
    } else if (name == "replication") {
      Fatal(protocol::sqlstate::kFeatureNotSupported,
            "replication connections are not supported through pgfleet: connect to PostgreSQL "
            "directly");
      return;
    } else if (name == "options") {
      auto settings = protocol::ParseStartupOptions(value);
      if (!settings.ok() && IgnoresStartupParameter("options")) continue;
      if (!settings.ok()) {
        Fatal(protocol::sqlstate::kProtocolViolation, base::Sv(settings.status().message()));
        return;
      }
      for (auto& setting : *settings) {
        if (!TakeStartupSetting(setting.name, setting.value, /*from_options=*/true)) return;
      }
    } else if (!TakeStartupSetting(name, value, /*from_options=*/false)) {
      return;
    }
  }
  if (config.pool.application_name_add_host) {
    // PgBouncer's application_name_add_host: at login only; a later SET is the client's own.
    if (const int slot = context_.tracked_params().Find("application_name"); slot >= 0) {
      const auto at = static_cast<size_t>(slot);
      const std::string name = base::StrCat(
          stream_.params.IsSet(at) ? stream_.params.Get(at) : "app", " - ", peer_address_);
      stream_.params.Set(at, name);
    }
  }
  if (protocol.negotiate) {
    protocol::StringSink sink;
    protocol::BuildNegotiateProtocolVersion(sink, protocol.version, protocol.unrecognized);
    if (!Send(AsBytes(sink.bytes()))) return Close("write failed");
  }
  if (user_.empty()) {
    Fatal(protocol::sqlstate::kInvalidAuthorization,
          "no PostgreSQL user name specified in startup packet");
    return;
  }
  if (database_.empty()) database_ = user_;
  // Unix sockets never carry TLS (PostgreSQL answers 'N' there too) and stay on the host.
  if (tls() == nullptr && peer_address_ != "unix" &&
      ClientTlsRequired(config.tls.client_tls_sslmode)) {
    ++context_.counters().clients_rejected_tls_required;
    Fatal(protocol::sqlstate::kInvalidAuthorization,
          base::StrCat("SSL required: pgfleet accepts only TLS connections (client_tls_sslmode=",
                       config::SslModeName(config.tls.client_tls_sslmode),
                       "); connect with sslmode=require or stronger"));
    return;
  }
  if (!AdmitLogin()) return;
  if (!holds_client_slot_) {
    ++context_.counters().clients_rejected_max_client_conn;
    Fatal(protocol::sqlstate::kTooManyConnections, "no more connections allowed (max_client_conn)");
    return;
  }
  admin_console_ = (database_ == kAdminDatabase ||
                    (database_ == kPgBouncerAdminDatabase &&
                     !config.databases.contains(std::string(kPgBouncerAdminDatabase)))) &&
                   host_.admin_console() != nullptr;
  // PgBouncer: the user pgbouncer, over the unix socket from the pooler's own OS user, is the
  // console's admin without a password.
  local_console_admin_ = admin_console_ && user_ == "pgbouncer" && IsOwnUserOnUnixSocket();
  if (admin_console_) {
    if (!local_console_admin_ && !host_.admin_console()->MayConnect(user_)) {
      ++context_.counters().login_failures;
      Fatal(protocol::sqlstate::kInvalidAuthorization,
            base::StrCat("not allowed to connect to the admin console: ", user_));
      return;
    }
  } else if (!config.FindDatabase(database_).has_value()) {
    ++context_.counters().login_failures;
    Fatal(protocol::sqlstate::kInvalidCatalogName, base::StrCat("no such database: ", database_));
    return;
  } else if (!host_.AcceptsClients(database_)) {
    ++context_.counters().login_failures;
    Fatal(protocol::sqlstate::kObjectNotInPrerequisiteState,
          base::StrCat("database \"", database_, "\" is disabled (DISABLE on the admin console)"));
    return;
  } else if (const std::string_view full = host_.CountClient(this); !full.empty()) {
    ++context_.counters().clients_rejected_max_client_conn;
    Fatal(protocol::sqlstate::kTooManyConnections,
          base::StrCat("no more connections allowed (", full, ")"));
    return;
  }
  BeginAuth();
}

bool ClientConn::IgnoresStartupParameter(std::string_view name) const {
  const auto& ignored = context_.config().pool.ignore_startup_parameters;
  return std::any_of(ignored.begin(), ignored.end(), [&](const std::string& entry) {
    return absl::EqualsIgnoreCase(entry, base::Av(name));
  });
}

bool ClientConn::TakeStartupSetting(const std::string& name, const std::string& value,
                                    bool from_options) {
  if (int slot = context_.tracked_params().Find(name); slot >= 0) {
    // As the server will report it (client_encoding=utf8 is reported as UTF8): what the client
    // is told at login, and what a server's value is compared with.
    stream_.params.Set(static_cast<size_t>(slot), CanonicalParamValue(name, value));
  } else if (IgnoresStartupParameter(name) ||
             (from_options && IgnoresStartupParameter("options"))) {
    // PgBouncer's meaning: dropped (with `options` listed, any setting inside it).
  } else if (!protocol::IsSettingName(name)) {
    Fatal(protocol::sqlstate::kProtocolViolation,
          base::StrCat("unsupported startup parameter: ", name));
    return false;
  } else {
    // Any other parameter names a setting, as PostgreSQL reads it: it becomes the session's
    // (checked on a server before the welcome, Pool::StartupSettingsKnownGood).
    startup_settings_.push_back({absl::AsciiStrToLower(name), value});
  }
  return true;
}

void ClientConn::BeginAuth() {
  const auto& config = context_.config();
  if (local_console_admin_) {
    FinishLogin();
    return;
  }
  switch (EffectiveAuthType()) {
    case config::AuthType::kTrust:
    case config::AuthType::kAny:
      // any: the user name is not checked; servers log in as the database's own user.
      FinishLogin();
      return;
    case config::AuthType::kCert:
    case config::AuthType::kPeer:
      // No password: who the client is comes from its connection. The servers log in with the
      // userlist's secret, as under trust.
      if (const std::string refusal = CheckIdentity(); !refusal.empty()) {
        ++context_.counters().login_failures;
        PGFLEET_LOG(kWarning, "client_login_failed", "client=", id_, " addr=", peer_address_,
                    " user=", base::LogQuote(user_), " reason=", base::LogQuote(refusal));
        Fatal(protocol::sqlstate::kInvalidAuthorization, refusal);
        return;
      }
      FinishLogin();
      return;
    case config::AuthType::kMd5:
    case config::AuthType::kScramSha256:
    case config::AuthType::kPlain:
      break;
  }
  auto it = context_.userlist().find(user_);
  if (it != context_.userlist().end()) {
    ContinueAuthWithSecret(it->second);
    return;
  }
  if (!admin_console_) {
    // The database's own auth_query (PgBouncer's per-database auth_user), else the global one.
    const config::DatabaseConfig db = *config.FindDatabase(database_);
    if (!config.EffectiveAuth(db).query.empty()) {
      host_.MoveClient(this, ClientState::kAuthQuery);
      host_.RunAuthQuery(this, db);
      return;
    }
  }
  // Same message as for a wrong password, so user names cannot be probed.
  ContinueAuthWithSecret("");
}

}  // namespace pgfleet::pool
