// The relay's part in session state under transaction pooling (docs/architecture.md, "Session
// state in transaction pooling"): which client messages may change the session (the statement
// classifier reads them), when their effects count (their batch succeeded, their transaction
// committed), and what the server has of them.
#include <algorithm>
#include <utility>
#include <vector>

#include "pooler/base/strings.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/reader.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/relay/relay.h"
#include "pooler/sql/statement_classifier.h"

namespace pgfleet::pool {

namespace {

// Queries are read whole to be classified; one longer than this (a bulk INSERT of megabytes) is
// relayed as it streams, unread. Statements that change a session are short.
constexpr size_t kMaxClassifiedMessage = 1u << 20;

std::string_view CString(std::span<const uint8_t> body) {
  protocol::Reader reader(body);
  std::string_view text;
  if (!reader.ReadCString(&text)) return {};
  return text;
}

// What the first effect that session_state: refuse turns away is, for its message.
const char* RefusedWhat(const sql::Effects& effects) {
  for (const sql::Effect& e : effects) {
    switch (e.kind) {
      case sql::EffectKind::kSet:
        return "SET (other than SET LOCAL)";
      case sql::EffectKind::kCreateTemp:
        return "a temporary table";
      case sql::EffectKind::kPrepare:
        return "PREPARE";
      case sql::EffectKind::kAdvisoryLock:
      case sql::EffectKind::kTryAdvisoryLock:
        return "a session advisory lock";
      case sql::EffectKind::kDeclareHold:
        return "a cursor WITH HOLD";
      case sql::EffectKind::kListen:
        return "LISTEN";
      default:
        break;
    }
  }
  return nullptr;
}

// A query that fails with this ERROR on the server, so that the client's transaction (or
// implicit one) fails exactly as for an error of its own statement.
std::string FailingQuery(std::string_view sqlstate, std::string_view message,
                         std::string_view hint) {
  return base::StrCat("DO $pgfleet$BEGIN RAISE EXCEPTION USING ERRCODE = ", QuoteLiteral(sqlstate),
                      ", MESSAGE = ", QuoteLiteral(message), ", HINT = ", QuoteLiteral(hint),
                      "; END$pgfleet$");
}

// The classified effects the relay follows: the session's, and the schema's where prepared
// statements are shared (`statements` not null). A schema change starts a new epoch of statements
// twice: now, so that the client's own Parses after its DDL (in its transaction, which alone sees
// it yet) are analysed afresh, and, like a session's SET, once its transaction commits, for
// everyone's (StatementRegistry::SchemaChanged).
sql::Effects EffectsToTrack(sql::Classification classified, StatementRegistry* statements) {
  if (statements != nullptr && !classified.schema_changes.empty()) {
    statements->SchemaChanged();
    classified.effects.insert(classified.effects.end(), classified.schema_changes.begin(),
                              classified.schema_changes.end());
    // In statement order, for a ROLLBACK later in the same Query (OnSessionServerMessage).
    std::stable_sort(
        classified.effects.begin(), classified.effects.end(),
        [](const sql::Effect& a, const sql::Effect& b) { return a.statement < b.statement; });
  }
  return std::move(classified.effects);
}

}  // namespace

Relay::SessionStep Relay::OnSessionMessage(const protocol::StreamDecoder::Piece& piece,
                                           RelayOutput& to_server) {
  ClientStream& client = *client_;
  const uint8_t type = piece.header.type;
  if (type == 'S') executes_in_batch_ = 0;
  if (type != 'Q' && type != 'P' && type != 'B' && type != 'E' && type != 'C') {
    return SessionStep::kRelay;
  }
  // Bind and Execute matter only for statements known to change the session.
  if ((type == 'B' || type == 'E' || type == 'C') && client.statement_effects.empty() &&
      client.portal_effects.empty() && !client.unnamed_refused) {
    if (type == 'E') ++executes_in_batch_;
    return SessionStep::kRelay;
  }
  if (!piece.whole()) {
    if (piece.header.total_size() <= kMaxClassifiedMessage) return SessionStep::kNeedMore;
    if (type == 'E') ++executes_in_batch_;
    return SessionStep::kRelay;
  }
  protocol::Reader reader(piece.body());
  switch (type) {
    case 'Q':
      return ClassifyQuery(CString(piece.body()), to_server);
    case 'P': {
      std::string_view name;
      std::string_view query;
      int16_t param_count = 0;
      if (!reader.ReadCString(&name) || !reader.ReadCString(&query) ||
          !reader.ReadInt16(&param_count)) {
        return SessionStep::kRelay;
      }
      sql::Effects effects;
      if (sql::MayChangeSession(query))
        effects = EffectsToTrack(sql::Classify(query), settings_.statements);
      if (!effects.empty() && name.empty()) {
        // The unnamed statement (psycopg, pgx and JDBC before they prepare): refused like a
        // Query, by a statement that fails when executed. It takes no parameters: the Binds of
        // it lose theirs (below).
        if (const std::string refusal = Refusal(effects); !refusal.empty()) {
          scratch_.mutable_bytes().clear();
          protocol::BuildParse(scratch_, "", refusal, {});
          const auto& bytes = scratch_.bytes();
          to_server.Insert(base::AsBytes(bytes));
          client.statement_effects.erase(std::string());
          client.unnamed_refused = true;
          return SessionStep::kRefused;
        }
      }
      if (name.empty()) client.unnamed_refused = false;
      if (effects.empty()) {
        if (!client.statement_effects.empty()) client.statement_effects.erase(std::string(name));
      } else {
        client.statement_effects[std::string(name)] = std::move(effects);
      }
      return SessionStep::kRelay;
    }
    case 'B': {
      std::string_view portal;
      std::string_view statement;
      if (!reader.ReadCString(&portal) || !reader.ReadCString(&statement)) {
        return SessionStep::kRelay;
      }
      int16_t format_count = 0;
      if (statement.empty() && client.unnamed_refused && reader.ReadInt16(&format_count) &&
          format_count >= 0) {
        // A Bind of the refused statement: the same portal and result formats, no parameters.
        std::span<const uint8_t> skipped;
        int16_t param_count = 0;
        if (!reader.ReadBytes(2 * static_cast<size_t>(format_count), &skipped) ||
            !reader.ReadInt16(&param_count)) {
          return SessionStep::kRelay;
        }
        for (int16_t i = 0; i < param_count; ++i) {
          int32_t length = 0;
          if (!reader.ReadInt32(&length) ||
              (length > 0 && !reader.ReadBytes(static_cast<size_t>(length), &skipped))) {
            return SessionStep::kRelay;
          }
        }
        const auto result_formats = reader.Rest();
        protocol::StringSink body;
        body.Append(portal);
        body.Append(std::string_view("\0\0\0\0\0\0", 6));  // statement "", 0 formats, 0 params
        body.Append(base::AsText(result_formats));
        scratch_.mutable_bytes().clear();
        const auto& b = body.bytes();
        protocol::BuildMessage(scratch_, 'B', base::AsBytes(b));
        const auto& bytes = scratch_.bytes();
        to_server.Insert(base::AsBytes(bytes));
        return SessionStep::kRefused;
      }
      if (portal.empty()) {
        auto it = client.statement_effects.find(std::string(statement));
        client.portal_effects = it == client.statement_effects.end() ? sql::Effects() : it->second;
      }
      return SessionStep::kRelay;
    }
    case 'E': {
      ++executes_in_batch_;
      std::string_view portal;
      if (reader.ReadCString(&portal) && portal.empty() && !client.portal_effects.empty()) {
        // Answered with the ReadyForQuery of the Sync that ends this batch; it is the batch's
        // executes_in_batch_-th statement.
        sql::Effects effects = client.portal_effects;
        for (sql::Effect& effect : effects) effect.statement = executes_in_batch_ - 1;
        StageEffects(std::move(effects), rfq_owed_.size() + 1);
      }
      return SessionStep::kRelay;
    }
    case 'C': {
      uint8_t kind = 0;
      std::string_view name;
      if (reader.ReadByte(&kind) && kind == 'S' && reader.ReadCString(&name)) {
        client.statement_effects.erase(std::string(name));
      }
      return SessionStep::kRelay;
    }
    default:
      return SessionStep::kRelay;
  }
}

Relay::SessionStep Relay::ClassifyQuery(std::string_view sql, RelayOutput& to_server) {
  if (!sql::MayChangeSession(sql)) return SessionStep::kRelay;
  sql::Effects effects = EffectsToTrack(sql::Classify(sql), settings_.statements);
  if (effects.empty()) return SessionStep::kRelay;
  if (const std::string refusal = Refusal(effects); !refusal.empty()) {
    scratch_.mutable_bytes().clear();
    protocol::BuildQuery(scratch_, refusal);
    const auto& bytes = scratch_.bytes();
    to_server.Insert(base::AsBytes(bytes));
    return SessionStep::kRefused;
  }
  StageEffects(std::move(effects), rfq_owed_.size() + 1);
  return SessionStep::kRelay;
}

std::string Relay::Refusal(const sql::Effects& effects) const {
  if (settings_.session == SessionTracking::kRefuse) {
    const char* what = RefusedWhat(effects);
    if (what == nullptr) return "";
    return FailingQuery(protocol::sqlstate::kFeatureNotSupported,
                        base::StrCat("pgfleet: ", what, " is not supported in transaction pooling"),
                        "This database or user has session_state: refuse. Use SET LOCAL inside a "
                        "transaction, or session pooling for clients that need session state.");
  }
  // A pg_try_advisory_lock is never refused: where another session holds the lock PostgreSQL
  // answers false and nothing pins, and where it takes the lock the pin counts beyond the limit,
  // as one made inside a transaction does (PinnedServers::OnPinChanged).
  const bool pins_for_sure = std::any_of(effects.begin(), effects.end(), [](const sql::Effect& e) {
    return e.pins() && e.kind != sql::EffectKind::kTryAdvisoryLock;
  });
  if (!pins_for_sure || client_->session.pinned() || settings_.pins == nullptr ||
      settings_.pins->MayPin()) {
    return "";
  }
  return FailingQuery(
      protocol::sqlstate::kConfigurationLimitExceeded,
      base::StrCat("pgfleet: too many server connections are pinned to clients by session "
                   "state (max_pinned_servers = ",
                   settings_.pins->limit(), ")"),
      "Temporary tables, SQL PREPARE, session advisory locks, cursors WITH HOLD and LISTEN "
      "keep a server for one client until released. Release them in other sessions, raise "
      "max_pinned_servers, or use session pooling for such clients.");
}

void Relay::StageEffects(sql::Effects effects, size_t answers_left) {
  staged_.push_back(StagedEffects{answers_left, false, std::move(effects)});
  UpdateTryLockWatch();
}

void Relay::UpdateTryLockWatch() {
  watch_try_lock_rows_ = false;
  for (const StagedEffects& staged : staged_) {
    for (const sql::Effect& effect : staged.effects) {
      if (effect.kind == sql::EffectKind::kTryAdvisoryLock) watch_try_lock_rows_ = true;
    }
  }
}

void Relay::OnTryLockRow(std::span<const uint8_t> body) {
  // `SELECT pg_try_advisory_lock(k)`: one column, true or false (text 't'/'f', binary 1/0).
  // A false one took no lock; a true one did, whatever later rows say.
  protocol::Reader reader(body);
  int16_t columns = 0;
  int32_t length = 0;
  uint8_t value = 0;
  if (!reader.ReadInt16(&columns) || columns != 1 || !reader.ReadInt32(&length) || length != 1 ||
      !reader.ReadByte(&value)) {
    return;
  }
  for (StagedEffects& staged : staged_) {
    if (staged.answers_left != 1) continue;  // not the batch being answered
    for (auto it = staged.effects.begin(); it != staged.effects.end(); ++it) {
      if (it->kind != sql::EffectKind::kTryAdvisoryLock) continue;
      if (value == 'f' || value == 0) {
        staged.effects.erase(it);
      } else {
        it->kind = sql::EffectKind::kAdvisoryLock;
      }
      UpdateTryLockWatch();
      return;
    }
  }
}

void Relay::OnSessionServerMessage(uint8_t type, std::span<const uint8_t> body) {
  switch (type) {
    case 'E':
      // The batch being answered failed: its effects never took (an implicit transaction rolls
      // back; a failed statement changed nothing).
      for (StagedEffects& staged : staged_) {
        if (staged.answers_left == 1) staged.failed = true;
      }
      break;
    case 'C': {
      auto tag = protocol::ParseCommandComplete(body);
      // COMMIT of a failed transaction reports ROLLBACK too. What the transaction did is undone
      // now: the effects of earlier batches, and those of this batch's statements before the
      // ROLLBACK (`BEGIN; SET ...; ROLLBACK` in one Query). Later statements of the batch run
      // after it and keep theirs.
      if (!tag.ok() || *tag != "ROLLBACK") break;
      UndoSchemaChanges(tx_effects_);
      tx_effects_.clear();
      tx_rolled_back_ = false;
      for (StagedEffects& staged : staged_) {
        if (staged.answers_left != 1) continue;  // not the batch being answered
        std::erase_if(staged.effects, [this](const sql::Effect& effect) {
          // A schema change stays, to start its epoch when the batch settles (see below).
          return effect.transactional() && effect.statement < statements_answered_ &&
                 effect.kind != sql::EffectKind::kSchemaChange;
        });
      }
      break;
    }
    case 'Z':
      SettleSessionEffects();
      break;
    default:
      break;
  }
}

void Relay::SettleSessionEffects() {
  for (StagedEffects& staged : staged_) {
    if (staged.answers_left > 0) --staged.answers_left;
  }
  while (!staged_.empty() && staged_.front().answers_left == 0) {
    StagedEffects staged = std::move(staged_.front());
    staged_.pop_front();
    if (staged.failed) {
      UndoSchemaChanges(staged.effects);
      continue;
    }
    for (sql::Effect& effect : staged.effects) {
      if (effect.transactional()) {
        tx_effects_.push_back(std::move(effect));
      } else {
        // Session advisory locks and SQL prepared statements survive a ROLLBACK.
        ApplySessionEffect(effect);
      }
    }
  }
  UpdateTryLockWatch();
  if (tx_status_ == 'E') tx_rolled_back_ = true;  // a failed transaction can only roll back
  if (tx_status_ != 'I') return;
  if (!tx_rolled_back_) {
    for (const sql::Effect& effect : tx_effects_) ApplySessionEffect(effect);
  } else {
    UndoSchemaChanges(tx_effects_);
  }
  tx_effects_.clear();
  tx_rolled_back_ = false;
}

void Relay::UndoSchemaChanges(const sql::Effects& effects) {
  // DDL that failed or rolled back leaves the schema as it was, but a statement Parsed after it
  // in its transaction was analysed against the change: it must not be shared from now on.
  if (settings_.statements == nullptr) return;
  if (std::any_of(effects.begin(), effects.end(),
                  [](const sql::Effect& e) { return e.kind == sql::EffectKind::kSchemaChange; })) {
    settings_.statements->SchemaChanged();
  }
}

void Relay::ApplySessionEffect(const sql::Effect& effect) {
  if (effect.kind == sql::EffectKind::kSchemaChange) {
    if (settings_.statements) settings_.statements->SchemaChanged();
    return;
  }
  if (client_ == nullptr) return;
  if (effect.kind == sql::EffectKind::kSet) {
    // A parameter the server reports (TimeZone, and search_path from PostgreSQL 18 on) follows
    // the client through ParameterStatus and the parameter sync already.
    const int slot = settings_.tracked->Find(effect.name);
    if (slot >= 0 && params_.IsSet(static_cast<size_t>(slot))) return;
  }
  ClientSession& session = client_->session;
  const bool was_pinned = session.pinned();
  session.Apply(effect);
  switch (effect.kind) {
    case sql::EffectKind::kSet:
      applied_[effect.name] = SessionSetting{effect.apply_sql, effect.reset_sql};
      break;
    case sql::EffectKind::kReset:
      applied_.erase(effect.name);
      break;
    case sql::EffectKind::kResetAll:
    case sql::EffectKind::kDiscardAll:
      applied_.clear();
      break;
    default:
      break;
  }
  if (was_pinned && !session.pinned() && session.pin_counted && settings_.pins != nullptr) {
    settings_.pins->OnPinChanged(false, 0);
    session.pin_counted = false;
  }
}

}  // namespace pgfleet::pool
