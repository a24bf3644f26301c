// Portable, specified random numbers for synthetic workloads (docs/traces.md).
// std::*_distribution output is implementation-defined, so the samplers are written here and the
// same seed gives the same sequence on every platform (up to libm's log/sqrt/pow, which are only
// used on values that are rounded to integers or milliseconds afterwards).
//
// Not thread-safe; one generator per workload.
#pragma once

#include <cstdint>

namespace mocker::replay {

/// SplitMix64 (Steele, Lea, Flood 2014; the reference constants of Vigna's splitmix64.c).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  /// Next 64 random bits.
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E37'79B9'7F4A'7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D0'49BB'1331'11EBull;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, 1): the top 53 bits scaled by 2^-53.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n) by multiply-shift of a 53-bit uniform (bias < 2^-40 for n < 2^13).
  /// REQUIRES: n >= 1.
  std::uint64_t uniformIndex(std::uint64_t n);

 private:
  std::uint64_t state_;
};

/// Standard normal by the Marsaglia polar method; one value per call (the spare is discarded so
/// each call's consumption depends only on its own rejections).
double sampleStandardNormal(SplitMix64& rng);

/// Normal(mean, stddev); stddev 0 returns mean without consuming randomness.
double sampleNormal(SplitMix64& rng, double mean, double stddev);

/// Exponential with the given mean: −mean · ln(1 − U).
double sampleExponential(SplitMix64& rng, double mean);

/// Gamma(shape, scale) by Marsaglia–Tsang (2000); shape < 1 uses the boost
/// Gamma(shape + 1) · U^(1/shape). REQUIRES: shape > 0, scale > 0.
double sampleGamma(SplitMix64& rng, double shape, double scale);

}  // namespace mocker::replay
