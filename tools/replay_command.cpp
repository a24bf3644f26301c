#include "tools/replay_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "tools/replay/azure_trace.h"
#include "tools/replay/collector.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/report_html.h"
#include "tools/replay/report_output.h"
#include "tools/replay/synthetic.h"

namespace mocker::tools {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// The workload from the trace file or the synthetic flags.
Result<replay::Workload> loadWorkload(const ReplayFlags& f, bool closed_loop) {
  std::string format = f.format;
  if (format.empty()) {
    if (f.trace.empty()) {
      return invalidArgument("give a TRACE file, or --format synthetic with the synthetic flags");
    }
    const std::string ext = std::filesystem::path(f.trace).extension().string();
    if (ext == ".jsonl" || ext == ".json") {
      format = "mooncake";
    } else if (ext == ".csv") {
      format = "azure";
    } else {
      return invalidArgument("cannot tell the format of '" + f.trace +
                             "' from its extension (.jsonl = mooncake, .csv = azure): use "
                             "--format");
    }
  }
  const replay::TraceOptions options{.trace_block_size = f.trace_block_size,
                                     .arrival_speedup_ratio = f.arrival_speedup_ratio,
                                     .skip_invalid = f.skip_invalid,
                                     .require_timestamps = !closed_loop};
  if (format == "mooncake") {
    if (f.trace.empty()) return invalidArgument("--format mooncake needs a TRACE file");
    return replay::loadMooncakeTrace(f.trace, options);
  }
  if (format == "azure") {
    if (f.trace.empty()) return invalidArgument("--format azure needs a TRACE file");
    return replay::loadAzureTrace(f.trace, options);
  }
  // synthetic
  if (!f.trace.empty()) {
    return invalidArgument("--format synthetic takes no TRACE file (got '" + f.trace + "')");
  }
  if (f.num_requests == 0) return invalidArgument("--num-requests: required (>= 1)");
  if (f.input_mean <= 0) return invalidArgument("--input-tokens-mean: required (> 0)");
  if (f.output_mean < 0) return invalidArgument("--output-tokens-mean: must be >= 0");
  replay::SyntheticSpec spec{
      .request_count = f.num_requests,
      .turns_per_session = f.turns_per_session,
      .input_tokens = {f.input_mean, f.input_stddev},
      .output_tokens = {f.output_mean, f.output_stddev},
      .shared_prefix_ratio = f.shared_prefix_ratio,
      .num_prefix_groups = f.num_prefix_groups,
      .block_size = f.trace_block_size,
      .seed = f.seed,
  };
  spec.arrival.rate_per_s = f.request_rate;
  spec.arrival.smoothness = f.gamma_smoothness;
  spec.arrival.interval_ms = f.arrival_interval_ms;
  if (f.arrival == "burst") {
    spec.arrival.kind = replay::ArrivalKind::Burst;
  } else if (f.arrival == "constant") {
    spec.arrival.kind = replay::ArrivalKind::Constant;
  } else if (f.arrival == "gamma") {
    spec.arrival.kind = replay::ArrivalKind::Gamma;
  } else if (f.arrival == "interval") {
    spec.arrival.kind = replay::ArrivalKind::Interval;
  } else {
    spec.arrival.kind = replay::ArrivalKind::Poisson;
  }
  spec.inter_turn_delay.ms = f.inter_turn_delay_ms;
  if (f.inter_turn_delay == "constant") {
    spec.inter_turn_delay.kind = replay::DelayKind::Constant;
  } else if (f.inter_turn_delay == "exponential") {
    spec.inter_turn_delay.kind = replay::DelayKind::Exponential;
  } else {
    spec.inter_turn_delay.kind = replay::DelayKind::None;
  }
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

}  // namespace

ReplayCommand::ReplayCommand(CLI::App& app) {
  cmd_ = app.add_subcommand(
      "replay",
      "Replay a Mooncake JSONL / Azure CSV trace or a synthetic workload and report latency, "
      "throughput and prefix-cache reuse (offline on a virtual clock by default)");
  ReplayFlags& f = flags_;
  cmd_->add_option("trace", f.trace, "trace file (.jsonl = Mooncake, .csv = Azure)")
      ->option_text("TRACE");
  const char* input = "Input";
  cmd_->add_option("--format", f.format, "mooncake | azure | synthetic (default: by extension)")
      ->check(CLI::IsMember({"mooncake", "azure", "synthetic"}))
      ->group(input);
  cmd_->add_option("--trace-block-size", f.trace_block_size,
                   "tokens per trace hash id (Mooncake 512)")
      ->capture_default_str()
      ->group(input);
  cmd_->add_option("--arrival-speedup-ratio", f.arrival_speedup_ratio,
                   "divide arrival times and inter-turn delays by this (> 0)")
      ->capture_default_str()
      ->group(input);
  cmd_->add_flag("--skip-invalid", f.skip_invalid,
                 "skip malformed trace lines (reported on stderr) instead of stopping")
      ->group(input);

  const char* synth = "Synthetic workload (--format synthetic)";
  cmd_->add_option("--num-requests", f.num_requests, "sessions to generate (>= 1)")->group(synth);
  cmd_->add_option("--input-tokens-mean", f.input_mean, "prompt length mean")->group(synth);
  cmd_->add_option("--input-tokens-stddev", f.input_stddev, "prompt length stddev")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--output-tokens-mean", f.output_mean, "output length mean")->group(synth);
  cmd_->add_option("--output-tokens-stddev", f.output_stddev, "output length stddev")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--arrival", f.arrival, "burst | constant | poisson | gamma | interval")
      ->check(CLI::IsMember({"burst", "constant", "poisson", "gamma", "interval"}))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--request-rate", f.request_rate, "sessions/s (constant, poisson, gamma)")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--gamma-smoothness", f.gamma_smoothness, "gamma shape (1 = Poisson)")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--arrival-interval-ms", f.arrival_interval_ms, "gap for --arrival interval")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--shared-prefix-ratio", f.shared_prefix_ratio,
                   "fraction of each prompt taken from its group's shared prefix, [0, 1]")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--num-prefix-groups", f.num_prefix_groups, "prefix groups (0 = no sharing)")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--turns-per-session", f.turns_per_session, "turns per session")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--inter-turn-delay", f.inter_turn_delay, "none | constant | exponential")
      ->check(CLI::IsMember({"none", "constant", "exponential"}))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--inter-turn-delay-ms", f.inter_turn_delay_ms,
                   "constant delay, or exponential mean")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--seed", f.seed, "RNG seed of the synthetic workload")
      ->capture_default_str()
      ->group(synth);

  const char* run_group = "Replay";
  cmd_->add_option("--mode", f.mode,
                   "offline (in-process engines, virtual clock) | live (wall clock, against "
                   "running `mocker serve` instances given by --connect)")
      ->check(CLI::IsMember({"offline", "live"}))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--num-workers", f.num_workers, "in-process workers (offline)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--router", f.router,
                   "round_robin | kv | random (between workers, or servers in live mode; kv is "
                   "offline only)")
      ->check(CLI::IsMember({"round_robin", "kv", "random"}))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--router-seed", f.router_seed, "seed of the random router")
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--concurrency", f.concurrency,
                   "closed loop: keep N requests in flight, ignoring first-turn timestamps")
      ->check(CLI::PositiveNumber)
      ->group(run_group);
  const char* live_group = "Live replay (--mode live)";
  cmd_->add_option("--connect", f.connect,
                   "submit endpoint of a running `mocker serve` (tcp://HOST:PORT); repeat for "
                   "several servers; implies --mode live")
      ->option_text("EP")
      ->group(live_group);
  cmd_->add_option("--connect-cancel", f.connect_cancel,
                   "cancel endpoint of each --connect server, in the same order (default: the "
                   "submit port + 1)")
      ->option_text("EP")
      ->group(live_group);
  cmd_->add_option("--request-timeout-s", f.request_timeout_s,
                   "cancel a request (counted cancelled) that has not ended after this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(live_group);
  cmd_->add_option("--connect-timeout-s", f.connect_timeout_s,
                   "every server must answer a start-up `stats` request within this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(live_group);
  cmd_->add_option("--stats-interval-ms", f.stats_interval_ms,
                   "poll each server's `stats` this often for KV usage / batch size (0 = off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(live_group);

  cmd_->add_flag("--progress,!--no-progress", f.progress,
                 "progress bar on stderr (only on a terminal, after one second)")
      ->group(run_group);

  const char* out_group = "Report";
  cmd_->add_option("--report-json", f.report_json, "write the JSON report")
      ->option_text("FILE")
      ->group(out_group);
  cmd_->add_option("--requests-jsonl", f.requests_jsonl, "write per-request timelines (JSONL)")
      ->option_text("FILE")
      ->group(out_group);
  cmd_->add_option("--report-html", f.report_html, "write a self-contained HTML report")
      ->option_text("FILE")
      ->group(out_group);
  cmd_->add_option("--slo-ttft-ms", f.slo_ttft_ms, "goodput SLO on TTFT")
      ->check(CLI::NonNegativeNumber)
      ->group(out_group);
  cmd_->add_option("--slo-tpot-ms", f.slo_tpot_ms, "goodput SLO on TPOT")
      ->check(CLI::NonNegativeNumber)
      ->group(out_group);
  cmd_->add_option("--slo-e2e-ms", f.slo_e2e_ms, "goodput SLO on end-to-end latency")
      ->check(CLI::NonNegativeNumber)
      ->group(out_group);

  addServeFlags(*cmd_, f.serve);
  cmd_->footer(
      "Offline mode runs the engines in-process with the --config / [engine] settings above. "
      "Live mode (--mode live --connect tcp://HOST:PORT ...) drives running `mocker serve` "
      "instances on the wall clock and takes none of the settings above (each server has its own; "
      "give the servers --allow-empty-output to replay 0-token outputs, which offline always "
      "accepts). See tools/replay/README.md.");
}

bool ReplayCommand::parsed() const { return cmd_->parsed(); }

namespace {

/// The live targets from --connect / --connect-cancel.
Result<std::vector<replay::LiveTarget>> liveTargets(const ReplayFlags& f) {
  if (f.connect.empty()) {
    return invalidArgument("live mode needs --connect tcp://HOST:PORT (a running `mocker serve`)");
  }
  if (!f.connect_cancel.empty() && f.connect_cancel.size() != f.connect.size()) {
    return invalidArgument("--connect-cancel: give one per --connect (got " +
                           std::to_string(f.connect_cancel.size()) + " for " +
                           std::to_string(f.connect.size()) + " servers), or none");
  }
  std::vector<replay::LiveTarget> targets;
  for (std::size_t i = 0; i < f.connect.size(); ++i) {
    replay::LiveTarget t{.submit_endpoint = f.connect[i]};
    if (f.connect_cancel.empty()) {
      MOCKER_TRY(t.cancel_endpoint, replay::defaultCancelEndpoint(f.connect[i]));
    } else {
      t.cancel_endpoint = f.connect_cancel[i];
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

}  // namespace

int ReplayCommand::run(std::ostream& out, std::ostream& err) {
  const ReplayFlags& f = flags_;
  const bool mode_given = cmd_->count("--mode") > 0;
  if (mode_given && f.mode == "offline" && !f.connect.empty()) {
    err << "mocker replay: --connect is for --mode live (got --mode offline)\n";
    return 2;
  }
  const ReplayMode mode =
      f.mode == "live" || !f.connect.empty() ? ReplayMode::Live : ReplayMode::Offline;
  const bool closed_loop = cmd_->count("--concurrency") > 0;

  // Validate the mode-specific configuration before reading the trace.
  std::optional<service::ServiceConfig> config;
  std::optional<replay::RouterKind> router;
  std::vector<replay::LiveTarget> targets;
  if (mode == ReplayMode::Offline) {
    if (!f.connect_cancel.empty()) {
      err << "mocker replay: --connect-cancel is for --mode live\n";
      return 2;
    }
    auto resolved = resolveServeConfig(f.serve, ConfigUse::EngineOnly);
    if (!resolved) {
      err << "mocker replay: configuration error: " << resolved.error().message << "\n";
      return 2;
    }
    config = std::move(*resolved);
    const Result<replay::RouterKind> r = replay::parseRouterKind(f.router);
    if (!r) {
      err << "mocker replay: " << r.error().message << "\n";
      return 2;
    }
    router = *r;
  } else {
    if (f.router == "kv") {
      err << "mocker replay: --router kv is offline only (live mode routes round_robin or "
             "random between the --connect servers; each server picks its own DP rank)\n";
      return 2;
    }
    if (cmd_->count("--num-workers") > 0) {
      err << "mocker replay: --num-workers is offline only (in live mode give one --connect per "
             "server)\n";
      return 2;
    }
    if (const auto flag = firstGivenServeFlag(f.serve)) {
      err << "mocker replay: " << *flag
          << " has no effect in live mode: each server runs with its own configuration (give it "
             "to mocker serve)\n";
      return 2;
    }
    auto t = liveTargets(f);
    if (!t) {
      err << "mocker replay: " << t.error().message << "\n";
      return 2;
    }
    targets = std::move(*t);
  }

  Result<replay::Workload> workload = loadWorkload(f, closed_loop);
  if (!workload) {
    err << "mocker replay: " << workload.error().message << "\n";
    return 1;
  }
  for (const replay::LineError& e : workload->skipped_lines) {
    err << "mocker replay: skipped line " << e.line << ": " << e.message << "\n";
  }

  replay::SloSpec slo;
  if (cmd_->count("--slo-ttft-ms") > 0) slo.ttft_ms = f.slo_ttft_ms;
  if (cmd_->count("--slo-tpot-ms") > 0) slo.tpot_ms = f.slo_tpot_ms;
  if (cmd_->count("--slo-e2e-ms") > 0) slo.e2e_ms = f.slo_e2e_ms;

  const bool tty = &err == &std::cerr && ::isatty(STDERR_FILENO) == 1 && f.progress;
  ProgressBar bar(err);
  replay::ReplayCollector collector({.keep_engine_samples = !f.report_html.empty()});
  replay::HtmlReportOptions html;
  std::string footer;
  double wall_ms = 0.0;

  if (mode == ReplayMode::Offline) {
    replay::OfflineReplayOptions options{
        .engine = config->engine,
        .num_workers = f.num_workers,
        .router = *router,
        .router_seed = f.router_seed,
    };
    if (closed_loop) options.concurrency = f.concurrency;
    if (tty) {
      options.progress = [&bar](const replay::OfflineProgress& p) {
        bar.update(p.ended, p.total, p.sim_time_ms / 1000.0, "simulated");
      };
    }
    const Clock::time_point start = Clock::now();
    const Result<replay::OfflineReplayStats> stats =
        replay::runOfflineReplay(*workload, options, collector);
    wall_ms = msSince(start);
    bar.finish();
    if (!stats) {
      err << "mocker replay: " << stats.error().message << "\n";
      return 2;
    }
    for (const std::string& w : stats->warnings) err << "mocker replay: warning: " << w << "\n";
    if (f.num_workers > 1) {
      std::ostringstream line;
      line << "Requests per worker (" << replay::toString(*router) << "):";
      for (const std::uint64_t n : stats->per_worker) line << " " << n;
      footer = line.str() + "\n";
    }
    const std::uint32_t dp_size = config->engine.dp_size;
    if (f.num_workers > 1) {
      for (std::uint32_t w = 0; w < f.num_workers; ++w) {
        for (std::uint32_t r = 0; r < dp_size; ++r) {
          html.rank_labels.push_back("worker " + std::to_string(w) +
                                     (dp_size > 1 ? " rank " + std::to_string(r) : ""));
        }
      }
    }
  } else {
    replay::LiveReplayOptions options{
        .targets = targets,
        .router = f.router == "random" ? replay::LiveRouterKind::Random
                                       : replay::LiveRouterKind::RoundRobin,
        .router_seed = f.router_seed,
        .request_timeout_ms = f.request_timeout_s * 1000.0,
        .connect_timeout_ms = f.connect_timeout_s * 1000.0,
        .stats_interval_ms = f.stats_interval_ms,
    };
    if (closed_loop) options.concurrency = f.concurrency;
    if (tty) {
      options.progress = [&bar](const replay::LiveProgress& p) {
        bar.update(p.ended, p.total, p.elapsed_ms / 1000.0, "elapsed");
      };
    }
    const Result<replay::LiveReplayStats> stats =
        replay::runLiveReplay(*workload, options, collector);
    bar.finish();
    if (!stats) {
      err << "mocker replay: " << stats.error().message << "\n";
      return 1;
    }
    wall_ms = stats->wall_ms;
    for (const std::string& w : stats->warnings) err << "mocker replay: warning: " << w << "\n";
    std::ostringstream line;
    line << "Live: " << targets.size() << " server(s)";
    if (targets.size() > 1) {
      line << ", requests per server (" << f.router << "):";
      for (const std::uint64_t n : stats->per_target) line << " " << n;
    }
    line << "; max in flight " << stats->max_in_flight;
    if (!closed_loop) line << "; max dispatch lag " << stats->max_dispatch_lag_ms << " ms";
    line << "\n";
    const replay::LiveTimingSummary timing = replay::summarizeLiveTiming(*stats, closed_loop);
    line << timing.text;
    for (const std::string& w : timing.warnings) err << "mocker replay: warning: " << w << "\n";
    if (stats->submit_rejects + stats->timeouts + stats->send_failures + stats->error_replies +
            stats->undecodable + stats->index_gaps >
        0) {
      line << "Live issues: " << stats->submit_rejects << " submit rejects, " << stats->timeouts
           << " timed out (cancelled), " << stats->send_failures << " send failures, "
           << stats->error_replies << " error replies, " << stats->undecodable
           << " undecodable messages, " << stats->index_gaps << " output index gaps\n";
    }
    footer = line.str();
    for (std::size_t t = 0; t < targets.size(); ++t) {
      for (std::uint32_t r = 0; r < stats->ranks_per_target[t]; ++r) {
        html.rank_labels.push_back(
            (targets.size() > 1 ? "server " + std::to_string(t) + " " : std::string()) + "rank " +
            std::to_string(r));
      }
    }
  }

  const replay::Report report = collector.buildReport({.slo = slo, .wall_time_ms = wall_ms});
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
  ok = write(f.requests_jsonl, [&] { return replay::formatRequestsJsonl(collector); }) && ok;
  ok =
      write(f.report_html, [&] { return replay::renderHtmlReport(report, collector, html); }) && ok;
  return ok ? 0 : 1;
}

}  // namespace mocker::tools
