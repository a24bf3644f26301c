#include "tools/calibrate_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string_view>

#include "tools/build_info.h"
#include "tools/calibrate/calibrate_html.h"
#include "tools/calibrate/fit.h"
#include "tools/calibrate/pass_fit.h"
#include "tools/calibrate/profile.h"
#include "tools/calibrate/recorded_run.h"
#include "tools/calibrate/simulate.h"
#include "tools/cli_options.h"
#include "tools/replay/workload.h"

namespace mocker::tools {

namespace cal = mocker::calibrate;

void addCalibrateCommand(CLI::App& app, CalibrateCommand& c) {
  c.cmd = app.add_subcommand(
      "calibrate",
      "Fit the timing model to recorded runs of a real engine, score it (TTFT, E2E, ITL) and "
      "write a profile for --config");
  c.cmd->add_option("RUN", c.runs,
                    "recorded runs: a run directory (trace.jsonl, ground_truth.csv, run.json) or "
                    "a `mocker replay --requests-jsonl` file with its .run.json sidecar (required "
                    "unless --passes)");
  c.cmd->add_option("--holdout", c.holdout,
                    "runs scored but not fitted on (each also given as RUN or only here)");
  c.cmd->add_flag("--leave-one-out", c.leave_one_out,
                  "for each RUN: fit on the others, score it; with -o, also fit on all and write");
  c.cmd->add_option("--evaluate", c.evaluate,
                    "score this profile (TOML, as written by -o) on every RUN; no fit");
  c.cmd->add_option("-o,--output", c.output,
                    "write the fitted profile (TOML) here; without it the profile is printed");
  c.cmd->add_option("--html", c.html,
                    "write a page: score tables, predicted vs recorded E2E per request, CDFs");
  c.cmd->add_flag("--json", c.json, "print the score tables and fits as JSON instead of text");
  c.cmd
      ->add_option("--params", c.params,
                   "parameters to fit (default: all; see below), comma-separated")
      ->delimiter(',');
  c.cmd
      ->add_option("--algorithm", c.algorithm,
                   "NLopt derivative-free algorithm: sbplx, bobyqa, neldermead, cobyla")
      ->capture_default_str();
  c.cmd->add_option("--max-evals", c.max_evaluations, "simulations of the fit runs per fit")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  c.cmd->add_option("--seed", c.seed, "seed of the starting points and the optimiser")
      ->capture_default_str();
  c.cmd
      ->add_option("--starts", c.starts,
                   "local searches per fit: from the defaults, then from seeded random points; "
                   "--max-evals is shared between them")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  c.cmd
      ->add_option("--prior-weight", c.prior_weight,
                   "weight of the prior that keeps each coefficient near its kernel-profile "
                   "default: loss = run error (%) + weight x sum of squared distances in prior "
                   "widths; 0 = run error only")
      ->check(between(0.0, 1e6))
      ->default_str(CLI::detail::to_string(cal::kDefaultPriorWeight));
  c.cmd
      ->add_option("--trace-block-size", c.trace_block_size,
                   "trace block size of --requests-jsonl runs (run directories: run.json, 16)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  c.cmd->add_option("--passes", c.passes,
                    "per-pass CSV (pass,new_tokens,context,duration_ms; one row per sequence of a "
                    "measured forward pass): fit the roofline coefficients to it by least squares "
                    "instead of replaying RUNs");
  c.cmd->add_option("--deployment", c.deployment,
                    "with --passes: a mocker config (TOML) with timing_model = \"roofline\" naming "
                    "the passes' model (model_config_path or [engine.model]), gpu and "
                    "tensor_parallel_size; its [engine.roofline] coefficients are the start");
  c.cmd->add_flag("--progress,!--no-progress", c.progress,
                  std::string("progress on stderr (only on a terminal)") + flagDefault(true));
  std::string footer =
      "Parameters (name: bounds, start, prior width — log-space for a positive start, else in "
      "the parameter's unit — doc; * = not fitted by default):\n";
  for (const cal::FitParameter& p : cal::allFitParameters()) {
    char bounds[128];
    std::snprintf(bounds, sizeof bounds, ": [%g, %g], %g, prior %g%s — ", p.lower, p.upper,
                  p.initial, p.prior_width, p.prior_center > 0.0 ? " (log)" : "");
    footer += "  " + p.key + (p.fitted_by_default ? "" : "*") + bounds + p.doc + "\n";
  }
  footer +=
      "Loss: the mean over fit runs of the mean absolute percentage error of E2E mean/p90/p99, "
      "TTFT mean/p90/p99 and ITL = (mean E2E - mean TTFT) / (mean output tokens - 1), plus "
      "--prior-weight x the sum over fitted parameters of z^2, z = ln(value / start) / width "
      "(value / width for a start of 0). "
      "Exit codes: 0 done, 1 bad input, 2 usage error.";
  c.cmd->footer(footer);
}

namespace {

/// Loaded runs, at stable addresses (PreparedRun points at them).
struct RunSet {
  std::vector<std::unique_ptr<cal::RecordedRun>> runs;
  std::vector<cal::PreparedRun> prepared;
  std::vector<bool> held_out;
};

Result<RunSet> loadRuns(const CalibrateCommand& c) {
  RunSet set;
  std::vector<std::string> paths = c.runs;
  std::set<std::string> holdout(c.holdout.begin(), c.holdout.end());
  for (const std::string& h : c.holdout) {
    if (std::find(paths.begin(), paths.end(), h) == paths.end()) paths.push_back(h);
  }
  std::set<std::string> seen;
  for (const std::string& path : paths) {
    if (!seen.insert(path).second) return invalidArgument("run '" + path + "' is given twice");
    Result<cal::RecordedRun> run = cal::loadRecordedRun(path, c.trace_block_size);
    if (!run) return run.error();
    set.runs.push_back(std::make_unique<cal::RecordedRun>(std::move(*run)));
    set.held_out.push_back(holdout.contains(path));
  }
  for (const auto& run : set.runs) {
    Result<cal::PreparedRun> p = cal::prepareRun(*run);
    if (!p) return p.error();
    set.prepared.push_back(std::move(*p));
  }
  return set;
}

/// "\r[calibrate] …" lines on a terminal.
class FitProgressLine {
 public:
  FitProgressLine(std::ostream& err, bool enabled) : err_(err), enabled_(enabled) {}
  std::function<void(const cal::FitProgress&)> callback(std::string label, std::uint32_t max) {
    if (!enabled_) return {};
    return [this, label = std::move(label), max](const cal::FitProgress& p) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "\r[calibrate] %s: evaluation %u/%u, loss %.2f %%, best %.2f %%", label.c_str(),
                    p.evaluations, max, p.loss, p.best_loss);
      err_ << buf << std::flush;
      dirty_ = true;
    };
  }
  void finish() {
    if (dirty_) err_ << "\n";
    dirty_ = false;
  }

