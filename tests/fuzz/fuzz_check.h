// Helpers shared by the libFuzzer targets: a check that aborts (so libFuzzer records the input as a
// crash) and bounds tests for views a parser returns into its input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

// Aborts with the failed condition; libFuzzer saves the input that got here.
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace pgfleet::fuzz {

// True when [p, p+n) lies inside `outer` (an empty range anywhere counts as inside).
inline bool Within(std::span<const uint8_t> outer, const void* p, size_t n) {
  if (n == 0) return true;
  const auto* b = static_cast<const uint8_t*>(p);
  return b >= outer.data() && b + n <= outer.data() + outer.size();
}
inline bool Within(std::span<const uint8_t> outer, std::string_view s) {
  return Within(outer, s.data(), s.size());
}
inline bool Within(std::span<const uint8_t> outer, std::span<const uint8_t> s) {
  return Within(outer, s.data(), s.size());
}

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace pgfleet::fuzz
