#include "tools/replay_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "tools/build_info.h"
#include "tools/output_path.h"
#include "tools/replay/azure_trace.h"
#include "tools/replay/collector.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/report_html.h"
#include "tools/replay/report_output.h"
#include "tools/replay/run_identity.h"
#include "tools/replay/synthetic.h"
#include "tools/replay/trace_dialect.h"
#include "tools/replay_aliases.h"
#include "tools/replay_plan.h"
#include "tools/replay_run.h"

namespace mocker::tools {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// The arrival process of the synthetic generators from --arrival and its parameters.
replay::ArrivalProcess syntheticArrival(const ReplayFlags& f) {
  replay::ArrivalProcess a{.rate_per_s = f.request_rate,
                           .smoothness = f.gamma_smoothness,
                           .interval_ms = f.arrival_interval_ms};
  if (f.arrival == "burst") {
    a.kind = replay::ArrivalKind::Burst;
  } else if (f.arrival == "constant") {
    a.kind = replay::ArrivalKind::Constant;
  } else if (f.arrival == "gamma") {
    a.kind = replay::ArrivalKind::Gamma;
  } else if (f.arrival == "interval") {
    a.kind = replay::ArrivalKind::Interval;
  } else {
    a.kind = replay::ArrivalKind::Poisson;
  }
  return a;
}

/// The workload from the trace file or the synthetic flags (`format` from workloadFormat).
/// Errors here are about the input (exit 1).
Result<replay::Workload> loadWorkload(const ReplayFlags& f, const std::string& format,
                                      bool closed_loop) {
  const replay::TraceOptions options{.trace_block_size = f.trace_block_size,
                                     .arrival_speedup_ratio = f.arrival_speedup_ratio,
                                     .skip_invalid = f.skip_invalid,
                                     .require_timestamps = !closed_loop};
  if (format == "mooncake") return replay::loadMooncakeTrace(f.trace, options);
  if (format == "mooncake-delta") {
    return replay::loadMooncakeTrace(f.trace, options, replay::TraceFormat::MooncakeDelta);
  }
  if (format == "agentic") {
    return replay::loadMooncakeTrace(f.trace, options, replay::TraceFormat::Agentic);
  }
  if (format == "azure") return replay::loadAzureTrace(f.trace, options);
  const auto delayKind = [](const std::string& name) {
    return name == "constant"      ? replay::DelayKind::Constant
           : name == "exponential" ? replay::DelayKind::Exponential
                                   : replay::DelayKind::None;
  };
  if (format == "synthetic-agentic") {
    replay::SyntheticAgenticSpec spec{
        .sessions = f.num_requests,
        .calls_per_session = f.turns_per_session,
        .system_prompt_tokens = f.system_prompt_tokens,
        .user_prompt_tokens = {f.input_mean, f.input_stddev},
        .output_tokens = {f.output_mean, f.output_stddev},
        .tool_output_tokens = {f.tool_output_mean, f.tool_output_stddev},
        .tool_wait = {delayKind(f.tool_wait), f.tool_wait_ms},
        .subagent_probability = f.subagent_probability,
        .subagent_fanout = f.subagent_fanout,
        .block_size = f.trace_block_size,
        .seed = f.seed,
    };
    spec.arrival = syntheticArrival(f);
    MOCKER_TRY(replay::Workload workload, replay::generateSyntheticAgenticWorkload(spec));
    if (f.arrival_speedup_ratio != 1.0) {
      replay::normalizeArrivals(workload.sessions, f.arrival_speedup_ratio);
    }
    return workload;
  }
  replay::SyntheticSpec spec{
      .request_count = f.num_requests,
      .turns_per_session = f.turns_per_session,
      .input_tokens = {f.input_mean, f.input_stddev},
      .output_tokens = {f.output_mean, f.output_stddev},
      .shared_prefix_ratio = f.shared_prefix_ratio,
      .num_prefix_groups = f.num_prefix_groups,
      .session_context = f.session_context,
      .block_size = f.trace_block_size,
      .seed = f.seed,
      .loras = f.loras,
  };
  spec.arrival = syntheticArrival(f);
  spec.inter_turn_delay = {delayKind(f.inter_turn_delay), f.inter_turn_delay_ms};
  MOCKER_TRY(replay::Workload workload, replay::generateSyntheticWorkload(spec));
  // The arrival speed-up (docs/traces.md, Normalisation) applies to synthetic workloads too.
  if (f.arrival_speedup_ratio != 1.0) {
    replay::normalizeArrivals(workload.sessions, f.arrival_speedup_ratio);
  }
  return workload;
}

Status writeFile(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return Error{ErrorCode::IoError, "cannot open '" + path + "' for writing"};
  file << text;
  file.close();
  if (!file) return Error{ErrorCode::IoError, "cannot write '" + path + "'"};
  return {};
}

/// The sidecar that carries the run identity next to the per-request JSONL.
std::string identitySidecarPath(const std::string& jsonl_path) { return jsonl_path + ".run.json"; }

/// Every output path of the run, checked before any work: writable, and no two the same file.
Status checkOutputPaths(const ReplayFlags& f, const ReplayPlan& plan) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> outputs;  // option, path
  if (!plan.fault_log.empty()) outputs.emplace_back("--fault-log", plan.fault_log);
  if (!f.report_json.empty()) outputs.emplace_back("--report-json", f.report_json);
  if (!f.requests_jsonl.empty()) {
    outputs.emplace_back("--requests-jsonl", f.requests_jsonl);
    outputs.emplace_back("--requests-jsonl (its run identity sidecar)",
                         identitySidecarPath(f.requests_jsonl));
  }
  if (!f.report_html.empty()) outputs.emplace_back("--report-html", f.report_html);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    MOCKER_TRY_VOID(checkOutputFile(outputs[i].first, outputs[i].second));
    for (std::size_t k = 0; k < i; ++k) {
      if (fs::weakly_canonical(outputs[k].second) == fs::weakly_canonical(outputs[i].second)) {
        return invalidArgument(outputs[k].first + " and " + outputs[i].first +
                               " name the same file '" + outputs[i].second + "'");
      }
    }
  }
  return {};
}

