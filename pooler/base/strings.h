// Bridges std::string_view and Debian's absl (20220623 is built with its own absl::string_view,
// which does not convert from std::string_view). Our APIs use std::string_view; these wrappers
// let absl's string functions take them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pgfleet::base {

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// A blank inside a line of a config file (hba, userlist): a space or tab-like, never a newline.
inline bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// Wire bytes as text and back (the same bytes, no copy).
inline std::string_view AsText(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}
inline std::span<const uint8_t> AsBytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

namespace internal {
template <typename T>
decltype(auto) AlphaNumArg(const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view> &&
                !std::is_convertible_v<const T&, absl::string_view>) {
    return Av(value);
  } else {
    return (value);
  }
}
}  // namespace internal

// absl::StrCat / StrAppend that also accept std::string_view arguments.
template <typename... Args>
std::string StrCat(const Args&... args) {
  return absl::StrCat(internal::AlphaNumArg(args)...);
}
template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  absl::StrAppend(out, internal::AlphaNumArg(args)...);
}

}  // namespace pgfleet::base
