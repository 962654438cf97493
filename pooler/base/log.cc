// Structured line logger writing to stderr.
#include "pooler/base/log.h"

#include <time.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "pooler/base/strings.h"

namespace pgfleet::base {
namespace {

LogLevel g_level = LogLevel::kInfo;
std::string* g_prefix = new std::string();

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level = level; }
LogLevel GetLogLevel() { return g_level; }
void SetLogPrefix(std::string_view prefix) { *g_prefix = std::string(prefix); }

std::string LogQuote(std::string_view value) {
  if (!value.empty() && value.find_first_of(" \"=\n\t") == std::string_view::npos) {
    return std::string(value);
  }
  return StrCat("\"", absl::StrReplaceAll(Av(value), {{"\"", "\\\""}, {"\n", "\\n"}}), "\"");
}

void LogLine(LogLevel level, std::string_view event, std::string_view fields) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  std::string line = absl::StrFormat(
      "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s %s%sevent=%s%s%s\n", tm.tm_year + 1900,
      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
      static_cast<int>(now.tv_nsec / 1000000), LevelName(level), *g_prefix,
      g_prefix->empty() ? "" : " ", event, fields.empty() ? "" : " ", fields);
  // A failed log write must never stop the data path (e.g. a full disk): ignore the result.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace pgfleet::base