/// The workload of a planned run: a .jsonl trace without --format is first read as the dialect
/// its first lines show (said on `err`; `format` becomes it). Errors (exit 1) name the trace.
Result<replay::Workload> loadInput(const ReplayFlags& f, std::string& format, bool closed_loop,
                                   std::ostream& err) {
  const std::optional<std::string> head =
      format == "mooncake" || format == "mooncake-delta" || format == "agentic"
          ? replay::readTraceHead(f.trace)
          : std::nullopt;
  const std::optional<Result<replay::DialectGuess>> guess =
      head ? std::optional(replay::detectJsonlDialect(*head)) : std::nullopt;
  if (f.format.empty() && guess) {
    if (!*guess) return Error{ErrorCode::Corruption, f.trace + ": " + guess->error().message};
    format = (*guess)->format;
    err << "mocker replay: " << f.trace << ": reading it as --format " << (*guess)->format << " ("
        << (*guess)->reason << ")\n";
  }
  Result<replay::Workload> workload = loadWorkload(f, format, closed_loop);
  if (!workload && guess && *guess && (*guess)->format != format) {
    return Error{workload.error().code, workload.error().message +
                                            " (its first lines look like --format " +
                                            (*guess)->format + ": " + (*guess)->reason + ")"};
  }
  return workload;
}

/// An offline run whose workload names LoRA adapters needs engines that take them: without
/// --max-loras every such request would be refused and reported only as "other".
std::optional<std::string> loraMismatch(const ReplayPlan& plan, const replay::Workload& workload) {
  const auto* offline = std::get_if<replay::OfflineReplayOptions>(&plan.options);
  if (offline == nullptr) return std::nullopt;  // live: the servers' own settings decide
  std::size_t named = 0;
  for (const replay::Session& s : workload.sessions) {
    for (const replay::Turn& t : s.turns) named += t.lora.has_value();
  }
  if (named == 0) return std::nullopt;
  if (offline->disagg) {
    return std::to_string(named) +
           " requests name a LoRA adapter, and disaggregated workers do not serve adapters";
  }
  if (offline->engine.max_loras == 0) {
    return std::to_string(named) +
           " requests name a LoRA adapter but --max-loras is 0 (LoRA off): every one would be "
           "refused; give --max-loras N (vLLM's default once LoRA is on is 1)";
  }
  return std::nullopt;
}

