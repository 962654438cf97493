// The `options` startup parameter (libpq's PGOPTIONS, pgjdbc's `options`, psql's
// `options='-c ...'`): backend command-line switches. pgfleet takes the ones that set a run-time
// setting, `-c name=value` and `--name=value`, and refuses the others.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pgfleet::protocol {

struct StartupSetting {
  std::string name;
  std::string value;
  bool operator==(const StartupSetting&) const = default;
};

// Splits `options` as PostgreSQL does (pg_split_opts: words at unescaped whitespace, a backslash
// takes the next byte literally), then reads each switch as process_postgres_switches does:
// `-c name=value`, `-cname=value` or `--name=value`; a name's dashes become underscores
// (ParseLongOption). InvalidArgument, with a message for the client, for any other switch, a
// setting without a value, or a name that is not a setting's.
absl::StatusOr<std::vector<StartupSetting>> ParseStartupOptions(std::string_view options);

// Whether `name` can name a setting (letters, digits, `_`, `$`, and `.` for an extension's
// custom settings), so that it never needs quoting in pgfleet's own messages.
bool IsSettingName(std::string_view name);

}  // namespace pgfleet::protocol
