// PgBouncer's auth_file format: one `"user" "secret"` per line; `""` escapes a quote; lines
// starting with ';' or '#' are comments. Secrets may be plain, md5 or SCRAM-SHA-256.
#pragma once

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace pgfleet::auth {

using Userlist = absl::flat_hash_map<std::string, std::string>;

// Errors name `source_name` and the line number.
absl::StatusOr<Userlist> ParseUserlist(std::string_view text, std::string_view source_name);
absl::StatusOr<Userlist> LoadUserlistFile(const std::string& path);

}  // namespace pgfleet::auth