 private:
  std::ostream& err_;
  bool enabled_;
  bool dirty_ = false;
};

bool writeFile(const std::string& path, const std::string& text, std::ostream& err) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) {
    file << text;
    file.close();
  }
  if (!file) {
    err << "mocker calibrate: cannot write '" << path << "'\n";
    return false;
  }
  return true;
}

std::string runIdentity(const cal::RecordedRun& run) {
  return run.name + " (" + std::to_string(run.requests.size()) + " requests, trace sha256 " +
         run.trace_sha256.substr(0, 16) + "…)";
}

/// Settings every fit applies before its parameters (the timing model they belong to).
std::vector<std::pair<std::string, std::string>> fixedSettings(
    std::span<const cal::FitParameter> params) {
  for (const cal::FitParameter& p : params) {
    if (cal::isRooflineKey(p.key)) return {{"timing_model", "\"roofline\""}};
  }
  return {};
}

/// What one fit produced.
struct FitOutcome {
  std::vector<const cal::PreparedRun*> fitted_on;
  cal::FitResult result;
  double seconds = 0.0;
};

struct Context {
  const CalibrateCommand& c;
  std::vector<cal::FitParameter> params;
  cal::FitOptions options;
  std::ostream& out;
  std::ostream& err;
  FitProgressLine progress;
};

