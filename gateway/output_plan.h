// Output plan: how many tokens each choice of a request generates (gateway/README.md "Output
// length"). With `ignore_eos` exactly max_tokens. Otherwise a modelled end-of-sequence: a length
// drawn from Normal(mean, stddev) (SplitMix64 + polar method, as the synthetic workloads draw
// lengths: rounded, at least 1), clamped to [max(min_tokens, 1), max_tokens]; a choice that ends
// short of max_tokens reports finish_reason "stop", one that reaches it "length".
//
// The draw is seeded by the request's `seed` when given, else by the gateway's seed and the
// request's sequence number; choice c uses the c-th draw. Same seeds, same lengths. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "gateway/openai_request.h"

namespace mocker::gateway {

struct LengthModel {
  double mean = 128.0;
  double stddev = 64.0;  ///< 0 ⇒ always round(mean)
  std::uint64_t seed = 0;
};

/// One length per choice (prompts × n, choice index order).
std::vector<std::uint32_t> planOutputLengths(const GenerateRequest& request,
                                             const LengthModel& model, std::uint64_t sequence);

}  // namespace mocker::gateway
