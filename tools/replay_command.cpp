#include "tools/replay_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <tuple>

#include "base/endpoint.h"
#include "tools/replay/azure_trace.h"
#include "tools/replay/collector.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/report_html.h"
#include "tools/replay/report_output.h"
#include "tools/replay/run_identity.h"
#include "tools/replay/synthetic.h"
#include "tools/replay/trace_dialect.h"

#include "engine/config.h"
#include "service/config.h"
#include "service/fleet.h"
#include "tools/build_info.h"
#include "tools/cli_options.h"
#include "tools/output_path.h"

namespace mocker::tools {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// The workload format from --format or the TRACE extension, checking that the command line
/// describes a workload: errors here are usage errors (exit 2), before any file is read.
Result<std::string> workloadFormat(const ReplayFlags& f) {
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
  if (format == "mooncake_delta") format = "mooncake-delta";
  if (format == "agentic-mooncake" || format == "agentic_mooncake") format = "agentic";
  if (format != "synthetic" && format != "synthetic-agentic") {
    if (f.trace.empty()) return invalidArgument("--format " + format + " needs a TRACE file");
    return format;
  }
  if (!f.trace.empty()) {
    return invalidArgument("--format " + format + " takes no TRACE file (got '" + f.trace + "')");
  }
  if (format == "synthetic-agentic" && f.tool_output_mean <= 0) {
    return invalidArgument(
        "--tool-output-tokens-mean: required with --format synthetic-agentic "
        "(> 0)");
  }
  if (f.num_requests == 0) return invalidArgument("--num-requests: required (>= 1)");
  if (f.input_mean <= 0) return invalidArgument("--input-tokens-mean: required (> 0)");
  // Lengths are sampled, rounded and raised to at least 1: without a mean every output would
  // silently be one token long.
  if (f.output_mean <= 0) return invalidArgument("--output-tokens-mean: required (> 0)");
  return format;
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
Status checkOutputPaths(const ReplayFlags& f) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> outputs;  // option, path
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

/// The effective [engine] settings as `mocker config --dump` prints them.
std::vector<replay::ConfigSetting> engineSettings(const service::ServiceConfig& config,
                                                  bool disaggregated = false) {
  service::ServiceConfig effective = config;
  effective.engine.block_size = engine::effectiveBlockSize(effective.engine);
  const bool roofline = effective.engine.timing_model == engine::TimingModelKind::Roofline;
  // The KV capacity the deployment gives (vLLM's "GPU KV cache size") is part of the identity.
  if (roofline) effective.engine.num_gpu_blocks = engine::effectiveNumGpuBlocks(effective.engine);
  std::vector<replay::ConfigSetting> out;
  constexpr std::string_view kPrefix = "engine.";
  for (const std::string& key : service::configKeys()) {
    if (!key.starts_with(kPrefix)) continue;
    if (!roofline && service::isRooflineKey(key)) continue;
    // The handoff settings only matter to a disaggregated run.
    if (!disaggregated &&
        (key == "engine.kv_bytes_per_token" || key == "engine.kv_transfer_bandwidth_gbps" ||
         key == "engine.kv_transfer_charge" || key == "engine.kv_hold_timeout_ms")) {
      continue;
    }
    const std::optional<std::string> text = service::configValueText(effective, key);
    const std::string type = service::configKeyType(key).value_or("TEXT");
    if (!text) continue;
    replay::ConfigSetting setting{.key = key.substr(kPrefix.size()), .text = *text};
    if (*text == "none" && type.ends_with("|none")) {
      setting.kind = replay::ConfigSetting::Kind::Null;
    } else if (type.starts_with("UINT") || type.starts_with("INT") || type.starts_with("FLOAT")) {
      setting.kind = replay::ConfigSetting::Kind::Number;
    } else if (type == "BOOL") {
      setting.kind = replay::ConfigSetting::Kind::Bool;
    }
    out.push_back(std::move(setting));
  }
  return out;
}

/// A disaggregated role's configuration: `base`, then the [engine] keys of `path` (if given),
/// validated for an engine-only use. Errors name the file, line and key.
Result<service::ServiceConfig> roleConfig(const service::ServiceConfig& base,
                                          const std::string& path, const char* flag) {
  if (path.empty()) return base;
  service::KeyOrigins origins;
  Result<service::ServiceConfig> layered = service::loadServiceConfigOver(base, path, origins);
  if (!layered)
    return Error{layered.error().code, std::string(flag) + ": " + layered.error().message};
  Result<service::ServiceConfig> finished =
      service::finishServiceConfig(std::move(*layered), origins, service::ConfigUse::EngineOnly);
  if (!finished) {
    return Error{finished.error().code, std::string(flag) + ": " + finished.error().message};
  }
  return finished;
}

/// engineSettings of both roles, keys prefixed "prefill." and "decode." (worker_type included).
std::vector<replay::ConfigSetting> roleSettings(const service::ServiceConfig& prefill,
                                                const service::ServiceConfig& decode) {
  std::vector<replay::ConfigSetting> out;
  for (const auto& [role, config] :
       {std::pair{"prefill", &prefill}, std::pair{"decode", &decode}}) {
    for (replay::ConfigSetting s : engineSettings(*config, true)) {
      if (s.key == "worker_type") s.text = role;
      s.key = std::string(role) + "." + s.key;
      out.push_back(std::move(s));
    }
  }
  return out;
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
  cmd_->add_option("--format", f.format,
                   "mooncake | mooncake-delta | agentic | azure | synthetic | synthetic-agentic "
                   "(default: .csv = azure; .jsonl / .json = the JSONL dialect its first lines "
                   "show, said on stderr)")
      ->check(CLI::IsMember({"mooncake", "mooncake-delta", "mooncake_delta", "agentic",
                             "agentic-mooncake", "agentic_mooncake", "azure", "synthetic",
                             "synthetic-agentic"}))
      ->group(input);
  cmd_->add_option("--trace-block-size", f.trace_block_size,
                   "tokens per trace hash id (Mooncake 512)")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(input);
  cmd_->add_option("--arrival-speedup-ratio", f.arrival_speedup_ratio,
                   "divide arrival times and inter-turn delays by this")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(input);
  cmd_->add_flag("--skip-invalid", f.skip_invalid,
                 std::string("skip malformed trace lines (reported on stderr) instead of "
                             "stopping") +
                     flagDefault(false))
      ->group(input);

  const char* synth = "Synthetic workload (--format synthetic)";
  auto* num_requests =
      cmd_->add_option("--num-requests", f.num_requests, "sessions to generate (required)")
          ->check(atLeast(1))
          ->group(synth);
  cmd_->add_option("--num-prompts", f.num_prompts,
                   "vLLM bench's name: requests to generate, as single-turn sessions (= "
                   "--num-requests with --turns-per-session 1)")
      ->check(atLeast(1))
      ->excludes(num_requests)
      ->group(synth);
  cmd_->add_option("--input-tokens-mean", f.input_mean, "prompt length mean (required)")
      ->check(greaterThan(0))
      ->group(synth);
  cmd_->add_option("--input-tokens-stddev", f.input_stddev, "prompt length stddev")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--output-tokens-mean", f.output_mean,
                   "output length mean (required; samples are rounded, at least 1)")
      ->check(greaterThan(0))
      ->group(synth);
  cmd_->add_option("--output-tokens-stddev", f.output_stddev, "output length stddev")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--arrival", f.arrival, "burst | constant | poisson | gamma | interval")
      ->check(CLI::IsMember({"burst", "constant", "poisson", "gamma", "interval"}))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--request-rate", f.request_rate, "sessions/s (constant, poisson, gamma)")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(synth);
  auto* smoothness =
      cmd_->add_option("--gamma-smoothness", f.gamma_smoothness, "gamma shape (1 = Poisson)")
          ->check(greaterThan(0))
          ->capture_default_str()
          ->group(synth);
  cmd_->add_option("--burstiness", f.burstiness,
                   "vLLM bench's name: gamma arrivals of this shape at --request-rate (= "
                   "--arrival gamma --gamma-smoothness X; 1 = Poisson, < 1 burstier)")
      ->check(greaterThan(0))
      ->excludes(smoothness)
      ->group(synth);
  cmd_->add_option("--arrival-interval-ms", f.arrival_interval_ms, "gap for --arrival interval")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--shared-prefix-ratio", f.shared_prefix_ratio,
                   "fraction of each prompt taken from its group's shared prefix")
      ->check(between(0, 1))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--num-prefix-groups", f.num_prefix_groups, "prefix groups (0 = no sharing)")
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--turns-per-session", f.turns_per_session, "turns per session")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--inter-turn-delay", f.inter_turn_delay, "none | constant | exponential")
      ->check(CLI::IsMember({"none", "constant", "exponential"}))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_option("--inter-turn-delay-ms", f.inter_turn_delay_ms,
                   "constant delay, or exponential mean")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd_->add_flag("--session-context", f.session_context,
                 "multi-turn sessions: each turn's prompt is the previous turn's prompt followed "
                 "by its own new input (the conversation so far)")
      ->group(synth);
  cmd_->add_option("--seed", f.seed, "RNG seed of the synthetic workload")
      ->capture_default_str()
      ->group(synth);
  const char* agentic =
      "Synthetic agentic sessions (--format synthetic-agentic: --num-requests sessions of "
      "--turns-per-session LLM calls; --input-tokens-* is the user prompt, --output-tokens-* "
      "each call's output; the arrival flags and --seed apply)";
  cmd_->add_option("--system-prompt-tokens", f.system_prompt_tokens,
                   "system prompt shared by every call of every session")
      ->capture_default_str()
      ->group(agentic);
  cmd_->add_option("--tool-output-tokens-mean", f.tool_output_mean,
                   "tokens each tool result adds to the context (required)")
      ->check(greaterThan(0))
      ->group(agentic);
  cmd_->add_option("--tool-output-tokens-stddev", f.tool_output_stddev, "its stddev")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(agentic);
  cmd_->add_option("--tool-wait", f.tool_wait,
                   "none | constant | exponential: time a tool call takes between a call's end "
                   "and the next call")
      ->check(CLI::IsMember({"none", "constant", "exponential"}))
      ->capture_default_str()
      ->group(agentic);
  cmd_->add_option("--tool-wait-ms", f.tool_wait_ms, "constant tool wait, or exponential mean")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(agentic);
  cmd_->add_option("--subagent-probability", f.subagent_probability,
                   "chance that a call (not the last) spawns sub-agents, which the next call "
                   "waits for")
      ->check(between(0, 1))
      ->capture_default_str()
      ->group(agentic);
  cmd_->add_option("--subagent-fanout", f.subagent_fanout,
                   "sub-agent requests per spawn (in 1..64)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str()
      ->group(agentic);

  const char* run_group = "Replay";
  cmd_->add_option("--mode", f.mode,
                   "offline (in-process engines, virtual clock) | live (wall clock, against "
                   "running `mocker serve` instances given by --connect)")
      ->check(CLI::IsMember({"offline", "live"}))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--num-workers", f.num_workers, "in-process workers (offline)")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--router", f.router,
                   "round_robin | kv | kv_prefix | random (between workers, or servers in live "
                   "mode; kv: Dynamo's KV-router cost, overlap weight x blocks to prefill + "
                   "active blocks; kv_prefix: longest cached prefix, offline only)")
      ->check(CLI::IsMember({"round_robin", "kv", "kv_prefix", "random"}))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--router-seed", f.router_seed,
                   "seed of the random router and of the kv router's tie-breaks and sampling")
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--router-overlap-weight", f.router_overlap_weight,
                   "kv router: weight of the blocks to prefill against the active blocks "
                   "(Dynamo's default)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--router-temperature", f.router_temperature,
                   "kv router: 0 = lowest cost wins; > 0 = softmax sampling over the normalised "
                   "costs (Dynamo's default 0)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str()
      ->group(run_group);
  cmd_->add_option("--concurrency", f.concurrency,
                   "closed loop: keep N requests in flight, ignoring first-turn timestamps")
      ->check(atLeast(1))
      ->group(run_group);
  const char* disagg_group = "Disaggregated prefill/decode (offline)";
  auto* num_prefill =
      cmd_->add_option("--num-prefill-workers", f.num_prefill_workers,
                       "prefill workers: compute prompts and hand their KV to decode workers "
                       "(with --num-decode-workers; replaces --num-workers)")
          ->check(atLeast(1))
          ->group(disagg_group);
  auto* num_decode = cmd_->add_option("--num-decode-workers", f.num_decode_workers,
                                      "decode workers: generate every output token")
                         ->check(atLeast(1))
                         ->group(disagg_group);
  num_prefill->needs(num_decode);
  num_decode->needs(num_prefill);
  cmd_->add_option("--prefill-config", f.prefill_config,
                   "TOML file whose [engine] keys override --config / the flags for the prefill "
                   "workers")
      ->option_text("FILE")
      ->needs(num_prefill)
      ->group(disagg_group);
  cmd_->add_option("--decode-config", f.decode_config,
                   "the same for the decode workers (both sides need the same block size)")
      ->option_text("FILE")
      ->needs(num_prefill)
      ->group(disagg_group);
  cmd_->add_option("--decode-router", f.decode_router,
                   "handoff to decode worker: round_robin | random | kv (kv = overlap credit 0: "
                   "fewest requests in flight); --router routes requests to prefill workers "
                   "(offline, or live with --connect-decode / --decode-fleet)")
      ->check(CLI::IsMember({"round_robin", "kv", "random"}))
      ->capture_default_str()
      ->group(disagg_group);
  const char* live_group = "Live replay (--mode live)";
  cmd_->add_option("--connect", f.connect,
                   "submit endpoint of a running `mocker serve` (tcp://HOST:PORT); repeat for "
                   "several servers; implies --mode live")
      ->option_text("EP")
      ->group(live_group);
  cmd_->add_option("--connect-kv-events", f.connect_kv_events,
                   "--router kv: KV-event PUB endpoint of each --connect server's rank 0, in the "
                   "same order (default: the submit port + 2; rank r at port + r)")
      ->option_text("EP")
      ->group(live_group);
  cmd_->add_option("--connect-kv-replay", f.connect_kv_replay,
                   "--router kv: KV replay ROUTER endpoint of each --connect server's rank 0, in "
                   "the same order (default: the submit port + 3; rank r at port + r)")
      ->option_text("EP")
      ->group(live_group);
  cmd_->add_option("--router-block-size", f.router_block_size,
                   "--router kv: the servers' KV block size, for hashing prompts the way their "
                   "KV events do (default hash seeds). Default: the size every server reports at "
                   "start-up (with --connect or --fleet); given, a server that reports another "
                   "size is an error")
      ->check(atLeast(1))
      ->group(live_group);
  cmd_->add_option("--connect-cancel", f.connect_cancel,
                   "cancel endpoint of each --connect server, in the same order (default: the "
                   "submit port + 1)")
      ->option_text("EP")
      ->group(live_group);
  cmd_->add_option("--fleet", f.fleet_file,
                   "every worker of a `mocker serve --fleet-file FILE` (their submit and cancel "
                   "endpoints), instead of --connect; implies --mode live")
      ->option_text("FILE")
      ->group(live_group);
  const char* live_disagg_group = "Disaggregated prefill/decode (live)";
  cmd_->add_option("--connect-prefill", f.connect_prefill,
                   "submit endpoint of a `mocker serve --worker-type prefill` (repeat; instead "
                   "of --connect, whose --connect-cancel / --connect-kv-* flags it takes); "
                   "with --connect-decode or --decode-fleet")
      ->option_text("EP")
      ->group(live_disagg_group);
  cmd_->add_option("--connect-decode", f.connect_decode,
                   "submit endpoint of a `mocker serve --worker-type decode` (repeat): handoffs "
                   "go there, routed by --decode-router")
      ->option_text("EP")
      ->group(live_disagg_group);
  cmd_->add_option("--connect-decode-cancel", f.connect_decode_cancel,
                   "cancel endpoint of each --connect-decode server, in the same order (default: "
                   "the submit port + 1)")
      ->option_text("EP")
      ->group(live_disagg_group);
  cmd_->add_option("--prefill-fleet", f.prefill_fleet,
                   "the prefill servers: every worker of a `mocker serve --worker-type prefill "
                   "--fleet-file FILE` (as --fleet)")
      ->option_text("FILE")
      ->group(live_disagg_group);
  cmd_->add_option("--decode-fleet", f.decode_fleet,
                   "the decode servers: every worker of a `mocker serve --worker-type decode "
                   "--fleet-file FILE`")
      ->option_text("FILE")
      ->group(live_disagg_group);
  auto* curve_server =
      cmd_->add_option("--curve-server-key-file", f.curve_server_key_file,
                       "CURVE: the servers' public key file (NAME.pub of their key pair; every "
                       "--connect server uses it)")
          ->option_text("FILE")
          ->group(live_group);
  auto* curve_secret =
      cmd_->add_option("--curve-secret-key-file", f.curve_secret_key_file,
                       "CURVE: this client's secret key file (NAME.key of `mocker keygen`; its "
                       "public key must be on every server's allow-list)")
          ->option_text("FILE")
          ->group(live_group);
  curve_server->needs(curve_secret);
  curve_secret->needs(curve_server);
  cmd_->add_option("--request-timeout-s", f.request_timeout_s,
                   "cancel a request (counted cancelled) that has not ended after this long")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(live_group);
  cmd_->add_option("--connect-timeout-s", f.connect_timeout_s,
                   "every server must answer a start-up `stats` request within this long")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(live_group);
  cmd_->add_option("--stats-interval-ms", f.stats_interval_ms,
                   "poll each server's `stats` this often for KV usage / batch size (0 = off)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(live_group);

  cmd_->add_flag("--progress,!--no-progress", f.progress,
                 std::string("progress bar on stderr (only on a terminal, after one second)") +
                     flagDefault(true))
      ->group(run_group);

  const char* out_group = "Report";
  cmd_->add_option("--report-json", f.report_json,
                   "write the JSON report (with the run identity: version, git revision, trace "
                   "SHA-256, engine config, date, command line)")
      ->option_text("FILE")
      ->group(out_group);
  cmd_->add_option("--requests-jsonl", f.requests_jsonl,
                   "write per-request timelines (JSONL), and the run identity to FILE.run.json")
      ->option_text("FILE")
      ->group(out_group);
  cmd_->add_option("--report-html", f.report_html, "write a self-contained HTML report")
      ->option_text("FILE")
      ->group(out_group);
  auto* slo_ttft = cmd_->add_option("--slo-ttft-ms", f.slo_ttft_ms,
                                    "goodput SLO on TTFT (a good request has TTFT <= this)")
                       ->check(atLeast(0))
                       ->group(out_group);
  auto* slo_tpot = cmd_->add_option("--slo-tpot-ms", f.slo_tpot_ms, "goodput SLO on TPOT")
                       ->check(atLeast(0))
                       ->group(out_group);
  auto* slo_e2e =
      cmd_->add_option("--slo-e2e-ms", f.slo_e2e_ms, "goodput SLO on end-to-end latency")
          ->check(atLeast(0))
          ->group(out_group);
  cmd_->add_option("--goodput", f.goodput,
                   "vLLM bench's form of the SLOs: KEY:MS pairs, keys ttft, tpot, e2el (= "
                   "--slo-ttft-ms / --slo-tpot-ms / --slo-e2e-ms)")
      ->option_text("KEY:MS ...")
      ->excludes(slo_ttft)
      ->excludes(slo_tpot)
      ->excludes(slo_e2e)
      ->group(out_group);

  addServeFlags(*cmd_, f.serve, ConfigUse::EngineOnly);
  cmd_->footer(
      "Offline mode runs the engines in-process with the --config / [engine] settings above. "
      "Offline, --speedup-ratio R models a GPU R times faster (every pass takes 1/R of the "
      "time, so latencies shrink); it does not make the replay itself faster, which runs on a "
      "virtual clock as fast as it can (--arrival-speedup-ratio compresses the trace's arrivals). "
      "Live mode (--mode live --connect tcp://HOST:PORT ...) drives running `mocker serve` "
      "instances on the wall clock and takes none of the settings above (each server has its own; "
      "give the servers --allow-empty-output to replay 0-token outputs, which offline always "
      "accepts). See replay.md in /usr/share/doc/mocker (tools/replay/README.md in the sources).");
}

