// Server login decisions: what pgfleet answers each authentication request with, and what a
// login's end (ReadyForQuery, an ErrorResponse, no usable password) means for waiting clients.
#include "pooler/conn/server_login.h"

#include "pooler/auth/md5.h"
#include "pooler/auth/secret.h"
#include "pooler/base/strings.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {
namespace {

LoginVerdict CloseVerdict(std::string reason) {
  LoginVerdict verdict;
  verdict.outcome = LoginVerdict::Outcome::kClose;
  verdict.message = std::move(reason);
  return verdict;
}

}  // namespace

ServerLogin::ServerLogin(const ServerCredentials& credentials, base::RandomSource& random,
                         const TrackedParamNames& tracked)
    : credentials_(credentials), random_(random), tracked_(tracked), params_(tracked.size()) {}

void ServerLogin::Start(ServerLoginOptions options, protocol::ByteSink& to_server) {
  options_ = std::move(options);
  std::vector<std::pair<std::string_view, std::string_view>> params = {
      {"user", options_.user}, {"database", options_.database}};
  if (!options_.application_name.empty()) {
    params.emplace_back("application_name", options_.application_name);
  }
  for (const auto& [name, value] : options_.settings) params.emplace_back(name, value);
  // 3.2 where the server speaks it (PostgreSQL 18: 32-byte cancel keys, which pgfleet keeps
  // whole); older servers answer NegotiateProtocolVersion with 3.0 and carry on.
  protocol::BuildStartupMessage(to_server, protocol::kProtocol32, params);
  protocol_version_ = protocol::kProtocol32;
}

LoginVerdict ServerLogin::FailedByPgfleet(std::string_view message) {
  LoginVerdict verdict;
  verdict.outcome = LoginVerdict::Outcome::kFailedByPgfleet;
  verdict.message = std::string(message);
  protocol::BuildErrorResponse(verdict.to_clients, "FATAL",
                               protocol::sqlstate::kInvalidAuthorization,
                               base::StrCat("pgfleet cannot log in to the server: ", message));
  // No waiting helps: every server of the pool would meet the same missing password or refusal.
  verdict.fatal_for_clients = true;
  return verdict;
}

LoginVerdict ServerLogin::OnMessage(uint8_t type, std::span<const uint8_t> body) {
  switch (type) {
    case 'R':
      return OnAuthRequest(body);
    case 'S': {
      auto ps = protocol::ParseParameterStatus(body);
      if (!ps.ok()) break;
      login_params_.emplace_back(std::string(ps->name), std::string(ps->value));
      int slot = tracked_.Find(ps->name);
      if (slot >= 0) params_.Set(static_cast<size_t>(slot), ps->value);
      return {};
    }
    case 'K': {
      auto key = protocol::ParseBackendKeyData(body);
      if (!key.ok()) break;
      backend_pid_ = key->pid;
      backend_secret_.assign(key->secret.begin(), key->secret.end());
      return {};
    }
    case 'Z': {
      LoginVerdict verdict;
      verdict.outcome = LoginVerdict::Outcome::kReady;
      return verdict;
    }
    case 'E':
      return OnServerError(body);
    case 'v': {  // NegotiateProtocolVersion: an older server speaks an older minor
      protocol::Reader reader(body);
      int32_t version = 0;
      if (!reader.ReadInt32(&version) || protocol::ProtocolMajor(version) != 3 ||
          static_cast<uint32_t>(version) > protocol::kProtocol32) {
        break;
      }
      protocol_version_ = static_cast<uint32_t>(version);
      return {};
    }
    case 'N':
      return {};
    default:
      break;
  }
  return CloseVerdict(base::StrCat("unexpected message '", std::string(1, static_cast<char>(type)),
                                   "' during login"));
}

LoginVerdict ServerLogin::OnServerError(std::span<const uint8_t> body) {
  auto fields = protocol::ParseErrorFields(body);
  LoginVerdict verdict;
  verdict.outcome = LoginVerdict::Outcome::kFailedByServer;
  verdict.sqlstate = fields.ok() ? std::string(fields->sqlstate) : "";
  verdict.message = fields.ok() ? std::string(fields->message) : "malformed";
  // Passed on whole so clients see the server's own words.
  protocol::BuildMessage(verdict.to_clients, 'E', body);
  // Auth and missing-database errors cannot get better by waiting; connection-limit errors can.
  verdict.fatal_for_clients = verdict.sqlstate.starts_with("28") || verdict.sqlstate == "3D000";
  return verdict;
}