/// A one-line progress bar on a terminal's stderr, drawn only once the run has lasted a second,
/// at most ten times per second.
class ProgressBar {
 public:
  explicit ProgressBar(std::ostream& err) : err_(err), start_(Clock::now()) {}
  /// `ended` of `total` requests; `seconds` of simulated (offline) or elapsed (live) time.
  void update(std::uint64_t ended, std::uint64_t total, double seconds, const char* what) {
    const double elapsed = msSince(start_);
    if (elapsed < 1000.0 || elapsed - last_draw_ms_ < 100.0) return;
    last_draw_ms_ = elapsed;
    constexpr int kWidth = 30;
    const double frac = total == 0 ? 1.0 : static_cast<double>(ended) / static_cast<double>(total);
    const int filled = static_cast<int>(frac * kWidth);
    std::ostringstream line;
    line << "\r[" << std::string(static_cast<std::size_t>(filled), '#')
         << std::string(static_cast<std::size_t>(kWidth - filled), '.') << "] " << ended << "/"
         << total << " requests, " << what << " " << static_cast<long long>(seconds) << " s ";
    err_ << line.str() << std::flush;
    drawn_ = true;
  }
  void finish() {
    if (drawn_) err_ << "\r" << std::string(80, ' ') << "\r" << std::flush;
  }

 private:
  std::ostream& err_;
  Clock::time_point start_;
  double last_draw_ms_ = 0.0;
  bool drawn_ = false;
};

