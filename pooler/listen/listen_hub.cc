// The LISTEN hub's decisions (listen_hub.h): no sockets, no clock; the pool does the I/O.
#include "pooler/listen/listen_hub.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "pooler/base/strings.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/stream_decoder.h"
#include "pooler/relay/relay.h"
#include "pooler/sql/statement_classifier.h"

namespace pgfleet::pool {

namespace {

// The hub's statement in `text`, or kNone.
IdleListen ClassifyListen(std::string_view text) {
  IdleListen out;
  if (!sql::StartsWithListenVerb(text)) return out;
  sql::Classification classified = sql::Classify(text);
  if (!classified.parsed || classified.statements != 1 || classified.effects.size() != 1) {
    return out;
  }
  sql::Effect& effect = classified.effects.front();
  switch (effect.kind) {
    case sql::EffectKind::kListen:
      out.kind = IdleListen::Kind::kListen;
      break;
    case sql::EffectKind::kUnlisten:
      out.kind = IdleListen::Kind::kUnlisten;
      break;
    case sql::EffectKind::kUnlistenAll:
      out.kind = IdleListen::Kind::kUnlistenAll;
      break;
    default:
      return out;
  }
  out.channel = std::move(effect.name);
  return out;
}

// Parse (unnamed, no parameter types), Bind (unnamed portal and statement, no parameters), an
// optional Describe of either, Execute (unnamed portal), Sync: the statement's text in `*text`,
// the answers before its own in `prefix`. Returns the bytes, 0 when `data` is anything else.
size_t ReadExtendedStatement(std::span<const uint8_t> data, uint32_t max_packet_size,
                             std::string_view* text, protocol::ByteSink& prefix) {
  size_t pos = 0;
  for (char expected : {'P', 'B', 'D', 'E', 'S'}) {
    protocol::StreamDecoder::Piece piece;
    if (protocol::StreamDecoder::PeekWhole(data.subspan(pos), max_packet_size, &piece) !=
        protocol::FrameResult::kMessage) {
      return 0;
    }
    const uint8_t type = piece.header.type;
    if (expected == 'D' && type != 'D') continue;  // Describe is optional
    if (type != expected) return 0;
    protocol::Reader reader(piece.body());
    std::string_view name;
    switch (type) {
      case 'P': {
        int16_t types = 0;
        if (!reader.ReadCString(&name) || !name.empty() || !reader.ReadCString(text) ||
            !reader.ReadInt16(&types) || types != 0) {
          return 0;
        }
        protocol::BuildParseComplete(prefix);
        break;
      }
      case 'B': {
        std::string_view statement;
        int16_t formats = 0;
        int16_t params = 0;
        std::span<const uint8_t> skipped;
        if (!reader.ReadCString(&name) || !name.empty() || !reader.ReadCString(&statement) ||
            !statement.empty() || !reader.ReadInt16(&formats) || formats < 0 ||
            !reader.ReadBytes(2 * static_cast<size_t>(formats), &skipped) ||
            !reader.ReadInt16(&params) || params != 0) {
          return 0;
        }
        protocol::BuildBindComplete(prefix);
        break;
      }
      case 'D': {
        uint8_t kind = 0;
        if (!reader.ReadByte(&kind) || !reader.ReadCString(&name) || !name.empty()) return 0;
        // A utility statement has no parameters and returns no rows.
        if (kind == 'S') protocol::BuildParameterDescription(prefix, {});
        protocol::BuildNoData(prefix);
        break;
      }
      case 'E':
        if (!reader.ReadCString(&name) || !name.empty()) return 0;
        break;
      default:  // 'S'
        break;
    }
    pos += piece.header.total_size();
  }
  return pos;
}

}  // namespace

IdleListen ReadIdleListen(ClientStream& client, std::span<const uint8_t> data,
                          uint32_t max_packet_size) {
  if (client.mid_message() || client.cancelled_rest != CancelledRest::kNone || data.empty()) {
    return {};
  }
  if (data[0] == 'Q') {
    protocol::StreamDecoder::Piece piece;
    if (protocol::StreamDecoder::PeekWhole(data, max_packet_size, &piece) !=
        protocol::FrameResult::kMessage) {
      return {};
    }
    protocol::Reader reader(piece.body());
    std::string_view text;
    if (!reader.ReadCString(&text)) return {};
    IdleListen out = ClassifyListen(text);
    if (out.kind != IdleListen::Kind::kNone) out.consumed = piece.header.total_size();
    return out;
  }
  if (data[0] != 'P') return {};
  // A statement is a few hundred bytes at most; anything longer is something else.
  constexpr size_t kMaxBatch = 4096;
  data = data.first(std::min(data.size(), kMaxBatch));
  std::string_view text;
  protocol::StringSink prefix;
  const size_t consumed = ReadExtendedStatement(data, max_packet_size, &text, prefix);
  if (consumed == 0) return {};
  IdleListen out = ClassifyListen(text);
  if (out.kind == IdleListen::Kind::kNone) return out;
  out.consumed = consumed;
  out.prefix = std::move(prefix.mutable_bytes());
  // The client's unnamed statement and portal are this one now, which changes no session.
  client.statement_effects.erase(std::string());
  client.portal_effects.clear();
  client.unnamed_refused = false;
  return out;
}

void BuildListenAnswer(protocol::ByteSink& sink, IdleListen::Kind kind) {
  protocol::BuildCommandComplete(sink, kind == IdleListen::Kind::kListen ? "LISTEN" : "UNLISTEN");
  protocol::BuildReadyForQuery(sink, 'I');
}

size_t NotificationQueue::Push(std::span<const uint8_t> message) {
  size_t dropped = 0;
  while (!messages_.empty() && bytes_ + message.size() > kMaxBytes) {
    bytes_ -= messages_.front().size();
    messages_.pop_front();
    ++dropped;
  }
  messages_.emplace_back(base::AsText(message));
  bytes_ += message.size();
  return dropped;
}

void NotificationQueue::TakeAll(protocol::ByteSink& sink) {
  for (const std::string& message : messages_) sink.Append(message);
  messages_.clear();
  bytes_ = 0;
}

bool ListenHub::Listen(NotificationListener* listener, const std::string& name,
                       protocol::ByteSink& answer) {
  Channel& channel = channels_[name];
  by_listener_[listener].insert(name);
  if (channel.listeners.contains(listener) ||
      (channel.confirmed && channel.listeners.insert(listener).second)) {
    BuildListenAnswer(answer, IdleListen::Kind::kListen);
    return true;
  }
  // Answered once the server's LISTEN has committed, as PostgreSQL answers a LISTEN only when
  // its session listens: a NOTIFY that commits after the client's LISTEN returned must reach it.
  if (std::find(channel.waiting.begin(), channel.waiting.end(), listener) ==
      channel.waiting.end()) {
    channel.waiting.push_back(listener);
  }
  if (has_server_ && channel.listen_seq == 0) SendListen(name, channel);
  return false;
}

void ListenHub::Unlisten(NotificationListener* listener, std::string_view channel) {
  auto it = by_listener_.find(listener);
  if (it == by_listener_.end()) return;
  const std::string name(channel);
  if (it->second.erase(name) == 0) return;
  if (it->second.empty()) by_listener_.erase(it);
  Drop(listener, name);
}

void ListenHub::UnlistenAll(NotificationListener* listener) {
  auto it = by_listener_.find(listener);
  if (it == by_listener_.end()) return;
  const absl::flat_hash_set<std::string> names = std::move(it->second);
  by_listener_.erase(it);
  // Sorted, so that the commands the server gets do not depend on hash order (tests read them).
  std::vector<std::string> sorted(names.begin(), names.end());
  std::sort(sorted.begin(), sorted.end());
  for (const std::string& name : sorted) Drop(listener, name);
}

void ListenHub::ApplyUnlistened(NotificationListener* listener,
                                const std::vector<std::string>& unlistened) {
  for (const std::string& channel : unlistened) {
    if (channel.empty()) {
      UnlistenAll(listener);
    } else {
      Unlisten(listener, channel);
    }
  }
}

bool ListenHub::Listens(const NotificationListener* listener, std::string_view channel) const {
  auto it = by_listener_.find(const_cast<NotificationListener*>(listener));
  return it != by_listener_.end() && it->second.contains(std::string(channel));
}

void ListenHub::Drop(NotificationListener* listener, const std::string& name) {
  auto it = channels_.find(name);
  if (it == channels_.end()) return;
  Channel& channel = it->second;
  channel.listeners.erase(listener);
  channel.waiting.erase(std::remove(channel.waiting.begin(), channel.waiting.end(), listener),
                        channel.waiting.end());
  if (channel.used()) return;
  const bool listened = channel.listen_seq != 0;
  channels_.erase(it);
  if (!has_server_ || !listened) return;
  // Nobody is left on the channel. When nobody is left at all, UNLISTEN * leaves the server
  // exactly as clean as DISCARD ALL would as far as listening goes, and TakeServerBack returns
  // it once that is answered.
  if (channels_.empty()) {
    Send("UNLISTEN *", "", false);
  } else {
    Send(absl::StrCat("UNLISTEN ", sql::QuoteIdentifier(name)), "", false);
  }
}

void ListenHub::Send(std::string_view sql, std::string channel, bool listen) {
  protocol::StringSink sink;
  protocol::BuildQuery(sink, sql);
  output_.append(sink.bytes());
  commands_.push_back(Command{next_seq_++, std::move(channel), listen, {}});
}

void ListenHub::SendListen(const std::string& name, Channel& channel) {
  channel.listen_seq = next_seq_;
  channel.confirmed = false;
  Send(absl::StrCat("LISTEN ", sql::QuoteIdentifier(name)), name, true);
}

void ListenHub::OnServer() {
  has_server_ = true;
  // Sorted: one stable order of commands.
  std::vector<std::string> names;
  names.reserve(channels_.size());
  for (const auto& [name, channel] : channels_) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) SendListen(name, channels_[name]);
}

