#include "tools/calibrate/fit.h"

#include <nlopt.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>

#include "base/enum_names.h"
#include "engine/roofline.h"

namespace mocker::calibrate {
namespace {

constexpr double kInfiniteErrorPct = 1e4;
constexpr double kFailedEvaluationLoss = 1e6;

std::string numberText(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool logScale(const FitParameter& p) { return p.lower > 0.0 && p.upper >= 100.0 * p.lower; }

double toValue(const FitParameter& p, double x) {
  x = std::clamp(x, 0.0, 1.0);
  if (logScale(p)) return p.lower * std::pow(p.upper / p.lower, x);
  return p.lower + x * (p.upper - p.lower);
}

double toSearch(const FitParameter& p, double v) {
  v = std::clamp(v, p.lower, p.upper);
  if (p.upper == p.lower) return 0.0;
  if (logScale(p)) return std::log(v / p.lower) / std::log(p.upper / p.lower);
  return (v - p.lower) / (p.upper - p.lower);
}

constexpr EnumNames<FitAlgorithm, 4> kAlgorithmNames = {{
    {"sbplx", FitAlgorithm::Sbplx},
    {"bobyqa", FitAlgorithm::Bobyqa},
    {"neldermead", FitAlgorithm::NelderMead},
    {"cobyla", FitAlgorithm::Cobyla},
}};

nlopt_algorithm nloptAlgorithm(FitAlgorithm a) {
  switch (a) {
    case FitAlgorithm::Sbplx:
      return NLOPT_LN_SBPLX;
    case FitAlgorithm::Bobyqa:
      return NLOPT_LN_BOBYQA;
    case FitAlgorithm::NelderMead:
      return NLOPT_LN_NELDERMEAD;
    case FitAlgorithm::Cobyla:
      return NLOPT_LN_COBYLA;
  }
  return NLOPT_LN_SBPLX;
}

std::string stopReason(nlopt_result r) {
  static constexpr EnumNames<nlopt_result, 8> kStopReasons{{
      {"success", NLOPT_SUCCESS},
      {"stopval reached", NLOPT_STOPVAL_REACHED},
      {"ftol reached", NLOPT_FTOL_REACHED},
      {"xtol reached", NLOPT_XTOL_REACHED},
      {"maxeval reached", NLOPT_MAXEVAL_REACHED},
      {"maxtime reached", NLOPT_MAXTIME_REACHED},
      {"roundoff limited", NLOPT_ROUNDOFF_LIMITED},
      {"forced stop", NLOPT_FORCED_STOP},
  }};
  const std::string_view name = enumName(kStopReasons, r);
  if (name != "?") return std::string(name);
  return "failure (" + std::to_string(static_cast<int>(r)) + ")";
}

}  // namespace

Result<FitAlgorithm> parseFitAlgorithm(std::string_view name) {
  if (const auto a = enumFromName(kAlgorithmNames, name)) return *a;
  return invalidArgument("unknown algorithm '" + std::string(name) + "' (expected " +
                         enumNameList(kAlgorithmNames, ", ") + ")");
}

std::string_view toString(FitAlgorithm algorithm) { return enumName(kAlgorithmNames, algorithm); }

constexpr std::string_view kRooflinePrefix = "roofline.";

namespace {

/// Prior width (log-space standard deviation) of each roofline coefficient around its
/// kernel-profile default: the upper end of the kernel-profile fit's mean absolute log error
/// (docs/engine.md, "Default coefficients": GEMMs 0.06–0.26 → 0.15; attention 0.27–0.31, MoE and
/// collectives up to 0.30 → 0.3), and a factor of 2 (ln 2) for the CPU-side overheads, which no
/// kernel profile measures.
struct PriorWidth {
  std::string_view name;
  double log_sd;
};
constexpr double kLn2 = 0.69314718055994531;
constexpr std::array<PriorWidth, engine::kNumRooflineCoefficients> kRooflinePriorWidths{{
    {"pass_overhead_ms", kLn2},
    {"sequence_overhead_us", kLn2},
    {"kernel_overhead_us", kLn2},
    {"gemm_compute_efficiency", 0.15},
    {"gemm_memory_efficiency", 0.15},
    {"attention_prefill_efficiency", 0.3},
    {"attention_decode_efficiency", 0.3},
    {"attention_mixed_decode_factor", 0.3},
    {"moe_compute_efficiency", 0.3},
    {"moe_memory_efficiency", 0.3},
    {"allreduce_efficiency", 0.3},
    {"allreduce_latency_us", 0.3},
}};

double rooflinePriorWidth(std::string_view name) {
  for (const PriorWidth& w : kRooflinePriorWidths) {
    if (w.name == name) return w.log_sd;
  }
  return 0.0;  // unreachable: fit_test checks that every coefficient has a width
}

/// A log-space prior for a positive value below centre / 1000 (bounds of 0) takes this value.
constexpr double kLogPriorFloor = 1e-3;

}  // namespace

double priorZ(const FitParameter& p, double value) {
  if (p.prior_center > 0.0) {
    return std::log(std::max(value, kLogPriorFloor * p.prior_center) / p.prior_center) /
           p.prior_width;
  }
  return (value - p.prior_center) / p.prior_width;
}

double priorPenalty(std::span<const FitParameter> params, std::span<const double> values,
                    double prior_weight) {
  if (prior_weight == 0.0) return 0.0;
  double sum = 0.0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double z = priorZ(params[i], values[i]);
    sum += z * z;
  }
  return prior_weight * sum;
}

bool isRooflineKey(std::string_view key) { return key.starts_with(kRooflinePrefix); }

std::vector<FitParameter> allFitParameters() {
  std::vector<FitParameter> out;
  for (const engine::RooflineCoefficientInfo& c : engine::rooflineCoefficientTable()) {
    out.push_back({"roofline." + std::string(c.name), c.lower, c.upper, c.default_value,
                   std::string(c.doc), true, c.default_value, rooflinePriorWidth(c.name)});
  }
  // Client terms: 0 unless the runs say otherwise (reference runs are recorded in the engine);
  // 10 ms per request and 0.1 ms per token are one width.
  out.push_back({std::string(kClientPerRequestKey), 0.0, 500.0, 0.0,
                 "client-side latency added to TTFT and E2E of every request (ms)", true, 0.0,
                 10.0});
  out.push_back({std::string(kClientPerTokenKey), 0.0, 5.0, 0.0,
                 "client-side latency per output token, added to E2E (ms)", true, 0.0, 0.1});
  // The polynomial ratios have no physical default: a weak prior (a factor of 4 is one width).
  constexpr double kLn4 = 2.0 * kLn2;
  out.push_back({"speedup_ratio", 0.05, 20.0, 1.0,
                 "polynomial model: divides every pass time (prefill and decode)", false, 1.0,
                 kLn4});
  out.push_back({"decode_speedup_ratio", 0.05, 20.0, 1.0,
                 "polynomial model: further divides the decode part of a pass", false, 1.0, kLn4});
  return out;
}

Result<std::vector<FitParameter>> selectFitParameters(const std::vector<std::string>& names) {
  const std::vector<FitParameter> all = allFitParameters();
  std::vector<FitParameter> out;
  for (const std::string& name : names) {
    if (name.empty()) continue;
    const auto it =
        std::find_if(all.begin(), all.end(), [&](const FitParameter& p) { return p.key == name; });
    if (it == all.end()) {
      std::string known;
      for (const FitParameter& p : all) known += (known.empty() ? "" : ", ") + p.key;
      return invalidArgument("unknown parameter '" + name + "' (known: " + known + ")");
    }
  }
  for (const FitParameter& p : all) {
    if (std::find(names.begin(), names.end(), p.key) != names.end()) out.push_back(p);
  }
  return out;
}

Status applyParameters(std::span<const FitParameter> params, std::span<const double> values,
                       service::ServiceConfig& config, ClientOverhead& client) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].key == kClientPerRequestKey) {
      client.per_request_ms = values[i];
    } else if (params[i].key == kClientPerTokenKey) {
      client.per_token_ms = values[i];
    } else if (isRooflineKey(params[i].key)) {
      const engine::RooflineCoefficientInfo* c = engine::findRooflineCoefficient(
          std::string_view(params[i].key).substr(kRooflinePrefix.size()));
      if (c == nullptr || !config.engine.roofline) {
        return invalidArgument(params[i].key + ": not a coefficient of a configured roofline");
      }
      config.engine.roofline->coefficients.*(c->member) = values[i];
    } else if (Status s = service::setConfigValue(config, "engine." + params[i].key,
                                                  numberText(values[i]));
               !s) {
      return s;
    }
  }
  return {};
}

