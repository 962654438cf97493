// Structured line logger writing to stderr.
#include "pooler/base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "pooler/base/strings.h"

namespace pgfleet::base {
namespace {

LogLevel g_level = LogLevel::kInfo;
std::string* g_prefix = new std::string();
std::atomic<uint64_t> g_dropped{0};     // lines lost since the process started
std::atomic<uint64_t> g_unreported{0};  // lines lost since the last log_lines_dropped line

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

// Where lines go: stderr, but never so that a write waits. A file or a terminal does not make a
// writer wait on anyone. A pipe or FIFO (a container runtime's log collector) or a socket (the
// journal) does when the reader stops reading, e.g. because its disk is full, and a blocked
// write would stop the event loop. So a pipe gets a private non-blocking descriptor of the same
// pipe (O_NONBLOCK on fd 2 itself would change a description that other processes share), and a
// socket is written with MSG_DONTWAIT.
struct Sink {
  int fd = STDERR_FILENO;
  bool socket = false;
};

Sink OpenSink() {
  Sink sink;
  struct stat st;
  if (fstat(STDERR_FILENO, &st) != 0) return sink;
  if (S_ISSOCK(st.st_mode)) {
    sink.socket = true;
  } else if (S_ISFIFO(st.st_mode)) {
    const int fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) sink.fd = fd;
  }
  return sink;
}

// log.file's descriptor, or -1. A file never makes a writer wait for a reader.
std::atomic<int> g_file_fd{-1};

// One write; true when the whole line went out (to stderr; the file is best effort).
bool Emit(const std::string& line) {
  static const Sink sink = OpenSink();
  if (const int file = g_file_fd.load(std::memory_order_relaxed); file >= 0) {
    (void)!write(file, line.data(), line.size());
  }
  const ssize_t n = sink.socket
                        ? send(sink.fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
                        : write(sink.fd, line.data(), line.size());
  return n == static_cast<ssize_t>(line.size());
}

std::string FormatLine(LogLevel level, std::string_view event, std::string_view fields) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  return absl::StrFormat("ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s %s%sevent=%s%s%s\n",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec, static_cast<int>(now.tv_nsec / 1000000), LevelName(level),
                         *g_prefix, g_prefix->empty() ? "" : " ", event, fields.empty() ? "" : " ",
                         fields);
}

}  // namespace

uint64_t DroppedLogLines() { return g_dropped.load(std::memory_order_relaxed); }

void SetLogFile(const std::string& path) {
  int fd = -1;
  if (!path.empty()) {
    fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
      LogLine(LogLevel::kError, "log_file_failed",
              StrCat("file=", LogQuote(path), " error=", LogQuote(strerror(errno))));
      return;
    }
  }
  // A line being written to the old descriptor at this moment may be lost with it.
  const int old = g_file_fd.exchange(fd);
  if (old >= 0) close(old);
}

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
  // A failed or refused write (a full disk, a stalled collector) drops the line and counts it;
  // the data path never waits for the log. The next line that gets through says how many were
  // lost.
  if (!Emit(FormatLine(level, event, fields))) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    g_unreported.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (g_unreported.load(std::memory_order_relaxed) == 0) return;
  const uint64_t lost = g_unreported.exchange(0, std::memory_order_relaxed);
  if (lost > 0 && !Emit(FormatLine(LogLevel::kWarning, "log_lines_dropped",
                                   StrCat("count=", lost, " total=", DroppedLogLines())))) {
    g_unreported.fetch_add(lost, std::memory_order_relaxed);
  }
}

}  // namespace pgfleet::base
