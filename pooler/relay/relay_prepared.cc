// Renaming of named prepared statements in client messages under transaction pooling
// (docs/architecture.md, "Prepared statements"), and DEALLOCATE answered by pgfleet.
#include <optional>

#include "pooler/base/strings.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/relay/relay.h"
#include "pooler/sql/statement_classifier.h"

namespace pgfleet::pool {

using base::AsText;

namespace {

// A DEALLOCATE, simple or extended (psycopg sends Parse/Bind/Describe/Execute/Sync with the
// unnamed statement), is a few hundred bytes at most; anything longer is something else.
constexpr size_t kMaxDeallocateMessage = 1024;

// The statement a DEALLOCATE names, when `sql` is one and names a statement of `statements`.
template <typename Map>
std::optional<std::string> DeallocatedStatement(std::string_view sql, const Map& statements) {
  // Every Query passes here: one that starts with another letter is no DEALLOCATE (which allows
  // only spaces before its word).
  if (sql::StartsWithOtherLetter(sql, "d")) return std::nullopt;
  if (!sql.empty() && sql.back() == '\0') sql.remove_suffix(1);
  std::optional<std::string> name = ParseDeallocate(sql);
  if (!name.has_value() || !statements.contains(*name)) return std::nullopt;
  return name;
}

}  // namespace

void Relay::AppendParse(const StatementPtr& statement, PendingAction action) {
  auto& counters = settings_.statements->counters();
  for (const StatementPtr& evicted :
       statements_.Add(statement, settings_.max_prepared_statements)) {
    protocol::BuildClose(scratch_, 'S', evicted->server_name);
    // With the statement: should an error earlier in the batch make the server skip this Close,
    // the statement is still there and goes back into the cache (Relay::UndoFailedPipeline).
    PushPending(PendingKind::kClose, PendingAction::kHide, evicted);
    ++counters.evictions;
  }
  const auto& tail = statement->parse_tail;
  protocol::BuildParseWithTail(scratch_, statement->server_name, base::AsBytes(tail));
  PushPending(PendingKind::kParse, action, statement);
}

void Relay::EnsureOnServer(const StatementPtr& statement) {
  if (statements_.Contains(*statement)) {
    statements_.Touch(*statement);
    return;
  }
  ++settings_.statements->counters().reprepares;
  AppendParse(statement, PendingAction::kHide);
}

Relay::Rewrite Relay::FailMessage(PendingKind poison, std::string_view sqlstate,
                                  std::string_view message) {
  PushPending(poison, PendingAction::kReplaceError);
  protocol::StringSink error;
  protocol::BuildErrorResponse(error, "ERROR", sqlstate, message);
  pending_.back().error = std::move(error.mutable_bytes());
  return Rewrite::kReplace;
}

// A client's DEALLOCATE or Close of a statement pgfleet renamed acts on the client's names in
// stream order, wherever it comes (idle, mid-transaction, behind other messages of a pipeline):
// later messages of the client find the name gone, and a Close or DEALLOCATE that PostgreSQL would
// skip (an error earlier in its batch) or fail (25P02 in a failed transaction) gives it back
// (UndoFailedPipeline). The server's copy stays: other clients' statements of the same content
// share it, and the per-server cache (max_prepared_statements) decides when it goes.
//
// A Close is answered by pgfleet (kFakeCloseComplete) in its turn: it cannot fail where the
// server would not skip it. A DEALLOCATE can fail (25P02), so the server answers it, in its turn
// and with the same outcome, by running kDeallocateStandIn in its place; pgfleet only replaces
// the CommandComplete tag. This keeps the order of answers exact without pgfleet knowing the
// transaction status at that point of the stream: an answer of its own for a DEALLOCATE queued
// behind messages the server has not run yet would need the ReadyForQuery status and the error
// that only the server knows then. (A DEALLOCATE on a quiet server is answered without the round
// trip: AnswerIdleDeallocate.)
Relay::Rewrite Relay::RewritePrepared(const protocol::StreamDecoder::Piece& piece, size_t* skip,
                                      FrontendVerdict* verdict) {
  const uint8_t type = piece.header.type;
  if (type != 'P' && type != 'B' && type != 'D' && type != 'C' && type != 'Q' && type != 'E') {
    return Rewrite::kPassThrough;
  }
  const bool whole = piece.whole();
  if (type == 'Q' && !whole) {
    // A DEALLOCATE is short; a long query streams on unread.
    return piece.header.total_size() <= kMaxDeallocateMessage ? Rewrite::kNeedMore
                                                              : Rewrite::kPassThrough;
  }
  // A Bind's names come first; its parameters may stream on in pieces.
  if (type != 'B' && !whole) return Rewrite::kNeedMore;
  protocol::Reader reader(piece.bytes.subspan(protocol::kHeaderSize));
  auto reject = [&](std::string_view sqlstate, std::string message, bool protocol_error) {
    verdict->kind = FrontendVerdict::Kind::kReject;
    verdict->sqlstate = sqlstate;
    verdict->message = std::move(message);
    verdict->protocol_error = protocol_error;
    return Rewrite::kReject;
  };
  auto malformed = [&] {
    return reject(protocol::sqlstate::kProtocolViolation, "malformed extended-protocol message",
                  true);
  };
  // A statement the client does not have: PostgreSQL's ERROR, and the session goes on.
  auto missing = [&](std::string_view name, PendingKind poison) {
    return FailMessage(poison, protocol::sqlstate::kInvalidSqlStatementName,
                       base::StrCat("prepared statement \"", name, "\" does not exist"));
  };
  auto& names = client_->statements;
  // The client's name leaves at this point of its stream; the message's answer (`action`) puts it
  // back if the server skips or fails that message.
  auto forget = [&](PendingKind kind, PendingAction action, std::string_view name) {
    PushPending(kind, action);
    auto it = names.find(std::string(name));
    if (it == names.end()) return;
    Pending& pending = pending_.back();
    pending.client_name = std::string(name);
    pending.unnamed_here = true;
    pending.named = std::move(it->second);
    names.erase(it);
    client_->RememberClosed(pending.named);
  };

  switch (type) {
    case 'Q': {
      std::optional<std::string> name;
      if (piece.header.total_size() <= kMaxDeallocateMessage) {
        name = DeallocatedStatement(AsText(piece.body()), names);
      }
      if (!name.has_value()) return Rewrite::kPassThrough;
      *skip = piece.header.total_size();
      protocol::BuildQuery(scratch_, kDeallocateStandIn);
      // Its statement's end; the Query's ReadyForQuery is a kSync as any other Query's.
      forget(PendingKind::kExecute, PendingAction::kReplaceTag, *name);
      return Rewrite::kReplace;
    }
    case 'E': {
      std::string_view portal;
      if (!reader.ReadCString(&portal)) return malformed();
      auto& deallocating = client_->portal_deallocates;
      if (!deallocating.has_value() || deallocating->portal != portal) {
        PushPending(PendingKind::kExecute, PendingAction::kForward);
        return Rewrite::kPassThrough;
      }
      // The portal runs kDeallocateStandIn, once (a second Execute of it is the server's to
      // answer, as for any portal that ran to its end).
      const std::string name = std::move(deallocating->name);
      deallocating.reset();
      if (!names.contains(name)) {
        // Closed or deallocated since the DEALLOCATE was parsed: PostgreSQL's ERROR.
        *skip = piece.header.total_size();
        protocol::BuildDescribe(scratch_, 'S', kMissingStatementName);
        return missing(name, PendingKind::kDescribe);
      }
      forget(PendingKind::kExecute, PendingAction::kReplaceTag, name);
      return Rewrite::kPassThrough;
    }
    case 'P': {
      std::string_view name;
      if (!reader.ReadCString(&name)) return malformed();
      if (name.empty()) {
        client_->unnamed_deallocates.reset();
        std::string_view query;
        int16_t params = 0;
        // A DEALLOCATE takes no parameters; with declared ones it is not psycopg's, and the
        // server answers it. (A Parse that pgfleet's session state refused is not one either.)
        std::optional<std::string> deallocated;
        if (!client_->unnamed_refused && reader.ReadCString(&query) && reader.ReadInt16(&params) &&
            params == 0) {
          deallocated = DeallocatedStatement(query, names);
        }
        PushPending(PendingKind::kParse, PendingAction::kForward);
        if (!deallocated.has_value()) return Rewrite::kPassThrough;
        *skip = piece.header.total_size();
        protocol::BuildParse(scratch_, "", kDeallocateStandIn, {});
        client_->unnamed_deallocates = std::move(deallocated);
        return Rewrite::kReplace;
      }
      // Whether the name is taken yet depends on an earlier batch's answer: wait for it.
      if (NameUnsettled(name)) return Rewrite::kWait;
      const auto tail = reader.Rest();
      auto& registry = *settings_.statements;
      if (client_->TakeClosed(AsText(tail), registry.epoch())) {
        // The client closed this very statement and Parses its text again (pgx and pgjdbc after
        // an error, psycopg after its cache let it go): PostgreSQL analyses that Parse afresh,
        // which catches what no error told pgfleet (a parameter's type changed around it). The
        // schema may have changed for every text, so a new epoch starts.
        registry.SchemaChanged();
      }
      StatementPtr statement = registry.Intern(AsText(tail));
      ++registry.counters().prepared;
      auto [it, inserted] = names.try_emplace(std::string(name), statement);
      *skip = piece.header.total_size();
      // Re-preparing a name is refused only for other content; the name says what the content is.
      if (!inserted) {
        if (it->second->parse_tail != statement->parse_tail) {
          // The server fails a Describe of a statement it cannot have in the Parse's place.
          protocol::BuildDescribe(scratch_, 'S', kMissingStatementName);
          return FailMessage(PendingKind::kDescribe,
                             protocol::sqlstate::kDuplicatePreparedStatement,
                             base::StrCat("prepared statement \"", name, "\" already exists"));
        }
        // The same text again keeps the statement the name has, of whatever epoch.
        statement = it->second;
      }
      if (statements_.Contains(*statement)) {
        // The server has it already (perhaps from a client long gone, or from before the server
        // moved here): answer ParseComplete ourselves, in order.
        statements_.Touch(*statement);
        ++registry.counters().hits;
        PushPending(PendingKind::kParse, PendingAction::kFakeParseComplete);
      } else {
        AppendParse(statement, PendingAction::kForward);
      }
      Pending& parse = pending_.back();
      parse.client_name = std::string(name);
      parse.named_here = inserted;
      parse.named = statement;
      return Rewrite::kReplace;
    }
    case 'B': {
      std::string_view portal;
      std::string_view name;
      if (!reader.ReadCString(&portal) || !reader.ReadCString(&name)) {
        return whole ? malformed() : Rewrite::kNeedMore;
      }
      // A Bind replaces the portal it names, here and on the server.
      auto& deallocating = client_->portal_deallocates;
      if (name.empty() && client_->unnamed_deallocates.has_value()) {
        deallocating =
            ClientStream::DeallocatePortal{std::string(portal), *client_->unnamed_deallocates};
      } else if (deallocating.has_value() && deallocating->portal == portal) {
        deallocating.reset();
      }
      if (name.empty()) {
        PushPending(PendingKind::kBind, PendingAction::kForward);
        return Rewrite::kPassThrough;
      }
      // New header and names; the parameters stream on from the original message.
      const size_t names_size = portal.size() + 1 + name.size() + 1;
      *skip = protocol::kHeaderSize + names_size;
      auto it = names.find(std::string(name));
      if (it == names.end()) {
        // The Bind itself fails on the server, naming a statement it cannot have.
        protocol::BuildBindHead(scratch_, portal, kMissingStatementName,
                                piece.header.body_size() - names_size);
        return missing(name, PendingKind::kBind);
      }
      const StatementPtr statement = it->second;
      EnsureOnServer(statement);
      PushPending(PendingKind::kBind, PendingAction::kForward);
      protocol::BuildBindHead(scratch_, portal, statement->server_name,
                              piece.header.body_size() - names_size);
      return Rewrite::kReplace;
    }
    case 'D':
    case 'C': {
      uint8_t kind = 0;
      std::string_view name;
      if (!reader.ReadByte(&kind) || !reader.ReadCString(&name)) return malformed();
      const PendingKind pending = type == 'D' ? PendingKind::kDescribe : PendingKind::kClose;
      if (kind != 'S' || name.empty()) {
        if (type == 'C' && kind == 'S') client_->unnamed_deallocates.reset();
        auto& deallocating = client_->portal_deallocates;
        if (type == 'C' && kind == 'P' && deallocating.has_value() &&
            deallocating->portal == name) {
          deallocating.reset();
        }
        PushPending(pending, PendingAction::kForward);
        return Rewrite::kPassThrough;
      }
      *skip = piece.header.total_size();
      if (type == 'C') {
        // Other clients may share the server-side statement: forget the name, keep the statement
        // (see above). Closing a name the client lacks is no error in PostgreSQL.
        forget(PendingKind::kClose, PendingAction::kFakeCloseComplete, name);
        return Rewrite::kReplace;
      }
      auto it = names.find(std::string(name));
      if (it == names.end()) {
        protocol::BuildDescribe(scratch_, 'S', kMissingStatementName);
        return missing(name, PendingKind::kDescribe);
      }
      EnsureOnServer(it->second);
      PushPending(PendingKind::kDescribe, PendingAction::kForward);
      protocol::BuildDescribe(scratch_, 'S', it->second->server_name);
      return Rewrite::kReplace;
    }
  }
  return Rewrite::kPassThrough;
}

size_t Relay::AnswerIdleDeallocate(ClientStream& client, std::span<const uint8_t> data,
                                   protocol::ByteSink& to_client, char tx_status) {
  if (client.mid_message()) return 0;
  constexpr size_t kMaxBatch = kMaxDeallocateMessage;
  data = data.first(std::min(data.size(), kMaxBatch));
  std::optional<std::string> name;
  protocol::StringSink answer;
  size_t pos = 0;
  bool done = false;
  while (!done) {
    protocol::StreamDecoder::Piece piece;
    if (protocol::StreamDecoder::PeekWhole(data.subspan(pos), kMaxBatch, &piece) !=
        protocol::FrameResult::kMessage) {
      return 0;
    }
    protocol::Reader reader(piece.body());
    std::string_view first;
    switch (piece.header.type) {
      case 'Q':  // only as the whole batch
        if (pos != 0) return 0;
        name = DeallocatedStatement(AsText(piece.body()), client.statements);
        if (!name.has_value()) return 0;
        protocol::BuildCommandComplete(answer, "DEALLOCATE");
        done = true;
        break;
      case 'P': {  // unnamed statement, no parameters
        std::string_view query;
        int16_t params = 0;
        if (pos != 0 || !reader.ReadCString(&first) || !first.empty() ||
            !reader.ReadCString(&query) || !reader.ReadInt16(&params) || params != 0) {
          return 0;
        }
        name = DeallocatedStatement(query, client.statements);
        if (!name.has_value()) return 0;
        protocol::BuildParseComplete(answer);
        break;
      }
      case 'B': {  // unnamed portal of the unnamed statement, no parameters
        std::string_view statement;
        if (!name.has_value() || !reader.ReadCString(&first) || !first.empty() ||
            !reader.ReadCString(&statement) || !statement.empty()) {
          return 0;
        }
        protocol::BuildBindComplete(answer);
        break;
      }
      case 'D': {
        uint8_t kind = 0;
        if (!name.has_value() || !reader.ReadByte(&kind) || !reader.ReadCString(&first) ||
            !first.empty()) {
          return 0;
        }
        // A utility command has no parameters and returns no rows.
        if (kind == 'S') protocol::BuildParameterDescription(answer, {});
        protocol::BuildNoData(answer);
        break;
      }
      case 'E':
        if (!name.has_value() || !reader.ReadCString(&first) || !first.empty()) return 0;
        protocol::BuildCommandComplete(answer, "DEALLOCATE");
        break;
      case 'S':
        if (!name.has_value()) return 0;
        done = true;
        break;
      default:
        return 0;
    }
    pos += piece.header.total_size();
  }
  if (auto it = client.statements.find(*name); it != client.statements.end()) {
    client.RememberClosed(std::move(it->second));
    client.statements.erase(it);
  }
  // Nothing is in flight to the client (idle, or a quiet transaction), so answering here keeps
  // order.
  protocol::BuildReadyForQuery(answer, tx_status);
  to_client.Append(answer.bytes());
  return pos;
}

}  // namespace pgfleet::pool