Result<std::vector<RunEvaluation>> evaluateRuns(std::span<const PreparedRun> runs,
                                                std::span<const FitParameter> params,
                                                std::span<const double> values) {
  std::vector<RunEvaluation> out;
  for (const PreparedRun& run : runs) {
    service::ServiceConfig config = run.base;
    ClientOverhead client;
    if (Status s = applyParameters(params, values, config, client); !s) return s.error();
    Result<Prediction> p = simulateRun(*run.run, config, client);
    if (!p) return p.error();
    RunScore score = scorePrediction(run, *p);
    out.push_back({std::move(score), std::move(*p)});
  }
  return out;
}

double calibrationLoss(std::span<const RunEvaluation> evaluations) {
  if (evaluations.empty()) return 0.0;
  double total = 0.0;
  for (const RunEvaluation& e : evaluations) {
    double run_total = 0.0;
    for (double err : e.score.error_pct) {
      run_total += std::isfinite(err) ? err : kInfiniteErrorPct;
    }
    total += run_total / static_cast<double>(kNumMetrics);
  }
  return total / static_cast<double>(evaluations.size());
}

namespace {

struct Objective {
  std::span<const PreparedRun> runs;
  std::span<const FitParameter> params;
  const FitOptions* options = nullptr;
  std::uint32_t evaluations = 0;
  double best_loss = std::numeric_limits<double>::infinity();
  std::vector<double> best_values;
  std::optional<Error> first_error;
};

double objective(unsigned n, const double* x, double* /*grad*/, void* data) {
  auto& o = *static_cast<Objective*>(data);
  std::vector<double> values(n);
  for (unsigned i = 0; i < n; ++i) values[i] = toValue(o.params[i], x[i]);
  const Result<std::vector<RunEvaluation>> evals = evaluateRuns(o.runs, o.params, values);
  double loss = kFailedEvaluationLoss;
  if (evals) {
    loss = calibrationLoss(*evals) + priorPenalty(o.params, values, o.options->prior_weight);
  } else if (!o.first_error) {
    o.first_error = evals.error();
  }
  ++o.evaluations;
  // Ties keep the earlier assignment, so the result does not depend on evaluation order.
  if (loss < o.best_loss) {
    o.best_loss = loss;
    o.best_values = values;
  }
  if (o.options->progress) o.options->progress({o.evaluations, loss, o.best_loss});
  return loss;
}

}  // namespace

