// Cells of the calibration CSV files (ground_truth.csv, the per-pass CSV): unquoted fields
// split at commas, finite numbers, and the "<source> line N: field 'x': …" error form.
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/result.h"

namespace mocker::calibrate::detail {

inline std::vector<std::string_view> splitCsv(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

/// 'text' (built by appending: GCC 12's -Wrestrict misfires on "'" + std::string(...)).
inline std::string singleQuoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out.append(text);
  out += '\'';
  return out;
}

inline Result<double> parseNumber(std::string_view text) {
  double v = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    return invalidArgument(singleQuoted(text) + " is not a finite number");
  }
  return v;
}

inline Error rowError(std::string_view source, std::size_t line, std::string_view field,
                      const std::string& what) {
  return invalidArgument(std::string(source) + " line " + std::to_string(line) + ": field '" +
                         std::string(field) + "': " + what);
}

}  // namespace mocker::calibrate::detail
