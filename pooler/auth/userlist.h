// PgBouncer's auth_file format: one `"user" "secret"` per line; `""` escapes a quote; lines
// starting with ';' or '#' are comments. Secrets may be plain, md5 or SCRAM-SHA-256.
#pragma once

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace pgfleet::auth {

using Userlist = absl::flat_hash_map<std::string, std::string>;

// Errors (InvalidArgument) name `source_name` and the line number but never quote the line, which
// holds a password. A user listed twice is an error (PgBouncer silently keeps the last entry).
// Fields after the password are ignored, as PgBouncer does.
[[nodiscard]] absl::StatusOr<Userlist> ParseUserlist(std::string_view text,
                                                     std::string_view source_name);
// Reads `path` and parses it with `path` as the source name; I/O errors carry errno's code.
[[nodiscard]] absl::StatusOr<Userlist> LoadUserlistFile(const std::string& path);

}  // namespace pgfleet::auth
