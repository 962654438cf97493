// What a statement does to its session beyond its transaction: the facts the statement
// classifier reads from PostgreSQL's own parse tree and the pool acts on (docs/architecture.md,
// "Session state in transaction pooling"). Pure data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pgfleet::sql {

enum class EffectKind : uint8_t {
  kSet,                // a session-level SET (or set_config(..., false)) of `name`
  kReset,              // RESET name, SET name TO DEFAULT
  kResetAll,           // RESET ALL
  kDiscardAll,         // DISCARD ALL: every setting and every pin below goes
  kDiscardTemp,        // DISCARD TEMP: every temporary object goes
  kCreateTemp,         // a temporary table, view or sequence `name` that outlives the transaction
  kDrop,               // DROP TABLE/VIEW/SEQUENCE of `name` (a temporary one, if the client has it)
  kPrepare,            // SQL PREPARE `name`
  kDeallocate,         // SQL DEALLOCATE `name`
  kDeallocateAll,      // DEALLOCATE ALL
  kAdvisoryLock,       // a session-level advisory lock taken (pg_advisory_lock[_shared])
  kTryAdvisoryLock,    // pg_try_advisory_lock[_shared]: a lock if its result is true
  kAdvisoryUnlock,     // pg_advisory_unlock[_shared]
  kAdvisoryUnlockAll,  // pg_advisory_unlock_all()
  kDeclareHold,        // DECLARE `name` ... WITH HOLD
  kClose,              // CLOSE `name`
  kCloseAll,           // CLOSE ALL
  kListen,             // LISTEN `name`
  kUnlisten,           // UNLISTEN `name`
  kUnlistenAll,        // UNLISTEN *
  // CREATE, ALTER or DROP of anything, SELECT INTO: statements prepared
  // before may be analysed differently now (Classification::schema_changes; it leaves the
  // session as it was).
  kSchemaChange,
};

struct Effect {
  EffectKind kind;
  // The setting (lower case, as PostgreSQL folds it) or the object's name.
  std::string name;
  // kSet only: the statement that sets it again on another server, and the one that puts the
  // server's default back for the next client.
  std::string apply_sql;
  std::string reset_sql;
  // Which statement of its Query made it (0 for the first): the relay matches it against the
  // statements answered so far, so that a ROLLBACK later in the same Query undoes it.
  uint32_t statement = 0;

  // Whether the effect is undone when its transaction rolls back. Session advisory locks and
  // SQL prepared statements are not transactional in PostgreSQL: they stay after a ROLLBACK.
  bool transactional() const {
    switch (kind) {
      case EffectKind::kPrepare:
      case EffectKind::kDeallocate:
      case EffectKind::kDeallocateAll:
      case EffectKind::kAdvisoryLock:
      case EffectKind::kTryAdvisoryLock:
      case EffectKind::kAdvisoryUnlock:
      case EffectKind::kAdvisoryUnlockAll:
        return false;
      default:
        return true;
    }
  }
  // Whether the effect makes state that cannot move to another server (a pin).
  bool pins() const {
    switch (kind) {
      case EffectKind::kCreateTemp:
      case EffectKind::kPrepare:
      case EffectKind::kAdvisoryLock:
      case EffectKind::kTryAdvisoryLock:
      case EffectKind::kDeclareHold:
      case EffectKind::kListen:
        return true;
      default:
        return false;
    }
  }
  bool operator==(const Effect&) const = default;
};

using Effects = std::vector<Effect>;

}  // namespace pgfleet::sql
