// Small statistics helpers for forward-pass metrics.
//
// Internal to engine/. Value types.
#pragma once

#include <cstdint>

namespace mocker::engine::detail {

/// Welford's online mean/variance; variance() is the population variance (0 for n = 0).
struct Welford {
  std::uint64_t n = 0;
  double mean = 0.0;
  double m2 = 0.0;

  void add(double x) {
    ++n;
    const double d = x - mean;
    mean += d / static_cast<double>(n);
    m2 += d * (x - mean);
  }
  double variance() const { return n == 0 ? 0.0 : m2 / static_cast<double>(n); }
};

/// Count, sum and sum of squares with exact integer arithmetic, supporting removal; used for the
/// queued-request statistics that change incrementally as requests enter and leave `waiting`.
class RunningMoments {
 public:
  void add(std::uint64_t x) {
    ++n_;
    sum_ += x;
    sum_sq_ += static_cast<U128>(x) * x;
  }
  void remove(std::uint64_t x) {
    --n_;
    sum_ -= x;
    sum_sq_ -= static_cast<U128>(x) * x;
  }
  std::uint64_t count() const { return n_; }
  std::uint64_t sum() const { return sum_; }
  /// Population variance: (n·Σx² − (Σx)²) / n², exact numerator.
  double variance() const {
    if (n_ == 0) return 0.0;
    const U128 num = static_cast<U128>(n_) * sum_sq_ - static_cast<U128>(sum_) * sum_;
    const double n = static_cast<double>(n_);
    return static_cast<double>(num) / (n * n);
  }

 private:
  __extension__ typedef unsigned __int128 U128;
  std::uint64_t n_ = 0;
  std::uint64_t sum_ = 0;
  U128 sum_sq_ = 0;
};

}  // namespace mocker::engine::detail
