// Cells of the calibration CSV files (ground_truth.csv, the per-pass CSV): unquoted fields
// split at commas, finite numbers, and the "<source> line N: field 'x': …" error form.
#pragma once

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/lines.h"
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

/// Column name -> index, from the header line.
using CsvColumns = std::map<std::string, std::size_t, std::less<>>;

/// Walks a CSV text (CRLF accepted, blank lines skipped): the first line is the header, which
/// must name every `required` column, each column once; every later line must have as many fields
/// as the header and is passed to `row` (its cells, its 1-based line number). Stops at the first
/// error (the row's, or "<source> line N: …"); an empty text is an error.
inline Status forEachCsvRow(std::string_view text, std::string_view source,
                            std::span<const char* const> required,
                            const std::function<Status(const std::vector<std::string_view>&,
                                                       const CsvColumns&, std::size_t)>& row) {
  CsvColumns column;
  for (auto [line, line_no] : Lines(text)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<std::string_view> cells = splitCsv(line);
    if (column.empty()) {
      for (std::size_t i = 0; i < cells.size(); ++i) {
        const auto [it, added] = column.emplace(std::string(cells[i]), i);
        if (!added) {  // which one is meant is unknown, and the field count would be wrong
          return rowError(source, line_no, cells[i],
                          "repeated column (columns " + std::to_string(it->second + 1) + " and " +
                              std::to_string(i + 1) + ")");
        }
      }
      for (const char* name : required) {
        if (!column.contains(name)) {
          return rowError(
              source, line_no, name,
              "missing column (header has " + std::to_string(cells.size()) + " columns)");
        }
      }
      continue;
    }
    if (cells.size() != column.size()) {
      return invalidArgument(std::string(source) + " line " + std::to_string(line_no) + ": " +
                             std::to_string(cells.size()) + " fields, the header has " +
                             std::to_string(column.size()));
    }
    if (Status s = row(cells, column, line_no); !s) return s;
  }
  if (column.empty()) return invalidArgument(std::string(source) + ": empty (no header line)");
  return {};
}

}  // namespace mocker::calibrate::detail
