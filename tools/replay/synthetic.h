// Synthetic workload generator (docs/traces.md): request count, normal input/output
// length distributions, an arrival process, shared-prefix groups, turns per session and
// inter-turn think time, all driven by one seeded SplitMix64 so that the same spec gives the
// same Workload everywhere.
//
// Pure function; thread-compatible.
#pragma once

#include <cstdint>

#include "base/result.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// Normal length distribution: sample, round to nearest (half away from zero), clamp >= 1.
struct LengthDistribution {
  double mean = 0.0;
  double stddev = 0.0;  ///< >= 0; 0 ⇒ always `mean` (no randomness consumed)
};

enum class ArrivalKind : std::uint8_t { Burst, Constant, Poisson, Gamma, Interval };

/// How sessions arrive. The first session arrives at 0; each next one adds one gap:
/// Burst 0; Constant 1000/rate ms; Poisson Exp(mean 1000/rate); Gamma shape `smoothness`,
/// scale 1000/(rate·smoothness); Interval `interval_ms`.
struct ArrivalProcess {
  ArrivalKind kind = ArrivalKind::Poisson;
  double rate_per_s = 1.0;   ///< Constant, Poisson, Gamma: finite, > 0
  double smoothness = 1.0;   ///< Gamma: finite, > 0 (1 = Poisson; vLLM's `burstiness`)
  double interval_ms = 0.0;  ///< Interval: finite, >= 0
};

enum class DelayKind : std::uint8_t { None, Constant, Exponential };

/// Think time before turns 2.. of a session.
struct InterTurnDelay {
  DelayKind kind = DelayKind::None;
  double ms = 0.0;  ///< Constant: the delay; Exponential: the mean. Finite, >= 0.
};

struct SyntheticSpec {
  std::uint32_t request_count = 0;  ///< number of sessions, >= 1
  std::uint32_t turns_per_session = 1;
  LengthDistribution input_tokens{};
  LengthDistribution output_tokens{};
  ArrivalProcess arrival{};
  double shared_prefix_ratio = 0.0;     ///< in [0, 1]
  std::uint32_t num_prefix_groups = 0;  ///< <= kMaxPrefixGroups; 0 ⇒ no sharing
  InterTurnDelay inter_turn_delay{};
  /// Multi-turn conversations: turn t > 0's prompt is the whole previous prompt (all its ids)
  /// followed by the ids of its own sampled input, so each turn extends the session's context.
  bool session_context = false;
  std::uint32_t block_size = kDefaultTraceBlockSize;  ///< trace block size for hash ids, >= 1
  std::uint64_t seed = 0;
  /// LoRA adapters: 0 = none; else each session uses adapter "lora-<k>", k in 1..loras drawn
  /// with Zipf popularity P(k) = (1/k) / H(loras) (lora-1 the most popular).
  std::uint32_t loras = 0;
};

inline constexpr std::uint32_t kMaxSyntheticLoras = 4096;

inline constexpr std::uint32_t kMaxPrefixGroups = 2048;
/// Shared ids are kSharedIdBase + group · 2^20 + block_index; fresh ids count up from 1 and
/// stay below kSharedIdBase. All ids are < 2^32, so token synthesis never aliases them.
inline constexpr std::uint64_t kSharedIdBase = 0x8000'0000ull;
inline constexpr std::uint64_t kSharedIdsPerGroup = 1ull << 20;

/// Generates the workload. Randomness is consumed in this order, per session i:
///   1. the arrival gap (i > 0; Poisson/Gamma only),
///   2. the prefix group (when num_prefix_groups > 0): uniformIndex(num_prefix_groups),
///   2'. the LoRA adapter (when loras > 0): one uniform() draw inverted through the Zipf CDF,
///   3. per turn: input length, output length, then the delay (turns 2.., Exponential only).
/// Each turn has n = ceil(input/block_size) ids; the first p = min(n, round(n · ratio)) are its
/// group's shared ids, the rest fresh. With session_context, turn t > 0 instead takes the previous
/// turn's ids followed by n fresh ids, and its input_length = previous ids · block_size + its
/// sampled input (no extra randomness). Sessions are named session_<i> (0-based); turns have
/// line 0 and no request_id. Errors name the offending parameter.
Result<Workload> generateSyntheticWorkload(const SyntheticSpec& spec);

/// Synthetic agentic sessions (docs/traces.md, Synthetic agentic sessions): each session is a
/// chain of LLM calls separated by tool calls. Every call is its own single-turn Session; call
/// c + 1 waits (Session::wait_for) for call c — and for the sub-agents call c spawned — and is
/// then released after a tool wait. Its prompt extends the previous call's context: shared system
/// prompt ++ user prompt ++ (output ++ tool output) per earlier call, so consecutive calls share
/// their prefix blocks.
struct SyntheticAgenticSpec {
  std::uint32_t sessions = 0;               ///< >= 1
  std::uint32_t calls_per_session = 1;      ///< LLM calls per session, >= 1
  std::uint32_t system_prompt_tokens = 0;   ///< shared by every call of every session
  LengthDistribution user_prompt_tokens{};  ///< first call's own input
  LengthDistribution output_tokens{};       ///< every call's output
  LengthDistribution tool_output_tokens{};  ///< input each tool result adds to the context
  InterTurnDelay tool_wait{};               ///< between a call's end and the next call
  double subagent_probability = 0.0;        ///< per call except the last, in [0, 1]
  std::uint32_t subagent_fanout = 1;        ///< sub-agent requests per spawn, 1..64
  ArrivalProcess arrival{};                 ///< of the sessions' first calls
  std::uint32_t block_size = kDefaultTraceBlockSize;  ///< >= 1
  std::uint64_t seed = 0;
};

/// Generates the agentic workload. Randomness per session i, in this order: the arrival gap
/// (i > 0), then per call c: its own input length (c = 0: user prompt; c > 0: tool output),
/// output length, tool wait (c > 0, Exponential only), and for c < calls − 1 the sub-agent
/// draw (uniform < probability; only when probability > 0) followed, when it spawns, by each
/// sub-agent's task length (tool-output distribution) and output length.
/// Ids: the system prompt's blocks are kSharedIdBase + b (shared by everyone), the rest fresh
/// from 1. Call c of session i is session `agent_<i>` with request_id `agent_<i>.<c>`; sub-agent k
/// spawned after call c is `agent_<i>.<c>.sub<k>` (prompt: system prompt ++ its task; it waits
/// for call c with no delay). Sessions appear in generation order (wait_for points backwards).
Result<Workload> generateSyntheticAgenticWorkload(const SyntheticAgenticSpec& spec);

}  // namespace mocker::replay
