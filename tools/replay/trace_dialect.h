// Which JSONL dialect a trace is written in (docs/traces.md, "Which dialect"), from its first
// lines: plain Mooncake (each turn carries its full prompt), Mooncake-delta (each later turn
// carries only its new part) or agentic (dependencies between requests). `mocker replay` uses it
// when --format is not given, and says what it chose.
//
// detectJsonlDialect is pure (text in, verdict out); readTraceHead is the only I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace mocker::replay {

/// How much of a trace the detection reads: at most this many bytes, in whole lines.
inline constexpr std::size_t kDialectProbeBytes = 1 << 20;

struct DialectGuess {
  std::string format;  ///< "mooncake" | "mooncake-delta" | "agentic" (as --format spells it)
  std::string reason;  ///< why, in a few words ("line 1 has 'wait_for'")
};

/// The dialect of a JSONL trace from its first lines (`head`: the file's start; a cut last line is
/// ignored, as are lines that do not parse — the trace parser reports those). Agentic: a row with
/// `wait_for`, `branches`, `prefix_reset` or `tool_wait_ms`. Else from the sessions with two or
/// more turns: a later turn whose hash_ids start with the previous turn's (all but its last,
/// possibly partial, block) repeats the prompt (mooncake); one that does not carries only its new
/// part (mooncake-delta). No such turn: mooncake (the two read the same). Error: turns of both
/// kinds, naming the lines and the --format to give.
Result<DialectGuess> detectJsonlDialect(std::string_view head);

/// The first kDialectProbeBytes of `path` (less for a shorter file); nullopt when it cannot be
/// read (the trace loader then says why).
std::optional<std::string> readTraceHead(const std::string& path);

}  // namespace mocker::replay
