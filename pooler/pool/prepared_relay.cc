// Renaming of named prepared statements in client messages (PROTOCOL-NOTES section 3).
#include "pooler/base/strings.h"
#include "pooler/pool/client_conn.h"
#include "pooler/pool/pool.h"
#include "pooler/pool/pool_registry.h"
#include "pooler/pool/server_conn.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {
namespace {

void AppendMessageHeader(protocol::StringSink& sink, char type, size_t body_size) {
  uint8_t header[5] = {static_cast<uint8_t>(type)};
  protocol::StoreBigEndian32(header + 1, static_cast<uint32_t>(body_size + 4));
  sink.Append(header, sizeof(header));
}

void AppendCString(protocol::StringSink& sink, std::string_view s) {
  sink.Append(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  static constexpr uint8_t kNul = 0;
  sink.Append(&kNul, 1);
}

}  // namespace

void ClientConn::AppendParse(ServerConn& server, const StatementPtr& statement,
                             PendingAction action) {
  auto& counters = registry_->statements().counters();
  const size_t capacity = static_cast<size_t>(registry_->config().pool.max_prepared_statements);
  if (auto evicted = server.statements().Add(statement->id, statement->server_name, capacity)) {
    protocol::BuildClose(scratch_, 'S', *evicted);
    server.PushPending({PendingKind::kClose, PendingAction::kHide});
    ++counters.evictions;
  }
  AppendMessageHeader(scratch_, 'P',
                      statement->server_name.size() + 1 + statement->parse_tail.size());
  AppendCString(scratch_, statement->server_name);
  scratch_.Append(statement->parse_tail);
  server.PushPending({PendingKind::kParse, action, statement->id});
}

void ClientConn::EnsureOnServer(ServerConn& server, const StatementPtr& statement) {
  if (server.statements().Contains(statement->id)) {
    server.statements().Touch(statement->id);
    return;
  }
  ++registry_->statements().counters().reprepares;
  AppendParse(server, statement, PendingAction::kHide);
}

ClientConn::PreparedRewrite ClientConn::RewritePrepared(ServerConn& server,
                                                        const protocol::FrameHeader& header,
                                                        std::span<const uint8_t> available,
                                                        size_t* skip) {
  const uint8_t type = header.type;
  if (type != 'P' && type != 'B' && type != 'D' && type != 'C') {
    return PreparedRewrite::kPassThrough;
  }
  const bool whole = available.size() >= header.total_size();
  if (type != 'B' && !whole) return PreparedRewrite::kNeedMore;
  protocol::Reader reader(
      available.subspan(protocol::kHeaderSize,
                        std::min(available.size(), header.total_size()) - protocol::kHeaderSize));
  auto malformed = [&] {
    ++registry_->counters().protocol_errors;
    Fatal(protocol::sqlstate::kProtocolViolation, "malformed extended-protocol message");
    return PreparedRewrite::kFatal;
  };
  auto missing = [&](std::string_view name) {
    Fatal("26000", base::StrCat("prepared statement \"", name, "\" does not exist"));
    return PreparedRewrite::kFatal;
  };

  switch (type) {
    case 'P': {
      std::string_view name;
      if (!reader.ReadCString(&name)) return malformed();
      if (name.empty()) {
        server.PushPending({PendingKind::kParse, PendingAction::kForward});
        return PreparedRewrite::kPassThrough;
      }
      auto tail = reader.Rest();
      auto& registry = registry_->statements();
      StatementPtr statement = registry.Intern(
          std::string_view(reinterpret_cast<const char*>(tail.data()), tail.size()));
      ++registry.counters().prepared;
      auto [it, inserted] = statements_.try_emplace(std::string(name), statement);
      if (!inserted && it->second->id != statement->id) {
        Fatal("42P05", base::StrCat("prepared statement \"", name, "\" already exists"));
        return PreparedRewrite::kFatal;
      }
      *skip = header.total_size();
      if (server.statements().Contains(statement->id)) {
        // The server has it already: answer ParseComplete ourselves, in order.
        server.statements().Touch(statement->id);
        ++registry.counters().hits;
        server.PushPending({PendingKind::kParse, PendingAction::kFakeParseComplete});
      } else {
        AppendParse(server, statement, PendingAction::kForward);
      }
      return PreparedRewrite::kReplace;
    }
    case 'B': {
      std::string_view portal;
      std::string_view name;
      if (!reader.ReadCString(&portal) || !reader.ReadCString(&name)) {
        return whole ? malformed() : PreparedRewrite::kNeedMore;
      }
      if (name.empty()) {
        server.PushPending({PendingKind::kBind, PendingAction::kForward});
        return PreparedRewrite::kPassThrough;
      }
      auto it = statements_.find(std::string(name));
      if (it == statements_.end()) return missing(name);
      const StatementPtr& statement = it->second;
      EnsureOnServer(server, statement);
      server.PushPending({PendingKind::kBind, PendingAction::kForward});
      // New header and names; the parameters stream on from the original message.
      const size_t names_size = portal.size() + 1 + name.size() + 1;
      AppendMessageHeader(scratch_, 'B',
                          header.body_size() - name.size() + statement->server_name.size());
      AppendCString(scratch_, portal);
      AppendCString(scratch_, statement->server_name);
      *skip = protocol::kHeaderSize + names_size;
      return PreparedRewrite::kReplace;
    }
    case 'D':
    case 'C': {
      uint8_t kind = 0;
      std::string_view name;
      if (!reader.ReadByte(&kind) || !reader.ReadCString(&name)) return malformed();
      const PendingKind pending = type == 'D' ? PendingKind::kDescribe : PendingKind::kClose;
      if (kind != 'S' || name.empty()) {
        server.PushPending({pending, PendingAction::kForward});
        return PreparedRewrite::kPassThrough;
      }
      *skip = header.total_size();
      if (type == 'C') {
        // Other clients may share the server-side statement: forget the name, keep the statement.
        statements_.erase(std::string(name));
        server.PushPending({PendingKind::kClose, PendingAction::kFakeCloseComplete});
        return PreparedRewrite::kReplace;
      }
      auto it = statements_.find(std::string(name));
      if (it == statements_.end()) return missing(name);
      EnsureOnServer(server, it->second);
      server.PushPending({PendingKind::kDescribe, PendingAction::kForward});
      AppendMessageHeader(scratch_, 'D', 1 + it->second->server_name.size() + 1);
      static constexpr uint8_t kStatement = 'S';
      scratch_.Append(&kStatement, 1);
      AppendCString(scratch_, it->second->server_name);
      return PreparedRewrite::kReplace;
    }
  }
  return PreparedRewrite::kPassThrough;
}

}  // namespace pgfleet::pool
