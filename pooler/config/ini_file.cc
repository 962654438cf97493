#include "pooler/config/ini_file.h"

#include <cerrno>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pgfleet::config::internal {
namespace {

constexpr int kMaxIncludeDepth = 10;

absl::Status SyntaxError(const std::string& file, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what, " (line ", line, ")"));
}

bool IsKeyChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
         c == '*';
}

absl::Status ReadInto(const std::string& text, const std::string& file, int depth,
                      std::string& section, std::vector<IniEntry>& out);

absl::Status Include(absl::string_view target, const std::string& file, int line, int depth,
                     std::string& section, std::vector<IniEntry>& out) {
  if (depth >= kMaxIncludeDepth) return SyntaxError(file, line, "%include nested too deep");
  const std::string path(target);
  auto text = ReadWholeFile(path);
  if (!text.ok()) {
    return SyntaxError(file, line, absl::StrCat("%include: ", text.status().message()));
  }
  return ReadInto(*text, path, depth + 1, section, out);
}

absl::Status ReadInto(const std::string& text, const std::string& file, int depth,
                      std::string& section, std::vector<IniEntry>& out) {
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (absl::ConsumePrefix(&line, "%include")) {
      if (line.empty() || !absl::ascii_isblank(static_cast<unsigned char>(line.front()))) {
        return SyntaxError(file, number, "%include needs a file name");
      }
      if (auto status =
              Include(absl::StripAsciiWhitespace(line), file, number, depth, section, out);
          !status.ok()) {
        return status;
      }
      continue;
    }
    if (line.front() == '[') {
      if (line.back() != ']') return SyntaxError(file, number, "a section name needs its ']'");
      section = std::string(absl::StripAsciiWhitespace(line.substr(1, line.size() - 2)));
      continue;
    }
    IniEntry entry{section, "", "", file, number};
    size_t at = 0;
    if (line.front() == '\'' || line.front() == '"') {
      const size_t close = line.find(line.front(), 1);
      if (close == absl::string_view::npos || close == 1) {
        return SyntaxError(file, number, "a quoted key needs its closing quote");
      }
      entry.key = std::string(line.substr(1, close - 1));
      at = close + 1;
    } else {
      while (at < line.size() && IsKeyChar(line[at])) ++at;
      entry.key = std::string(line.substr(0, at));
    }
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(line.substr(at));
    if (entry.key.empty() || !absl::ConsumePrefix(&rest, "=")) {
      return SyntaxError(file, number, absl::StrCat("expected key = value, got \"", line, "\""));
    }
    entry.value = std::string(absl::StripAsciiWhitespace(rest));
    out.push_back(std::move(entry));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open config file"));
  }
  std::string text;
  char buffer[8192];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int read_errno = errno;
  std::fclose(file);
  if (failed) {
    return absl::ErrnoToStatus(read_errno, absl::StrCat(path, ": cannot read config file"));
  }
  return text;
}

absl::StatusOr<std::vector<IniEntry>> ReadIniText(const std::string& text,
                                                  const std::string& name) {
  std::vector<IniEntry> entries;
  std::string section;
  if (auto status = ReadInto(text, name, 0, section, entries); !status.ok()) return status;
  return entries;
}

bool LooksLikeIni(const std::string& text) {
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    return line.front() == '[' || absl::StartsWith(line, "%include");
  }
  return false;
}

}  // namespace pgfleet::config::internal