LoginVerdict ServerLogin::OnAuthRequest(std::span<const uint8_t> body) {
  auto auth = protocol::ParseAuthentication(body);
  if (!auth.ok()) return CloseVerdict("malformed authentication request");
  const auto kind = auth::ClassifySecret(credentials_.secret);
  LoginVerdict verdict;
  switch (static_cast<protocol::AuthRequest>(auth->code)) {
    case protocol::AuthRequest::kOk:
      return verdict;
    case protocol::AuthRequest::kCleartext:
      if (kind != auth::SecretKind::kPlain) {
        return FailedByPgfleet("server asked for a cleartext password and none is configured");
      }
      protocol::BuildPasswordMessage(verdict.to_server, credentials_.secret);
      return verdict;
    case protocol::AuthRequest::kMd5: {
      std::string hash;
      if (kind == auth::SecretKind::kPlain) {
        hash = auth::Md5PasswordHash(options_.user, credentials_.secret);
      } else if (kind == auth::SecretKind::kMd5) {
        hash = credentials_.secret;
      } else {
        return FailedByPgfleet(
            "server asked for md5 and no plain or md5 password is known for the user");
      }
      // ParseAuthentication checked that an md5 request carries exactly 4 salt bytes.
      std::span<const uint8_t, 4> salt(auth->data.data(), 4);
      protocol::BuildPasswordMessage(verdict.to_server, auth::Md5SaltedResponse(hash, salt));
      return verdict;
    }
    case protocol::AuthRequest::kSasl:
      return OnSasl(auth->data);
    case protocol::AuthRequest::kSaslContinue: {
      if (!scram_.has_value()) return CloseVerdict("unexpected SASL continue");
      auto final_msg = scram_->HandleServerFirst(base::AsText(auth->data));
      if (!final_msg.ok()) {
        return FailedByPgfleet(base::StrCat("SCRAM: ", final_msg.status().message()));
      }
      protocol::BuildSaslResponse(verdict.to_server, *final_msg);
      return verdict;
    }
    case protocol::AuthRequest::kSaslFinal:
      // A server that cannot prove it knows the secret could be anyone.
      if (!scram_.has_value() || !scram_->VerifyServerFinal(base::AsText(auth->data)).ok()) {
        return FailedByPgfleet("server's SCRAM signature did not verify");
      }
      scram_.reset();
      return verdict;
    default:
      return FailedByPgfleet(base::StrCat("unsupported server authentication method ", auth->code));
  }
}

LoginVerdict ServerLogin::OnSasl(std::span<const uint8_t> mechanisms) {
  const bool offers_plus = protocol::SaslOffers(mechanisms, auth::kScramSha256Plus);
  // Over TLS, bind the exchange to the server's certificate when the server offers it, as libpq's
  // default channel_binding=prefer does.
  std::optional<std::vector<uint8_t>> end_point;
  if (options_.tls && offers_plus && options_.server_end_point) {
    end_point = options_.server_end_point();
  }
  if (!end_point.has_value() && !protocol::SaslOffers(mechanisms, auth::kScramSha256)) {
    return FailedByPgfleet("server offers no supported SASL mechanism");
  }
  auth::ScramClientBinding binding;
  if (end_point.has_value()) {
    binding.flag = auth::ScramClientBinding::Flag::kTlsServerEndPoint;
    binding.data = *std::move(end_point);
  } else if (options_.tls && !offers_plus) {
    // "y": we could bind but the server did not offer to; a server that did offer it learns that
    // someone in between removed -PLUS from the list.
    binding.flag = auth::ScramClientBinding::Flag::kSupportedNotUsed;
  }
  const std::string_view mechanism =
      binding.flag == auth::ScramClientBinding::Flag::kTlsServerEndPoint ? auth::kScramSha256Plus
                                                                         : auth::kScramSha256;
  const auto kind = auth::ClassifySecret(credentials_.secret);
  if (kind == auth::SecretKind::kPlain) {
    scram_.emplace(auth::ScramClientExchange::WithPassword(credentials_.secret, random_));
  } else if (kind == auth::SecretKind::kScramSha256 && credentials_.scram_client_key.has_value()) {
    auto secret = auth::ParseScramSecret(credentials_.secret);
    if (!secret.ok()) return FailedByPgfleet("stored SCRAM secret is malformed");
    scram_.emplace(
        auth::ScramClientExchange::WithClientKey(*credentials_.scram_client_key, *secret, random_));
  } else {
    return FailedByPgfleet("server asked for SCRAM and no usable password is known for the user");
  }
  LoginVerdict verdict;
  protocol::BuildSaslInitialResponse(verdict.to_server, mechanism,
                                     scram_->ClientFirst(std::move(binding)));
  return verdict;
}

std::vector<std::pair<std::string, std::string>> ServerLoginSettings(
    const config::PoolConfig& pool) {
  std::vector<std::pair<std::string, std::string>> settings;
  // Milliseconds with their unit: PostgreSQL converts them for the settings counted in seconds.
  auto duration = [&](const char* name, absl::Duration value) {
    if (value > absl::ZeroDuration()) {
      settings.emplace_back(name, base::StrCat(absl::ToInt64Milliseconds(value), "ms"));
    }
  };
  duration("client_connection_check_interval", pool.server_connection_check_interval);
  if (pool.tcp_keepalive) {
    duration("tcp_keepalives_idle", pool.server_tcp_keepalive_idle);
    duration("tcp_keepalives_interval", pool.server_tcp_keepalive_interval);
    if (pool.server_tcp_keepalive_count > 0) {
      settings.emplace_back("tcp_keepalives_count",
                            std::to_string(pool.server_tcp_keepalive_count));
    }
  }
  duration("tcp_user_timeout", pool.server_tcp_user_timeout);
  return settings;
}

}  // namespace pgfleet::pool
