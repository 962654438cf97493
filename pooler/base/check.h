// Invariant checks: PGFLEET_CHECK aborts on a broken invariant in every build; PGFLEET_BUG logs and
// counts in release builds (like ENVOY_BUG) so one bad connection cannot take a worker down.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "pooler/base/log.h"

namespace pgfleet::base {
// Number of PGFLEET_BUG hits in this process (exported as a metric later).
inline unsigned long long g_bug_count = 0;
}  // namespace pgfleet::base

#define PGFLEET_CHECK(cond)                                                           \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#ifdef NDEBUG
#define PGFLEET_BUG(cond, what)                                                                   \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      ++::pgfleet::base::g_bug_count;                                                             \
      PGFLEET_LOG(kError, "bug", "what=", ::pgfleet::base::LogQuote(what), " at=", __FILE__, ":", \
                  __LINE__);                                                                      \
    }                                                                                             \
  } while (0)
#else
#define PGFLEET_BUG(cond, what) PGFLEET_CHECK(cond)
#endif
