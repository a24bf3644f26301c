#include "gateway/output_plan.h"

#include <algorithm>
#include <cmath>

#include "tools/replay/random.h"

namespace mocker::gateway {

std::vector<std::uint32_t> planOutputLengths(const GenerateRequest& request,
                                             const LengthModel& model, std::uint64_t sequence) {
  const std::size_t num_choices = request.prompts.size() * request.n;
  std::vector<std::uint32_t> lengths(num_choices, request.max_tokens);
  if (request.ignore_eos) return lengths;
  const std::uint64_t seed =
      request.seed ? *request.seed : model.seed ^ (sequence * 0x9E37'79B9'7F4A'7C15ull);
  replay::SplitMix64 rng(seed);
  const double lo = std::max<double>(1.0, request.min_tokens);
  const double hi = request.max_tokens;
  for (auto& length : lengths) {
    const double drawn = std::round(replay::sampleNormal(rng, model.mean, model.stddev));
    length = static_cast<std::uint32_t>(std::clamp(drawn, lo, hi));
  }
  return lengths;
}

}  // namespace mocker::gateway