/// Copies of `runs` with the fit's fixed settings applied to their base configuration.
Result<std::vector<cal::PreparedRun>> withFixedSettings(
    const Context& ctx, std::span<const cal::PreparedRun* const> runs) {
  std::vector<cal::PreparedRun> subset;
  const bool roofline = !fixedSettings(ctx.params).empty();
  for (const cal::PreparedRun* r : runs) {
    subset.push_back(*r);
    if (!roofline) continue;
    if (Status s = cal::useRoofline(subset.back(), subset.back().base); !s) return s.error();
  }
  return subset;
}

Result<FitOutcome> fitOn(Context& ctx, std::vector<const cal::PreparedRun*> runs,
                         const std::string& label) {
  Result<std::vector<cal::PreparedRun>> subset = withFixedSettings(ctx, runs);
  if (!subset) return subset.error();
  cal::FitOptions options = ctx.options;
  options.progress = ctx.progress.callback(label, options.max_evaluations);
  const auto start = std::chrono::steady_clock::now();
  Result<cal::FitResult> result = cal::fitParameters(*subset, ctx.params, options);
  ctx.progress.finish();
  if (!result) return result.error();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return FitOutcome{std::move(runs), std::move(*result), seconds};
}

/// Scores `runs` under a fitted assignment.
Result<std::vector<cal::RunEvaluation>> scoreWith(const Context& ctx, const FitOutcome& fit,
                                                  std::vector<const cal::PreparedRun*> runs) {
  Result<std::vector<cal::PreparedRun>> subset = withFixedSettings(ctx, runs);
  if (!subset) return subset.error();
  return cal::evaluateRuns(*subset, ctx.params, fit.result.values);
}

std::string profileText(const Context& ctx, const FitOutcome& fit) {
  cal::ProfileHeader header{.generator = std::string("mocker calibrate ") + buildVersion() +
                                         " (git " + buildGitRevision() + ")"};
  for (const cal::PreparedRun* r : fit.fitted_on) header.fitted_on.push_back(runIdentity(*r->run));
  char summary[320];
  std::snprintf(summary, sizeof summary,
                "loss %.3f %% (run error %.3f %% + prior %.3f, weight %g) after %u evaluations "
                "(%s, %u starts, seed %llu, max %u; %s)",
                fit.result.loss, fit.result.run_loss, fit.result.prior_penalty,
                ctx.options.prior_weight, fit.result.evaluations,
                std::string(cal::toString(ctx.options.algorithm)).c_str(), ctx.options.starts,
                static_cast<unsigned long long>(ctx.options.seed), ctx.options.max_evaluations,
                fit.result.stop_reason.c_str());
  header.fit_summary = summary;
  for (const std::string& key : fit.result.kept) {
    header.notes.push_back(key + " kept at its start value: no fit run exercises it");
  }
  return cal::formatProfile(header, fixedSettings(ctx.params), ctx.params, fit.result.values);
}

nlohmann::ordered_json fitJson(const Context& ctx, const FitOutcome& fit) {
  nlohmann::ordered_json j;
  j["fitted_on"] = nlohmann::ordered_json::array();
  for (const cal::PreparedRun* r : fit.fitted_on) j["fitted_on"].push_back(r->run->name);
  j["loss"] = fit.result.loss;
  j["run_loss"] = fit.result.run_loss;
  j["prior_penalty"] = fit.result.prior_penalty;
  j["prior_weight"] = ctx.options.prior_weight;
  j["evaluations"] = fit.result.evaluations;
  j["stop_reason"] = fit.result.stop_reason;
  j["kept"] = fit.result.kept;
  nlohmann::ordered_json values = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < ctx.params.size(); ++i) {
    values[ctx.params[i].key] = fit.result.values[i];
  }
  j["values"] = std::move(values);
  return j;
}

