// Replay workload model (docs/traces.md, Workload model): every trace format and the
// synthetic generator produce a Workload — sessions of turns — and each turn becomes one engine
// request whose prompt is synthesised from its hash ids.
//
// Plain value types and pure functions; thread-compatible. No logging (warnings are returned as
// data); the only I/O is readTextFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/types.h"

namespace mocker::replay {

/// Mooncake block size, the default `trace_block_size` ("Token synthesis").
inline constexpr std::uint32_t kDefaultTraceBlockSize = 512;

/// One turn of a session = one engine request ("Workload model").
/// Invariants (established by every parser/generator): input_length >= 1, input_length <=
/// hash_ids.size() * trace_block_size, hash_ids non-empty, delay_after_previous_ms finite and
/// >= 0, and 0 for the first turn of a session.
struct Turn {
  std::uint32_t input_length = 1;         ///< prompt tokens (already clamped to capacity)
  std::uint32_t output_length = 0;        ///< tokens to generate (max_output_tokens)
  std::vector<std::uint64_t> hash_ids{};  ///< one id per trace block of the prompt
  /// Think time after the previous turn's terminal signal (already divided by
  /// arrival_speedup_ratio). Always 0 for the first turn.
  double delay_after_previous_ms = 0.0;
  std::optional<std::string> request_id{};  ///< carried into per-request output only
  std::optional<std::string> lora{};        ///< LoRA adapter name (the trace's `lora` column)
  std::size_t line = 0;                     ///< 1-based source line; 0 for synthetic turns
};

/// A sequence of turns; a session never has two turns in flight ("Sessions and delays").
struct Session {
  std::string session_id{};
  /// Arrival of the first turn after normalisation: the earliest session arrives at 0.
  /// Absent only when the trace has no timestamps (allowed for closed-loop replay, "Closed loop").
  std::optional<double> first_arrival_ms{};
  std::vector<Turn> turns{};  ///< non-empty
  /// Agentic traces ("Dependencies"): indices into Workload::sessions whose last turn must reach
  /// its terminal (any outcome) before this session's first turn becomes eligible, at
  /// (latest such terminal) + dependency_delay_ms. Such a session has no first_arrival_ms.
  /// Empty for every other format.
  std::vector<std::uint32_t> wait_for{};
  /// `delay` + `tool_wait_ms` of an agentic row, already divided by arrival_speedup_ratio.
  double dependency_delay_ms = 0.0;
};

/// A line that was skipped (skip_invalid) or that stopped parsing.
struct LineError {
  std::size_t line = 0;  ///< 1-based
  std::string message{};
};

/// What the replay loop consumes.
struct Workload {
  /// Sorted by first arrival (stable: file order breaks ties) when every session has one;
  /// otherwise in file order.
  std::vector<Session> sessions{};
  std::uint32_t trace_block_size = kDefaultTraceBlockSize;
  /// Lines dropped because TraceOptions::skip_invalid was set, in file order.
  std::vector<LineError> skipped_lines{};
  /// mooncake-delta ("Cumulative prompts"): a turn's hash_ids/input_length are only its new
  /// input; the replay sends turn k of a session as (the prompt of turn k−1) ++ (the tokens that
  /// turn emitted) ++ (turn k's own tokens). The first turn is sent as is.
  bool cumulative_prompts = false;

  std::size_t numTurns() const;
};

/// Options shared by the trace parsers.
struct TraceOptions {
  std::uint32_t trace_block_size = kDefaultTraceBlockSize;  ///< >= 1
  double arrival_speedup_ratio = 1.0;                       ///< finite, > 0
  /// Collect per-line errors in Workload::skipped_lines and continue; otherwise the first bad
  /// line fails the whole parse.
  bool skip_invalid = false;
  /// Trace mode needs a timestamp on every first turn; closed-loop mode does not ("Normalisation").
  bool require_timestamps = true;
};

/// Reads a whole file (trace inputs). NotFound / IoError name the path.
Result<std::string> readTextFile(const std::string& path);

/// Checks trace_block_size >= 1 and a finite, positive arrival_speedup_ratio.
Status validateTraceOptions(const TraceOptions& options);

/// Normalisation: stable-sorts sessions by first arrival, shifts so the earliest is 0, and divides
/// first arrivals and every inter-turn delay by `arrival_speedup_ratio`. Sessions without an
/// arrival keep file order and only their delays are scaled.
/// REQUIRES: arrival_speedup_ratio finite and > 0.
void normalizeArrivals(std::vector<Session>& sessions, double arrival_speedup_ratio);

/// Largest hash id that maps to a distinct token (ids are reduced mod 2^32, "Token synthesis").
inline constexpr std::uint64_t kMaxUnaliasedHashId = 0xFFFF'FFFFull;

/// Token synthesis: each hash id `h` becomes `trace_block_size` copies of token
/// `h mod 2^32`; the concatenation is truncated to min(input_length, capacity).
/// Example: hash_ids [7, 9], input_length 700, block 512 ⇒ 512 × 7 then 188 × 9.
/// `aliased_hash_id` is set when some id was >= 2^32 (and so may alias another id).
/// Room for at most kReservedOutputTokens output tokens is reserved, so the engine appending the
/// first outputs does not copy the whole prompt; beyond that, memory follows the tokens actually
/// generated, never the requested output length.
inline constexpr std::uint32_t kReservedOutputTokens = 4096;
struct SynthesizedPrompt {
  std::vector<std::uint32_t> tokens{};
  bool aliased_hash_id = false;
};
SynthesizedPrompt synthesizePrompt(const Turn& turn, std::uint32_t trace_block_size);

/// Stateful wrapper that warns once per run about hash ids >= 2^32. One per replay.
/// Not thread-safe.
class PromptSynthesizer {
 public:
  explicit PromptSynthesizer(std::uint32_t trace_block_size);

  /// The prompt tokens of `turn`; records the aliasing warning the first time it applies.
  std::vector<std::uint32_t> synthesize(const Turn& turn);
  /// The same prompt, synthesized only when the engine asks for it (Request::deferred_prompt);
  /// the warning is recorded now. `turn` must outlive the returned source.
  std::shared_ptr<const engine::PromptSource> defer(const Turn& turn);

  /// At most one message; the caller decides how to print it.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void noteAliasing(const Turn& turn, bool aliased);

  std::uint32_t trace_block_size_;
  std::vector<std::string> warnings_;
};

}  // namespace mocker::replay