/// The report table and footer on `out`, then every output file asked for. Returns the exit code:
/// 1 when a file could not be written or every request was rejected (said on `err`), else 0.
int writeReport(const ReplayFlags& f, const replay::Report& report,
                const replay::ReplayCollector& collector, const RunSummary& run, ReplayMode mode,
                std::ostream& out, std::ostream& err) {
  std::string footer = run.footer;
  if (mode == ReplayMode::Live) {
    footer += replay::formatLiveTimeScale(report, report.identity->server_speedup_ratios);
  }
  out << replay::formatReportTable(report) << footer;

  // Each output is formatted only when it is asked for: the per-request JSONL of a large trace
  // takes as long to build as a sizeable part of the replay.
  const auto write = [&err](const std::string& path, const auto& format) {
    if (path.empty()) return true;
    const Status s = writeFile(path, format());
    if (!s) err << "mocker replay: " << s.error().message << "\n";
    return s.has_value();
  };
  bool ok = write(f.report_json, [&] { return replay::formatReportJson(report); });
  // Live times are steady_clock readings: nanoseconds, 1e6 per ms.
  const double ticks_per_ms = mode == ReplayMode::Live ? 1e6 : 0.0;
  ok = write(f.requests_jsonl,
             [&] { return replay::formatRequestsJsonl(collector, ticks_per_ms); }) &&
       ok;
  if (!f.requests_jsonl.empty()) {
    ok = write(identitySidecarPath(f.requests_jsonl),
               [&] { return replay::formatRunIdentityJson(*report.identity); }) &&
         ok;
  }
  ok =
      write(f.report_html, [&] { return replay::renderHtmlReport(report, collector, run.html); }) &&
      ok;
  if (report.num_requests > 0 && report.rejected_requests == report.num_requests) {
    // Nothing was served: a report of zeros must not pass for a result.
    const replay::StopReasonCounts& by = report.rejected_by;
    const std::uint64_t other =
        report.rejected_requests - by.max_model_len - by.kv_capacity - by.max_num_batched_tokens;
    err << "mocker replay: every request was rejected (" << report.rejected_requests
        << "): max_model_len " << by.max_model_len << ", kv capacity " << by.kv_capacity
        << ", max_num_batched_tokens " << by.max_num_batched_tokens;
    if (other > 0) err << ", other " << other;
    err << " (per request: terminal_reason in --requests-jsonl)\n";
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace

ReplayCommand::ReplayCommand(CLI::App& app) {
  cmd_ = app.add_subcommand(
      "replay",
      "Replay a Mooncake JSONL / Azure CSV trace or a synthetic workload and report latency, "
      "throughput and prefix-cache reuse (offline on a virtual clock by default)");
  registerReplayFlags(*cmd_, flags_);
}

bool ReplayCommand::parsed() const { return cmd_->parsed(); }

int ReplayCommand::run(std::ostream& out, std::ostream& err,
                       const std::vector<std::string>& command_line) {
  const std::string date_utc = replay::currentUtcIso8601();
  const GivenFlags given = givenFlags(*cmd_);
  if (const Status s = applyReplayAliases(flags_, given); !s) {
    err << "mocker replay: " << s.error().message << "\n";
    return 2;
  }
  const ReplayFlags& f = flags_;
  const Result<ReplayPlan> plan = planReplay(f, given);
  if (!plan) {
    err << "mocker replay: " << plan.error().message << "\n";
    return planExitCode(plan.error());
  }
  if (const Status s = checkOutputPaths(f, *plan); !s) {
    err << "mocker replay: " << s.error().message << "\n";
    return 1;
  }
  std::string format = plan->format;
  const Result<replay::Workload> workload = loadInput(f, format, plan->closed_loop, err);
  if (!workload) {
    err << "mocker replay: " << workload.error().message << "\n";
    return 1;
  }
  if (const auto mismatch = loraMismatch(*plan, *workload)) {
    err << "mocker replay: " << *mismatch << "\n";
    return 2;
  }
  replay::RunIdentity identity{
      .mocker_version = buildVersion(),
      .git_revision = buildGitRevision(),
      .mode = plan->mode == ReplayMode::Live ? "live" : "offline",
      .format = format,
      .num_workers = plan->num_workers,
      .router = plan->router,
      .servers = plan->servers,
      .engine_config = plan->engine_config,
      .gpu_kv_cache_tokens = plan->gpu_kv_cache_tokens,
      .date_utc = date_utc,
      .command_line = replay::shellQuotedCommandLine(command_line),
  };
  if (format != "synthetic" && format != "synthetic-agentic") {
    identity.trace_path = f.trace;
    Result<std::string> sha = replay::fileSha256(f.trace);
    if (!sha) {
      err << "mocker replay: " << sha.error().message << "\n";
      return 1;
    }
    identity.trace_sha256 = std::move(*sha);
  }
  for (const replay::LineError& e : workload->skipped_lines) {
    err << "mocker replay: skipped line " << e.line << ": " << e.message << "\n";
  }

  const bool tty = &err == &std::cerr && ::isatty(STDERR_FILENO) == 1 && f.progress;
  ProgressBar bar(err);
  replay::ReplayCollector collector({.keep_engine_samples = !f.report_html.empty()});
  Result<RunSummary> run = runPlan(
      *plan, *workload, collector,
      tty ? RunProgress([&bar](std::uint64_t ended, std::uint64_t total, double seconds,
                               const char* what) { bar.update(ended, total, seconds, what); })
          : RunProgress());
  bar.finish();
  if (!run) {
    err << "mocker replay: " << run.error().message << "\n";
    return runExitCode(*plan);
  }
  for (const std::string& w : run->warnings) err << "mocker replay: warning: " << w << "\n";
  identity.server_speedup_ratios = run->server_speedup_ratios;
  replay::Report report = collector.buildReport({.slo = plan->slo, .wall_time_ms = run->wall_ms});
  report.identity = std::move(identity);
  report.handoff = run->handoff;
  report.tiers = run->tiers;
  report.faults = run->faults;
  report.server_faults = run->server_faults;
  int code = writeReport(f, report, collector, *run, plan->mode, out, err);
  if (!plan->fault_log.empty()) {
    std::string text;
    for (const std::string& line : run->fault_log) text += line + "\n";
    if (const Status s = writeFile(plan->fault_log, text); !s) {
      err << "mocker replay: " << s.error().message << "\n";
      code = 1;
    }
  }
  return code;
}

}  // namespace mocker::tools
