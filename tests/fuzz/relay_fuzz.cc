// Fuzzes the socket-free Relay (pooler/relay/relay.h) the way ClientConn and ServerConn drive it:
// one Relay linked to one ClientStream, fed a client's byte stream and a server's byte stream in
// arbitrary chunks (1 byte up to everything pending), with the unconsumed rest of each fed again
// with more bytes appended, as the shells keep it in their input buffers.
//
// The input is a script (FuzzedDataProvider): setup (track_prepared, max_prepared_statements,
// chaos), then steps: the client writes messages (well framed, built with builders.h), either
// side's pending bytes are delivered in a chunk, the server sends a notice, pgfleet adds a hidden
// query (only where the pool would: on a releasable server). While the server is releasable the
// client counts as unlinked, so its bytes meet Relay::AnswerIdleDeallocate first, as in
// ClientConn; a DEALLOCATE behind other messages meets the relay's stand-in rewrite. The server is
// a small model of PostgreSQL that answers what the relay actually sent it (renamed and injected
// statements included): simple and extended queries, transaction status, COPY in both directions,
// skip-till-Sync after an error, prepared statements and portals. A plausible server is what
// reaches the deep states (pipelines failing midway, COPY after an error, evictions); in chaos mode
// the fuzzer also slips arbitrary backend messages into the server's stream, and only the checks
// that hold for any server remain. At the end everything is delivered and the client finishes like
// a driver (CopyDone, Sync, rollback).
//
// Checked, aborting on a violation:
//  - the release rule: never IsReleasable() while the last ReadyForQuery said 'T'/'E', while the
//    client is in COPY FROM STDIN, while the client's or the server's stream is inside a message,
//    while a hidden query, a Query/Sync of the client (one PostgreSQL does not ignore in COPY FROM
//    STDIN) or anything else the server owes is unanswered (model mode), and, the other way round,
//    released once the client is idle and everything is answered (model mode, clients that follow
//    the protocol);
//  - framing: both output streams are always a well-framed message sequence; pgfleet's own
//    messages start at message boundaries (and to the client are whole); a chunk that ends at a
//    message boundary is consumed entirely and leaves both outputs at a boundary;
//  - what passes: a server message is passed whole or not at all; hidden queries' answers never
//    reach the client and the client's always do (only pgfleet's own ParseComplete/CloseComplete
//    may be hidden); without track_prepared the client's stream reaches the server unchanged but
//    for the Syncs the relay keeps back inside COPY FROM STDIN;
//  - answers: the client never gets more ParseComplete/BindComplete/CloseComplete than it sent
//    Parse/Bind/Close (model mode);
//  - DEALLOCATE: one of a statement the relay renamed for the client never reaches the server,
//    and the stand-in's CommandComplete never reaches the client (DEALLOCATE's does, in its place);
//  - prepared statements: the server never gets a Bind/Describe of a pgfleet_ statement it lacks
//    (but pgfleet_missing_statement, which pgfleet sends on purpose to fail a message it refused,
//    and whose error it replaces with the client's) or a Parse of one it has (the relay's
//    per-server cache matches the server);
//  - and ASan/UBSan/LeakSanitizer on all of it.
//
// RELAY_FUZZ_TRACE=1 prints an input's story.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/stream_decoder.h"
#include "pooler/relay/param_sync.h"
#include "pooler/relay/prepared_statements.h"
#include "pooler/relay/relay.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace pool = pgfleet::pool;
namespace protocol = pgfleet::protocol;

constexpr uint32_t kMaxPacket = 1u << 30;
// Bounds one input's work so a 16 KiB input cannot run into libFuzzer's timeout.
constexpr int kMaxSteps = 600;

// RELAY_FUZZ_TRACE=1 prints the story of an input (what each side sent, what the relay took), to
// read a crash input by.
bool Tracing() {
  static const bool on = std::getenv("RELAY_FUZZ_TRACE") != nullptr;
  return on;
}
#define TRACE(...)                                    \
  do {                                                \
    if (Tracing()) std::fprintf(stderr, __VA_ARGS__); \
  } while (0)

// One message for a trace: its type, size and (for Query/Parse/Bind/Describe/Close) its names.
std::string Show(std::string_view message) {
  std::string out(1, message[0]);
  out += "(" + std::to_string(message.size()) + ")";
  if (std::string_view("QPBDC").find(message[0]) != std::string_view::npos) {
    std::string_view body = message.substr(protocol::kHeaderSize);
    if (message[0] == 'D' || message[0] == 'C') {
      out += " ";
      out += body.substr(0, 1);
      body.remove_prefix(std::min<size_t>(1, body.size()));
    }
    for (int i = 0; i < (message[0] == 'Q' ? 1 : 2) && !body.empty(); ++i) {
      const std::string_view text = body.substr(0, std::min(body.find('\0'), size_t{40}));
      out += " '" + std::string(text) + "'";
      body.remove_prefix(std::min(body.size(), body.find('\0') + 1));
    }
  }
  return out;
}

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Messages builders.h has no builder for (pgfleet never writes them itself).
std::string Typed(char type, std::string_view body) {
  std::string out(1, type);
  uint8_t length[4];
  protocol::StoreBigEndian32(length, static_cast<uint32_t>(body.size() + 4));
  out.append(reinterpret_cast<const char*>(length), 4);
  out.append(body);
  return out;
}

template <typename Fn>
std::string Build(Fn fn) {
  protocol::StringSink sink;
  fn(sink);
  return sink.bytes();
}

// True when `bytes` is a sequence of whole, well-framed messages.
bool AllWhole(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    protocol::StreamDecoder::Piece piece;
    if (protocol::StreamDecoder::PeekWhole(Bytes(bytes.substr(pos)), kMaxPacket, &piece) !=
        protocol::FrameResult::kMessage) {
      return false;
    }
    pos += piece.header.total_size();
  }
  return true;
}

// Frames one output stream as it grows, whatever the pieces it arrives in, and hands on each
// message once it is whole: the framing check and the receiving side's view in one place.
class Framer {
 public:
  template <typename Fn>
  void Feed(std::string_view bytes, Fn&& on_message) {
    while (!bytes.empty()) {
      const size_t want = total_ == 0 ? protocol::kHeaderSize : total_;
      const size_t take = std::min(want - cur_.size(), bytes.size());
      cur_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (total_ == 0 && cur_.size() == protocol::kHeaderSize) {
        protocol::FrameHeader header;
        FUZZ_CHECK(protocol::PeekHeader(Bytes(cur_), kMaxPacket, &header) ==
                   protocol::FrameResult::kMessage);
        total_ = header.total_size();
      }
      if (total_ != 0 && cur_.size() == total_) {
        on_message(static_cast<uint8_t>(cur_[0]),
                   std::string_view(cur_).substr(protocol::kHeaderSize));
        cur_.clear();
        total_ = 0;
      }
    }
  }
  bool at_boundary() const { return cur_.empty(); }

 private:
  std::string cur_;
  size_t total_ = 0;  // of the message being framed; 0 before its header is whole
};

