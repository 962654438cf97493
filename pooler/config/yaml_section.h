// The machinery that reads one YAML mapping into a config struct (yaml_loader.cc's sections): each
// accessor takes its key and checks its kind, and every problem becomes an Issue naming the key
// path and line. Only the config's loader includes it: yaml-cpp stays inside pgfleet_config.
#pragma once

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "pooler/config/config.h"
#include "pooler/config/validate.h"
#include "yaml-cpp/yaml.h"

namespace pgfleet::config::yaml_reading {

using internal::Issue;

inline int LineOf(const YAML::Mark& mark) { return mark.is_null() ? 0 : mark.line + 1; }

inline std::string KindOf(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return absl::StrCat("\"", node.Scalar(), "\"");
    case YAML::NodeType::Undefined:
      break;
  }
  return "an undefined value";
}

inline std::string JoinPath(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// Collects problems, and the line of every key seen so that the validator's problems, which only
// know key paths, can be pointed at a line too.
struct Loader {
  std::vector<Issue> issues;
  std::map<std::string, int> key_lines;

  void Report(std::string key, std::string message, int line) {
    issues.push_back(Issue{std::move(key), std::move(message), line, 0});
  }
};

// One YAML mapping being read into a struct. Each accessor consumes its key if present (leaving
// the default otherwise); Finish() reports every key no accessor asked for.
class Section {
 public:
  Section(Loader& loader, const YAML::Node& node, std::string path, int line)
      : loader_(loader), path_(std::move(path)) {
    if (node.IsNull()) return;  // `pool:` with nothing under it: all defaults
    if (!node.IsMap()) {
      loader_.Report(path_, absl::StrCat("expected a mapping, got ", KindOf(node)), line);
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const int key_line = LineOf(it->first.Mark());
      if (!it->first.IsScalar()) {
        loader_.Report(path_, absl::StrCat("keys must be plain strings, got ", KindOf(it->first)),
                       key_line);
        continue;
      }
      const std::string& key = it->first.Scalar();
      // yaml-cpp keeps both copies of a repeated key; silently using one would hide a mistake.
      if (!seen.insert(key).second) {
        loader_.Report(JoinPath(path_, key), "duplicate key", key_line);
        continue;
      }
      loader_.key_lines[JoinPath(path_, key)] = key_line;
      entries_.push_back(Entry{key, it->second, key_line, false});
    }
  }

  void String(absl::string_view key, std::string& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    // `server_check_query:` with nothing after it reads as the empty string.
    if (e->value.IsNull()) {
      out.clear();
    } else if (e->value.IsScalar()) {
      out = e->value.Scalar();
    } else {
      Bad(*e, "a string");
    }
  }

  // Every integer in the config is a count, size or port, so negatives are rejected here and
  // upper bounds are left to the validator.
  void Int(absl::string_view key, int& out) {
    std::optional<int> value;
    OptionalInt(key, value);
    if (value) out = *value;
  }

  void OptionalInt(absl::string_view key, std::optional<int>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    int64_t value = 0;
    if (!e->value.IsScalar() || !absl::SimpleAtoi(e->value.Scalar(), &value) || value < 0) {
      Bad(*e, "a non-negative integer");
    } else if (value > INT_MAX) {
      Bad(*e, absl::StrCat("a non-negative integer no larger than ", INT_MAX));
    } else {
      out = static_cast<int>(value);
    }
  }

  void Bool(absl::string_view key, bool& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    const std::string text = e->value.IsScalar() ? absl::AsciiStrToLower(e->value.Scalar()) : "";
    if (text == "true" || text == "yes" || text == "on" || text == "1") {
      out = true;
    } else if (text == "false" || text == "no" || text == "off" || text == "0") {
      out = false;
    } else {
      Bad(*e, "true or false");
    }
  }

  void Duration(absl::string_view key, absl::Duration& out) {
    std::optional<absl::Duration> value;
    OptionalDuration(key, value);
    if (value) out = *value;
  }

  void OptionalDuration(absl::string_view key, std::optional<absl::Duration>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    if (!e->value.IsScalar()) {
      Bad(*e, "a duration such as 500ms, 30s, 5m, 1h or 2d");
      return;
    }
    absl::StatusOr<absl::Duration> value = ParseDuration(e->value.Scalar());
    if (value.ok()) {
      out = *value;
    } else {
      loader_.Report(JoinPath(path_, key), std::string(value.status().message()), e->line);
    }
  }

  // A file mode in octal, as chmod takes it ("0777", "660").
  void FileMode(absl::string_view key, int& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    const std::string text = e->value.IsScalar() ? e->value.Scalar() : "";
    int mode = 0;
    bool ok = !text.empty() && text.size() <= 5;
    for (char c : text) {
      ok = ok && c >= '0' && c <= '7';
      mode = mode * 8 + (c - '0');
    }
    if (ok && mode <= 07777) {
      out = mode;
    } else {
      Bad(*e, "a file mode in octal such as 0777 or 0660");
    }
  }

  void Mode(absl::string_view key, std::optional<PoolMode>& out) {
    OptionalEnum(key, out, ParsePoolMode, "one of session, transaction, statement");
  }

  void Mode(absl::string_view key, PoolMode& out) {
    std::optional<PoolMode> mode;
    Mode(key, mode);
    if (mode) out = *mode;
  }

  // An enum spelled by name: `parse` maps the YAML text to a value, `expected` lists the names.
  template <typename T, typename Parser>
  void Enum(absl::string_view key, T& out, Parser parse, absl::string_view expected) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    std::optional<T> value;
    if (e->value.IsScalar()) value = parse(e->value.Scalar());
    if (value) {
      out = *value;
    } else {
      Bad(*e, expected);
    }
  }

  template <typename T, typename Parser>
  void OptionalEnum(absl::string_view key, std::optional<T>& out, Parser parse,
                    absl::string_view expected) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    std::optional<T> value;
    if (e->value.IsScalar()) value = parse(e->value.Scalar());
    if (value) {
      out = value;
    } else {
      Bad(*e, expected);
    }
  }

  void Auth(absl::string_view key, AuthType& out) {
    Enum(key, out, ParseAuthType, "one of trust, md5, scram-sha-256, cert, plain, any");
  }

  void Ssl(absl::string_view key, SslMode& out) {
    Enum(key, out, ParseSslMode, "one of disable, allow, prefer, require, verify-ca, verify-full");
  }

  // A YAML list of names, or PgBouncer's comma-separated string ("extra_float_digits, options").
  void StringList(absl::string_view key, std::vector<std::string>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    if (e->value.IsNull()) {
      out.clear();
    } else if (e->value.IsScalar()) {
      out = absl::StrSplit(e->value.Scalar(), ',', absl::SkipWhitespace());
      for (std::string& item : out) absl::StripAsciiWhitespace(&item);
    } else if (e->value.IsSequence()) {
      StringsOf(key, *e, out);
    } else {
      Bad(*e, "a list of names");
    }
  }

  // libpq's host list: one host, "a,b", or a YAML list of strings. An empty name stays in the
  // list for the validator to name.
  void HostList(absl::string_view key, std::vector<std::string>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    if (e->value.IsNull() || e->value.IsScalar()) {
      const std::string text = e->value.IsNull() ? "" : e->value.Scalar();
      out = absl::StrSplit(text, ',');
      for (std::string& host : out) absl::StripAsciiWhitespace(&host);
    } else if (e->value.IsSequence() && e->value.size() > 0) {
      StringsOf(key, *e, out);
    } else {
      Bad(*e, "a string");
    }
  }

  // libpq's port list: one port for every host, "5432,5433", or a YAML list, one per host.
  void PortList(absl::string_view key, std::vector<int>& out) {
    Entry* e = Take(key);
    if (e == nullptr) return;
    std::vector<std::string> texts;
    if (e->value.IsScalar()) {
      texts = absl::StrSplit(e->value.Scalar(), ',');
    } else if (e->value.IsSequence() && e->value.size() > 0) {
      for (size_t i = 0; i < e->value.size(); ++i) {
        texts.push_back(e->value[i].IsScalar() ? e->value[i].Scalar() : std::string("?"));
      }
    }
    std::vector<int> ports;
    for (std::string& text : texts) {
      absl::StripAsciiWhitespace(&text);
      int64_t value = 0;
      if (!absl::SimpleAtoi(text, &value) || value < 0 || value > INT_MAX) break;
      ports.push_back(static_cast<int>(value));
    }
    if (texts.empty() || ports.size() != texts.size()) {
      Bad(*e, texts.size() > 1 ? "a port or a list of ports" : "a non-negative integer");
      return;
    }
    out = std::move(ports);
  }

  // Whether the YAML gives `key` (for settings whose default behaves differently from the same
  // value written out).
  bool Has(absl::string_view key) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [&](const Entry& e) { return e.key == key; });
  }

  // Marks `key` known and returns its value for a nested reader; nullptr when absent.
  const YAML::Node* Child(absl::string_view key, int* line = nullptr) {
    Entry* e = Take(key);
    if (e == nullptr) return nullptr;
    if (line != nullptr) *line = e->line;
    return &e->value;
  }

  // Each key that no accessor consumed becomes a warning ("peering.x: unknown key, ignored").
  void FinishAsWarnings(std::vector<std::string>& warnings) {
    for (const Entry& e : entries_) {
      if (!e.used)
        warnings.push_back(absl::StrCat(JoinPath(path_, e.key), ": unknown key, ignored"));
    }
  }

  // Reports each key that no accessor consumed, suggesting the closest known one.
  void Finish() {
    for (const Entry& e : entries_) {
      if (e.used) continue;
      std::string message = absl::StrCat("unknown key \"", JoinPath(path_, e.key), "\"");
      const absl::string_view hint = internal::ClosestKey(e.key, known_);
      if (!hint.empty()) {
        absl::StrAppend(&message, ", did you mean \"", JoinPath(path_, hint), "\"?");
      }
      loader_.Report("", std::move(message), e.line);
    }
  }

 private:
  struct Entry {
    std::string key;
    YAML::Node value;
    int line;
    bool used;
  };

  Entry* Take(absl::string_view key) {
    known_.push_back(key);
    for (Entry& e : entries_) {
      if (e.key == key) {
        e.used = true;
        return &e;
      }
    }
    return nullptr;
  }

  // A YAML list's strings into `out`; an item that is not a string is reported by its index.
  void StringsOf(absl::string_view key, const Entry& e, std::vector<std::string>& out) {
    out.clear();
    for (size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      if (item.IsScalar()) {
        out.push_back(item.Scalar());
      } else {
        loader_.Report(absl::StrCat(JoinPath(path_, key), "[", i, "]"),
                       absl::StrCat("expected a string, got ", KindOf(item)),
                       LineOf(item.Mark()) > 0 ? LineOf(item.Mark()) : e.line);
      }
    }
  }

  void Bad(const Entry& e, absl::string_view expected) {
    loader_.Report(JoinPath(path_, e.key),
                   absl::StrCat("expected ", expected, ", got ", KindOf(e.value)), e.line);
  }

  Loader& loader_;
  std::string path_;
  std::vector<Entry> entries_;
  // Keys the accessors asked for, for "did you mean". Views of string literals or of names in the
  // YAML tree, both of which outlive this Section.
  std::vector<absl::string_view> known_;
};