/// The outputs common to every mode: tables (or JSON) on stdout, the page.
struct Outputs {
  std::vector<cal::ScoreTable> tables;
  std::vector<cal::PlottedRun> plotted;
  nlohmann::ordered_json fits = nlohmann::ordered_json::array();
  std::string profile;
};

void addTable(Outputs& o, const std::string& title, std::vector<cal::RunEvaluation> evals,
              std::span<const cal::PreparedRun* const> runs, const std::string& role) {
  std::vector<cal::RunScore> scores;
  for (std::size_t i = 0; i < evals.size(); ++i) {
    scores.push_back(evals[i].score);
    o.plotted.push_back({runs[i]->run, std::move(evals[i]), role});
  }
  o.tables.push_back(cal::makeScoreTable(title, std::move(scores)));
}

int emit(const Context& ctx, const Outputs& o) {
  bool ok = true;
  if (ctx.c.json) {
    nlohmann::ordered_json j;
    j["tables"] = nlohmann::ordered_json::array();
    for (const cal::ScoreTable& t : o.tables) j["tables"].push_back(cal::scoreTableJson(t));
    j["fits"] = o.fits;
    ctx.out << j.dump(2) << "\n";
  } else {
    for (const cal::ScoreTable& t : o.tables) ctx.out << cal::formatScoreTable(t) << "\n";
  }
  if (!o.profile.empty()) {
    if (!ctx.c.output.empty()) {
      ok = writeFile(ctx.c.output, o.profile, ctx.err) && ok;
    } else if (!ctx.c.json) {
      ctx.out << o.profile;
    }
  }
  if (!ctx.c.html.empty()) {
    ok = writeFile(ctx.c.html,
                   cal::renderCalibrationHtml("mocker calibrate", o.tables, o.plotted, o.profile),
                   ctx.err) &&
         ok;
  }
  return ok ? 0 : 1;
}

int fail(std::ostream& err, const Error& e) {
  err << "mocker calibrate: " << e.message << "\n";
  return 1;
}

int runEvaluate(Context& ctx, const RunSet& set) {
  const Result<cal::LoadedProfile> profile = cal::loadProfile(ctx.c.evaluate);
  if (!profile) return fail(ctx.err, profile.error());
  std::vector<cal::RunEvaluation> evals;
  std::vector<const cal::PreparedRun*> runs;
  for (const cal::PreparedRun& p : set.prepared) {
    service::ServiceConfig config = p.base;
    if (Status s = cal::applyProfile(*profile, config); !s) return fail(ctx.err, s.error());
    if (config.engine.timing_model == engine::TimingModelKind::Roofline) {
      // The profile's coefficients on the run's deployment.
      if (Status s = cal::useRoofline(p, config); !s) return fail(ctx.err, s.error());
      config.engine.roofline->coefficients = config.roofline.coefficients;
    }
    Result<cal::Prediction> pred = cal::simulateRun(*p.run, config, profile->client);
    if (!pred) return fail(ctx.err, pred.error());
    cal::RunScore score = cal::scorePrediction(p, *pred);
    evals.push_back({std::move(score), std::move(*pred)});
    runs.push_back(&p);
  }
  Outputs o;
  addTable(o, "profile " + ctx.c.evaluate, std::move(evals), runs, "evaluated");
  return emit(ctx, o);
}

int runFit(Context& ctx, const RunSet& set) {
  std::vector<const cal::PreparedRun*> fit_runs, held;
  for (std::size_t i = 0; i < set.prepared.size(); ++i) {
    (set.held_out[i] ? held : fit_runs).push_back(&set.prepared[i]);
  }
  if (fit_runs.empty()) {
    ctx.err << "mocker calibrate: every run is held out; nothing to fit on\n";
    return 2;
  }
  Result<FitOutcome> fit = fitOn(ctx, fit_runs, "fit");
  if (!fit) return fail(ctx.err, fit.error());
  Outputs o;
  Result<std::vector<cal::RunEvaluation>> scored = scoreWith(ctx, *fit, fit_runs);
  if (!scored) return fail(ctx.err, scored.error());
  addTable(o, "fit runs", std::move(*scored), fit_runs, "fit");
  if (!held.empty()) {
    Result<std::vector<cal::RunEvaluation>> h = scoreWith(ctx, *fit, held);
    if (!h) return fail(ctx.err, h.error());
    addTable(o, "held-out runs", std::move(*h), held, "held out");
  }
  o.fits.push_back(fitJson(ctx, *fit));
  o.profile = profileText(ctx, *fit);
  char line[160];
  std::snprintf(line, sizeof line, "mocker calibrate: fit took %.1f s (%u evaluations)\n",
                fit->seconds, fit->result.evaluations);
  ctx.err << line;
  return emit(ctx, o);
}

