// Session parameters pgfleet tracks per client and per server (docs/architecture.md, "Session
// parameters"), and the SET statement that makes a server's values match a client's when they
// differ.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pgfleet::pool {

// The names tracked in one worker, in slot order; built once from config.
class TrackedParamNames {
 public:
  // Always tracks client_encoding, DateStyle, TimeZone, standard_conforming_strings and
  // application_name, plus `extra` (e.g. IntervalStyle, search_path).
  explicit TrackedParamNames(const std::vector<std::string>& extra);

  // The slot of `name` (case-insensitive), or -1 when untracked.
  int Find(std::string_view name) const;
  size_t size() const { return names_.size(); }
  const std::string& name(size_t slot) const { return names_[slot]; }

 private:
  std::vector<std::string> names_;  // canonical spelling, as servers report them
};

// Values by slot; an empty optional-like flag marks "never set".
class ParamSet {
 public:
  explicit ParamSet(size_t slots = 0) : values_(slots), set_(slots, false) {}
  void Resize(size_t slots) {
    values_.resize(slots);
    set_.resize(slots, false);
  }
  void Set(size_t slot, std::string_view value) {
    values_[slot].assign(value);
    set_[slot] = true;
  }
  bool IsSet(size_t slot) const { return set_[slot]; }
  const std::string& Get(size_t slot) const { return values_[slot]; }
  size_t size() const { return values_.size(); }
  // Fills slots unset here from `defaults`.
  void FillUnset(const ParamSet& defaults);

 private:
  std::vector<std::string> values_;
  std::vector<bool> set_;
};

// Appends to `sql` one "SELECT pg_catalog.set_config('name','value',false),...;" for every slot
// where `wanted` is set and differs from `current`; returns true when anything was appended.
// set_config() round-trips any reported value exactly (lists, quotes, empty strings).
bool BuildParamSync(const TrackedParamNames& names, const ParamSet& wanted, const ParamSet& current,
                    std::string* sql);

// The value PostgreSQL would report for `name` set to `value`, where pgfleet knows its spelling:
// client_encoding by any of PostgreSQL's names for an encoding ("utf8", "unicode", "Latin-1")
// becomes the encoding's canonical name ("UTF8", "LATIN1"), as the server's ParameterStatus says
// it. Anything else is returned as given.
std::string CanonicalParamValue(std::string_view name, std::string_view value);

// Quotes a value as a SQL string literal (E'' form when it holds backslashes).
std::string QuoteLiteral(std::string_view value);

}  // namespace pgfleet::pool
