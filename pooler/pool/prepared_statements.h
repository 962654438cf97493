// Protocol-level named prepared statements under transaction pooling (PgBouncer 1.21's scheme,
// docs/architecture.md, "Prepared statements"): each distinct (query, parameter types) becomes one
// worker-wide statement with a server-side name "pgfleet_<id>"; clients keep their own names; each
// server remembers which statements it has, in LRU order, bounded by max_prepared_statements.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace pgfleet::pool {

struct PreparedStatement {
  uint64_t id = 0;
  std::string server_name;  // "pgfleet_<id>"
  // The Parse body after the statement name: query text, NUL, parameter count and type OIDs.
  // Re-Parse on another server sends server_name + this.
  std::string parse_tail;
};
using StatementPtr = std::shared_ptr<const PreparedStatement>;

struct PreparedCounters {
  uint64_t prepared = 0;    // client Parse of a named statement
  uint64_t hits = 0;        // the server already had it: nothing sent
  uint64_t reprepares = 0;  // injected Parse on a server that lacked it
  uint64_t evictions = 0;   // Close sent to keep a server under max_prepared_statements
};

// Worker-wide interning of statements; entries live while some client holds them.
class StatementRegistry {
 public:
  // The statement for this Parse tail (query + types), created on first use.
  StatementPtr Intern(std::string_view parse_tail);
  PreparedCounters& counters() { return counters_; }
  size_t size() const { return by_tail_.size(); }

 private:
  uint64_t next_id_ = 1;
  absl::flat_hash_map<std::string, std::weak_ptr<const PreparedStatement>> by_tail_;
  PreparedCounters counters_;
};

// The statement name of a simple-query `DEALLOCATE [PREPARE] name` (case-insensitive keywords,
// an unquoted name folded to lower case as PostgreSQL does, or a "quoted" one kept exactly, an
// optional trailing ';'); nullopt for anything else, including DEALLOCATE ALL. Drivers such as
// psycopg 3 drop protocol-level statements this way.
std::optional<std::string> ParseDeallocate(std::string_view sql);

// The statements one server connection has prepared, least recently used first.
class ServerStatementCache {
 public:
  bool Contains(uint64_t id) const { return index_.contains(id); }
  void Touch(uint64_t id);
  // Records `id`; when that puts the cache over `capacity`, returns the server name of the least
  // recently used other statement, which the caller must Close on the server.
  std::optional<std::string> Add(uint64_t id, const std::string& server_name, size_t capacity);
  void Remove(uint64_t id);
  void Clear();
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    uint64_t id;
    std::string server_name;
  };
  std::list<Entry> lru_;  // front = least recently used
  absl::flat_hash_map<uint64_t, std::list<Entry>::iterator> index_;
};

// What the server owes for each extended-protocol message in flight, in order, so responses can
// be passed on, hidden (pgfleet's own Parse/Close) or stood in for (a Parse or Close the server
// never saw), and so a failed pipeline un-registers statements the server skipped.
enum class PendingKind : uint8_t { kParse, kBind, kDescribe, kExecute, kClose, kSync };
enum class PendingAction : uint8_t { kForward, kHide, kFakeParseComplete, kFakeCloseComplete };

struct Pending {
  PendingKind kind;
  PendingAction action;
  uint64_t statement_id = 0;  // for Parse: the statement the server registers
};

}  // namespace pgfleet::pool
