// Tracked session parameters.
#include "pooler/pool/param_sync.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "pooler/base/strings.h"

namespace pgfleet::pool {

TrackedParamNames::TrackedParamNames(const std::vector<std::string>& extra)
    : names_{"client_encoding", "DateStyle", "TimeZone", "standard_conforming_strings",
             "application_name"} {
  for (const auto& name : extra) {
    if (Find(name) < 0) names_.push_back(name);
  }
}

int TrackedParamNames::Find(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (absl::EqualsIgnoreCase(names_[i], base::Av(name))) return static_cast<int>(i);
  }
  return -1;
}

void ParamSet::FillUnset(const ParamSet& defaults) {
  for (size_t i = 0; i < values_.size() && i < defaults.size(); ++i) {
    if (!set_[i] && defaults.IsSet(i)) Set(i, defaults.Get(i));
  }
}

std::string QuoteLiteral(std::string_view value) {
  std::string out;
  bool backslash = value.find('\\') != std::string_view::npos;
  out.append(backslash ? "E'" : "'");
  for (char c : value) {
    if (c == '\'') out.push_back('\'');
    if (c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

bool BuildParamSync(const TrackedParamNames& names, const ParamSet& wanted, const ParamSet& current,
                    std::string* sql) {
  bool any = false;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (!wanted.IsSet(i)) continue;
    if (current.IsSet(i) && current.Get(i) == wanted.Get(i)) continue;
    // set_config() takes the value as the server reported it, list syntax and all: SET would
    // read a quoted list ('"$user", public') as one element, a schema of that name.
    base::StrAppend(sql, any ? "," : "SELECT ", "pg_catalog.set_config(",
                    QuoteLiteral(names.name(i)), ",", QuoteLiteral(wanted.Get(i)), ",false)");
    any = true;
  }
  if (any) sql->push_back(';');
  return any;
}

}  // namespace pgfleet::pool