bool ReplayCommand::parsed() const { return cmd_->parsed(); }

namespace {

/// --connect-kv-events / --connect-kv-replay: one per server, or none (the default layout).
Status addKvEndpoints(const ReplayFlags& f, std::vector<replay::LiveTarget>& targets) {
  if (!f.fleet_kv_events.empty() && f.connect_kv_events.empty() && f.connect_kv_replay.empty()) {
    // --fleet: every rank's endpoints, as the file names them.
    for (std::size_t i = 0; i < targets.size(); ++i) {
      for (std::size_t r = 0; r < f.fleet_kv_events[i].size(); ++r) {
        if (f.fleet_kv_events[i][r].empty() || f.fleet_kv_replay[i][r].empty()) {
          return invalidArgument("--fleet: worker " + std::to_string(i) + " rank " +
                                 std::to_string(r) +
                                 " publishes no KV events or has no replay socket; --router kv "
                                 "needs both (mocker serve --kv-events --kv-replay)");
        }
      }
      targets[i].kv_events = f.fleet_kv_events[i];
      targets[i].kv_replay = f.fleet_kv_replay[i];
    }
    return {};
  }
  for (const auto& [list, flag, offset] :
       {std::tuple{&f.connect_kv_events, "--connect-kv-events", 2u},
        std::tuple{&f.connect_kv_replay, "--connect-kv-replay", 3u}}) {
    if (!list->empty() && list->size() != targets.size()) {
      return invalidArgument(std::string(flag) + ": give one per --connect (got " +
                             std::to_string(list->size()) + " for " +
                             std::to_string(targets.size()) + " servers), or none");
    }
    for (std::size_t i = 0; i < targets.size(); ++i) {
      std::string ep;
      if (list->empty()) {
        auto derived = replay::defaultEndpointAfter(
            targets[i].submit_endpoint, offset,
            offset == 2 ? "the KV-event endpoint" : "the KV-event replay endpoint", flag);
        if (!derived) return invalidArgument(std::string(flag) + ": " + derived.error().message);
        ep = std::move(*derived);
      } else {
        ep = (*list)[i];
      }
      (offset == 2 ? targets[i].kv_events : targets[i].kv_replay).push_back(std::move(ep));
    }
  }
  return {};
}

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
    if (auto parsed = parseEndpoint(f.connect[i]); !parsed) {
      return invalidArgument("--connect: " + parsed.error().message);
    }
    if (f.connect_cancel.empty()) {
      MOCKER_TRY(t.cancel_endpoint, replay::defaultCancelEndpoint(f.connect[i]));
    } else {
      t.cancel_endpoint = f.connect_cancel[i];
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

/// The decode servers from --connect-decode / --connect-decode-cancel (none: not disaggregated).
Result<std::vector<replay::LiveTarget>> decodeTargets(const ReplayFlags& f) {
  if (!f.connect_decode_cancel.empty() &&
      f.connect_decode_cancel.size() != f.connect_decode.size()) {
    return invalidArgument("--connect-decode-cancel: give one per --connect-decode (got " +
                           std::to_string(f.connect_decode_cancel.size()) + " for " +
                           std::to_string(f.connect_decode.size()) + " servers), or none");
  }
  std::vector<replay::LiveTarget> targets;
  for (std::size_t i = 0; i < f.connect_decode.size(); ++i) {
    replay::LiveTarget t{.submit_endpoint = f.connect_decode[i]};
    if (f.connect_decode_cancel.empty()) {
      auto cancel = replay::defaultCancelEndpoint(f.connect_decode[i]);
      if (!cancel) return invalidArgument("--connect-decode: " + cancel.error().message);
      t.cancel_endpoint = std::move(*cancel);
    } else {
      t.cancel_endpoint = f.connect_decode_cancel[i];
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

}  // namespace

Status ReplayCommand::applyAliases() {
  ReplayFlags& f = flags_;
  // Live disaggregated: the prefill servers are the --connect / --fleet servers.
  const bool prefill_given = !f.connect_prefill.empty() || !f.prefill_fleet.empty();
  const bool decode_given = !f.connect_decode.empty() || !f.decode_fleet.empty();
  if (prefill_given != decode_given) {
    return invalidArgument(prefill_given ? "--connect-prefill / --prefill-fleet need the decode "
                                           "servers: --connect-decode or --decode-fleet"
                                         : "--connect-decode / --decode-fleet need the prefill "
                                           "servers: --connect-prefill or --prefill-fleet");
  }
  if (!f.connect_decode_cancel.empty() && f.connect_decode.empty()) {
    return invalidArgument("--connect-decode-cancel is for --connect-decode servers");
  }
  if (prefill_given) {
    if (!f.connect.empty() || !f.fleet_file.empty()) {
      return invalidArgument(
          "--connect-prefill / --prefill-fleet replace --connect / --fleet: give one or the other");
    }
    if (!f.connect_prefill.empty() && !f.prefill_fleet.empty()) {
      return invalidArgument(
          "give the prefill servers with --connect-prefill or --prefill-fleet, "
          "not both");
    }
    if (!f.connect_decode.empty() && !f.decode_fleet.empty()) {
      return invalidArgument(
          "give the decode servers with --connect-decode or --decode-fleet, "
          "not both");
    }
    if (cmd_->count("--mode") > 0 && f.mode == "offline") {
      return invalidArgument(
          "--connect-prefill / --prefill-fleet are for --mode live (got --mode "
          "offline; offline disaggregation is --num-prefill-workers)");
    }
    f.connect = f.connect_prefill;
    f.fleet_file = f.prefill_fleet;
    if (!f.decode_fleet.empty()) {
      auto manifest = service::loadFleetManifest(f.decode_fleet);
      if (!manifest) return invalidArgument("--decode-fleet: " + manifest.error().message);
      for (const service::FleetManifest::Worker& w : manifest->workers) {
        f.connect_decode.push_back(w.submit);
        f.connect_decode_cancel.push_back(w.cancel);
      }
    }
  }
  if (!f.fleet_file.empty()) {
    // --fleet is one --connect / --connect-cancel pair per worker, read from the file.
    if (!f.connect.empty() || !f.connect_cancel.empty()) {
      return invalidArgument(
          "--fleet replaces --connect and --connect-cancel: give one or the other");
    }
    if (cmd_->count("--mode") > 0 && f.mode == "offline") {
      return invalidArgument("--fleet is for --mode live (got --mode offline)");
    }
    auto manifest = service::loadFleetManifest(f.fleet_file);
    if (!manifest) return invalidArgument("--fleet: " + manifest.error().message);
    for (const service::FleetManifest::Worker& w : manifest->workers) {
      f.connect.push_back(w.submit);
      f.connect_cancel.push_back(w.cancel);
      auto& events = f.fleet_kv_events.emplace_back();
      auto& replays = f.fleet_kv_replay.emplace_back();
      for (const service::FleetManifest::Rank& r : w.ranks) {
        events.push_back(r.kv_events);
        replays.push_back(r.kv_replay);
      }
    }
  }
  if (cmd_->count("--num-prompts") > 0) {
    if (f.turns_per_session != 1) {
      return invalidArgument(
          "--num-prompts counts single-turn requests; with --turns-per-session " +
          std::to_string(f.turns_per_session) + " give the number of sessions with --num-requests");
    }
    f.num_requests = f.num_prompts;
  }
  if (cmd_->count("--burstiness") > 0) {
    if (cmd_->count("--arrival") > 0 && f.arrival != "gamma") {
      return invalidArgument(
          "--burstiness sets gamma arrivals; it does not combine with --arrival " + f.arrival);
    }
    f.arrival = "gamma";
    f.gamma_smoothness = f.burstiness;
  }
  std::vector<std::string> seen;
  for (const std::string& item : f.goodput) {
    const std::size_t colon = item.find(':');
    const std::string key = item.substr(0, colon);
    double* slo = key == "ttft"   ? &f.slo_ttft_ms
                  : key == "tpot" ? &f.slo_tpot_ms
                  : key == "e2el" ? &f.slo_e2e_ms
                                  : nullptr;
    if (colon == std::string::npos || slo == nullptr) {
      return invalidArgument(
          "--goodput: expected KEY:MS with KEY one of ttft, tpot, e2el, got '" + item + "'" +
          (colon == std::string::npos ? " (it takes every following word: put TRACE first)" : ""));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return invalidArgument("--goodput: " + key + " given twice");
    }
    seen.push_back(key);
    std::string ms = item.substr(colon + 1);
    if (const std::string problem = atLeast(0)(ms); !problem.empty()) {
      return invalidArgument("--goodput: " + key + ": " + problem);
    }
    *slo = std::stod(ms);
  }
  return {};
}

int ReplayCommand::run(std::ostream& out, std::ostream& err,
                       const std::vector<std::string>& command_line) {
  const std::string date_utc = replay::currentUtcIso8601();
  if (const Status s = applyAliases(); !s) {
    err << "mocker replay: " << s.error().message << "\n";
    return 2;
  }
  const ReplayFlags& f = flags_;
  const bool mode_given = cmd_->count("--mode") > 0;
  if (mode_given && f.mode == "offline" && !f.connect.empty()) {
    err << "mocker replay: --connect is for --mode live (got --mode offline)\n";
    return 2;
  }
  const ReplayMode mode =
      f.mode == "live" || !f.connect.empty() ? ReplayMode::Live : ReplayMode::Offline;
  const bool closed_loop = cmd_->count("--concurrency") > 0;

  if (f.router != "kv") {
    for (const char* flag : {"--router-overlap-weight", "--router-temperature",
                             "--connect-kv-events", "--connect-kv-replay", "--router-block-size"}) {
      if (cmd_->count(flag) > 0) {
        err << "mocker replay: " << flag << " is for --router kv\n";
        return 2;
      }
    }
  }
  // Validate the mode-specific configuration before reading the trace.
  std::optional<service::ServiceConfig> config;
  std::optional<service::ServiceConfig> prefill_config;  // disaggregated runs
  std::optional<service::ServiceConfig> decode_config;
  std::optional<replay::RouterKind> router;
  std::vector<replay::LiveTarget> targets;
  std::vector<replay::LiveTarget> decode_targets;  // live disaggregated
  std::optional<service::CurveClientKeys> curve;
  if (mode == ReplayMode::Offline) {
    for (const char* flag :
         {"--connect-cancel", "--curve-server-key-file", "--curve-secret-key-file",
          "--connect-kv-events", "--connect-kv-replay", "--router-block-size"}) {
      if (cmd_->count(flag) > 0) {
        err << "mocker replay: " << flag << " is for --mode live\n";
        return 2;
      }
    }
    auto resolved = resolveServeConfig(f.serve, ConfigUse::EngineOnly);
    if (!resolved) {
      err << "mocker replay: configuration error: " << resolved.error().message << "\n";
      return 2;
    }
    config = std::move(*resolved);
    if (f.num_prefill_workers > 0) {
      for (const auto& [path, flag, out_config] :
           {std::tuple{&f.prefill_config, "--prefill-config", &prefill_config},
            std::tuple{&f.decode_config, "--decode-config", &decode_config}}) {
        Result<service::ServiceConfig> role = roleConfig(*config, *path, flag);
        if (!role) {
          err << "mocker replay: configuration error: " << role.error().message << "\n";
          return 2;
        }
        *out_config = std::move(*role);
      }
    }
    const Result<replay::RouterKind> r = replay::parseRouterKind(f.router);
    if (!r) {
      err << "mocker replay: " << r.error().message << "\n";
      return 2;
    }
    router = *r;
    if (cmd_->count("--decode-router") > 0 && f.num_prefill_workers == 0) {
      err << "mocker replay: --decode-router needs --num-prefill-workers (offline) or decode "
             "servers (live)\n";
      return 2;
    }
    if (f.num_prefill_workers > 0 && cmd_->count("--num-workers") > 0) {
      err << "mocker replay: --num-workers is for aggregated workers; a disaggregated run has "
             "--num-prefill-workers + --num-decode-workers workers\n";
      return 2;
    }
  } else {
    if (f.router == "kv_prefix") {
      err << "mocker replay: --router kv_prefix is offline only (live mode routes kv, "
             "round_robin or random between the --connect servers)\n";
      return 2;
    }
    if (cmd_->count("--num-workers") > 0) {
      err << "mocker replay: --num-workers is offline only (in live mode give one --connect per "
             "server)\n";
      return 2;
    }
    if (f.num_prefill_workers > 0) {
      err << "mocker replay: --num-prefill-workers / --num-decode-workers are offline only (live "
             "disaggregation: --connect-prefill / --prefill-fleet and --connect-decode / "
             "--decode-fleet)\n";
      return 2;
    }
    if (cmd_->count("--decode-router") > 0 && f.connect_decode.empty()) {
      err << "mocker replay: --decode-router needs decode servers (--connect-decode or "
             "--decode-fleet)\n";
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
    auto d = decodeTargets(f);
    if (!d) {
      err << "mocker replay: " << d.error().message << "\n";
      return 2;
    }
    decode_targets = std::move(*d);
    if (f.router == "kv") {
      if (!f.curve_secret_key_file.empty()) {
        err << "mocker replay: --router kv with CURVE servers is not supported (the KV-event "
               "subscription would need the CURVE keys too)\n";
        return 2;
      }
      if (const Status s = addKvEndpoints(f, targets); !s) {
        err << "mocker replay: " << s.error().message << "\n";
        return 2;
      }
    }
    if (!f.curve_secret_key_file.empty()) {
      auto keys = service::loadCurveClientKeys(f.curve_server_key_file, f.curve_secret_key_file);
      if (!keys) {
        err << "mocker replay: " << keys.error().message << "\n";
        return 1;
      }
      curve = std::move(*keys);
    }
  }

  Result<std::string> trace_format = workloadFormat(f);
  if (!trace_format) {
    err << "mocker replay: " << trace_format.error().message << "\n";
    return 2;
  }
  if (const Status s = checkOutputPaths(f); !s) {
    err << "mocker replay: " << s.error().message << "\n";
    return 1;
  }
  // A .jsonl trace without --format: its dialect from its first lines, said on stderr.
  const std::optional<std::string> head =
      *trace_format == "mooncake" || *trace_format == "mooncake-delta" || *trace_format == "agentic"
          ? replay::readTraceHead(f.trace)
          : std::nullopt;
  const std::optional<Result<replay::DialectGuess>> guess =
      head ? std::optional(replay::detectJsonlDialect(*head)) : std::nullopt;
  if (f.format.empty() && guess) {
    if (!*guess) {
      err << "mocker replay: " << f.trace << ": " << guess->error().message << "\n";
      return 1;
    }
    *trace_format = (*guess)->format;
    err << "mocker replay: " << f.trace << ": reading it as --format " << (*guess)->format << " ("
        << (*guess)->reason << ")\n";
  }
  Result<replay::Workload> workload = loadWorkload(f, *trace_format, closed_loop);
  if (!workload) {
    err << "mocker replay: " << workload.error().message;
    if (guess && *guess && (*guess)->format != *trace_format) {
      err << " (its first lines look like --format " << (*guess)->format << ": " << (*guess)->reason
          << ")";
    }
    err << "\n";
    return 1;
  }
  replay::RunIdentity identity{
      .mocker_version = buildVersion(),
      .git_revision = buildGitRevision(),
      .mode = mode == ReplayMode::Live ? "live" : "offline",
      .format = *trace_format,
      .num_workers = mode == ReplayMode::Live
                         ? static_cast<std::uint32_t>(targets.size() + decode_targets.size())
                     : prefill_config ? f.num_prefill_workers + f.num_decode_workers
                                      : f.num_workers,
      .router = prefill_config || !decode_targets.empty()
                    ? f.router + " (prefill), " + f.decode_router + " (decode)"
                    : f.router,
      .servers = mode == ReplayMode::Live ? f.connect : std::vector<std::string>{},
      .engine_config = prefill_config ? roleSettings(*prefill_config, *decode_config)
                       : config       ? engineSettings(*config)
                                      : std::vector<replay::ConfigSetting>{},
      .date_utc = date_utc,
      .command_line = replay::shellQuotedCommandLine(command_line),
  };
  if (config && !prefill_config && mode != ReplayMode::Live) {
    identity.gpu_kv_cache_tokens = engine::deploymentKvCacheTokens(config->engine);
  }
  if (*trace_format != "synthetic" && *trace_format != "synthetic-agentic") {
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

  replay::SloSpec slo;
  const auto goodput_has = [&f](const char* key) {
    return std::any_of(f.goodput.begin(), f.goodput.end(),
                       [key](const std::string& item) { return item.starts_with(key); });
  };
  if (cmd_->count("--slo-ttft-ms") > 0 || goodput_has("ttft:")) slo.ttft_ms = f.slo_ttft_ms;
  if (cmd_->count("--slo-tpot-ms") > 0 || goodput_has("tpot:")) slo.tpot_ms = f.slo_tpot_ms;
  if (cmd_->count("--slo-e2e-ms") > 0 || goodput_has("e2el:")) slo.e2e_ms = f.slo_e2e_ms;

  const bool tty = &err == &std::cerr && ::isatty(STDERR_FILENO) == 1 && f.progress;
  ProgressBar bar(err);
  replay::ReplayCollector collector({.keep_engine_samples = !f.report_html.empty()});
  replay::HtmlReportOptions html;
  std::string footer;
  double wall_ms = 0.0;
  std::optional<replay::HandoffReport> handoff;

  if (mode == ReplayMode::Offline) {
    replay::OfflineReplayOptions options{
        .engine = config->engine,
        .num_workers = f.num_workers,
        .router = *router,
        .router_seed = f.router_seed,
        .kv_router = {.overlap_weight = f.router_overlap_weight,
                      .temperature = f.router_temperature},
    };
    if (closed_loop) options.concurrency = f.concurrency;
    if (prefill_config) {
      options.disagg = replay::DisaggOptions{
          .num_prefill_workers = f.num_prefill_workers,
          .num_decode_workers = f.num_decode_workers,
          .prefill_engine = prefill_config->engine,
          .decode_engine = decode_config->engine,
          .decode_router = *replay::parseRouterKind(f.decode_router),
      };
    }
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
    if (stats->handoff) {
      handoff = replay::summarizeHandoffs(*stats->handoff);
      std::ostringstream line;
      line << "Requests per prefill worker (" << f.router << "):";
      for (const std::uint64_t n : stats->handoff->per_prefill_worker) line << " " << n;
      line << "\nHandoffs per decode worker (" << f.decode_router << "):";
      for (const std::uint64_t n : stats->handoff->per_decode_worker) line << " " << n;
      footer = line.str() + "\n";
      for (std::uint32_t w = 0; w < f.num_prefill_workers + f.num_decode_workers; ++w) {
        const bool prefill = w < f.num_prefill_workers;
        const std::uint32_t dp = (prefill ? prefill_config : decode_config)->engine.dp_size;
        for (std::uint32_t r = 0; r < dp; ++r) {
          html.rank_labels.push_back((prefill
                                          ? "prefill " + std::to_string(w)
                                          : "decode " + std::to_string(w - f.num_prefill_workers)) +
                                     (dp > 1 ? " rank " + std::to_string(r) : ""));
        }
      }
    } else if (f.num_workers > 1) {
      std::ostringstream line;
      line << "Requests per worker (" << replay::toString(*router) << "):";
      for (const std::uint64_t n : stats->per_worker) line << " " << n;
      footer = line.str() + "\n";
      html.requests_per_worker = stats->per_worker;
    }
    const std::uint32_t dp_size = config->engine.dp_size;
    if (!stats->handoff && f.num_workers > 1) {
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
                  : f.router == "kv"   ? replay::LiveRouterKind::Kv
                                       : replay::LiveRouterKind::RoundRobin,
        .router_seed = f.router_seed,
        .kv_router = {.overlap_weight = f.router_overlap_weight,
                      .temperature = f.router_temperature},
        .kv_block_size = f.router_block_size,
        .request_timeout_ms = f.request_timeout_s * 1000.0,
        .connect_timeout_ms = f.connect_timeout_s * 1000.0,
        .stats_interval_ms = f.stats_interval_ms,
        .curve = curve,
    };
    options.decode_targets = decode_targets;
    options.decode_router = f.decode_router == "random" ? replay::LiveRouterKind::Random
                            : f.decode_router == "kv"   ? replay::LiveRouterKind::Kv
                                                        : replay::LiveRouterKind::RoundRobin;
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
    for (const auto& e : stats->engines) {
      identity.server_speedup_ratios.push_back(e ? std::optional(e->speedup_ratio) : std::nullopt);
    }
    for (const std::string& w : stats->warnings) err << "mocker replay: warning: " << w << "\n";
    std::ostringstream line;
    if (stats->handoff) {
      line << "Live disaggregated: " << targets.size() << " prefill + " << decode_targets.size()
           << " decode server(s); requests per prefill server (" << f.router << "):";
      for (const std::uint64_t n : stats->per_target) line << " " << n;
      line << "; handoffs per decode server (" << f.decode_router << "):";
      for (const std::uint64_t n : stats->handoff->per_decode_target) line << " " << n;
    } else {
      line << "Live: " << targets.size() << " server(s)";
      if (targets.size() > 1) {
        line << ", requests per server (" << f.router << "):";
        for (const std::uint64_t n : stats->per_target) line << " " << n;
      }
    }
    line << "; max in flight " << stats->max_in_flight;
    if (!closed_loop) line << "; max dispatch lag " << stats->max_dispatch_lag_ms << " ms";
    line << "\n";
    if (stats->handoff) line << replay::formatLiveHandoffs(*stats->handoff);
    if (f.router == "kv") {
      line << "Live kv router: " << stats->kv_block_size << "-token blocks; "
           << stats->kv_routed_hits << " requests routed to a cached prefix; "
           << stats->kv_query_failures << " overlap queries unanswered; index applied "
           << stats->kv_batches_applied << " KV-event batches, " << stats->kv_gaps_detected
           << " gaps (" << stats->kv_gaps_healed << " healed by replay), " << stats->kv_resyncs
           << " resyncs\n";
    }
    const replay::LiveTimingSummary timing =
        replay::summarizeLiveTiming(*stats, closed_loop, stats->handoff ? targets.size() : 0);
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
    if (stats->handoff) {
      handoff = replay::summarizeLiveHandoffs(*stats->handoff);
      for (std::size_t t = 0; t < targets.size() + decode_targets.size(); ++t) {
        const bool prefill = t < targets.size();
        for (std::uint32_t r = 0; r < stats->ranks_per_target[t]; ++r) {
          html.rank_labels.push_back((prefill ? "prefill " + std::to_string(t)
                                              : "decode " + std::to_string(t - targets.size())) +
                                     " rank " + std::to_string(r));
        }
      }
    } else {
      if (targets.size() > 1) html.requests_per_worker = stats->per_target;
      for (std::size_t t = 0; t < targets.size(); ++t) {
        for (std::uint32_t r = 0; r < stats->ranks_per_target[t]; ++r) {
          html.rank_labels.push_back(
              (targets.size() > 1 ? "server " + std::to_string(t) + " " : std::string()) + "rank " +
              std::to_string(r));
        }
      }
    }
  }

  replay::Report report = collector.buildReport({.slo = slo, .wall_time_ms = wall_ms});
  report.identity = std::move(identity);
  report.handoff = std::move(handoff);
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
      write(f.report_html, [&] { return replay::renderHtmlReport(report, collector, html); }) && ok;
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

}  // namespace mocker::tools
