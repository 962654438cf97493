// Internal to pooler/config: the problem list that the loader and the validator share, so that
// both kinds of error come out in one format, with line numbers the validator cannot see.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pooler/config/config.h"

// absl::string_view, not std::string_view, throughout: Debian builds absl with its own
// string_view type, and std::string_view does not convert to it for StrCat and friends.
namespace pgfleet::config::internal {

// One thing wrong with a config.
struct Issue {
  std::string key;      // dotted path, e.g. "databases.app.port"; empty for whole-file problems
  std::string message;  // what is wrong and what was found, e.g. `expected ..., got "abc"`
  int line = 0;         // 1-based line in the source; 0 = unknown
  int column = 0;       // 1-based; 0 = unknown (only YAML syntax errors know it)
};

// Semantic checks on an already-typed Config (ranges and combinations); appends to `issues`.
void CheckConfig(const Config& config, std::vector<Issue>& issues);
// The `peering:` and `controller:` part of CheckConfig.
void CheckFleetSections(const Config& config, std::vector<Issue>& issues);

// OK when `issues` is empty, else InvalidArgument with one `source: key: message (line N)` line
// per issue, in the order given.
absl::Status IssuesToStatus(absl::string_view source, const std::vector<Issue>& issues);

// The entry of `known` closest to `key` by edit distance, or "" when none is close enough to be
// a plausible typo (at most 2 edits, and fewer than half the key's length).
absl::string_view ClosestKey(absl::string_view key, const std::vector<absl::string_view>& known);

}  // namespace pgfleet::config::internal
