#include "engine/speculative.h"

#include <xxhash.h>

#include <array>

namespace mocker::engine {
namespace {

double rateAt(const EngineConfig& config, std::uint32_t position) {
  return position <= config.spec_accept_rates.size() ? config.spec_accept_rates[position - 1] : 0.0;
}

}  // namespace

double specUniform(std::uint64_t spec_seed, std::uint32_t dp_rank, RequestId id, std::uint32_t step,
                   std::uint32_t position) {
  std::array<unsigned char, 24> buf{};
  const std::uint64_t seed = spec_seed + dp_rank;  // wraps like the u64 it is
  const std::uint64_t id_value = id.value();
  for (std::size_t i = 0; i < 8; ++i) {
    buf[i] = static_cast<unsigned char>(seed >> (8 * i));
    buf[8 + i] = static_cast<unsigned char>(id_value >> (8 * i));
  }
  for (std::size_t i = 0; i < 4; ++i) {
    buf[16 + i] = static_cast<unsigned char>(step >> (8 * i));
    buf[20 + i] = static_cast<unsigned char>(position >> (8 * i));
  }
  const std::uint64_t h = XXH3_64bits_withSeed(buf.data(), buf.size(), 0);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

std::uint32_t specBurst(const EngineConfig& config, std::uint32_t dp_rank, RequestId id,
                        std::uint32_t step, std::uint32_t remaining) {
  const std::uint32_t worst = specWorstCaseBurst(config, remaining);
  std::uint32_t burst = 1;
  // Draws beyond the clamp could not change the result: stop there.
  while (burst < worst &&
         specUniform(config.spec_seed, dp_rank, id, step, burst) < rateAt(config, burst)) {
    ++burst;
  }
  return burst;
}

double specExpectedBurst(const EngineConfig& config) {
  double expected = 1.0, run = 1.0;
  for (std::uint32_t i = 1; i <= config.spec_num_draft_tokens.value_or(0); ++i) {
    run *= rateAt(config, i);
    expected += run;
  }
  return expected;
}

}  // namespace mocker::engine
