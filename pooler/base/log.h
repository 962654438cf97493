// Structured logging: one line per event, `ts=... level=... event=... key=value ...`.
// Callers pass only non-secret fields; nothing here knows what a password is, so never log one.
#pragma once

#include <cstdint>
#include <string_view>

#include "pooler/base/strings.h"

namespace pgfleet::base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below `level` are dropped. Not thread-safe to change while other threads log.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Prefix added to every line (e.g. "worker=3"), set once per process at start.
void SetLogPrefix(std::string_view prefix);

// Writes one line to stderr with a single write(2), so lines from processes sharing stderr don't
// interleave. `fields` is already formatted as `k=v k=v`. Never blocks: a line that cannot be
// written now (a full disk, a pipe or socket whose reader stalls) is dropped and counted, and the
// next line that gets through is followed by `event=log_lines_dropped count=N total=M`.
void LogLine(LogLevel level, std::string_view event, std::string_view fields);

// Lines dropped so far in this process.
uint64_t DroppedLogLines();

// PgBouncer's logfile: every line also goes to `path` (appended, created 0640), besides stderr.
// Called again (SIGHUP) it reopens the file, so that a rotated log moves on to the new file;
// "" stops. On failure the previous file stays in use and a log line says why.
void SetLogFile(const std::string& path);

// Quotes a value for key=value output when it has spaces, quotes or is empty.
std::string LogQuote(std::string_view value);

}  // namespace pgfleet::base

#define PGFLEET_LOG(level, event, ...)                                        \
  do {                                                                        \
    if (::pgfleet::base::LogLevel::level >= ::pgfleet::base::GetLogLevel()) { \
      ::pgfleet::base::LogLine(::pgfleet::base::LogLevel::level, event,       \
                               ::pgfleet::base::StrCat(__VA_ARGS__));         \
    }                                                                         \
  } while (0)
