// Protocol-level named prepared statements under transaction pooling (PgBouncer 1.21's scheme,
// docs/architecture.md, "Prepared statements"): each distinct (query, parameter types) becomes one
// worker-wide statement whose server-side name derives from its content, "pgfleet_" + a SHA-256
// prefix, so every worker of every pod names a statement alike and a server connection can move
// between workers with the names it has prepared; clients keep their own names; each server
// remembers which statements it has, in LRU order, bounded by max_prepared_statements, and keeps
// them interned while it has them.
//
// PostgreSQL analyses every Parse afresh, so a statement shared by its text is shared only within
// one schema epoch (docs/architecture.md, "Prepared statements after a schema change"): DDL seen
// in any client's stream, or a server's error that says a cached plan went stale, starts a new
// epoch for the pod (and, over peering, for the fleet); a Parse from then on gets a statement of
// the new epoch, with a name of its own, which every server analyses anew.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace pgfleet::pool {

struct PreparedStatement {
  // "pgfleet_" + 32 lowercase hex digits of SHA-256(parse_tail): the name identifies the content,
  // so a server that has the name has this statement, whichever worker prepared it.
  std::string server_name;
  // The Parse body after the statement name: query text, NUL, parameter count and type OIDs.
  // Re-Parse on another server sends server_name + this.
  std::string parse_tail;
  // The schema epoch it belongs to: a statement of an older epoch stays what its holders prepared
  // (a server that has it answers for it as PostgreSQL answers for a client's own statement after
  // DDL), and a Parse in a newer epoch gets another statement.
  uint64_t epoch = 0;
};
using StatementPtr = std::shared_ptr<const PreparedStatement>;

struct PreparedCounters {
  uint64_t prepared = 0;        // client Parse of a named statement
  uint64_t hits = 0;            // the server already had it: nothing sent
  uint64_t reprepares = 0;      // injected Parse on a server that lacked it
  uint64_t evictions = 0;       // Close sent to keep a server under max_prepared_statements
  uint64_t schema_changes = 0;  // epochs this worker started (DDL seen, or a stale-plan error)
};

// The server-side name of a statement with this Parse tail in this epoch (see
// PreparedStatement::server_name): "pgfleet_" + 32 hex digits, and "_" + the epoch after it when
// it is not 0 (at most 61 characters, within PostgreSQL's NAMEDATALEN).
std::string StatementServerName(std::string_view parse_tail, uint64_t epoch = 0);

// Whether a server's ErrorResponse says that a cached plan no longer fits the schema (PostgreSQL
// revalidates a prepared statement after DDL and refuses a changed result type with 0A000, or
// fails to find a type that was dropped with XX000 "cache lookup failed"): statements prepared
// before are stale, and later Parses must be analysed afresh. `routine` is the error's R field,
// which no lc_messages translates.
bool IsStaleStatementError(std::string_view sqlstate, std::string_view message,
                           std::string_view routine);

// Worker-wide interning of statements; entries live while some client names them or some server
// cache holds them (a server that has a statement keeps it interned, so a client preparing it again
// gets the same object and the relay knows the server has it). A server moved in from another
// worker records what it has by interning each Parse tail here and adopting the result.
class StatementRegistry {
 public:
  // The statement for this Parse tail (query + types) in the current epoch, created on first use.
  StatementPtr Intern(std::string_view parse_tail);
  // The statement for this Parse tail in `epoch` (a server moved in from a sibling has it under
  // that epoch's name).
  StatementPtr InternAt(std::string_view parse_tail, uint64_t epoch);
  PreparedCounters& counters() { return counters_; }
  size_t size() const { return by_tail_.size(); }

  // The schema may have changed: every Parse from now on gets a statement of a new epoch. Seen
  // here (DDL through this worker, a stale-plan error, a client's Parse of a text it closed):
  // the pod's epoch moves and `on_schema_change` tells the other pods. Told by another pod:
  // OnRemoteSchemaChange, which tells nobody further.
  void SchemaChanged();
  void OnRemoteSchemaChange();
  uint64_t epoch() const { return epoch_->load(std::memory_order_acquire); }
  // The pod's epoch, shared by its workers (pooler/budget's shared region); by default this
  // worker's own. Set once at start, before any statement is interned.
  void set_shared_epoch(std::atomic<uint64_t>* epoch) { epoch_ = epoch; }
  void set_on_schema_change(std::function<void()> notify) { notify_ = std::move(notify); }

 private:
  // A new statement; `intern`: the one Parses of its text get from now on.
  StatementPtr Make(std::string key, uint64_t epoch, bool intern);

  absl::flat_hash_map<std::string, std::weak_ptr<const PreparedStatement>> by_tail_;
  PreparedCounters counters_;
  std::atomic<uint64_t> own_epoch_{0};
  std::atomic<uint64_t>* epoch_ = &own_epoch_;
  std::function<void()> notify_;
};

