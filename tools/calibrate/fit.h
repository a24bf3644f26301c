// The fit of `mocker calibrate` (docs/calibration.md, "Fit"): minimises the calibration loss
//   L = mean over the fit runs of ( mean over the seven metrics of score.h of their absolute
//       percentage error ), in %,  + prior_weight · Σ_params z²   (the prior penalty, MAP),
// where z is a parameter's distance from its prior centre (the kernel-profile default) in prior
// widths (log-space for a positive centre: z = ln(value / centre) / width; linear for a centre of
// 0: z = value / width), over a set of bounded parameters with a derivative-free optimiser of NLopt
// (Debian libnlopt-dev; NLOPT_LN_NELDERMEAD by default). Each evaluation replays every fit run in
// the simulator (simulate.h). Parameters are searched in [0, 1] per parameter: linear between the
// bounds, or logarithmic when the lower bound is > 0 and the upper one at least 100 times it.
// Several local searches (FitOptions::starts) from seeded starting points; the best result wins.
// Deterministic: the starting points and NLopt's generator are seeded and the simulation has no
// randomness of its own.
//
// Not thread-safe (NLopt's seed is global); runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "tools/calibrate/simulate.h"

namespace mocker::calibrate {

/// Keys of the two client-overhead parameters (simulate.h); every other key is an [engine] key
/// path without "engine." ("speedup_ratio", "roofline.<coefficient>").
inline constexpr std::string_view kClientPerRequestKey = "client.overhead_per_request_ms";
inline constexpr std::string_view kClientPerTokenKey = "client.overhead_per_token_ms";

struct FitParameter {
  std::string key;
  double lower = 0.0;
  double upper = 1.0;
  double initial = 0.0;  ///< the start of the search (clamped to the bounds)
  std::string doc;
  bool fitted_by_default = true;  ///< part of the default --params
  /// The prior: centre (the kernel-profile default; 0 for the client terms) and width — log-space
  /// standard deviation when prior_center > 0, else a linear scale in the parameter's unit.
  double prior_center = 0.0;
  double prior_width = 1.0;  ///< > 0
};

/// The prior weight of FitOptions (--prior-weight): chosen by leave-one-run-out on the five
/// reference runs among 0, 0.25, 1, 4 and 16 (docs/benchmarks.md, "Calibration accuracy").
inline constexpr double kDefaultPriorWeight = 1.0;

/// A parameter's distance from its prior centre in prior widths (see above). A value at or
/// below 0 with a positive centre counts as centre / 1000.
double priorZ(const FitParameter& param, double value);

/// prior_weight · Σ priorZ(param, value)², in % (the loss's unit).
double priorPenalty(std::span<const FitParameter> params, std::span<const double> values,
                    double prior_weight);

/// Every parameter `mocker calibrate` can fit: the roofline timing model's coefficients
/// (engine/roofline.h rooflineCoefficientTable(), keys "roofline.<name>", the table's bounds and
/// defaults), the two client-overhead terms, and — not fitted by default — the polynomial
/// model's speedup_ratio and decode_speedup_ratio.
std::vector<FitParameter> allFitParameters();

/// True for a key of a roofline coefficient ("roofline.<name>").
bool isRooflineKey(std::string_view key);

/// The parameters named in `names` (in allFitParameters order; "" entries ignored); an unknown
/// name is an error listing the known ones.
Result<std::vector<FitParameter>> selectFitParameters(const std::vector<std::string>& names);

/// A parameter assignment applied to a prepared run's base configuration: roofline coefficients
/// into config.engine.roofline (REQUIRES: set, see useRoofline), other [engine] keys through
/// service::setConfigValue, the client terms into `client`.
Status applyParameters(std::span<const FitParameter> params, std::span<const double> values,
                       service::ServiceConfig& config, ClientOverhead& client);

/// One run simulated and scored.
struct RunEvaluation {
  RunScore score;
  Prediction prediction;
};

/// Simulates and scores every run under base config + assignment.
Result<std::vector<RunEvaluation>> evaluateRuns(std::span<const PreparedRun> runs,
                                                std::span<const FitParameter> params,
                                                std::span<const double> values);

/// The loss above; an infinite error (a recorded metric of 0) counts as 1e4 %.
double calibrationLoss(std::span<const RunEvaluation> evaluations);

enum class FitAlgorithm : std::uint8_t { Sbplx, Bobyqa, NelderMead, Cobyla };
Result<FitAlgorithm> parseFitAlgorithm(std::string_view name);  ///< sbplx|bobyqa|neldermead|cobyla
std::string_view toString(FitAlgorithm algorithm);

struct FitProgress {
  std::uint32_t evaluations = 0;
  double loss = 0.0;       ///< of the latest evaluation
  double best_loss = 0.0;  ///< lowest so far
};

struct FitOptions {
  FitAlgorithm algorithm = FitAlgorithm::NelderMead;
  std::uint32_t max_evaluations = 200;  ///< >= 1
  std::uint64_t seed = 1;
  /// Local searches: the first from every parameter's `initial`, the others from points drawn
  /// uniformly in the search space by a generator seeded with `seed`; each gets an equal share
  /// of max_evaluations. The loss of a replayed trace is piecewise smooth with many shallow
  /// local minima, so a single local search often stops early.
  std::uint32_t starts = 4;   ///< >= 1
  double initial_step = 0.1;  ///< in the [0, 1] search space
  double xtol = 1e-3;         ///< stop when a step moves every coordinate less than this
  /// Weight of the prior penalty (% of loss per squared prior width); 0 = maximum likelihood
  /// (the run error alone).
  double prior_weight = kDefaultPriorWeight;
  std::function<void(const FitProgress&)> progress{};  ///< after every evaluation
};

struct FitResult {
  std::vector<double> values;  ///< best assignment, one per parameter
  double loss = 0.0;           ///< run_loss + prior_penalty
  double run_loss = 0.0;       ///< calibrationLoss of the fit runs at `values`
  double prior_penalty = 0.0;  ///< priorPenalty of the fitted (not kept) parameters
  std::uint32_t evaluations = 0;
  std::string stop_reason;  ///< NLopt's result of each local search, e.g. "xtol reached"
  /// Parameters no fit run exercises (parameterExercised), kept at their start value.
  std::vector<std::string> kept;
};

/// False for a roofline coefficient that changes no pass of any fit run's deployment (e.g. the
/// MoE efficiencies when no fit run serves an MoE model, the all-reduce terms when every fit run
/// is on one GPU): fitted, it would drift freely and decide a held-out run's error by chance.
/// Probed with three passes (decodes, a prompt chunk, both) at the coefficient's two bounds.
bool parameterExercised(const FitParameter& param, std::span<const PreparedRun> runs);

/// Fits `params` to `runs`; parameters the runs do not exercise keep their start value
/// (FitResult::kept). An evaluation whose simulation fails (e.g. a configuration the
/// engine rejects) scores 1e6; the fit fails only when no evaluation succeeded (that error).
Result<FitResult> fitParameters(std::span<const PreparedRun> runs,
                                std::span<const FitParameter> params, const FitOptions& options);

}  // namespace mocker::calibrate
