// Status propagation macros; absl 20220623 ships none of its own.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PGFLEET_CONCAT_INNER(a, b) a##b
#define PGFLEET_CONCAT(a, b) PGFLEET_CONCAT_INNER(a, b)

// Returns from the enclosing function with `expr`'s status when it is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status pgfleet_status_ = (expr);           \
    if (!pgfleet_status_.ok()) return pgfleet_status_; \
  } while (0)

// Declares or assigns `lhs` from a StatusOr, returning its status on error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(PGFLEET_CONCAT(pgfleet_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