void ListenHub::OnServerLost() {
  has_server_ = false;
  commands_.clear();
  output_.clear();
  for (auto& [name, channel] : channels_) {
    channel.listen_seq = 0;
    channel.confirmed = false;
  }
}

bool ListenHub::TakeServerBack() {
  if (!has_server_ || !channels_.empty() || !commands_.empty() || !output_.empty()) return false;
  has_server_ = false;
  return true;
}

std::vector<NotificationListener*> ListenHub::TakeWaiting() {
  std::vector<std::pair<NotificationListener*, std::string>> waits;
  for (auto& [name, channel] : channels_) {
    for (NotificationListener* listener : channel.waiting) waits.emplace_back(listener, name);
  }
  std::sort(waits.begin(), waits.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });
  std::vector<NotificationListener*> out;
  for (const auto& [listener, name] : waits) {
    if (std::find(out.begin(), out.end(), listener) == out.end()) out.push_back(listener);
    Unlisten(listener, name);
  }
  return out;
}

void ListenHub::OnServerMessage(uint8_t type, std::span<const uint8_t> body) {
  switch (type) {
    case 'A':
      Deliver(body);
      break;
    case 'E':
      if (!commands_.empty()) {
        commands_.front().error.assign(base::AsText(body));
      }
      break;
    case 'Z':
      OnReady();
      break;
    default:
      // CommandComplete, NoticeResponse, ParameterStatus: nothing a client needs.
      break;
  }
}

