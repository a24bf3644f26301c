// Distribution statistics for replay reports (docs/metrics.md, Statistics): count, mean, min,
// max, p50, p75, p90, p95, p99 and population std, computed exactly from all samples.
//
// Pure functions; thread-compatible.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace mocker::replay {

/// Summary of one sample set. When count == 0 every other field is meaningless (0) and output
/// formats show null / "–". With count == 1 every percentile is the value and std is 0.
struct Distribution {
  std::size_t count = 0;
  double mean = 0.0;
  double min = 0.0;
  double max = 0.0;
  double p50 = 0.0;
  double p75 = 0.0;
  double p90 = 0.0;
  double p95 = 0.0;
  double p99 = 0.0;
  double std = 0.0;  ///< population standard deviation (divide by n), like numpy.std
  /// p0, p1, …, p100 (kQuantilePoints values, percentileLinear; p0 = min, p100 = max): the
  /// distribution's shape for CDF plots and `mocker compare`. Empty when count == 0.
  std::vector<double> quantiles{};
};

/// Number of entries of Distribution::quantiles: every whole percentile from 0 to 100.
inline constexpr std::size_t kQuantilePoints = 101;

/// numpy's default percentile ("linear"): for sorted x_0..x_{n−1}, h = (n − 1)·p/100,
/// value = x_⌊h⌋ + (h − ⌊h⌋)·(x_⌈h⌉ − x_⌊h⌋). [10, 20, 30, 40]: p50 = 25, p90 = 37, p99 = 39.7.
/// REQUIRES: `sorted` non-empty and ascending, 0 <= p <= 100.
double percentileLinear(std::span<const double> sorted, double p);

/// Sorts `samples` ascending. The result is the sequence std::sort would produce (equal values
/// are bit-identical, so their order cannot show), computed in linear passes for large inputs
/// (from 4,096 samples): a counting sort over the distinct values when they repeat (at most
/// 1/8 distinct, typical of pooled inter-token gaps), otherwise an LSD radix sort over the
/// IEEE 754 bit patterns. The only equal-comparing values with different bits, −0.0 and +0.0,
/// come out −0.0 first. REQUIRES: no NaN.
void sortSamples(std::vector<double>& samples);

/// Summarises samples that are already sorted ascending. Deterministic: sums run in sorted
/// order; std uses the two-pass formula.
Distribution summarizeSorted(std::span<const double> sorted);

/// sortSamples + summarizeSorted on `samples` (taken by value).
Distribution summarize(std::vector<double> samples);

}  // namespace mocker::replay
