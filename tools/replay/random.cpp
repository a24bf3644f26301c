#include "tools/replay/random.h"

#include <cmath>

#include "base/check.h"

namespace mocker::replay {

std::uint64_t SplitMix64::uniformIndex(std::uint64_t n) {
  MOCKER_CHECK(n >= 1);
  const auto i = static_cast<std::uint64_t>(uniform() * static_cast<double>(n));
  return i < n ? i : n - 1;
}

double sampleStandardNormal(SplitMix64& rng) {
  for (;;) {
    const double u = 2.0 * rng.uniform() - 1.0;
    const double v = 2.0 * rng.uniform() - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

double sampleNormal(SplitMix64& rng, double mean, double stddev) {
  if (stddev == 0.0) return mean;
  return mean + stddev * sampleStandardNormal(rng);
}

double sampleExponential(SplitMix64& rng, double mean) {
  return -mean * std::log1p(-rng.uniform());
}

double sampleGamma(SplitMix64& rng, double shape, double scale) {
  MOCKER_CHECK(shape > 0.0 && scale > 0.0);
  if (shape < 1.0) {
    const double g = sampleGamma(rng, shape + 1.0, 1.0);
    double u = rng.uniform();
    while (u == 0.0) u = rng.uniform();
    return scale * g * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0.0;
    double v = 0.0;
    do {
      x = sampleStandardNormal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng.uniform();
    if (u < 1.0 - 0.0331 * (x * x) * (x * x)) return scale * d * v;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return scale * d * v;
  }
}

}  // namespace mocker::replay
