// Session parameters pgfleet tracks per client and per server (docs/architecture.md, "Session
// parameters"), and the SET statement that makes a server's values match a client's when they
// differ.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"

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

// Values by slot, each either set (possibly to "") or never set.
//
// Stored packed, slot after slot, in one string: every link of a client to a server compares the
// client's set with the server's (BuildParamSync), almost always to find them equal, and one
// memcmp of the packed bytes says so where nine string comparisons cost about ten times as much.
// One allocation per set also keeps an idle client small.
class ParamSet {
 public:
  explicit ParamSet(size_t slots = 0) { Resize(slots); }
  // Slots added are unset; values in the slots kept stay.
  void Resize(size_t slots);
  void Set(size_t slot, std::string_view value);
  void Clear(size_t slot);  // unset again
  bool IsSet(size_t slot) const { return ValueAt(Offset(slot)).has_value(); }
  // The value, or "" when unset. Valid until the next Set or Resize.
  std::string_view Get(size_t slot) const { return ValueAt(Offset(slot)).value_or(""); }
  size_t size() const { return slots_; }
  // Fills slots unset here from `defaults`.
  void FillUnset(const ParamSet& defaults);
  // Every slot, in order: its value, or nullopt when unset. Valid until the next Set or Resize.
  absl::InlinedVector<std::optional<std::string_view>, 16> Values() const;
  // Same slots, each unset in both or set to the same value in both.
  bool operator==(const ParamSet& other) const = default;

 private:
  // Each slot is a 4-byte length, kUnset for a slot never set, then that many bytes of value.
  static constexpr uint32_t kUnset = 0xffffffff;
  size_t Offset(size_t slot) const;  // where `slot`'s length starts in packed_
  uint32_t LengthAt(size_t offset) const;
  std::optional<std::string_view> ValueAt(size_t offset) const;
  size_t EntrySize(size_t offset) const;  // length field and value
  // One slot's bytes: `length` (kUnset for none), then `value`.
  static std::string Entry(uint32_t length, std::string_view value);

  std::string packed_;
  size_t slots_ = 0;
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
