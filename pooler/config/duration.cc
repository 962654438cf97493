// ParseDuration: the config's duration syntax ("500ms", "30s", "5m", "1h", "2d", bare seconds).
#include <cctype>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "pooler/config/config.h"

namespace pgfleet::config {
namespace {

absl::Status BadDuration(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("expected a duration such as 500ms, 30s, 5m, 1h or 2d (a bare number is "
                   "seconds), got \"",
                   text, "\""));
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(std::string_view input) {
  // Debian's absl is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), which
  // std::string_view does not convert to implicitly.
  const absl::string_view text(input.data(), input.size());
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed.front() == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("a duration must not be negative, got \"", text, "\""));
  }
  // The number is digits with an optional fraction; no sign, exponent, "inf" or "nan", which
  // SimpleAtod alone would accept.
  size_t i = 0;
  while (i < trimmed.size() && std::isdigit(static_cast<unsigned char>(trimmed[i]))) ++i;
  const size_t int_digits = i;
  if (i < trimmed.size() && trimmed[i] == '.') {
    ++i;
    const size_t frac_start = i;
    while (i < trimmed.size() && std::isdigit(static_cast<unsigned char>(trimmed[i]))) ++i;
    if (i == frac_start) return BadDuration(text);
  }
  if (int_digits == 0) return BadDuration(text);
  const absl::string_view number = trimmed.substr(0, i);
  const absl::string_view unit = trimmed.substr(i);

  double value = 0;
  if (!absl::SimpleAtod(number, &value)) return BadDuration(text);
  absl::Duration result;
  if (unit.empty() || unit == "s") {
    result = absl::Seconds(value);
  } else if (unit == "ms") {
    result = absl::Milliseconds(value);
  } else if (unit == "us") {
    result = absl::Microseconds(value);
  } else if (unit == "m" || unit == "min") {
    result = absl::Minutes(value);
  } else if (unit == "h") {
    result = absl::Hours(value);
  } else if (unit == "d") {
    result = absl::Hours(24 * value);
  } else {
    return BadDuration(text);
  }
  // absl saturates instead of overflowing; an infinite timeout would silently mean "never".
  if (result == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("duration \"", text, "\" is too large"));
  }
  return result;
}

}  // namespace pgfleet::config
