// Enum ↔ name tables for configs, flags, logs and wire enums: one table per enum, read both ways.
// The first entry for a value is its canonical name (what enumName returns and dumps print); later
// entries with the same value are aliases accepted by enumFromName. Matching is ASCII
// case-insensitive.
//
//   constexpr EnumNames<Color, 3> kColors{{{"red", Color::Red}, {"blue", Color::Blue},
//                                          {"azure", Color::Blue}}};
//   enumFromName(kColors, "Azure") == Color::Blue;  enumName(kColors, Color::Blue) == "blue"
//
// Header-only; constexpr tables, no allocation except for enumNameList.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/ascii.h"

namespace mocker {

template <typename Enum, std::size_t N>
using EnumNames = std::array<std::pair<std::string_view, Enum>, N>;

/// The value named `name` (any ASCII case, aliases included), or nullopt.
template <typename Enum, std::size_t N>
std::optional<Enum> enumFromName(const EnumNames<Enum, N>& names, std::string_view name) {
  const std::string lower = asciiLower(name);
  for (const auto& [n, value] : names) {
    if (lower == n) return value;
  }
  return std::nullopt;
}

/// The canonical name of `v`; "?" for a value the table lacks (a bug in the table).
template <typename Enum, std::size_t N>
constexpr std::string_view enumName(const EnumNames<Enum, N>& names, Enum v) {
  for (const auto& [n, value] : names) {
    if (value == v) return n;
  }
  return "?";
}

/// Every accepted name, aliases included, in table order, joined by `separator`
/// ("p6 | p7 | p8"), for error messages and --help.
template <typename Enum, std::size_t N>
std::string enumNameList(const EnumNames<Enum, N>& names, std::string_view separator) {
  std::string out;
  for (const auto& [n, value] : names) {
    if (!out.empty()) out += separator;
    out += n;
  }
  return out;
}

}  // namespace mocker
