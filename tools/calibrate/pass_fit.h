// Per-pass calibration (docs/calibration.md, "Per-pass measurements"): when the real engine's
// forward passes were measured one by one (batch composition and duration of each pass), the
// roofline coefficients are fitted to them directly — a nonlinear least-squares fit of the modelled
// pass time (engine/roofline.h rooflinePass) to the measured one, by Eigen's Levenberg–Marquardt
// (libeigen3-dev, unsupported/Eigen/NonLinearOptimization) with a numerical Jacobian — instead of
// replaying whole runs.
//
// Per-pass CSV (header first; columns in any order, others ignored; no quoted fields): one row per
// sequence of a pass —
//   pass         pass id (non-negative integer); the rows of one pass are consecutive
//   new_tokens   tokens the sequence computed in the pass (a prompt chunk, or 1 for a decode), >= 1
//   context      tokens of the sequence already in KV before the pass, >= 0
//   duration_ms  the pass's measured duration, ms, > 0; the same on every row of the pass
//
// Residual of pass i: modelled / measured − 1 (relative, so short and long passes weigh alike).
// Each coefficient is searched through x ↦ lower + (upper − lower)(1 + sin x)/2, which keeps it
// inside its table bounds. Coefficients the passes cannot constrain (their term is absent from
// every pass, e.g. MoE on a dense model) keep their start value and are reported as such.
//
// Pure functions; deterministic (no randomness; same input ⇒ same output, byte for byte).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/roofline.h"

namespace mocker::calibrate {

/// One measured forward pass.
struct MeasuredPass {
  std::vector<engine::PassSequence> sequences;
  double duration_ms = 0.0;
  std::size_t line = 0;  ///< of its first row
};

/// Parses the per-pass CSV (named `source` in errors: "<source> line 7: field 'context': …").
Result<std::vector<MeasuredPass>> parsePassesCsv(std::string_view text, std::string_view source);

/// Writes passes in the same format (pass ids 0, 1, …; durations with 17 significant digits).
std::string formatPassesCsv(const std::vector<MeasuredPass>& passes);

struct PassFitSummary {
  double median_abs_error_pct = 0.0;  ///< median over passes of |modelled / measured − 1| × 100
  double mean_abs_error_pct = 0.0;
  double max_abs_error_pct = 0.0;
};

/// The error summary of `config`'s coefficients on `passes`, each pass timed as the engine times
/// it with CUDA-graph padding up to `cuda_graph_max_tokens` (engine::engineCudaGraphMaxTokens of
/// the deployment's engine settings; 0 = no padding).
PassFitSummary scorePasses(const engine::RooflineConfig& config,
                           const std::vector<MeasuredPass>& passes,
                           std::uint32_t cuda_graph_max_tokens = 0);

struct PassFitResult {
  engine::RooflineCoefficients coefficients;  ///< the start with the fitted ones replaced
  std::vector<std::string> fitted;            ///< coefficient names fitted
  std::vector<std::string> unconstrained;     ///< asked for, but absent from every pass (kept)
  PassFitSummary before;                      ///< at the start coefficients
  PassFitSummary after;
  int evaluations = 0;      ///< residual-vector evaluations (Jacobian columns included)
  std::string stop_reason;  ///< Eigen's LevenbergMarquardt status
};

/// Fits the coefficients named in `names` (engine::rooflineCoefficientTable() names; empty = the
/// default set: every coefficient but kernel_overhead_us, which is collinear with
/// pass_overhead_ms — every pass of one deployment launches the same kernels) to `passes`,
/// starting from `deployment.coefficients`, with the passes padded as scorePasses says (the same
/// padding the engine applies when it replays with these settings, so the fitted coefficients
/// are not biased by it). Errors: an unknown name, fewer passes than fitted coefficients, a
/// deployment checkRooflineConfig rejects.
Result<PassFitResult> fitPasses(const engine::RooflineConfig& deployment,
                                const std::vector<MeasuredPass>& passes,
                                const std::vector<std::string>& names,
                                std::uint32_t cuda_graph_max_tokens = 0);

}  // namespace mocker::calibrate