bool parameterExercised(const FitParameter& param, std::span<const PreparedRun> runs) {
  if (!isRooflineKey(param.key)) return true;
  const engine::RooflineCoefficientInfo* e =
      engine::findRooflineCoefficient(std::string_view(param.key).substr(kRooflinePrefix.size()));
  if (e == nullptr) return true;
  // Probe passes: a decode batch, a prompt chunk alone, a prompt chunk beside decodes.
  const std::vector<std::vector<engine::PassSequence>> probes = {
      std::vector<engine::PassSequence>(16, {.new_tokens = 1, .context = 1024}),
      {{.new_tokens = 512, .context = 0}},
      {{.new_tokens = 256, .context = 512},
       {.new_tokens = 1, .context = 2048},
       {.new_tokens = 1, .context = 2048}}};
  for (const PreparedRun& run : runs) {
    if (!run.deployment) continue;
    engine::RooflineConfig low = *run.deployment, high = *run.deployment;
    low.coefficients.*(e->member) = e->lower;
    high.coefficients.*(e->member) = e->upper;
    for (const auto& probe : probes) {
      if (engine::rooflinePass(low, probe).total_ms != engine::rooflinePass(high, probe).total_ms) {
        return true;
      }
    }
  }
  return false;
}

namespace {

Result<FitResult> searchParameters(std::span<const PreparedRun> runs,
                                   std::span<const FitParameter> params,
                                   const FitOptions& options) {
  const auto n = static_cast<unsigned>(params.size());
  const std::uint32_t starts = std::max<std::uint32_t>(1, options.starts);
  const std::uint32_t total = std::max<std::uint32_t>(1, options.max_evaluations);
  nlopt_srand(options.seed);
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Objective o{.runs = runs, .params = params, .options = &options};
  std::string reasons;
  std::vector<double> lower(n, 0.0), upper(n, 1.0), x(n);
  for (std::uint32_t k = 0; k < starts && o.evaluations < total; ++k) {
    for (unsigned i = 0; i < n; ++i) {
      x[i] = k == 0 ? toSearch(params[i], params[i].initial) : uniform(rng);
    }
    // An equal share of what is left, so every search runs even if an earlier one stopped early.
    const std::uint32_t budget = (total - o.evaluations) / (starts - k);
    if (budget == 0) continue;
    nlopt_opt opt = nlopt_create(nloptAlgorithm(options.algorithm), n);
    if (opt == nullptr) return Error{ErrorCode::Internal, "nlopt_create failed"};
    nlopt_set_lower_bounds(opt, lower.data());
    nlopt_set_upper_bounds(opt, upper.data());
    nlopt_set_min_objective(opt, objective, &o);
    nlopt_set_maxeval(opt, static_cast<int>(budget));
    nlopt_set_xtol_abs1(opt, options.xtol);
    nlopt_set_initial_step1(opt, options.initial_step);
    double final_loss = 0.0;
    const nlopt_result r = nlopt_optimize(opt, x.data(), &final_loss);
    nlopt_destroy(opt);
    reasons += (reasons.empty() ? "" : ", ") + stopReason(r);
  }
  if (o.best_values.empty() || o.best_loss >= kFailedEvaluationLoss) {
    if (o.first_error) return *o.first_error;
    return Error{ErrorCode::Internal, "the optimiser stopped before any evaluation: " + reasons};
  }
  const double penalty = priorPenalty(params, o.best_values, options.prior_weight);
  return FitResult{.values = o.best_values,
                   .loss = o.best_loss,
                   .run_loss = o.best_loss - penalty,
                   .prior_penalty = penalty,
                   .evaluations = o.evaluations,
                   .stop_reason = reasons};
}

}  // namespace

Result<FitResult> fitParameters(std::span<const PreparedRun> runs,
                                std::span<const FitParameter> params, const FitOptions& options) {
  if (params.empty()) return invalidArgument("no parameters to fit");
  if (runs.empty()) return invalidArgument("no runs to fit on");
  std::vector<FitParameter> active;
  std::vector<std::size_t> index;
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (parameterExercised(params[i], runs)) {
      active.push_back(params[i]);
      index.push_back(i);
    } else {
      kept.push_back(params[i].key);
    }
  }
  if (active.empty()) {
    return invalidArgument("no parameter to fit is exercised by the fit runs' deployments");
  }
  Result<FitResult> result = searchParameters(runs, active, options);
  if (!result) return result;
  std::vector<double> values;
  for (const FitParameter& p : params) values.push_back(std::clamp(p.initial, p.lower, p.upper));
  for (std::size_t k = 0; k < index.size(); ++k) values[index[k]] = result->values[k];
  result->values = std::move(values);
  result->kept = std::move(kept);
  return result;
}

}  // namespace mocker::calibrate
