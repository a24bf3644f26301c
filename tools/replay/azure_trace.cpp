#include "tools/replay/azure_trace.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace mocker::replay {
namespace {

constexpr std::string_view kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr std::int64_t kTicksPerSecond = 10'000'000;
constexpr std::int64_t kTicksPerDay = 86'400 * kTicksPerSecond;

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// Exactly `digits` decimal digits at s[pos..].
bool fixedDigits(std::string_view s, std::size_t pos, std::size_t digits, unsigned& out) {
  if (pos + digits > s.size()) return false;
  unsigned v = 0;
  for (std::size_t i = pos; i < pos + digits; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + static_cast<unsigned>(s[i] - '0');
  }
  out = v;
  return true;
}

bool isLeapYear(unsigned y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned daysInMonth(unsigned y, unsigned m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && isLeapYear(y) ? 29 : kDays[m - 1];
}

/// A non-negative decimal integer that fits in uint32.
Result<std::uint32_t> parseCount(std::string_view field, const char* name) {
  field = trim(field);
  std::uint32_t value = 0;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec != std::errc() || ptr != field.data() + field.size()) {
    return invalidArgument(std::string(name) + " must be a non-negative integer (got '" +
                           std::string(field) + "')");
  }
  return value;
}

struct Row {
  std::int64_t ticks = 0;
  std::uint32_t input_length = 0;
  std::uint32_t output_length = 0;
  std::size_t line = 0;
};

Result<Row> parseRow(std::string_view text, std::size_t line) {
  const auto c1 = text.find(',');
  const auto c2 = c1 == std::string_view::npos ? c1 : text.find(',', c1 + 1);
  if (c2 == std::string_view::npos || text.find(',', c2 + 1) != std::string_view::npos) {
    return invalidArgument("expected 3 comma-separated fields");
  }
  Row row;
  row.line = line;
  MOCKER_TRY(row.ticks, parseAzureTimestamp(trim(text.substr(0, c1))));
  MOCKER_TRY(row.input_length, parseCount(text.substr(c1 + 1, c2 - c1 - 1), "ContextTokens"));
  MOCKER_TRY(row.output_length, parseCount(text.substr(c2 + 1), "GeneratedTokens"));
  if (row.input_length == 0) return invalidArgument("ContextTokens must be >= 1 (got 0)");
  return row;
}

}  // namespace

std::int64_t daysFromCivil(std::int64_t y, unsigned m, unsigned d) {
  // http://howardhinnant.github.io/date_algorithms.html#days_from_civil
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<std::int64_t>(y - era * 400);                       // [0, 399]
  const std::int64_t mp = m > 2 ? static_cast<std::int64_t>(m) - 3 : m + 9;        // [0, 11]
  const std::int64_t doy = (153 * mp + 2) / 5 + static_cast<std::int64_t>(d) - 1;  // [0, 365]
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;                  // [0, 146096]
  return era * 146097 + doe - 719468;
}

Result<std::int64_t> parseAzureTimestamp(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return invalidArgument("bad TIMESTAMP '" + std::string(text) + "': " + why);
  };
  // YYYY-MM-DD HH:MM:SS
  // 0123456789012345678
  unsigned year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (text.size() < 19 || !fixedDigits(text, 0, 4, year) || text[4] != '-' ||
      !fixedDigits(text, 5, 2, month) || text[7] != '-' || !fixedDigits(text, 8, 2, day) ||
      (text[10] != ' ' && text[10] != 'T') || !fixedDigits(text, 11, 2, hour) || text[13] != ':' ||
      !fixedDigits(text, 14, 2, minute) || text[16] != ':' || !fixedDigits(text, 17, 2, second)) {
    return bad("expected YYYY-MM-DD HH:MM:SS[.fraction]");
  }
  std::int64_t fraction_ticks = 0;
  if (text.size() > 19) {
    if (text[19] != '.') return bad("unexpected text after the seconds");
    const std::size_t digits = text.size() - 20;
    if (digits == 0 || digits > 7) return bad("expected 1 to 7 fractional digits");
    unsigned frac = 0;
    if (!fixedDigits(text, 20, digits, frac)) return bad("fraction must be digits");
    fraction_ticks = frac;
    for (std::size_t i = digits; i < 7; ++i) fraction_ticks *= 10;
  }
  if (month < 1 || month > 12) return bad("month out of range");
  if (day < 1 || day > daysInMonth(year, month)) return bad("day out of range");
  if (hour > 23 || minute > 59 || second > 59) return bad("time of day out of range");
  const std::int64_t seconds_of_day = hour * 3600 + minute * 60 + second;
  return daysFromCivil(year, month, day) * kTicksPerDay + seconds_of_day * kTicksPerSecond +
         fraction_ticks;
}

Result<Workload> parseAzureTrace(std::string_view text, const TraceOptions& options) {
  MOCKER_TRY_VOID(validateTraceOptions(options));
  Workload workload;
  workload.trace_block_size = options.trace_block_size;

  std::vector<Row> rows;
  std::size_t line = 0;
  std::size_t pos = 0;
  bool header_seen = false;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (trim(raw).empty()) continue;
    if (!header_seen) {
      std::string_view header = trim(raw);
      if (header.substr(0, 3) == "\xEF\xBB\xBF") header.remove_prefix(3);  // UTF-8 BOM
      if (header != kHeader) {
        return invalidArgument("line " + std::to_string(line) + ": expected header '" +
                               std::string(kHeader) + "' (got '" + std::string(header) + "')");
      }
      header_seen = true;
      continue;
    }
    auto row = parseRow(raw, line);
    if (!row) {
      if (!options.skip_invalid) {
        return Error{row.error().code, "line " + std::to_string(line) + ": " + row.error().message};
      }
      workload.skipped_lines.push_back(LineError{line, row.error().message});
      continue;
    }
    rows.push_back(*row);
  }
  if (!header_seen) return invalidArgument("empty trace: no header");
  if (rows.empty()) return invalidArgument("empty trace: no requests");

  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.ticks < b.ticks; });
  const std::int64_t min_ticks = rows.front().ticks;
  std::uint64_t next_hash_id = 0;
  workload.sessions.reserve(rows.size());
  for (const Row& row : rows) {
    Turn turn;
    turn.input_length = row.input_length;
    turn.output_length = row.output_length;
    turn.line = row.line;
    const std::uint64_t blocks =
        (std::uint64_t{row.input_length} + options.trace_block_size - 1) / options.trace_block_size;
    turn.hash_ids.resize(blocks);
    for (std::uint64_t& h : turn.hash_ids) h = next_hash_id++;
    Session session;
    session.session_id = "request_" + std::to_string(row.line);
    // Ticks differences are exact integers; one division gives the correctly rounded ms value.
    session.first_arrival_ms = static_cast<double>(row.ticks - min_ticks) / 10'000.0;
    session.turns.push_back(std::move(turn));
    workload.sessions.push_back(std::move(session));
  }
  normalizeArrivals(workload.sessions, options.arrival_speedup_ratio);
  return workload;
}

Result<Workload> loadAzureTrace(const std::string& path, const TraceOptions& options) {
  MOCKER_TRY(std::string text, readTextFile(path));
  auto parsed = parseAzureTrace(text, options);
  if (!parsed) return parsed.error().withContext(path);
  return parsed;
}

}  // namespace mocker::replay
