// Sanitizer reports in a process's log. In the ASan+UBSan build (scripts/test.sh, build-asan) a
// report aborts the process that hit it and goes to its stderr, which the harness writes to the
// log; a pgfleet worker that aborts is restarted by its supervisor, so the test could still pass.
// The harness looks for a report when it stops a process and fails the test that started it.
#pragma once

#include <algorithm>
#include <string>

namespace pgfleet::testing {

// The report (from the start of its first line, at most `max_chars`), or "" when there is none.
inline std::string SanitizerReport(const std::string& log, size_t max_chars = 16000) {
  size_t first = std::string::npos;
  for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "runtime error: ", "SUMMARY: UndefinedBehaviorSanitizer"}) {
    first = std::min(first, log.find(marker));
  }
  if (first == std::string::npos) return "";
  const size_t line = log.rfind('\n', first);
  const size_t begin = line == std::string::npos ? 0 : line + 1;
  return log.substr(begin, max_chars);
}

}  // namespace pgfleet::testing