enum class QueryKind {
  kSelect,
  kBegin,
  kCommit,
  kRollback,
  kCopyIn,
  kCopyOut,
  kSet,
  kDiscardAll,
  kDeallocateAll,
  kEmpty,
  kBad,         // fails at parse time, every time (a syntax error)
  kDeallocate,  // DEALLOCATE of one named statement (`value`)
  kUnlisten,    // pgfleet's stand-in for a client's DEALLOCATE (pool::kDeallocateStandIn)
};
struct QuerySpec {
  std::string_view sql;
  QueryKind kind;
  std::string_view value = {};  // kSet: the search_path it reports; kDeallocate: the statement
};
constexpr QuerySpec kClientQueries[] = {
    {"select 1", QueryKind::kSelect},
    {"begin", QueryKind::kBegin},
    {"commit", QueryKind::kCommit},
    {"rollback", QueryKind::kRollback},
    {"copy t from stdin", QueryKind::kCopyIn},
    {"copy t to stdout", QueryKind::kCopyOut},
    {"set search_path=c", QueryKind::kSet, "c"},
    {"discard all", QueryKind::kDiscardAll},
    {"deallocate all", QueryKind::kDeallocateAll},
    {"", QueryKind::kEmpty},
    {"select bad", QueryKind::kBad},
    // What drivers send to drop a statement; pgfleet answers them itself for a client it renames
    // for (Relay::AnswerIdleDeallocate), or the server gets them.
    {"DEALLOCATE a", QueryKind::kDeallocate, "a"},
    {"deallocate prepare b;", QueryKind::kDeallocate, "b"},
    {"DEALLOCATE \"c\"", QueryKind::kDeallocate, "c"},
};
// What the pool sends hidden: a parameter sync, server_check_query, and one that fails.
constexpr QuerySpec kHiddenQueries[] = {
    {"SET search_path='h'", QueryKind::kSet, "h"},
    {"select 1", QueryKind::kSelect},
    {"select bad", QueryKind::kBad},
};
// A CommandComplete's body: its tag and the NUL that ends it.
std::string CompleteBody(std::string_view tag) { return std::string(tag) + '\0'; }

// What the relay sends in the place of a client's DEALLOCATE of a statement it renamed.
constexpr QuerySpec kStandIn = {pool::kDeallocateStandIn, QueryKind::kUnlisten};

// The query a text is: a client query may carry a trailing comment as padding, so that messages
// are long enough to be relayed in pieces and distinct texts make distinct statements.
const QuerySpec& Classify(std::string_view sql) {
  if (size_t comment = sql.find(" /*"); comment != std::string_view::npos) {
    sql = sql.substr(0, comment);
  }
  for (const auto& spec : kClientQueries) {
    if (spec.sql == sql) return spec;
  }
  for (const auto& spec : kHiddenQueries) {
    if (spec.sql == sql) return spec;
  }
  if (sql == kStandIn.sql) return kStandIn;
  FUZZ_CHECK(false && "the server got a query nobody sent");
  return kClientQueries[0];
}

bool EndsTransaction(QueryKind kind) {
  return kind == QueryKind::kCommit || kind == QueryKind::kRollback;
}