// Where a key of a YAML tree built from another format (pgbouncer.ini) was written, so that a
// problem names what the user wrote: the file, its key and line.
struct KeyOrigin {
  std::string file;
  std::string key;
  int line = 0;
};
using KeyOrigins = std::map<std::string, KeyOrigin>;  // by the YAML key path

// A pgbouncer.ini as the YAML tree pgfleet reads, and where each key was written
// (pgbouncer_ini.cc).
struct TranslatedIni {
  YAML::Node root;
  KeyOrigins origins;
};
absl::StatusOr<TranslatedIni> ReadPgBouncerIniText(const std::string& text,
                                                   const std::string& source);
absl::StatusOr<TranslatedIni> ReadPgBouncerIniFile(const std::string& path);
// The console's SET key = value pairs as YAML keys (no PgBouncer defaults added); `source`
// names them in errors.
absl::StatusOr<TranslatedIni> TranslateSettings(
    const std::vector<std::pair<std::string, std::string>>& settings, const std::string& source);

// Reads a parsed config tree: LoadConfigText after the parse. With `origins`, each problem names
// the origin of its key instead of `source_name` and the YAML path.
absl::StatusOr<Config> LoadConfigNode(const YAML::Node& root, const std::string& source_name,
                                      const KeyOrigins* origins);

}  // namespace pgfleet::config::yaml_reading
