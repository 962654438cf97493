// PgBouncer's ini syntax (its lib/usual/cfparser.c), read into entries without meaning: the
// pgbouncer.ini reader (pgbouncer_ini.cc) gives them their meaning.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pgfleet::config::internal {

struct IniEntry {
  std::string section;  // as written between [ and ], "" before the first
  std::string key;      // as written (a quoted key without its quotes)
  std::string value;    // the rest of the line after '=', trimmed
  std::string file;     // where it was read (an %include's own path)
  int line = 0;
};

// Reads `text` as PgBouncer reads its ini: lines starting with ';' or '#' are comments (not later
// in a line), `[section]`, `key = value` (a key of letters, digits and `_.-*`, or quoted with ' or
// "), and `%include file` (a relative path from the working directory, as PgBouncer takes it; at
// most 10 levels). `name` stands for its file in entries and errors, which name file and line.
absl::StatusOr<std::vector<IniEntry>> ReadIniText(const std::string& text, const std::string& name);

// The whole file; an error names it.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Whether `text` reads as an ini file rather than YAML: its first line that is not blank or a
// comment opens a section or is an %include.
bool LooksLikeIni(const std::string& text);

}  // namespace pgfleet::config::internal
