// The handoff wire format (handoff_message.h). Big-endian, every field fixed-width or
// length-prefixed, so a decoder needs no delimiters and every read is bounds-checked:
//
//   u8 version (kVersion)   u8 kind   u32 from   str database   str user
//   kServer only:
//     u32 backend_pid   str backend_secret   i64 created_at_us   i64 last_used_at_us
//     str host   u32 port                     the address it is connected to
//     u32 n, n x (str name, str value)       login_params
//     u32 n, n x (str name, str value)       tracked_params
//     u32 n, n x (u32 index, i64 epoch)      statement_epochs
//     u8 statements_complete (0 or 1)
//     u32 n, n x str                         statements
//
// where str is u32 length + bytes. The encoding is canonical (one byte string per message), so
// the fuzzer can check that a decoded message re-encodes to what it came from.
#include "pooler/handoff/handoff_message.h"

#include <cstring>
#include <span>

#include "absl/status/status.h"
#include "pooler/base/strings.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/reader.h"

namespace pgfleet::pool {
namespace {

// Bumped on any layout change: sibling workers of one pod run the same binary, but a worker
// started by a newer binary during an upgrade must refuse, not misread, an older one's message.
constexpr uint8_t kVersion = 3;

// The smallest encoding of one list element (an empty str, or a pair of them), to reject a count
// that the remaining bytes could not hold before anything is allocated for it.
constexpr size_t kMinStringBytes = 4;
constexpr size_t kMinPairBytes = 2 * kMinStringBytes;
constexpr size_t kMinEpochBytes = 12;

class Writer {
 public:
  void Byte(uint8_t v) { sink_.Append(&v, 1); }
  void U32(uint32_t v) {
    uint8_t b[4];
    protocol::StoreBigEndian32(b, v);
    sink_.Append(b, sizeof(b));
  }
  void I64(int64_t v) {
    U32(static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32));
    U32(static_cast<uint32_t>(static_cast<uint64_t>(v)));
  }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    sink_.Append(s);
  }
  void Pairs(const std::vector<std::pair<std::string, std::string>>& pairs) {
    U32(static_cast<uint32_t>(pairs.size()));
    for (const auto& [name, value] : pairs) {
      Str(name);
      Str(value);
    }
  }
  std::string& bytes() { return sink_.mutable_bytes(); }

 private:
  protocol::StringSink sink_;
};

std::string Encode(const HandoffMessage& message, bool with_statements) {
  Writer w;
  w.Byte(kVersion);
  w.Byte(static_cast<uint8_t>(message.kind));
  w.U32(message.from);
  w.Str(message.database);
  w.Str(message.user);
  if (message.kind == HandoffMessage::Kind::kServer) {
    const ServerHandoff& s = message.server;
    w.U32(s.backend_pid);
    w.Str(base::AsText(s.backend_secret));
    w.I64(s.created_at_us);
    w.I64(s.last_used_at_us);
    w.Str(s.host);
    w.U32(s.port);
    w.Pairs(s.login_params);
    w.Pairs(s.tracked_params);
    // The epochs first, so that a statement-free server ends with statements_complete and the
    // statements' count.
    if (with_statements) {
      w.U32(static_cast<uint32_t>(s.statement_epochs.size()));
      for (const auto& [index, epoch] : s.statement_epochs) {
        w.U32(index);
        w.I64(static_cast<int64_t>(epoch));
      }
    } else {
      w.U32(0);
    }
    w.Byte(with_statements && s.statements_complete ? 1 : 0);
    if (with_statements) {
      w.U32(static_cast<uint32_t>(s.statements.size()));
      for (const std::string& tail : s.statements) w.Str(tail);
    } else {
      w.U32(0);
    }
  }
  if (message.kind == HandoffMessage::Kind::kClient) w.Str(message.peer_address);
  return std::move(w.bytes());
}

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(base::StrCat("malformed handoff message: ", what));
}

