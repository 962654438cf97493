// Reads what a client's SQL does to its session, with PostgreSQL's own parser (libpg_query), so
// that transaction pooling can carry settings to the client's next server and keep a server for
// state that cannot move (docs/architecture.md, "Session state in transaction pooling").
//
// Parsing costs microseconds; a pooler relays hundreds of thousands of statements a second. So
// MayChangeSession() looks at a statement's first word and scans for the few function names
// that matter, and only what it lets through is parsed: pgbench's SELECT, INSERT, UPDATE,
// BEGIN and COMMIT never are.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "pooler/sql/session_effects.h"

namespace pgfleet::sql {

// False when `sql` certainly leaves the session as it was (beyond its transaction) and the schema
// too: no need to parse it. True when it may not: a SET, RESET, DISCARD, PREPARE, DEALLOCATE,
// DECLARE, CLOSE, LISTEN, UNLISTEN, CREATE, ALTER or DROP, anything that names an advisory lock
// function or set_config() or says "temp" (SELECT ... INTO TEMP), and any query of several
// statements.
bool MayChangeSession(std::string_view sql);

struct Classification {
  Effects effects;  // in statement order
  // One kSchemaChange for each statement that may change what a prepared statement's analysis
  // finds (a table's columns, a type): CREATE, ALTER, DROP, SELECT INTO.
  // Kept apart from `effects`, which are the session's.
  Effects schema_changes;
  // False when PostgreSQL's grammar (as libpg_query knows it) rejects the text: the server will
  // most likely reject it too, so it is taken to change nothing.
  bool parsed = true;
  // How many statements the text holds (0 when it did not parse).
  int statements = 0;
};

// The session effects of every statement in `sql` (a simple Query's text or a Parse's).
Classification Classify(std::string_view sql);

// Whether `sql`'s first word (after blanks and comments) is LISTEN or UNLISTEN: the only texts
// the LISTEN hub may answer (pool/listen_hub.h), checked before anything is parsed.
bool StartsWithListenVerb(std::string_view sql);

// Whether `sql` certainly starts with a word whose first letter is none of `initials` (lower
// case): its first byte is such a letter. A blank, comment or parenthesis first says nothing
// (false). The idle checks for DEALLOCATE and LISTEN ask it before they frame and read a Query:
// almost every Query passes them by on its first byte.
// Inline, and without string_view::find (a call to memchr): it runs on every Query.
inline bool StartsWithOtherLetter(std::string_view sql, std::string_view initials) {
  if (sql.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(sql.front()))) return false;
  const char lower = static_cast<char>(sql.front() | 0x20);
  for (char initial : initials) {
    if (initial == lower) return false;
  }
  return true;
}

// The effect of set_config(name, value, false): a session setting of `name` (lower case) that
// set_config() applies again and RESET undoes.
Effect SetConfigEffect(std::string_view name, std::string_view value);

// `name` as a quoted SQL identifier ("a""b"), exactly as written (no case folding).
std::string QuoteIdentifier(std::string_view name);

}  // namespace pgfleet::sql