int runLeaveOneOut(Context& ctx, const RunSet& set) {
  if (set.prepared.size() < 2) {
    ctx.err << "mocker calibrate: --leave-one-out needs at least two runs\n";
    return 2;
  }
  Outputs o;
  std::vector<cal::RunEvaluation> held_evals;
  std::vector<const cal::PreparedRun*> held_runs;
  for (std::size_t k = 0; k < set.prepared.size(); ++k) {
    std::vector<const cal::PreparedRun*> others;
    for (std::size_t i = 0; i < set.prepared.size(); ++i) {
      if (i != k) others.push_back(&set.prepared[i]);
    }
    Result<FitOutcome> fit = fitOn(ctx, others, "without " + set.prepared[k].run->name);
    if (!fit) return fail(ctx.err, fit.error());
    Result<std::vector<cal::RunEvaluation>> h = scoreWith(ctx, *fit, {&set.prepared[k]});
    if (!h) return fail(ctx.err, h.error());
    held_evals.push_back(std::move(h->front()));
    held_runs.push_back(&set.prepared[k]);
    o.fits.push_back(fitJson(ctx, *fit));
  }
  addTable(o, "held-out runs (leave-one-out)", std::move(held_evals), held_runs, "held out");
  if (!ctx.c.output.empty()) {
    std::vector<const cal::PreparedRun*> all;
    for (const cal::PreparedRun& p : set.prepared) all.push_back(&p);
    Result<FitOutcome> fit = fitOn(ctx, all, "all runs");
    if (!fit) return fail(ctx.err, fit.error());
    o.fits.push_back(fitJson(ctx, *fit));
    o.profile = profileText(ctx, *fit);
  }
  return emit(ctx, o);
}