// The decoder's cursor: protocol::Reader plus the unsigned and string reads of this format.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : reader_(base::AsBytes(bytes)) {}

  size_t remaining() const { return reader_.remaining(); }
  [[nodiscard]] bool Byte(uint8_t* out) { return reader_.ReadByte(out); }
  [[nodiscard]] bool U32(uint32_t* out) {
    int32_t v;
    if (!reader_.ReadInt32(&v)) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  }
  [[nodiscard]] bool I64(int64_t* out) {
    uint32_t high, low;
    if (!U32(&high) || !U32(&low)) return false;
    *out = static_cast<int64_t>((uint64_t{high} << 32) | low);
    return true;
  }
  [[nodiscard]] bool Bytes(std::span<const uint8_t>* out) {
    uint32_t size;
    return U32(&size) && reader_.ReadBytes(size, out);
  }
  [[nodiscard]] bool Str(std::string* out) {
    std::span<const uint8_t> bytes;
    if (!Bytes(&bytes)) return false;
    out->assign(base::AsText(bytes));
    return true;
  }
  // A list's count, rejected when its elements (each at least min_element_bytes) cannot fit in
  // what is left: a forged count must not make the decoder reserve gigabytes.
  [[nodiscard]] bool Count(size_t min_element_bytes, uint32_t* out) {
    return U32(out) && *out <= remaining() / min_element_bytes;
  }
  [[nodiscard]] bool Pairs(std::vector<std::pair<std::string, std::string>>* out) {
    uint32_t n;
    if (!Count(kMinPairBytes, &n)) return false;
    out->resize(n);
    for (auto& [name, value] : *out) {
      if (!Str(&name) || !Str(&value)) return false;
    }
    return true;
  }

 private:
  protocol::Reader reader_;
};

}  // namespace

std::string EncodeHandoff(const HandoffMessage& message) {
  std::string bytes = Encode(message, /*with_statements=*/true);
  if (bytes.size() > kMaxHandoffMessageBytes && message.kind == HandoffMessage::Kind::kServer &&
      !message.server.statements.empty()) {
    // One datagram must carry the whole message; the statements are only a cache of what the
    // server has, so they are what gives way (the receiver then clears the server's).
    bytes = Encode(message, /*with_statements=*/false);
  }
  return bytes;
}

absl::StatusOr<HandoffMessage> DecodeHandoff(std::string_view bytes) {
  if (bytes.size() > kMaxHandoffMessageBytes) return Malformed("longer than one message may be");
  Cursor c(bytes);
  HandoffMessage message;
  uint8_t version, kind;
  if (!c.Byte(&version)) return Malformed("empty");
  if (version != kVersion) return Malformed(base::StrCat("unknown version ", version));
  if (!c.Byte(&kind)) return Malformed("truncated kind");
  switch (static_cast<HandoffMessage::Kind>(kind)) {
    case HandoffMessage::Kind::kRequest:
    case HandoffMessage::Kind::kServer:
    case HandoffMessage::Kind::kRoom:
    case HandoffMessage::Kind::kEvict:
    case HandoffMessage::Kind::kClient:
      message.kind = static_cast<HandoffMessage::Kind>(kind);
      break;
    default:
      return Malformed(base::StrCat("unknown kind ", kind));
  }
  if (!c.U32(&message.from) || !c.Str(&message.database) || !c.Str(&message.user)) {
    return Malformed("truncated header");
  }
  if (message.kind == HandoffMessage::Kind::kServer) {
    ServerHandoff& s = message.server;
    std::span<const uint8_t> secret;
    if (!c.U32(&s.backend_pid) || !c.Bytes(&secret) || !c.I64(&s.created_at_us) ||
        !c.I64(&s.last_used_at_us) || !c.Str(&s.host) || !c.U32(&s.port)) {
      return Malformed("truncated server");
    }
    s.backend_secret.assign(secret.begin(), secret.end());
    if (!c.Pairs(&s.login_params) || !c.Pairs(&s.tracked_params)) {
      return Malformed("truncated or oversized parameters");
    }
    uint32_t n;
    if (!c.Count(kMinEpochBytes, &n)) return Malformed("truncated or oversized statement epochs");
    s.statement_epochs.resize(n);
    for (auto& [index, epoch] : s.statement_epochs) {
      int64_t value = 0;
      if (!c.U32(&index) || !c.I64(&value)) return Malformed("truncated statement epoch");
      epoch = static_cast<uint64_t>(value);
    }
    uint8_t complete;
    if (!c.Byte(&complete)) return Malformed("truncated statements_complete");
    if (complete > 1) return Malformed("statements_complete is not 0 or 1");
    s.statements_complete = complete == 1;
    if (!c.Count(kMinStringBytes, &n)) return Malformed("truncated or oversized statements");
    s.statements.resize(n);
    for (std::string& tail : s.statements) {
      if (!c.Str(&tail)) return Malformed("truncated statement");
    }
    // Canonical: each listed once, in order, for a statement that is there, never epoch 0.
    for (size_t i = 0; i < s.statement_epochs.size(); ++i) {
      const auto& [index, epoch] = s.statement_epochs[i];
      if (index >= s.statements.size() || epoch == 0 ||
          (i > 0 && index <= s.statement_epochs[i - 1].first)) {
        return Malformed("statement epoch out of order or range");
      }
    }
  }
  if (message.kind == HandoffMessage::Kind::kClient && !c.Str(&message.peer_address)) {
    return Malformed("truncated peer address");
  }
  if (c.remaining() != 0) return Malformed("trailing bytes");
  return message;
}

}  // namespace pgfleet::pool
