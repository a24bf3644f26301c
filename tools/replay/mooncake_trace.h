// Mooncake JSONL trace parser (docs/traces.md, Mooncake JSONL): one JSON object per line with
// timestamp/created_time, input_length/input_tokens, output_length/output_tokens, hash_ids,
// optional session_id, delay/delay_ms and request_id. Produces a normalised Workload.
//
// Pure functions; thread-compatible. Every error names its 1-based line number.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// Parses Mooncake JSONL text. Blank lines are skipped; unknown keys are ignored; a key together
/// with its alias on one line is an error. With options.skip_invalid, bad lines are recorded in
/// Workload::skipped_lines and parsing continues; otherwise the first one is returned as the
/// error ("line 12: missing required key 'output_length'"). An empty result is an error.
Result<Workload> parseMooncakeTrace(std::string_view text, const TraceOptions& options);

/// readTextFile + parseMooncakeTrace; errors are prefixed with the path.
Result<Workload> loadMooncakeTrace(const std::string& path, const TraceOptions& options);

}  // namespace mocker::replay
