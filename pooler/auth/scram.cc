// SCRAM-SHA-256 exchanges and verifiers, checked against PostgreSQL's auth-scram.c and libpq's
// fe-auth-scram.c for what each side accepts.
#include "pooler/auth/scram.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pooler/auth/scram_primitives.h"
#include "pooler/base/check.h"
#include "pooler/base/strings.h"

namespace pgfleet::auth {

namespace {

using base::Av;

using internal::Base64Decode;
using internal::Base64Encode;

// Debian's absl 20220623 is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW=0),
// which std::string_view does not convert to implicitly.

// Splits on every `separator`; "" gives one empty piece, like absl::StrSplit.
std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  while (true) {
    const size_t end = text.find(separator);
    pieces.push_back(text.substr(0, end));
    if (end == std::string_view::npos) return pieces;
    text.remove_prefix(end + 1);
  }
}

// 18 bytes give a 24-character nonce, as PostgreSQL and libpq use (SCRAM_RAW_NONCE_LEN).
constexpr size_t kRawNonceLength = 18;

std::string NewNonce(base::RandomSource& random) {
  std::array<uint8_t, kRawNonceLength> raw;
  random.Fill(raw);
  return Base64Encode(raw);
}

// The value of `attribute` ("r=abc" -> "abc") when `part` is that attribute, else nullopt.
std::optional<std::string_view> AttributeValue(std::string_view part, char attribute) {
  if (part.size() < 2 || part[0] != attribute || part[1] != '=') return std::nullopt;
  return part.substr(2);
}

// RFC 5802 "attr-val": one ASCII letter, '=', then a value (possibly empty).
bool IsAttribute(std::string_view part) {
  return part.size() >= 2 && absl::ascii_isalpha(static_cast<unsigned char>(part[0])) &&
         part[1] == '=';
}

// RFC 5802 "printable": %x21-2B / %x2D-7E, i.e. visible ASCII except ','.
bool IsPrintableNonce(std::string_view nonce) {
  if (nonce.empty()) return false;
  for (char c : nonce) {
    if (c < 0x21 || c > 0x7e || c == ',') return false;
  }
  return true;
}

// A positive decimal iteration count without sign, spaces or leading zeros; nullopt otherwise.
std::optional<int> ParseIterations(std::string_view text) {
  // Nine digits keep the value inside int; real counts are four to six digits.
  if (text.empty() || text.size() > 9 || text[0] == '0') return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

std::optional<ScramKey> DecodeKey(std::string_view text) {
  std::optional<std::vector<uint8_t>> bytes = Base64Decode(text);
  if (!bytes.has_value() || bytes->size() != ScramKey{}.size()) return std::nullopt;
  ScramKey key;
  std::copy(bytes->begin(), bytes->end(), key.begin());
  return key;
}

bool KeysEqual(const ScramKey& a, const ScramKey& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed SCRAM message: ", Av(what)));
}

}  // namespace

absl::StatusOr<ScramSecret> ParseScramSecret(std::string_view text) {
  auto invalid = [](std::string_view why) {
    // Never echo the text: it is a password equivalent for anyone who can replay it to us.
    return absl::InvalidArgumentError(absl::StrCat("invalid SCRAM-SHA-256 secret: ", Av(why)));
  };
  constexpr std::string_view kPrefix = "SCRAM-SHA-256$";
  if (!text.starts_with(kPrefix)) return invalid("missing SCRAM-SHA-256$ prefix");
  text.remove_prefix(kPrefix.size());

  std::vector<std::string_view> halves = Split(text, '$');
  if (halves.size() != 2) return invalid("expected <iterations>:<salt>$<StoredKey>:<ServerKey>");
  std::vector<std::string_view> params = Split(halves[0], ':');
  std::vector<std::string_view> keys = Split(halves[1], ':');
  if (params.size() != 2 || keys.size() != 2) {
    return invalid("expected <iterations>:<salt>$<StoredKey>:<ServerKey>");
  }

  ScramSecret secret;
  std::optional<int> iterations = ParseIterations(params[0]);
  if (!iterations.has_value()) return invalid("bad iteration count");
  secret.iterations = *iterations;
  std::optional<std::vector<uint8_t>> salt = Base64Decode(params[1]);
  if (!salt.has_value() || salt->empty()) return invalid("bad salt");
  secret.salt = std::move(*salt);
  std::optional<ScramKey> stored_key = DecodeKey(keys[0]);
  std::optional<ScramKey> server_key = DecodeKey(keys[1]);
  if (!stored_key.has_value()) return invalid("bad StoredKey");
  if (!server_key.has_value()) return invalid("bad ServerKey");
  secret.stored_key = *stored_key;
  secret.server_key = *server_key;
  return secret;
}

ScramSecret MakeScramSecret(std::string_view password, std::span<const uint8_t> salt,
                            int iterations) {
  ScramKey salted = internal::SaltedPassword(password, salt, iterations);
  ScramKey client_key = internal::ClientKeyFromSalted(salted);
  ScramSecret secret;
  secret.iterations = iterations;
  secret.salt.assign(salt.begin(), salt.end());
  secret.stored_key = internal::Sha256(client_key);
  secret.server_key = internal::ServerKeyFromSalted(salted);
  OPENSSL_cleanse(salted.data(), salted.size());
  OPENSSL_cleanse(client_key.data(), client_key.size());
  return secret;
}

std::string FormatScramSecret(const ScramSecret& secret) {
  return absl::StrCat(Av(kScramSha256), "$", secret.iterations, ":", Base64Encode(secret.salt), "$",
                      Base64Encode(secret.stored_key), ":", Base64Encode(secret.server_key));
}

ScramServerExchange::ScramServerExchange(ScramSecret secret, base::RandomSource& random,
                                         std::optional<std::vector<uint8_t>> channel_binding)
    : secret_(std::move(secret)), random_(random), channel_binding_(std::move(channel_binding)) {}

absl::StatusOr<std::string> ScramServerExchange::HandleClientFirst(std::string_view client_first,
                                                                   bool plus) {
  if (stage_ != Stage::kExpectClientFirst) {
    stage_ = Stage::kDone;
    return absl::FailedPreconditionError("SCRAM client-first-message out of order");
  }
  // Whatever happens below, a second client-first is a protocol error.
  stage_ = Stage::kDone;

  // gs2-header = gs2-cbind-flag "," [authzid] ","; no SCRAM value may contain ',' (RFC 5802
  // section 5.1 encodes it in names), so splitting on ',' yields exactly the attributes.
  std::vector<std::string_view> parts = Split(client_first, ',');
  if (parts.size() < 4) return Malformed("client-first-message is too short");
  if (plus) {
    if (!channel_binding_.has_value()) {
      return absl::FailedPreconditionError("SCRAM-SHA-256-PLUS was not offered");
    }
    if (!parts[0].starts_with("p=")) {
      return Malformed("SCRAM-SHA-256-PLUS selected without channel binding");
    }
    if (parts[0].substr(2) != kTlsServerEndPoint) {
      return absl::UnimplementedError(
          base::StrCat("unsupported SCRAM channel binding type \"", parts[0].substr(2), "\""));
    }
    binding_in_use_ = true;
  } else if (parts[0].starts_with("p=")) {
    return Malformed("channel binding requested but the client selected SCRAM-SHA-256");
  } else if (parts[0] == "y" && channel_binding_.has_value()) {
    // The client could bind and believes we cannot, yet we offered -PLUS: someone in between
    // removed it (RFC 5802 section 6).
    return absl::PermissionDeniedError("SCRAM channel binding negotiation error");
  } else if (parts[0] != "n" && parts[0] != "y") {
    return Malformed("bad GS2 channel binding flag");
  }
  if (!parts[1].empty()) {
    return absl::UnimplementedError("SCRAM authorization identity (a=) is not supported");
  }
  gs2_header_ = absl::StrCat(Av(parts[0]), ",,");
  const std::string_view bare = client_first.substr(gs2_header_.size());

  if (AttributeValue(parts[2], 'm').has_value()) {
    return absl::UnimplementedError("client requires an unsupported SCRAM extension");
  }
  // PostgreSQL ignores the SCRAM user name (the startup packet's user is authoritative), so any
  // value, including the empty one libpq sends, is accepted.
  if (!AttributeValue(parts[2], 'n').has_value()) return Malformed("expected n= user name");
  std::optional<std::string_view> client_nonce = AttributeValue(parts[3], 'r');
  if (!client_nonce.has_value()) return Malformed("expected r= nonce");
  if (!IsPrintableNonce(*client_nonce)) return Malformed("client nonce is empty or not printable");
  for (size_t i = 4; i < parts.size(); ++i) {
    if (!IsAttribute(parts[i])) return Malformed("bad extension attribute");
  }

  client_first_bare_ = std::string(bare);
  nonce_ = absl::StrCat(Av(*client_nonce), NewNonce(random_));
  server_first_ =
      absl::StrCat("r=", nonce_, ",s=", Base64Encode(secret_.salt), ",i=", secret_.iterations);
  stage_ = Stage::kExpectClientFinal;
  return server_first_;
}

absl::StatusOr<std::string> ScramServerExchange::HandleClientFinal(std::string_view client_final) {
  if (stage_ != Stage::kExpectClientFinal) {
    stage_ = Stage::kDone;
    return absl::FailedPreconditionError("SCRAM client-final-message out of order");
  }
  stage_ = Stage::kDone;

  // client-final-message = channel-binding "," nonce ["," extensions] "," proof
  std::vector<std::string_view> parts = Split(client_final, ',');
  if (parts.size() < 3) return Malformed("client-final-message is too short");
  std::optional<std::string_view> binding = AttributeValue(parts[0], 'c');
  if (!binding.has_value()) return Malformed("expected c= channel binding");
  std::optional<std::vector<uint8_t>> binding_bytes = Base64Decode(*binding);
  if (!binding_bytes.has_value()) return Malformed("c= is not base64");
  // The GS2 header sent in client-first, then (with -PLUS) our certificate's hash.
  std::string expected_binding = gs2_header_;
  if (binding_in_use_) expected_binding.append(channel_binding_->begin(), channel_binding_->end());
  if (base::AsText(*binding_bytes) != expected_binding) {
    return binding_in_use_ ? absl::PermissionDeniedError("SCRAM channel binding check failed")
                           : Malformed("c= does not match the GS2 header");
  }
  std::optional<std::string_view> nonce = AttributeValue(parts[1], 'r');
  if (!nonce.has_value()) return Malformed("expected r= nonce");
  for (size_t i = 2; i + 1 < parts.size(); ++i) {
    if (!IsAttribute(parts[i])) return Malformed("bad extension attribute");
  }
  std::optional<std::string_view> proof_text = AttributeValue(parts.back(), 'p');
  if (!proof_text.has_value()) return Malformed("expected p= proof last");
  std::optional<ScramKey> proof = DecodeKey(*proof_text);
  if (!proof.has_value()) return Malformed("p= is not a base64 32-byte proof");
  if (*nonce != nonce_) return absl::PermissionDeniedError("SCRAM nonce mismatch");

  const std::string_view without_proof =
      client_final.substr(0, client_final.size() - parts.back().size() - 1);
  const std::string auth_message =
      absl::StrCat(client_first_bare_, ",", server_first_, ",", Av(without_proof));
  ScramKey client_key = internal::RecoverClientKey(secret_.stored_key, *proof, auth_message);
  if (!KeysEqual(internal::Sha256(client_key), secret_.stored_key)) {
    OPENSSL_cleanse(client_key.data(), client_key.size());
    return absl::PermissionDeniedError("SCRAM proof does not match the stored secret");
  }
  client_key_ = client_key;
  return absl::StrCat("v=",
                      Base64Encode(internal::ServerSignature(secret_.server_key, auth_message)));
}

ScramClientExchange ScramClientExchange::WithPassword(std::string password,
                                                      base::RandomSource& random) {
  ScramClientExchange exchange(random);
  exchange.password_ = std::move(password);
  return exchange;
}

ScramClientExchange ScramClientExchange::WithClientKey(const ScramKey& client_key,
                                                       const ScramSecret& secret,
                                                       base::RandomSource& random) {
  ScramClientExchange exchange(random);
  exchange.client_key_ = client_key;
  exchange.secret_ = secret;
  return exchange;
}

std::string ScramClientExchange::ClientFirst(Binding binding) {
  // Each call starts the exchange over with a fresh nonce.
  nonce_ = NewNonce(*random_);
  client_first_bare_ = absl::StrCat("n=,r=", nonce_);
  auth_message_.clear();
  server_key_ = {};
  binding_data_.clear();
  switch (binding.flag) {
    case Binding::Flag::kNone:
      gs2_header_ = "n,,";
      break;
    case Binding::Flag::kSupportedNotUsed:
      gs2_header_ = "y,,";
      break;
    case Binding::Flag::kTlsServerEndPoint:
      gs2_header_ = base::StrCat("p=", kTlsServerEndPoint, ",,");
      binding_data_ = std::move(binding.data);
      break;
  }
  return absl::StrCat(gs2_header_, client_first_bare_);
}

absl::StatusOr<std::string> ScramClientExchange::HandleServerFirst(std::string_view server_first) {
  if (client_first_bare_.empty() || !auth_message_.empty()) {
    return absl::FailedPreconditionError("SCRAM server-first-message out of order");
  }
  std::vector<std::string_view> parts = Split(server_first, ',');
  if (AttributeValue(parts[0], 'm').has_value()) {
    return absl::UnimplementedError("server requires an unsupported SCRAM extension");
  }
  if (parts.size() < 3) return Malformed("server-first-message is too short");
  std::optional<std::string_view> nonce = AttributeValue(parts[0], 'r');
  std::optional<std::string_view> salt_text = AttributeValue(parts[1], 's');
  std::optional<std::string_view> iterations_text = AttributeValue(parts[2], 'i');
  if (!nonce.has_value() || !salt_text.has_value() || !iterations_text.has_value()) {
    return Malformed("expected r=,s=,i=");
  }
  for (size_t i = 3; i < parts.size(); ++i) {
    if (!IsAttribute(parts[i])) return Malformed("bad extension attribute");
  }
  // The server must extend our nonce; echoing it alone would let a reflected exchange pass.
  if (!nonce->starts_with(nonce_) || nonce->size() == nonce_.size() || !IsPrintableNonce(*nonce)) {
    return absl::PermissionDeniedError("SCRAM server nonce does not extend the client nonce");
  }
  std::optional<std::vector<uint8_t>> salt = Base64Decode(*salt_text);
  if (!salt.has_value() || salt->empty()) return Malformed("bad s= salt");
  std::optional<int> iterations = ParseIterations(*iterations_text);
  if (!iterations.has_value()) return Malformed("bad i= iteration count");

  ScramKey client_key;
  if (password_.has_value()) {
    ScramKey salted = internal::SaltedPassword(*password_, *salt, *iterations);
    client_key = internal::ClientKeyFromSalted(salted);
    server_key_ = internal::ServerKeyFromSalted(salted);
    OPENSSL_cleanse(salted.data(), salted.size());
  } else {
    PGFLEET_CHECK(client_key_.has_value() && secret_.has_value());
    // The recovered ClientKey is tied to one salt and count; a server holding a different
    // verifier for the user needs the password itself.
    if (*salt != secret_->salt || *iterations != secret_->iterations) {
      return absl::FailedPreconditionError(
          "server's SCRAM salt or iteration count differ from the stored secret");
    }
    if (!KeysEqual(internal::Sha256(*client_key_), secret_->stored_key)) {
      return absl::FailedPreconditionError("ClientKey does not belong to the stored secret");
    }
    client_key = *client_key_;
    server_key_ = secret_->server_key;
  }

  std::vector<uint8_t> binding(gs2_header_.begin(), gs2_header_.end());
  binding.insert(binding.end(), binding_data_.begin(), binding_data_.end());
  const std::string without_proof = absl::StrCat("c=", Base64Encode(binding), ",r=", Av(*nonce));
  auth_message_ = absl::StrCat(client_first_bare_, ",", Av(server_first), ",", without_proof);
  const ScramKey proof = internal::ClientProof(client_key, auth_message_);
  OPENSSL_cleanse(client_key.data(), client_key.size());
  return absl::StrCat(without_proof, ",p=", Base64Encode(proof));
}

absl::Status ScramClientExchange::VerifyServerFinal(std::string_view server_final) {
  if (auth_message_.empty()) {
    return absl::FailedPreconditionError("SCRAM server-final-message out of order");
  }
  std::vector<std::string_view> parts = Split(server_final, ',');
  if (std::optional<std::string_view> error = AttributeValue(parts[0], 'e'); error.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat("server rejected SCRAM authentication: ", Av(*error)));
  }
  std::optional<std::string_view> verifier = AttributeValue(parts[0], 'v');
  if (!verifier.has_value()) return Malformed("expected v= server signature");
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!IsAttribute(parts[i])) return Malformed("bad extension attribute");
  }
  std::optional<ScramKey> signature = DecodeKey(*verifier);
  if (!signature.has_value()) return Malformed("v= is not a base64 32-byte signature");
  if (!KeysEqual(*signature, internal::ServerSignature(server_key_, auth_message_))) {
    return absl::PermissionDeniedError("SCRAM server signature does not match");
  }
  return absl::OkStatus();
}

}  // namespace pgfleet::auth
