#include "tools/replay/stats.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace mocker::replay {

double percentileLinear(const std::vector<double>& sorted, double p) {
  MOCKER_CHECK(!sorted.empty() && p >= 0.0 && p <= 100.0);
  const double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const double lo_h = std::floor(h);
  const auto lo = static_cast<std::size_t>(lo_h);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - lo_h) * (sorted[hi] - sorted[lo]);
}

Distribution summarize(std::vector<double> samples) {
  Distribution d;
  d.count = samples.size();
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  double sum = 0.0;
  for (const double x : samples) sum += x;
  const auto n = static_cast<double>(samples.size());
  d.mean = sum / n;
  double squares = 0.0;
  for (const double x : samples) squares += (x - d.mean) * (x - d.mean);
  d.std = std::sqrt(squares / n);
  d.min = samples.front();
  d.max = samples.back();
  d.p50 = percentileLinear(samples, 50);
  d.p75 = percentileLinear(samples, 75);
  d.p90 = percentileLinear(samples, 90);
  d.p95 = percentileLinear(samples, 95);
  d.p99 = percentileLinear(samples, 99);
  return d;
}

}  // namespace mocker::replay
