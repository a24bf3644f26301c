// The dependency graph of an agentic trace (docs/traces.md, Agentic JSONL): the accepted rows,
// each one request naming the requests it waits for (wait_for) and spawns (branches), resolved
// into single-turn sessions whose Session::wait_for holds session indices. Unknown ids, rows
// waiting for skipped rows and dependency cycles are line errors. No I/O.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/result.h"
#include "tools/replay/workload.h"

namespace mocker::replay::detail {

/// One accepted agentic row, before the dependency graph is resolved.
struct AgenticRow {
  std::size_t line = 0;
  std::string request_id;
  std::vector<std::string> wait_for;
  std::vector<std::string> branches;
  double dependency_delay_ms = 0.0;
  Session session;  // one turn; first_arrival_ms = timestamp of a row without wait_for
};

/// Resolves wait_for / branches to accepted rows, rejects cycles, and builds one single-turn
/// session per row (file order) with normalised arrivals (options.arrival_speedup_ratio; the
/// earliest independent row at 0, dependent rows released by their dependencies). Line errors go
/// to `skipped` (options.skip_invalid; a row waiting for a skipped row is skipped too, and
/// `skipped` ends in line order) or are returned ("line N: …"). The rows' sessions are moved out.
Result<std::vector<Session>> resolveAgenticGraph(std::vector<AgenticRow>& rows,
                                                 const TraceOptions& options,
                                                 std::vector<LineError>& skipped);

}  // namespace mocker::replay::detail