/// --passes: the per-pass least-squares fit of the roofline coefficients.
int runPasses(const CalibrateCommand& c, std::ostream& out, std::ostream& err) {
  if (!c.runs.empty() || !c.holdout.empty() || c.leave_one_out || !c.evaluate.empty() ||
      !c.html.empty() || c.deployment.empty()) {
    err << "mocker calibrate: --passes needs --deployment and takes no RUN, --holdout, "
           "--leave-one-out, --evaluate or --html\n";
    return 2;
  }
  std::vector<std::string> names;
  for (const std::string& key : c.params) {
    if (!cal::isRooflineKey(key)) {
      err << "mocker calibrate: --params: '" << key
          << "' is not a roofline coefficient (a per-pass fit fits roofline.<name> only)\n";
      return 2;
    }
    names.push_back(key.substr(std::string_view("roofline.").size()));
  }
  Result<service::ServiceConfig> config = service::loadServiceConfig(c.deployment);
  if (!config) return fail(err, config.error());
  if (!config->engine.roofline) {
    err << "mocker calibrate: " << c.deployment
        << ": the deployment needs [engine] timing_model = \"roofline\"\n";
    return 1;
  }
  const Result<std::string> text = replay::readTextFile(c.passes);
  if (!text) return fail(err, text.error());
  const Result<std::vector<cal::MeasuredPass>> passes = cal::parsePassesCsv(*text, c.passes);
  if (!passes) return fail(err, passes.error());
  // Padded as the engine pads when it replays with the deployment's settings.
  const Result<cal::PassFitResult> fit = cal::fitPasses(
      *config->engine.roofline, *passes, names, engine::engineCudaGraphMaxTokens(config->engine));
  if (!fit) return fail(err, fit.error().withContext(c.passes));
  std::vector<cal::FitParameter> params;
  std::vector<double> values;
  for (const cal::FitParameter& p : cal::allFitParameters()) {
    const std::string name = p.key.substr(std::min(p.key.size(), std::string("roofline.").size()));
    if (!cal::isRooflineKey(p.key) ||
        std::find(fit->fitted.begin(), fit->fitted.end(), name) == fit->fitted.end()) {
      continue;
    }
    params.push_back(p);
    values.push_back(fit->coefficients.*(engine::findRooflineCoefficient(name)->member));
  }
  char line[320];
  std::snprintf(line, sizeof line,
                "%zu passes; |modelled / measured - 1|: median %.2f %%, mean %.2f %%, max %.2f %% "
                "(start: median %.2f %%, mean %.2f %%, max %.2f %%)",
                passes->size(), fit->after.median_abs_error_pct, fit->after.mean_abs_error_pct,
                fit->after.max_abs_error_pct, fit->before.median_abs_error_pct,
                fit->before.mean_abs_error_pct, fit->before.max_abs_error_pct);
  cal::ProfileHeader header{
      .generator =
          std::string("mocker calibrate ") + buildVersion() + " (git " + buildGitRevision() + ")",
      .fitted_on = {c.passes + " (per-pass fit on " + c.deployment + ")"},
      .fit_summary = std::string(line) + "; Levenberg-Marquardt, " +
                     std::to_string(fit->evaluations) + " evaluations, " + fit->stop_reason};
  for (const std::string& n : fit->unconstrained) {
    header.notes.push_back("roofline." + n + " kept at its start value: no pass exercises it");
  }
  out << line << "\n";
  for (const std::string& note : header.notes) out << note << "\n";
  const std::string profile = cal::formatProfile(header, fixedSettings(params), params, values);
  if (!c.output.empty()) return writeFile(c.output, profile, err) ? 0 : 1;
  out << profile;
  return 0;
}

}  // namespace

int runCalibrateCommand(const CalibrateCommand& c, std::ostream& out, std::ostream& err) {
  if (!c.passes.empty()) return runPasses(c, out, err);
  if (c.runs.empty()) {
    err << "mocker calibrate: RUN is required (or --passes)\n";
    return 2;
  }
  const int modes =
      (c.leave_one_out ? 1 : 0) + (c.evaluate.empty() ? 0 : 1) + (c.holdout.empty() ? 0 : 1);
  if (modes > 1) {
    err << "mocker calibrate: --leave-one-out, --holdout and --evaluate exclude each other\n";
    return 2;
  }
  const Result<cal::FitAlgorithm> algorithm = cal::parseFitAlgorithm(c.algorithm);
  if (!algorithm) {
    err << "mocker calibrate: --algorithm: " << algorithm.error().message << "\n";
    return 2;
  }
  std::vector<std::string> names = c.params;
  if (names.empty()) {
    for (const cal::FitParameter& p : cal::allFitParameters()) {
      if (p.fitted_by_default) names.push_back(p.key);
    }
  }
  Result<std::vector<cal::FitParameter>> params = cal::selectFitParameters(names);
  if (!params) {
    err << "mocker calibrate: --params: " << params.error().message << "\n";
    return 2;
  }
  Result<RunSet> set = loadRuns(c);
  if (!set) return fail(err, set.error());
  const bool tty = &err == &std::cerr && ::isatty(STDERR_FILENO) == 1 && c.progress;
  Context ctx{c,
              std::move(*params),
              {.algorithm = *algorithm,
               .max_evaluations = c.max_evaluations,
               .seed = c.seed,
               .starts = c.starts,
               .prior_weight = c.prior_weight.value_or(cal::kDefaultPriorWeight)},
              out,
              err,
              FitProgressLine(err, tty)};
  if (!c.evaluate.empty()) return runEvaluate(ctx, *set);
  if (c.leave_one_out) return runLeaveOneOut(ctx, *set);
  return runFit(ctx, *set);
}

}  // namespace mocker::tools