// The statement name of a simple-query `DEALLOCATE [PREPARE] name` (case-insensitive keywords,
// an unquoted name folded to lower case as PostgreSQL does, or a "quoted" one kept exactly, an
// optional trailing ';'); nullopt for anything else, including DEALLOCATE ALL. Drivers such as
// psycopg 3 drop protocol-level statements this way.
std::optional<std::string> ParseDeallocate(std::string_view sql);

// The statements one server connection has prepared, least recently used first. Entries are
// keyed by server name: that is what the server knows, and it identifies the content.
class ServerStatementCache {
 public:
  bool Contains(const PreparedStatement& statement) const {
    return index_.contains(statement.server_name);
  }
  void Touch(const PreparedStatement& statement);
  // Records `statement` as most recently used. When that puts the cache over `capacity` (0: no
  // bound), returns the least recently used others until it is within it (one, unless Adopt or a
  // lowered capacity left it over), which the caller must Close on the server. A statement the
  // cache has is only touched.
  std::vector<StatementPtr> Add(StatementPtr statement, size_t capacity);
  // Records a statement the server already has (a server moved in from another worker), as most
  // recently used; nothing is evicted here, so nothing needs a Close.
  void Adopt(StatementPtr statement);
  void Remove(const PreparedStatement& statement);
  void Clear();
  size_t size() const { return index_.size(); }
  // What the server has, least recently used first: what a worker hands over with the server
  // (Adopt in this order rebuilds the same LRU).
  std::vector<StatementPtr> InLruOrder() const;

 private:
  // Holding the statement keeps it interned while the server has it (see StatementRegistry).
  std::list<StatementPtr> lru_;  // front = least recently used
  // Keys view the entries' own server_name, which lives as long as the entry.
  absl::flat_hash_map<std::string_view, std::list<StatementPtr>::iterator> index_;
};

// What the server owes for each extended-protocol message in flight, in order, so responses can
// be passed on, hidden (pgfleet's own Parse/Close) or stood in for (a Parse or Close the server
// never saw), and so a failed pipeline un-registers statements the server skipped.
enum class PendingKind : uint8_t { kParse, kBind, kDescribe, kExecute, kClose, kSync };
enum class PendingAction : uint8_t {
  kForward,
  kHide,
  kFakeParseComplete,
  kFakeCloseComplete,
  // A message pgfleet refused as PostgreSQL would (a statement name the client does not have, or
  // has for another query): the server was sent a message that fails (kMissingStatementName), so
  // that it skips to the Sync and the Sync rolls the batch back, and its error is replaced by
  // `error`, the client's.
  kReplaceError,
  // A client's DEALLOCATE of a renamed statement, sent to the server as kDeallocateStandIn: the
  // CommandComplete that ends it is replaced by DEALLOCATE's.
  kReplaceTag,
};

// A statement name no server has: pgfleet names its statements "pgfleet_" and 32 hex digits, and
// never this. A Bind or Describe of it fails, without side effects, wherever PostgreSQL must fail
// a client's message that pgfleet answers for (a client that PREPAREs this very name in SQL
// defeats it, and gets the answer to its own statement).
inline constexpr std::string_view kMissingStatementName = "pgfleet_missing_statement";

// What the server runs in the place of a client's DEALLOCATE of a statement pgfleet renamed, when
// the DEALLOCATE comes behind other messages (Relay::RewritePrepared): the server knows the
// statement by another name, if at all. It answers as DEALLOCATE does but for its tag (NoData to a
// Describe, one CommandComplete, 25P02 in a failed transaction, skipped after an error in its
// batch; allowed in read-only transactions and on a hot standby) and changes nothing: UNLISTEN of
// a channel nobody listens on is a no-op in PostgreSQL (Async_Unlisten queues nothing for a
// session that never listened). The `pgfleet_` channel name never collides with a client's.
inline constexpr std::string_view kDeallocateStandIn = "UNLISTEN pgfleet_deallocate";
inline constexpr std::string_view kDeallocateStandInTag = "UNLISTEN";

struct Pending {
  PendingKind kind = PendingKind::kSync;
  PendingAction action = PendingAction::kForward;
  // For a renamed Parse: the statement the server registers; for an eviction Close: the one it
  // drops.
  StatementPtr statement;
  // For a renamed Parse: an earlier batch was undone after this Parse was sent, and left the
  // statement on the server (its eviction Close was skipped): should this Parse be skipped too,
  // the statement is there all the same (Relay::UndoFailedPipeline).
  bool found_there = false;
  // For a client's Parse of a named statement: the client's name for it, and whether this Parse
  // gave the client that name (a Parse that fails, or is skipped after an error, frees it again,
  // as in PostgreSQL). The statement the name was given is `named`.
  // For a client's Close or DEALLOCATE of a renamed statement: the name it took away
  // (`unnamed_here`) and the statement the name had (`named`); skipped after an error in its
  // batch, it gives the name back, as in PostgreSQL.
  std::string client_name;
  bool named_here = false;
  bool unnamed_here = false;
  StatementPtr named;
  // kReplaceError: the ErrorResponse the client gets in place of the server's.
  std::string error;
};

}  // namespace pgfleet::pool
