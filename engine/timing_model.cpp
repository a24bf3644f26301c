#include "engine/timing_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mocker::engine {
namespace {

// Index i such that xs[i] <= x < xs[i+1], clamped to [0, n-2] so that values outside the range
// extrapolate linearly from the outermost segment. REQUIRES: xs.size() >= 2.
std::size_t segment(const std::vector<double>& xs, double x) {
  const auto it = std::upper_bound(xs.begin(), xs.end(), x);
  const auto idx = static_cast<std::size_t>(std::max<std::ptrdiff_t>(it - xs.begin() - 1, 0));
  return std::min(idx, xs.size() - 2);
}

double interp1(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.size() == 1) return ys[0];
  const std::size_t i = segment(xs, x);
  const double t = (x - xs[i]) / (xs[i + 1] - xs[i]);
  return ys[i] + t * (ys[i + 1] - ys[i]);
}

double interp2(const TimingProfile& p, double row_x, double col_x) {
  const auto& rows = p.decode_active_kv_tokens;
  const auto& cols = p.decode_context_length;
  // Interpolate along columns within the two bracketing rows, then between the rows.
  const auto along_cols = [&](std::size_t r) { return interp1(cols, p.decode_itl[r], col_x); };
  if (rows.size() == 1) return along_cols(0);
  const std::size_t r = segment(rows, row_x);
  const double t = (row_x - rows[r]) / (rows[r + 1] - rows[r]);
  const double a = along_cols(r);
  const double b = along_cols(r + 1);
  return a + t * (b - a);
}

// Clamps to >= floor but lets a non-finite value through so that the caller can fail the pass
// (std::max would silently turn NaN into the floor).
double clampFinite(double v, double floor) { return std::isfinite(v) ? std::max(v, floor) : v; }

}  // namespace

TimingModel::TimingModel(const EngineConfig& config)
    : kind_(config.timing_model),
      profile_(config.timing_profile ? &*config.timing_profile : nullptr),
      roofline_(config.timing_model == TimingModelKind::Roofline && config.roofline
                    ? &*config.roofline
                    : nullptr),
      cuda_graph_max_tokens_(engineCudaGraphMaxTokens(config)),
      fixed_prefill_ms_(config.fixed_prefill_ms.value_or(0.0)),
      fixed_decode_ms_(config.fixed_decode_ms.value_or(0.0)) {}

double TimingModel::prefillMs(std::uint64_t batch, std::uint64_t isl, std::uint64_t prefix) const {
  if (batch == 0 || isl <= prefix) return 0.0;
  const double t = static_cast<double>(batch) * static_cast<double>(isl - prefix);
  switch (kind_) {
    case TimingModelKind::Polynomial:
      return 4.209989e-07 * t * t + 1.518344e-02 * t + 1.650142e+01;
    case TimingModelKind::Interpolated:
      return clampFinite(interp1(profile_->prefill_isl, profile_->prefill_ttft_ms, t), 0.0);
    case TimingModelKind::Fixed:
      return fixed_prefill_ms_;
    case TimingModelKind::Roofline:
      return 0.0;  // passMs times the whole pass
  }
  return 0.0;
}

double TimingModel::decodeMs(std::uint64_t batch, std::uint64_t active_kv, std::uint64_t ctx,
                             std::uint64_t total_kv) const {
  if (batch == 0) return 0.0;
  switch (kind_) {
    case TimingModelKind::Polynomial: {
      const double u =
          total_kv == 0
              ? 1.0
              : std::min(static_cast<double>(active_kv) / static_cast<double>(total_kv), 1.0);
      return std::max(1.0, -25.74 * u * u + 54.01 * u + 5.74);
    }
    case TimingModelKind::Interpolated:
      return clampFinite(
          interp2(*profile_, static_cast<double>(active_kv), static_cast<double>(ctx)), 1.0);
    case TimingModelKind::Fixed:
      return fixed_decode_ms_;
    case TimingModelKind::Roofline:
      return 0.0;  // passMs times the whole pass
  }
  return 0.0;
}

double TimingModel::passMs(std::span<const PassSequence> sequences) const {
  return rooflinePass(*roofline_, sequences, cuda_graph_max_tokens_).total_ms;
}

}  // namespace mocker::engine