void ListenHub::OnReady() {
  if (commands_.empty()) return;
  Command command = std::move(commands_.front());
  commands_.pop_front();
  if (!command.listen) return;
  auto it = channels_.find(command.channel);
  if (it == channels_.end() || it->second.listen_seq != command.seq) return;  // superseded
  Channel& channel = it->second;
  std::vector<NotificationListener*> waiting = std::move(channel.waiting);
  channel.waiting.clear();
  protocol::StringSink answer;
  if (!command.error.empty()) {
    // The server refused the LISTEN (an invalid name, too long): each waiting client gets the
    // error as PostgreSQL would have answered it, and listens on nothing new.
    protocol::BuildMessage(answer, 'E', base::AsBytes(command.error));
    protocol::BuildReadyForQuery(answer, 'I');
    channel.listen_seq = 0;
    if (!channel.used()) channels_.erase(it);
    for (NotificationListener* listener : waiting) {
      auto own = by_listener_.find(listener);
      if (own != by_listener_.end()) {
        own->second.erase(command.channel);
        if (own->second.empty()) by_listener_.erase(own);
      }
      answers_.emplace_back(listener, answer.bytes());
    }
    // Every other channel the server listened on was UNLISTENed as its last listener left: with
    // none left, it listens on nothing and TakeServerBack may return it.
    return;
  }
  channel.confirmed = true;
  BuildListenAnswer(answer, IdleListen::Kind::kListen);
  for (NotificationListener* listener : waiting) {
    channel.listeners.insert(listener);
    answers_.emplace_back(listener, answer.bytes());
  }
}

void ListenHub::Deliver(std::span<const uint8_t> body) {
  protocol::Reader reader(body);
  int32_t pid = 0;
  std::string_view name;
  if (!reader.ReadInt32(&pid) || !reader.ReadCString(&name)) return;
  ++notifications_received_;
  auto it = channels_.find(std::string(name));
  if (it == channels_.end()) return;
  // The server's message as it came: its pid is the NOTIFYing server backend's.
  protocol::StringSink message;
  protocol::BuildMessage(message, 'A', body);
  const std::string channel_name(name);
  const auto& bytes = message.bytes();
  const std::span<const uint8_t> span(base::AsBytes(bytes));
  std::vector<NotificationListener*> listeners(it->second.listeners.begin(),
                                               it->second.listeners.end());
  for (NotificationListener* listener : listeners) {
    // A client closed by an earlier delivery (its socket failed) left the hub meanwhile.
    auto now = channels_.find(channel_name);
    if (now == channels_.end()) return;
    if (!now->second.listeners.contains(listener)) continue;
    listener->OnNotification(channel_name, span);
  }
}

}  // namespace pgfleet::pool
