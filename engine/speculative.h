// Speculative decoding (engine/README.md "Speculative decoding"): how many tokens a ready request
// emits in one pass. A draft of k tokens is verified per pass; draft position i (1-based) is
// accepted with probability spec_accept_rates[i - 1], the burst is 1 + the number of leading
// accepted drafts, clamped to the tokens the request may still generate.
//
// The draws come from a counter-based generator: draw i of request `id` at its decode step j
// succeeds iff U < p_i, U = (XXH3_64(LE64(spec_seed + dp_rank) ‖ LE64(id) ‖ LE32(j) ‖ LE32(i),
// seed 0) >> 11) · 2^-53. A result depends only on those inputs, never on iteration order.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "engine/config.h"
#include "engine/types.h"

namespace mocker::engine {

/// The uniform [0, 1) variate of draw `position` (1-based) of request `id` at decode step `step`.
double specUniform(std::uint64_t spec_seed, std::uint32_t dp_rank, RequestId id, std::uint32_t step,
                   std::uint32_t position);

/// Tokens request `id` emits at its decode step `step` (0-based count of its earlier bursts),
/// given that it may generate `remaining` >= 1 more tokens: 1 + leading accepted drafts, at most
/// `remaining`. 1 when speculative decoding is off.
std::uint32_t specBurst(const EngineConfig& config, std::uint32_t dp_rank, RequestId id,
                        std::uint32_t step, std::uint32_t remaining);

/// The largest burst a request with `remaining` >= 1 tokens left can draw: min(1 + k,
/// remaining); its KV is acquired before the draws. 1 when speculative decoding is off.
inline std::uint32_t specWorstCaseBurst(const EngineConfig& config, std::uint32_t remaining) {
  const std::uint32_t k = config.spec_num_draft_tokens.value_or(0);
  return remaining < 1 + k ? remaining : 1 + k;
}

/// Expected tokens per pass without clamping: 1 + p1 + p1·p2 + … over the first k rates.
double specExpectedBurst(const EngineConfig& config);

}  // namespace mocker::engine
