// Mooncake JSONL trace parser (docs/traces.md, Mooncake JSONL): one JSON object per line with
// timestamp/created_time, input_length/input_tokens, output_length/output_tokens, hash_ids,
// optional session_id, delay/delay_ms and request_id. Produces a normalised Workload.
//
// Pure functions; thread-compatible. Every error names its 1-based line number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// The three JSONL dialects (docs/traces.md): plain Mooncake; mooncake-delta, whose later turns
/// carry only their new input (Workload::cumulative_prompts); agentic, one request per row with
/// `request_id`, `wait_for` dependencies (Session::wait_for), `delay` + `tool_wait_ms` after them,
/// and informational `branches` / `prefix_reset`.
enum class TraceFormat : std::uint8_t { Mooncake, MooncakeDelta, Agentic };
std::string_view toString(TraceFormat format);

/// Parses Mooncake JSONL text. Blank lines are skipped; unknown keys are ignored; a key together
/// with its alias on one line is an error. With options.skip_invalid, bad lines are recorded in
/// Workload::skipped_lines and parsing continues; otherwise the first one is returned as the
/// error ("line 12: missing required key 'output_length'"). An empty result is an error.
/// Agentic: graph errors (unknown ids, cycles) name the row's line too; with skip_invalid a row
/// waiting for a skipped row is skipped as well.
Result<Workload> parseMooncakeTrace(std::string_view text, const TraceOptions& options,
                                    TraceFormat format = TraceFormat::Mooncake);

/// readTextFile + parseMooncakeTrace; errors are prefixed with the path.
Result<Workload> loadMooncakeTrace(const std::string& path, const TraceOptions& options,
                                   TraceFormat format = TraceFormat::Mooncake);

}  // namespace mocker::replay