// Whose answer a server message is.
enum class Tag : uint8_t {
  kClient,  // the client's messages (as relayed, renamed and injected ones included)
  kHidden,  // a query pgfleet added with AddHiddenQuery
  kAsync,   // a NoticeResponse the server sends on its own
  kChaos,   // an arbitrary message (chaos mode)
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider& fdp)
      : fdp_(fdp),
        tracked_(std::vector<std::string>{"search_path"}),
        client_(kMaxPacket, tracked_.size()) {
    settings_.track_prepared = fdp_.ConsumeBool();
    settings_.max_prepared_statements = fdp_.ConsumeIntegralInRange<size_t>(0, 3);
    settings_.tracked = &tracked_;
    settings_.statements = &registry_;
    chaos_ = fdp_.ConsumeIntegralInRange<int>(0, 3) == 0;
    TRACE("setup: track_prepared=%d max_prepared_statements=%zu chaos=%d\n",
          settings_.track_prepared, settings_.max_prepared_statements, chaos_);
    relay_.emplace(settings_);
    relay_->Link(&client_);
  }

  void Run() {
    for (int step = 0; step < kMaxSteps && fdp_.remaining_bytes() > 0 && !rejected_; ++step) {
      switch (fdp_.ConsumeIntegralInRange<int>(0, 11)) {
        case 0:
        case 1:
        case 2:
        case 3:
          ClientWrites();
          break;
        case 4:
        case 5:
          DeliverClient(ChunkSize(client_out_.size(), true));
          break;
        case 6:
        case 7:
        case 8:
          DeliverServer(ChunkSize(server_out_.size(), false));
          break;
        case 9:
          ServerNotice();
          break;
        case 10:
          HiddenQuery();
          break;
        default:
          if (chaos_) {
            ServerChaos();
          } else {
            DeliverServer(ChunkSize(server_out_.size(), false));
          }
          break;
      }
    }
    Drain();
  }

 private:
  struct ClientMsg {
    uint64_t start;
    uint64_t end;
    uint8_t type;
    bool seen = false;  // the relay has acted on its type
  };
  struct ServerMsg {
    uint64_t start;
    uint64_t end;
    uint8_t type;
    Tag tag;
    char status;          // ReadyForQuery: the transaction status it reports
    bool discards;        // CommandComplete of DISCARD ALL / DEALLOCATE ALL
    uint64_t passed = 0;  // bytes of it the relay passed to the client
    // An error for the message pgfleet made fail in the place of one it refused (a statement
    // name the client lacks, or has for another query), or the CommandComplete of its stand-in for
    // a DEALLOCATE: the client gets pgfleet's message instead.
    bool replaced = false;
  };
  struct Portal {
    QueryKind kind;
    int rows_left;
    bool done = false;  // a utility statement's portal ran (only kUnlisten's is marked)
  };
  enum class Copy { kNone, kSimple, kExtended };

  // Receives what the relay sends the server, framing it as it comes.
  class ToServer final : public pool::RelayOutput {
   public:
    ToServer(Harness& h, std::string_view input) : h_(h), input_(input) {}
    void Pass(size_t begin, size_t end) override {
      FUZZ_CHECK(begin <= end && end <= input_.size() && begin >= last_end_);
      last_end_ = end;
      out_.append(input_.substr(begin, end - begin));
      h_.SendToServer(input_.substr(begin, end - begin), /*hidden=*/false);
    }
    void Insert(std::span<const uint8_t> bytes) override {
      // Only renaming writes messages of pgfleet's own to the server, and never inside another.
      FUZZ_CHECK(h_.settings_.track_prepared);
      FUZZ_CHECK(h_.to_server_.at_boundary());
      const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      out_.append(text);
      h_.SendToServer(text, /*hidden=*/false);
    }
    const std::string& out() const { return out_; }
    size_t last_end() const { return last_end_; }

   private:
    Harness& h_;
    std::string_view input_;
    std::string out_;
    size_t last_end_ = 0;
  };

  // Receives what the relay sends the client from the server's stream.
  class ToClient final : public pool::RelayOutput {
   public:
    ToClient(Harness& h, std::string_view input) : h_(h), input_(input) {}
    void Pass(size_t begin, size_t end) override {
      FUZZ_CHECK(begin <= end && end <= input_.size() && begin >= last_end_);
      last_end_ = end;
      h_.MarkPassed(h_.server_consumed_ + begin, h_.server_consumed_ + end);
      out_.append(input_.substr(begin, end - begin));
      h_.DeliverToClient(input_.substr(begin, end - begin));
    }
    void Insert(std::span<const uint8_t> bytes) override {
      const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      h_.CheckStandIns(text);
      out_.append(text);
      h_.DeliverToClient(text);
    }
    const std::string& out() const { return out_; }
    size_t last_end() const { return last_end_; }

   private:
    Harness& h_;
    std::string_view input_;
    std::string out_;
    size_t last_end_ = 0;
  };

  // ---- chunking ----

  // How much of `pending` bytes goes in the next read: all, one byte, any amount, or up to the
  // next message boundary (whole messages).
  size_t ChunkSize(size_t pending, bool client) {
    if (pending == 0) return 0;
    switch (fdp_.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        return pending;
      case 1:
        return 1;
      case 2:
        return fdp_.ConsumeIntegralInRange<size_t>(1, pending);
      default: {
        const uint64_t from = client ? client_delivered_ : server_delivered_;
        const uint64_t next = client ? NextClientBoundary(from) : NextServerBoundary(from);
        return static_cast<size_t>(next - from);
      }
    }
  }
  uint64_t NextClientBoundary(uint64_t from) const {
    for (const auto& m : client_msgs_) {
      if (m.end > from) return m.end;
    }
    return client_generated_;
  }
  uint64_t NextServerBoundary(uint64_t from) const {
    for (const auto& m : server_msgs_) {
      if (m.end > from) return m.end;
    }
    return server_generated_;
  }
  bool ClientBoundary(uint64_t offset) const {
    if (offset == client_generated_) return true;
    for (const auto& m : client_msgs_) {
      if (m.start == offset) return true;
    }
    return false;
  }
  bool ServerBoundary(uint64_t offset) const {
    if (offset == server_generated_) return true;
    for (const auto& m : server_msgs_) {
      if (m.start == offset) return true;
    }
    return false;
  }
  // The relay has taken part of a message, not all of it.
  bool ClientMid() const {
    for (const auto& m : client_msgs_) {
      if (m.end > client_consumed_) return m.start < client_consumed_;
    }
    return false;
  }
  bool ServerMid() const {
    for (const auto& m : server_msgs_) {
      if (m.end > server_consumed_) return m.start < server_consumed_;
    }
    return false;
  }
  // The model server still has answers on their way (not counting notices).
  bool ServerOwes() const {
    for (const auto& m : server_msgs_) {
      if (m.tag == Tag::kClient || m.tag == Tag::kHidden) return true;
    }
    return false;
  }

  // ---- the client ----

  void AppendClient(const std::string& message) {
    TRACE("client writes %s\n", Show(message).c_str());
    client_msgs_.push_back(
        {client_generated_, client_generated_ + message.size(), static_cast<uint8_t>(message[0])});
    client_generated_ += message.size();
    client_out_ += message;
    switch (message[0]) {
      case 'Q':
      case 'S':
        gen_unsynced_ = false;
        break;
      case 'P':
      case 'B':
      case 'D':
      case 'E':
      case 'C':
        gen_unsynced_ = true;
        break;
      default:
        break;
    }
  }

  std::string PickQuery() {
    const auto& spec =
        kClientQueries[fdp_.ConsumeIntegralInRange<size_t>(0, std::size(kClientQueries) - 1)];
    std::string sql(spec.sql);
    if (fdp_.ConsumeIntegralInRange<int>(0, 3) == 0) {
      sql += " /*";
      sql.append(fdp_.ConsumeIntegralInRange<size_t>(0, 300), 'x');
      sql += "*/";
    }
    return sql;
  }
  std::string PickStatement() {
    static constexpr std::string_view kNames[] = {"", "a", "b", "c"};
    return std::string(kNames[fdp_.ConsumeIntegralInRange<size_t>(0, std::size(kNames) - 1)]);
  }
  // A statement to use: when pgfleet renames, mostly one the client prepared (an unknown name is
  // an ERROR that fails its batch, as in PostgreSQL).
  std::string PickPrepared() {
    std::string name = PickStatement();
    if (settings_.track_prepared && !name.empty() && !client_names_.contains(name) &&
        fdp_.ConsumeIntegralInRange<int>(0, 7) != 0) {
      name.clear();
    }
    return name;
  }
  std::string PickPortal() { return fdp_.ConsumeBool() ? "" : "p"; }

  void WriteParse(const std::string& name) {
    std::string sql = PickQuery();
    // Re-preparing a name with another query is refused by pgfleet (and by PostgreSQL); mostly
    // the client repeats the text it used.
    if (auto it = client_names_.find(name); it != client_names_.end() && fdp_.ConsumeBool()) {
      sql = it->second;
    }
    if (!name.empty()) client_names_[name] = sql;
    AppendClient(Build([&](auto& s) { protocol::BuildParse(s, name, sql, {}); }));
  }
  void WriteBind(const std::string& portal, const std::string& statement) {
    std::vector<std::string> values(fdp_.ConsumeIntegralInRange<size_t>(0, 2));
    for (auto& v : values) v.assign(fdp_.ConsumeIntegralInRange<size_t>(0, 400), 'v');
    std::vector<std::string_view> views(values.begin(), values.end());
    AppendClient(Build([&](auto& s) { protocol::BuildBindText(s, portal, statement, views); }));
  }
  void WriteExecute(const std::string& portal) {
    const uint32_t max_rows = fdp_.ConsumeIntegralInRange<uint32_t>(0, 2);
    AppendClient(Build([&](auto& s) { protocol::BuildExecute(s, portal, max_rows); }));
  }
  void WriteCopyData() {
    AppendClient(Typed('d', std::string(fdp_.ConsumeIntegralInRange<size_t>(0, 400), 'r')));
  }

  void ClientWrites() {
    // Inside COPY FROM STDIN a client mostly sends its data.
    int action = fdp_.ConsumeIntegralInRange<int>(0, 11);
    if (copy_in_view_ && fdp_.ConsumeBool()) action = 11;
    switch (action) {
      case 0:
        AppendClient(Build([&](auto& s) { protocol::BuildQuery(s, PickQuery()); }));
        break;
      case 1:
        WriteParse(PickStatement());
        break;
      case 2: {
        const std::string portal = PickPortal();
        WriteBind(portal, PickPrepared());
        break;
      }
      case 3: {
        const char kind = fdp_.ConsumeBool() ? 'S' : 'P';
        const std::string name = kind == 'S' ? PickPrepared() : PickPortal();
        AppendClient(Build([&](auto& s) { protocol::BuildDescribe(s, kind, name); }));
        break;
      }
      case 4:
        WriteExecute(PickPortal());
        break;
      case 5:
        AppendClient(Build([](auto& s) { protocol::BuildSync(s); }));
        break;
      case 6: {
        // What drivers send for one statement: Parse, Bind, Describe, Execute, Sync.
        const std::string name = PickStatement();
        WriteParse(name);
        WriteBind("", name);
        if (fdp_.ConsumeBool()) {
          AppendClient(Build([](auto& s) { protocol::BuildDescribe(s, 'P', ""); }));
        }
        WriteExecute("");
        AppendClient(Build([](auto& s) { protocol::BuildSync(s); }));
        break;
      }
      case 7:
        AppendClient(Typed('H', ""));  // Flush
        break;
      case 8: {
        const char kind = fdp_.ConsumeBool() ? 'S' : 'P';
        const std::string name = kind == 'S' ? PickStatement() : PickPortal();
        if (kind == 'S') client_names_.erase(name);
        AppendClient(Build([&](auto& s) { protocol::BuildClose(s, kind, name); }));
        break;
      }
      case 9:
        // Late or stray COPY messages: PostgreSQL drops them outside COPY.
        switch (fdp_.ConsumeIntegralInRange<int>(0, 2)) {
          case 0:
            WriteCopyData();
            break;
          case 1:
            AppendClient(Typed('c', ""));
            break;
          default:
            AppendClient(Typed('f', std::string("gave up\0", 8)));
            break;
        }
        break;
      case 10: {
        // psycopg 3 drops a statement with an unnamed-statement DEALLOCATE, extended protocol:
        // with its Sync, or in a pipeline (libpq's PQsendQueryParams) behind and ahead of other
        // messages of one batch.
        const auto& spec = kClientQueries[fdp_.ConsumeIntegralInRange<size_t>(
            std::size(kClientQueries) - 3, std::size(kClientQueries) - 1)];
        AppendClient(Build([&](auto& s) { protocol::BuildParse(s, "", spec.sql, {}); }));
        const std::string portal = fdp_.ConsumeIntegralInRange<int>(0, 3) == 0 ? "p" : "";
        AppendClient(Build([&](auto& s) { protocol::BuildBindText(s, portal, "", {}); }));
        AppendClient(Build([&](auto& s) { protocol::BuildDescribe(s, 'P', portal); }));
        AppendClient(Build([&](auto& s) { protocol::BuildExecute(s, portal, 0); }));
        if (fdp_.ConsumeBool()) AppendClient(Build([](auto& s) { protocol::BuildSync(s); }));
        break;
      }
      default: {
        const size_t rows = fdp_.ConsumeIntegralInRange<size_t>(0, 3);
        for (size_t i = 0; i < rows; ++i) WriteCopyData();
        switch (fdp_.ConsumeIntegralInRange<int>(0, 3)) {
          case 0:
            AppendClient(Typed('c', ""));
            break;
          case 1:
            AppendClient(Typed('f', std::string("gave up\0", 8)));
            break;
          default:
            break;  // more data later
        }
        break;
      }
    }
  }

  void DeliverClient(size_t n) {
    if (n == 0 || rejected_) return;
    client_in_.append(client_out_, 0, n);
    client_out_.erase(0, n);
    client_delivered_ += n;
    FeedClient(n);
  }

  // The relay takes what it can of the client's pending bytes (`n` of them just delivered; 0: fed
  // again after the server's answers, as ServerConn does while the relay says the client waits).
  void FeedClient(size_t n) {
    AnswerIdleDeallocate();
    if (client_in_.empty()) return CheckInvariants();
    const bool ends_whole = ClientBoundary(client_delivered_);
    const bool input_whole = ends_whole && ClientBoundary(client_consumed_);
    ToServer to_server(*this, client_in_);
    protocol::StringSink answers;
    const pool::FrontendVerdict verdict =
        relay_->FromClient(Bytes(client_in_), absl::UnixEpoch(), to_server, answers);
    TRACE("  relay <- client %zu bytes (%zu pending): took %zu, kind %d\n", n, client_in_.size(),
          verdict.consumed, static_cast<int>(verdict.kind));
    if (verdict.kind == pool::FrontendVerdict::Kind::kReject) {
      // Well-framed messages of known types are never refused: a statement name the client
      // lacks, or has for another query, is an ERROR in its turn, and the session goes on.
      FUZZ_CHECK(false);
      rejected_ = true;
      return;
    }
    FUZZ_CHECK(verdict.kind == pool::FrontendVerdict::Kind::kContinue);  // no Terminate sent
    FUZZ_CHECK(verdict.consumed <= client_in_.size());
    FUZZ_CHECK(to_server.last_end() <= verdict.consumed);
    if (!answers.bytes().empty()) CheckStandIns(answers.bytes());
    DeliverToClient(answers.bytes());
    if (!settings_.track_prepared) {
      // Nothing to rename: the server gets exactly what the relay took, but for the Syncs it
      // keeps back inside COPY FROM STDIN.
      FUZZ_CHECK(to_server.out() == ExpectedToServer(verdict.consumed));
    }
    client_in_.erase(0, verdict.consumed);
    client_consumed_ += verdict.consumed;
    AdvanceClient();
    if (ends_whole) {
      // All of it, unless a Parse waits for an earlier batch's answers (Relay::client_waits).
      FUZZ_CHECK(client_in_.empty() || (relay_->client_waits() &&
                                        ClientBoundary(client_consumed_) && client_in_[0] == 'P'));
      FUZZ_CHECK(to_server_.at_boundary());
    }
    if (input_whole) FUZZ_CHECK(AllWhole(to_server.out()) && AllWhole(answers.bytes()));
    CheckInvariants();
  }

  // In transaction pooling a releasable server goes back to the pool and its client waits unlinked;
  // the client's next bytes meet ClientConn::AnswerDeallocate before any server.
  void AnswerIdleDeallocate() {
    while (settings_.track_prepared && relay_->IsReleasable() && !client_in_.empty()) {
      protocol::StringSink answer;
      const size_t answered = pool::Relay::AnswerIdleDeallocate(client_, Bytes(client_in_), answer);
      if (answered == 0) return;
      TRACE("  pgfleet answers an idle client's DEALLOCATE: %zu bytes\n", answered);
      // Whole messages answered by whole messages, ending with ReadyForQuery 'I'.
      FUZZ_CHECK(answered <= client_in_.size() && ClientBoundary(client_consumed_ + answered));
      FUZZ_CHECK(to_client_.at_boundary() && AllWhole(answer.bytes()));
      FUZZ_CHECK(
          answer.bytes().ends_with(Build([](auto& s) { protocol::BuildReadyForQuery(s, 'I'); })));
      client_in_.erase(0, answered);
      client_consumed_ += answered;
      AdvanceClient();
      DeliverToClient(answer.bytes());
      for (auto it = client_names_.begin(); it != client_names_.end();) {
        it = client_.statements.contains(it->first) ? std::next(it) : client_names_.erase(it);
      }
      CheckInvariants();
    }
  }

  // The first `consumed` bytes of client_in_ less the Syncs the relay keeps from the server: those
  // it acts on while the client is in COPY FROM STDIN (after the CopyInResponse, before its
  // CopyDone/CopyFail).
  std::string ExpectedToServer(size_t consumed) const {
    const uint64_t begin = client_consumed_;
    const uint64_t end = client_consumed_ + consumed;
    bool in_copy = copy_in_view_;
    std::string out;
    uint64_t at = begin;
    for (const auto& m : client_msgs_) {
      if (m.seen || m.end <= begin) continue;
      if (m.start >= end) break;
      if (m.type == 'c' || m.type == 'f') in_copy = false;
      if (m.type == 'S' && in_copy) {
        FUZZ_CHECK(m.end <= end);
        out.append(client_in_, at - begin, m.start - at);
        at = m.end;
      }
    }
    out.append(client_in_, at - begin, end - at);
    return out;
  }

  // What the relay has now acted on, in the order it did.
  void AdvanceClient() {
    for (auto& m : client_msgs_) {
      if (m.start >= client_consumed_) break;
      if (m.seen) continue;
      m.seen = true;
      if (m.type == 'P' || m.type == 'B' || m.type == 'C') ++asked_[m.type];
      // Only COPY messages (and Sync, Flush) belong inside COPY FROM STDIN; PostgreSQL fails the
      // COPY at any other, or reads it after the COPY failed, skipping to a Sync the relay keeps
      // back. The model's accounts no longer hold.
      if (copy_in_view_ &&
          std::string_view("dcfHS").find(static_cast<char>(m.type)) == std::string_view::npos) {
        lost_message_ = true;
      }
      switch (m.type) {
        case 'S':
          if (copy_in_view_) break;  // kept from the server: nothing owed, nothing closed
          ++answers_owed_;
          unsynced_ = false;
          break;
        case 'Q':
          ++answers_owed_;
          unsynced_ = false;
          break;
        case 'P':
        case 'B':
        case 'D':
        case 'C':
        case 'E':
          unsynced_ = true;
          break;
        case 'c':
        case 'f':
          copy_in_view_ = false;
          break;
        default:
          break;
      }
    }
    while (!client_msgs_.empty() && client_msgs_.front().seen &&
           client_msgs_.front().end <= client_consumed_) {
      client_msgs_.pop_front();
    }
  }

  // Stand-in answers pgfleet writes to the client: whole, between messages, the two it makes.
  void CheckStandIns(std::string_view bytes) {
    FUZZ_CHECK(settings_.track_prepared);
    FUZZ_CHECK(to_client_.at_boundary());
    FUZZ_CHECK(AllWhole(bytes));
    size_t pos = 0;
    while (pos < bytes.size()) {
      protocol::FrameHeader header;
      FUZZ_CHECK(protocol::PeekHeader(Bytes(bytes.substr(pos)), kMaxPacket, &header) ==
                 protocol::FrameResult::kMessage);
      // ParseComplete, CloseComplete, the ERROR of a message pgfleet refused, or the
      // CommandComplete of a DEALLOCATE in the place of its stand-in's.
      FUZZ_CHECK(
          header.type == '1' || header.type == '3' || header.type == 'E' ||
          (header.type == 'C' && bytes.substr(pos + protocol::kHeaderSize, header.body_size()) ==
                                     std::string_view("DEALLOCATE\0", 11)));
      pos += header.total_size();
    }
  }

  void DeliverToClient(std::string_view bytes) {
    to_client_.Feed(bytes, [&](uint8_t type, std::string_view body) {
      static constexpr std::string_view kBackendTypes = "123nItTDCENSZGHdcs";
      FUZZ_CHECK(kBackendTypes.find(static_cast<char>(type)) != std::string_view::npos);
      if (type == '1' || type == '2' || type == '3') ++got_[type];
      // The stand-in's tag never reaches the client: its DEALLOCATE's does (while the model's
      // account of whose answer is whose holds).
      FUZZ_CHECK(!Trusted() || !(type == 'C' && body.starts_with(pool::kDeallocateStandInTag)));
      if (type == 'C' && (body.starts_with("DISCARD ALL") || body.starts_with("DEALLOCATE ALL"))) {
        client_names_.clear();  // pgfleet forgets the client's statements when it sees these
      }
      if (type == 'Z') {
        ++answers_received_;
        FUZZ_CHECK(body.size() == 1);
        tx_view_ = body[0];
      } else if (type == 'G') {
        // In COPY FROM STDIN unless the client already ended it: a client may pipeline its
        // CopyDone/CopyFail before the CopyInResponse comes. The model server knows whether a
        // CopyDone/CopyFail came after the COPY's command; for an arbitrary server's (chaos) or
        // once the model is out of step, the relay's reading is taken.
        FUZZ_CHECK(!copy_ins_.empty());
        const int ends_at_command = copy_ins_.front();
        copy_ins_.pop_front();
        copy_in_view_ = ends_at_command >= 0 && Trusted() ? copy_ends_received_ == ends_at_command
                                                          : client_.in_copy_in;
      }
    });
  }

  // ---- the server ----

  void SendToServer(std::string_view bytes, bool hidden) {
    to_server_.Feed(bytes, [&](uint8_t type, std::string_view body) {
      TRACE("    server gets %c(%zu)%s\n", type, body.size() + protocol::kHeaderSize,
            hidden ? " [hidden]" : "");
      // Relayed after the server ran a DISCARD ALL / DEALLOCATE ALL whose CommandComplete the
      // relay has not seen yet: decided on a statement cache that is out of date (a pipelining
      // race the relay cannot avoid; the statement checks stop here).
      if (discards_in_flight_ > 0) raced_discard_ = true;
      tag_ = hidden ? Tag::kHidden : Tag::kClient;
      answering_missing_ = NamesMissingStatement(type, body);
      if (answering_missing_)
        TRACE("    (it names %s: it fails there)\n", pool::kMissingStatementName.data());
      ServerReceives(type, body);
      answering_missing_ = false;
      tag_ = Tag::kClient;
    });
  }

  // A Bind or statement Describe of the name pgfleet sends where a refused message was.
  static bool NamesMissingStatement(uint8_t type, std::string_view body) {
    protocol::Reader reader(Bytes(body));
    std::string_view name;
    uint8_t kind = 0;
    if (type == 'B') {
      std::string_view portal;
      return reader.ReadCString(&portal) && reader.ReadCString(&name) &&
             name == pool::kMissingStatementName;
    }
    return type == 'D' && reader.ReadByte(&kind) && kind == 'S' && reader.ReadCString(&name) &&
           name == pool::kMissingStatementName;
  }

  void Emit(const std::string& message) {
    TRACE("    server sends %s%s\n", Show(message).c_str(),
          tag_ == Tag::kHidden   ? " [hidden]"
          : tag_ == Tag::kClient ? ""
                                 : " [async/chaos]");
    const uint8_t type = static_cast<uint8_t>(message[0]);
    bool discards = false;
    if (type == 'C') {
      const std::string_view tag = std::string_view(message).substr(protocol::kHeaderSize);
      discards = tag.starts_with("DISCARD ALL") || tag.starts_with("DEALLOCATE ALL");
    }
    if (discards && tag_ != Tag::kHidden) ++discards_in_flight_;
    if (type == 'G') copy_ins_.push_back(tag_ == Tag::kClient ? copy_ends_received_ : -1);
    server_msgs_.push_back({server_generated_, server_generated_ + message.size(), type, tag_,
                            type == 'Z' ? message[5] : '\0', discards});
    server_msgs_.back().replaced =
        (type == 'E' && answering_missing_) ||
        (type == 'C' && std::string_view(message).substr(protocol::kHeaderSize) ==
                            CompleteBody(pool::kDeallocateStandInTag));
    server_generated_ += message.size();
    server_out_ += message;
  }
  void EmitReady() {
    if (tx_ == 'I') portals_.clear();  // a transaction's end closes its portals
    Emit(Build([&](auto& s) { protocol::BuildReadyForQuery(s, tx_); }));
    ++ready_emitted_;
  }
  void EmitError(std::string_view sqlstate) {
    Emit(Build([&](auto& s) { protocol::BuildErrorResponse(s, "ERROR", sqlstate, "failed"); }));
    if (tx_ == 'T') tx_ = 'E';
  }
  // An error in an extended-protocol message: the server skips everything up to Sync.
  void ExtendedError(std::string_view sqlstate) {
    EmitError(sqlstate);
    skipping_ = true;
  }
  void EmitRows(int rows) {
    for (int i = 0; i < rows; ++i) {
      const std::string value(fdp_.ConsumeIntegralInRange<size_t>(0, 300), 'v');
      const std::string_view values[] = {value};
      Emit(Build([&](auto& s) { protocol::BuildDataRow(s, values); }));
    }
  }
  void EmitRowDescription() {
    const protocol::ColumnSpec columns[] = {{"c", 25}};
    Emit(Build([&](auto& s) { protocol::BuildRowDescription(s, columns); }));
  }
  void EmitComplete(std::string_view tag) {
    Emit(Build([&](auto& s) { protocol::BuildCommandComplete(s, tag); }));
  }

  // Runs a statement (simple Query or Execute); false when it failed with an error.
  bool RunStatement(const QuerySpec& spec, bool simple, Portal* portal, uint32_t max_rows) {
    switch (spec.kind) {
      case QueryKind::kSelect: {
        if (fdp_.ConsumeIntegralInRange<int>(0, 7) == 0) {
          EmitError("22012");  // division by zero, at run time
          return false;
        }
        if (simple) EmitRowDescription();
        int rows = portal != nullptr ? portal->rows_left : fdp_.ConsumeIntegralInRange<int>(0, 3);
        if (portal != nullptr && max_rows > 0 && rows > static_cast<int>(max_rows)) {
          EmitRows(static_cast<int>(max_rows));
          portal->rows_left -= static_cast<int>(max_rows);
          Emit(Typed('s', ""));  // PortalSuspended
          return true;
        }
        EmitRows(rows);
        if (portal != nullptr) portal->rows_left = 0;
        EmitComplete("SELECT " + std::to_string(rows));
        return true;
      }
      case QueryKind::kBegin:
        if (tx_ != 'I') {
          Emit(Build([](auto& s) {
            protocol::BuildNoticeResponse(s, "WARNING", "25001", "already a transaction");
          }));
        }
        tx_ = 'T';
        EmitComplete("BEGIN");
        return true;
      case QueryKind::kCommit:
      case QueryKind::kRollback:
        EmitComplete(tx_ == 'E' || spec.kind == QueryKind::kRollback ? "ROLLBACK" : "COMMIT");
        tx_ = 'I';
        return true;
      case QueryKind::kCopyIn:
        Emit(Typed('G', std::string("\0\0\0", 3)));
        copy_ = simple ? Copy::kSimple : Copy::kExtended;
        copy_rows_ = 0;
        copy_data_seen_ = false;
        maybe_swallowed_ = 0;
        return true;
      case QueryKind::kCopyOut: {
        Emit(Typed('H', std::string("\0\0\0", 3)));
        const int rows = fdp_.ConsumeIntegralInRange<int>(0, 3);
        for (int i = 0; i < rows; ++i) {
          Emit(Typed('d', std::string(fdp_.ConsumeIntegralInRange<size_t>(0, 300), 'o')));
        }
        Emit(Typed('c', ""));
        EmitComplete("COPY " + std::to_string(rows));
        return true;
      }
      case QueryKind::kSet:
        Emit(Build([&](auto& s) { protocol::BuildParameterStatus(s, "search_path", spec.value); }));
        EmitComplete("SET");
        return true;
      case QueryKind::kDiscardAll:
        if (tx_ == 'T') {
          EmitError("25001");  // cannot run inside a transaction block
          return false;
        }
        for (auto it = statements_.begin(); it != statements_.end();) {
          it = it->first.empty() ? std::next(it) : statements_.erase(it);
        }
        portals_.clear();
        EmitComplete("DISCARD ALL");
        return true;
      case QueryKind::kDeallocateAll:
        for (auto it = statements_.begin(); it != statements_.end();) {
          it = it->first.empty() ? std::next(it) : statements_.erase(it);
        }
        EmitComplete("DEALLOCATE ALL");
        return true;
      case QueryKind::kEmpty:
        Emit(Typed('I', ""));
        return true;
      case QueryKind::kBad:
        EmitError("42601");
        return false;
      case QueryKind::kDeallocate:
        if (statements_.erase(std::string(spec.value)) == 0) {
          EmitError("26000");
          return false;
        }
        EmitComplete("DEALLOCATE");
        return true;
      case QueryKind::kUnlisten:
        EmitComplete(pool::kDeallocateStandInTag);
        return true;
    }
    return true;
  }

  // Ends COPY FROM STDIN. After a simple Query its ReadyForQuery follows; after Execute an error
  // skips to the next Sync.
  void EndCopy(bool failed) {
    const Copy was = copy_;
    copy_ = Copy::kNone;
    // The relay keeps such Syncs owed: it never releases this server.
    if (failed && maybe_swallowed_ > 0) unknowable_sync_ = true;
    if (was == Copy::kSimple) {
      EmitReady();
    } else if (failed) {
      skipping_ = true;
    }
  }

  // The relay's cache of what the server has prepared against the server: a Parse of a renamed
  // statement the server has, or a Bind/Describe of one it lacks, is an error the client did not
  // cause. A Bind may still name a statement whose own Parse failed (pipelined before the relay
  // saw the error): PostgreSQL would refuse the client's Bind just the same.
  void CheckRenamed(std::string_view name, bool must_exist) {
    if (!settings_.track_prepared || !name.starts_with("pgfleet_") || !Trusted() ||
        raced_discard_ || name == pool::kMissingStatementName) {
      return;
    }
    const bool exists = statements_.contains(std::string(name));
    if (must_exist) {
      FUZZ_CHECK(exists || failed_parses_.contains(std::string(name)));
    } else {
      // Eviction Closes skipped after an error included: the relay takes the statement back when
      // that error's ReadyForQuery comes. Until then it may re-parse the statement in a later
      // batch of the same pipeline (a race it cannot avoid); the server refuses with 42P05 and the
      // relay takes the statement back then.
      const auto skipped = skipped_closes_.find(std::string(name));
      FUZZ_CHECK(!exists || (skipped != skipped_closes_.end() && skipped->second > ready_taken_));
    }
  }
  // A client's DEALLOCATE of a name the relay renames for it never reaches the server, which
  // knows the statement by another name: the relay sent its stand-in instead. (One padded with a
  // comment is not recognised, and reaches the server as it is.)
  void CheckDeallocate(std::string_view sql, const QuerySpec& spec) {
    if (!settings_.track_prepared || spec.kind != QueryKind::kDeallocate || sql != spec.sql) return;
    FUZZ_CHECK(!client_.statements.contains(std::string(spec.value)));
  }
  // A message the server skipped (after an error) or lost (inside COPY).
  void Skipped(uint8_t type, std::string_view body) {
    protocol::Reader reader(Bytes(body));
    std::string_view name;
    uint8_t kind = 0;
    if (type == 'P' && reader.ReadCString(&name) && !name.empty()) {
      failed_parses_.insert(std::string(name));
    } else if (type == 'C' && reader.ReadByte(&kind) && kind == 'S' && reader.ReadCString(&name)) {
      skipped_closes_[std::string(name)] = ready_emitted_ + 1;  // the Sync's ReadyForQuery ends it
    }
  }
  // A Parse the server refused or skipped.
  void ParseFailed(std::string_view body) {
    protocol::Reader reader(Bytes(body));
    std::string_view name;
    if (reader.ReadCString(&name) && !name.empty()) failed_parses_.insert(std::string(name));
  }

  void ServerReceives(uint8_t type, std::string_view body) {
    protocol::Reader reader(Bytes(body));
    if (type == 'c' || type == 'f') ++copy_ends_received_;
    if (copy_ != Copy::kNone) {
      switch (type) {
        case 'd':
          ++copy_rows_;
          copy_data_seen_ = true;
          if (fdp_.ConsumeIntegralInRange<int>(0, 7) == 0) {
            EmitError("22P02");  // bad data: PostgreSQL ends the COPY itself
            EndCopy(true);
          }
          return;
        case 'c':
          EmitComplete("COPY " + std::to_string(copy_rows_));
          EndCopy(false);
          return;
        case 'f':
          EmitError("57014");
          EndCopy(true);
          return;
        case 'H':
          return;
        case 'S':
          // PostgreSQL ignores Sync during COPY FROM STDIN (copyfromparse.c: "for the convenience
          // of client libraries (such as libpq) that may send those without noticing that the
          // command they just sent was COPY"): it gets no ReadyForQuery.
          ++swallowed_syncs_;
          // Sent on before the relay knew of the COPY (it keeps later ones back): after CopyData,
          // the relay cannot tell whether it is ignored if the COPY then fails.
          if (copy_data_seen_) ++maybe_swallowed_;
          return;
        default:
          // Anything else is a protocol violation that ends the COPY, and the message is lost.
          Skipped(type, body);
          lost_message_ = true;
          EmitError("08P01");
          EndCopy(true);
          return;
      }
    }
    if (skipping_) {
      Skipped(type, body);
      if (type == 'S') {
        skipping_ = false;
        EmitReady();
      } else if (type == 'Q') {
        lost_message_ = true;  // a Query sent before the Sync that ends the skip gets no answer
      }
      return;
    }
    switch (type) {
      case 'Q': {
        std::string_view sql;
        FUZZ_CHECK(reader.ReadCString(&sql));
        const QuerySpec& spec = Classify(sql);
        CheckDeallocate(sql, spec);
        statements_.erase("");
        portals_.erase("");
        if (tx_ == 'E' && !EndsTransaction(spec.kind)) {
          EmitError("25P02");
        } else if (RunStatement(spec, /*simple=*/true, nullptr, 0) && copy_ != Copy::kNone) {
          return;  // ReadyForQuery after the COPY
        }
        EmitReady();
        return;
      }
      case 'P': {
        std::string_view name;
        std::string_view sql;
        FUZZ_CHECK(reader.ReadCString(&name) && reader.ReadCString(&sql));
        const QuerySpec& spec = Classify(sql);
        if (name.empty()) CheckDeallocate(sql, spec);
        if ((tx_ == 'E' && !EndsTransaction(spec.kind)) || spec.kind == QueryKind::kBad) {
          ParseFailed(body);
          return ExtendedError(spec.kind == QueryKind::kBad ? "42601" : "25P02");
        }
        CheckRenamed(name, /*must_exist=*/false);
        if (!name.empty() && statements_.contains(std::string(name))) {
          ParseFailed(body);
          return ExtendedError("42P05");
        }
        statements_[std::string(name)] = spec.kind;
        Emit(Build([](auto& s) { protocol::BuildParseComplete(s); }));
        return;
      }
      case 'B': {
        std::string_view portal;
        std::string_view name;
        FUZZ_CHECK(reader.ReadCString(&portal) && reader.ReadCString(&name));
        if (tx_ != 'E') CheckRenamed(name, /*must_exist=*/true);
        auto it = statements_.find(std::string(name));
        if (it == statements_.end()) return ExtendedError("26000");
        if (tx_ == 'E' && !EndsTransaction(it->second)) return ExtendedError("25P02");
        if (!portal.empty() && portals_.contains(std::string(portal))) {
          return ExtendedError("42P03");
        }
        portals_[std::string(portal)] = {it->second, fdp_.ConsumeIntegralInRange<int>(0, 3)};
        Emit(Build([](auto& s) { protocol::BuildBindComplete(s); }));
        return;
      }
      case 'D': {
        uint8_t kind = 0;
        std::string_view name;
        FUZZ_CHECK(reader.ReadByte(&kind) && reader.ReadCString(&name));
        QueryKind query;
        if (kind == 'S') {
          if (tx_ != 'E') CheckRenamed(name, /*must_exist=*/true);
          auto it = statements_.find(std::string(name));
          if (it == statements_.end()) return ExtendedError("26000");
          query = it->second;
        } else {
          auto it = portals_.find(std::string(name));
          if (it == portals_.end()) return ExtendedError("34000");
          query = it->second.kind;
        }
        if (tx_ == 'E' && query == QueryKind::kSelect) return ExtendedError("25P02");
        if (kind == 'S') Emit(Build([](auto& s) { protocol::BuildParameterDescription(s, {}); }));
        if (query == QueryKind::kSelect) {
          EmitRowDescription();
        } else {
          Emit(Build([](auto& s) { protocol::BuildNoData(s); }));
        }
        return;
      }
      case 'E': {
        std::string_view portal_name;
        int32_t max_rows = 0;
        FUZZ_CHECK(reader.ReadCString(&portal_name) && reader.ReadInt32(&max_rows));
        auto it = portals_.find(std::string(portal_name));
        if (it == portals_.end()) return ExtendedError("34000");
        if (tx_ == 'E' && !EndsTransaction(it->second.kind)) return ExtendedError("25P02");
        // PostgreSQL runs a utility statement's portal once: "portal cannot be run" after.
        if (it->second.done) return ExtendedError("55000");
        if (it->second.kind == QueryKind::kUnlisten) it->second.done = true;
        QuerySpec spec{"", it->second.kind, "c"};
        Portal portal = it->second;
        if (!RunStatement(spec, /*simple=*/false, &portal, static_cast<uint32_t>(max_rows))) {
          skipping_ = true;
          return;
        }
        if (auto again = portals_.find(std::string(portal_name)); again != portals_.end()) {
          again->second = portal;
        }
        return;
      }
      case 'C': {
        uint8_t kind = 0;
        std::string_view name;
        FUZZ_CHECK(reader.ReadByte(&kind) && reader.ReadCString(&name));
        if (kind == 'S') {
          statements_.erase(std::string(name));
        } else {
          portals_.erase(std::string(name));
        }
        Emit(Build([](auto& s) { protocol::BuildCloseComplete(s); }));
        return;
      }
      case 'S':
        EmitReady();
        return;
      case 'H':
      case 'd':
      case 'c':
      case 'f':
        return;  // Flush; COPY messages outside COPY are dropped
      default:
        FUZZ_CHECK(false && "the relay sent the server a message type nobody sent");
    }
  }

  void ServerNotice() {
    tag_ = Tag::kAsync;
    Emit(Build([](auto& s) { protocol::BuildNoticeResponse(s, "NOTICE", "00000", "hello"); }));
    tag_ = Tag::kClient;
  }

  // Any message from the list a server sends, anywhere: the model's promises no longer hold.
  void ServerChaos() {
    tag_ = Tag::kChaos;
    switch (fdp_.ConsumeIntegralInRange<int>(0, 17)) {
      case 0: {
        static constexpr char kStatus[] = {'I', 'T', 'E'};
        const char status = kStatus[fdp_.ConsumeIntegralInRange<size_t>(0, 2)];
        Emit(Build([&](auto& s) { protocol::BuildReadyForQuery(s, status); }));
        break;
      }
      case 1:
        Emit(Build([](auto& s) { protocol::BuildErrorResponse(s, "ERROR", "XX000", "chaos"); }));
        break;
      case 2:
        EmitComplete(fdp_.ConsumeBool() ? "SELECT 1" : "DISCARD ALL");
        break;
      case 3:
        Emit(Build([](auto& s) { protocol::BuildParseComplete(s); }));
        break;
      case 4:
        Emit(Build([](auto& s) { protocol::BuildBindComplete(s); }));
        break;
      case 5:
        Emit(Build([](auto& s) { protocol::BuildCloseComplete(s); }));
        break;
      case 6:
        Emit(Build([](auto& s) { protocol::BuildNoData(s); }));
        break;
      case 7:
        EmitRowDescription();
        break;
      case 8:
        EmitRows(1);
        break;
      case 9:
        Emit(Typed('G', std::string("\0\0\0", 3)));
        break;
      case 10:
        Emit(Typed('H', std::string("\0\0\0", 3)));
        break;
      case 11:
        Emit(Typed('d', std::string(fdp_.ConsumeIntegralInRange<size_t>(0, 300), 'o')));
        break;
      case 12:
        Emit(Typed('c', ""));
        break;
      case 13:
        Emit(Build([](auto& s) { protocol::BuildParameterStatus(s, "search_path", "z"); }));
        break;
      case 14:
        Emit(Build([](auto& s) { protocol::BuildNoticeResponse(s, "NOTICE", "00000", "x"); }));
        break;
      case 15:
        Emit(Typed('I', ""));
        break;
      case 16:
        Emit(Typed('s', ""));
        break;
      default:
        Emit(Build([](auto& s) { protocol::BuildParameterDescription(s, {}); }));
        break;
    }
    tag_ = Tag::kClient;
  }

  // What the pool does when it links a client (parameter sync) or checks a server: only on a
  // server it may hand out, so the hidden query's answers come before anything the client sends.
  void HiddenQuery() {
    if (rejected_ || !relay_->IsReleasable()) return;
    const auto& spec =
        kHiddenQueries[fdp_.ConsumeIntegralInRange<size_t>(0, std::size(kHiddenQueries) - 1)];
    FUZZ_CHECK(to_server_.at_boundary());
    protocol::StringSink sink;
    TRACE("pgfleet adds hidden query '%s'\n", std::string(spec.sql).c_str());
    relay_->AddHiddenQuery(sink, spec.sql);
    FUZZ_CHECK(AllWhole(sink.bytes()));
    ++hidden_owed_;
    SendToServer(sink.bytes(), /*hidden=*/true);
    FUZZ_CHECK(to_server_.at_boundary());
    CheckInvariants();
  }

  void MarkPassed(uint64_t begin, uint64_t end) {
    for (auto& m : server_msgs_) {
      if (m.start >= end) break;
      const uint64_t from = std::max(begin, m.start);
      const uint64_t to = std::min(end, m.end);
      if (from < to) m.passed += to - from;
    }
  }

  void DeliverServer(size_t n) {
    if (n == 0 || rejected_) return;
    server_in_.append(server_out_, 0, n);
    server_out_.erase(0, n);
    server_delivered_ += n;
    const bool ends_whole = ServerBoundary(server_delivered_);
    const bool input_whole = ends_whole && ServerBoundary(server_consumed_);
    ToClient to_client(*this, server_in_);
    const pool::BackendVerdict verdict =
        relay_->FromServer(Bytes(server_in_), to_client, observer_);
    TRACE("  relay <- server %zu bytes (%zu pending): took %zu, releasable %d\n", n,
          server_in_.size(), verdict.consumed, relay_->IsReleasable());
    FUZZ_CHECK(!verdict.protocol_error);
    FUZZ_CHECK(verdict.consumed <= server_in_.size());
    FUZZ_CHECK(to_client.last_end() <= verdict.consumed);
    server_in_.erase(0, verdict.consumed);
    server_consumed_ += verdict.consumed;
    AdvanceServer();
    if (ends_whole) {
      FUZZ_CHECK(server_in_.empty());
      FUZZ_CHECK(to_client_.at_boundary());
    }
    if (input_whole) FUZZ_CHECK(AllWhole(to_client.out()));
    CheckInvariants();
    if (relay_->client_waits() && !client_in_.empty()) FeedClient(0);
  }

  // Server messages the relay has taken whole: what it did with each.
  void AdvanceServer() {
    while (!server_msgs_.empty() && server_msgs_.front().end <= server_consumed_) {
      const ServerMsg m = server_msgs_.front();
      server_msgs_.pop_front();
      const uint64_t size = m.end - m.start;
      FUZZ_CHECK(m.passed == 0 || m.passed == size);  // never half a message
      if (m.type == 'Z') {
        last_ready_ = m.status;
        ++ready_taken_;
      }
      if (m.discards && m.tag != Tag::kHidden) --discards_in_flight_;
      if (!Trusted()) continue;
      switch (m.tag) {
        case Tag::kHidden:
          FUZZ_CHECK(m.passed == 0);
          if (m.type == 'Z') --hidden_owed_;
          break;
        case Tag::kClient:
          // Only answers to pgfleet's own Parse (re-prepare) and Close (eviction) are kept back,
          // and errors (and DEALLOCATE's tag) pgfleet replaces with the client's own.
          if (!settings_.track_prepared || (m.type != '1' && m.type != '3' && !m.replaced)) {
            FUZZ_CHECK(m.passed == size);
          }
          break;
        default:
          break;
      }
    }
  }

  // Whether the model's account of whose answer is whose still holds: not after chaos, nor after
  // the client broke the protocol so that the server dropped a message it counted on.
  bool Trusted() const { return !chaos_ && !lost_message_; }

  void CheckInvariants() {
    if (Trusted()) {
      // The client never gets a ParseComplete/BindComplete/CloseComplete it did not ask for
      // (answers matched to the wrong message show up here).
      FUZZ_CHECK(got_['1'] <= asked_['P'] && got_['2'] <= asked_['B'] && got_['3'] <= asked_['C']);
    }
    // The relay's view of the client's stream and the transaction matches what it was fed.
    FUZZ_CHECK(client_.in_copy_in == copy_in_view_);
    FUZZ_CHECK(client_.mid_message() == ClientMid());
    FUZZ_CHECK(client_.unsynced == unsynced_);
    FUZZ_CHECK(relay_->in_transaction() == (last_ready_ != 'I'));
    // Each output stream is inside a message only while its input is.
    FUZZ_CHECK(to_server_.at_boundary() || ClientMid());
    FUZZ_CHECK(to_client_.at_boundary() || ServerMid());
    if (!relay_->IsReleasable()) return;
    FUZZ_CHECK(last_ready_ == 'I');
    FUZZ_CHECK(!client_.in_copy_in && !copy_in_view_);
    FUZZ_CHECK(!ClientMid());
    FUZZ_CHECK(!ServerMid());
    FUZZ_CHECK(!unsynced_);
    if (Trusted()) {
      // Syncs the server ignored in COPY FROM STDIN are owed nothing. (Any server's
      // CopyInResponse tells the relay that the client's Syncs since the COPY's command are
      // ignored, so this holds only for a server that means it.)
      FUZZ_CHECK(answers_owed_ <= answers_received_ + swallowed_syncs_);
      FUZZ_CHECK(hidden_owed_ == 0);
      FUZZ_CHECK(!ServerOwes());
    }
  }

  // Everything on its way arrives, and the client finishes what it started like a driver would:
  // ends its COPY, syncs, rolls back. Then the server must be free for the next client.
  void Drain() {
    bool synced_after_copy = false;
    // Each round answers what is owed; a Parse that waits for an earlier batch's answer goes out
    // only in the round after it, so a client that queued many of them needs as many rounds.
    for (int round = 0; round < 8 + kMaxSteps && !rejected_; ++round) {
      DeliverClient(client_out_.size());
      DeliverServer(server_out_.size());
      if (rejected_ || !client_out_.empty() || !server_out_.empty()) continue;
      if (copy_in_view_) {
        AppendClient(Typed('c', ""));
      } else if (gen_unsynced_ || unsynced_) {
        // (unsynced_ alone: the client's Sync was kept back inside COPY FROM STDIN.)
        AppendClient(Build([](auto& s) { protocol::BuildSync(s); }));
      } else if (tx_view_ != 'I') {
        AppendClient(Build([](auto& s) { protocol::BuildQuery(s, "rollback"); }));
      } else if (answers_owed_ > answers_received_ && !synced_after_copy) {
        // Still waiting for a ReadyForQuery: the COPY was an extended-protocol one, and libpq
        // ends those with CopyDone and a Sync.
        AppendClient(Build([](auto& s) { protocol::BuildSync(s); }));
        synced_after_copy = true;
      } else {
        break;
      }
    }
    // A Sync sent on after CopyData before the CopyInResponse, in a COPY that then failed: whether
    // PostgreSQL answered it cannot be known, and the relay keeps the server rather than release it
    // early.
    if (rejected_ || !Trusted() || unknowable_sync_) return;
    FUZZ_CHECK(client_out_.empty() && client_in_.empty() && server_out_.empty() &&
               server_in_.empty());
    FUZZ_CHECK(!copy_in_view_ && !gen_unsynced_ && tx_view_ == 'I');
    FUZZ_CHECK(relay_->IsReleasable());
    FUZZ_CHECK(answers_owed_ == answers_received_ + swallowed_syncs_);  // the model's books
  }

  FuzzedDataProvider& fdp_;
  pool::TrackedParamNames tracked_;
  pool::StatementRegistry registry_;
  pool::RelaySettings settings_;
  bool chaos_ = false;
  pool::ClientStream client_;
  std::optional<pool::Relay> relay_;
  pool::RelayObserver observer_;
  bool rejected_ = false;

  // Client -> relay: written (out), delivered and not yet consumed (in); offsets in the stream.
  std::string client_out_;
  std::string client_in_;
  uint64_t client_generated_ = 0;
  uint64_t client_delivered_ = 0;
  uint64_t client_consumed_ = 0;
  std::deque<ClientMsg> client_msgs_;  // not yet wholly consumed
  std::map<std::string, std::string> client_names_;
  bool gen_unsynced_ = false;  // extended messages written since the last Sync/Query
  // As the relay has acted on the client's messages.
  bool unsynced_ = false;
  int answers_owed_ = 0;          // Query/Sync taken by the relay
  std::map<uint8_t, int> asked_;  // Parse/Bind/Close taken by the relay
  // What the client has received.
  Framer to_client_;
  int answers_received_ = 0;    // ReadyForQuery
  std::map<uint8_t, int> got_;  // ParseComplete/BindComplete/CloseComplete
  char tx_view_ = 'I';
  bool copy_in_view_ = false;  // got CopyInResponse, has not sent CopyDone/CopyFail since

  // Relay -> server, and server -> relay.
  Framer to_server_;
  std::string server_out_;
  std::string server_in_;
  uint64_t server_generated_ = 0;
  uint64_t server_delivered_ = 0;
  uint64_t server_consumed_ = 0;
  std::deque<ServerMsg> server_msgs_;  // not yet wholly consumed
  char last_ready_ = 'I';              // the last ReadyForQuery the relay took
  int hidden_owed_ = 0;
  int discards_in_flight_ = 0;
  bool raced_discard_ = false;
  bool answering_missing_ = false;  // the server answers a message naming kMissingStatementName

  // The model server.
  Tag tag_ = Tag::kClient;  // whose message the server is answering
  char tx_ = 'I';
  bool skipping_ = false;
  Copy copy_ = Copy::kNone;
  int copy_rows_ = 0;
  std::map<std::string, QueryKind> statements_;
  std::map<std::string, Portal> portals_;
  std::set<std::string> failed_parses_;  // Parse of a renamed statement refused or skipped
  // Close of a statement skipped, with the number of the ReadyForQuery that ended the skip.
  std::map<std::string, int> skipped_closes_;
  int ready_emitted_ = 0;         // ReadyForQuery the model server sent (EmitReady)
  int ready_taken_ = 0;           // ReadyForQuery the relay took
  bool lost_message_ = false;     // the client broke the protocol and a message got no answer
  int swallowed_syncs_ = 0;       // Syncs that reached the server during COPY FROM STDIN
  bool copy_data_seen_ = false;   // the current COPY FROM STDIN got CopyData
  int maybe_swallowed_ = 0;       // Syncs it swallowed after CopyData
  bool unknowable_sync_ = false;  // one of those, and then the COPY failed
  int copy_ends_received_ = 0;    // CopyDone/CopyFail that reached the server, in COPY or not
  // For each CopyInResponse sent and not yet delivered: copy_ends_received_ when the model server
  // started that COPY, or -1 for one sent by chaos.
  std::deque<int> copy_ins_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  Harness harness(fdp);
  harness.Run();
  return 0;
}
