// Azure LLM inference CSV parser (docs/traces.md, Azure CSV): header
// `TIMESTAMP,ContextTokens,GeneratedTokens`, one request per row, absolute timestamps
// `YYYY-MM-DD HH:MM:SS[.fraction]` (≤ 7 fractional digits, no time zone, read as UTC). There is
// no prefix information, so every request gets fresh hash ids (zero reuse by construction).
//
// Pure functions; thread-compatible. Civil-date arithmetic is our own (no locale, no strptime).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// Days since 1970-01-01 of the proleptic Gregorian date y-m-d (H. Hinnant's days_from_civil).
/// REQUIRES: 1 <= m <= 12, 1 <= d <= 31.
std::int64_t daysFromCivil(std::int64_t y, unsigned m, unsigned d);

/// Parses `YYYY-MM-DD HH:MM:SS[.f{1,7}]` (a 'T' separator is also accepted) to 100-ns ticks
/// since 1970-01-01T00:00:00 UTC. Validates ranges (month, day of that month, 0–23, 0–59, 0–59).
Result<std::int64_t> parseAzureTimestamp(std::string_view text);

/// Parses Azure CSV text. Rows are stable-sorted by timestamp; arrival_ms = (ticks − min)/10^4,
/// then divided by arrival_speedup_ratio. Row k (file order after sorting) gets
/// ceil(ContextTokens / trace_block_size) consecutive fresh hash ids from a counter starting at
/// 0, in arrival order. Sessions are named request_<line>. skip_invalid as for Mooncake.
Result<Workload> parseAzureTrace(std::string_view text, const TraceOptions& options);

/// readTextFile + parseAzureTrace; errors are prefixed with the path.
Result<Workload> loadAzureTrace(const std::string& path, const TraceOptions& options);

}  // namespace mocker::replay
