#include "tools/replay_plan.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "base/endpoint.h"
#include "engine/config.h"
#include "net/security.h"
#include "service/config.h"
#include "service/fault_plan.h"
#include "tools/serve_flags.h"

namespace mocker::tools {
namespace {

/// A configuration file or flag value that does not load or validate: a usage error (exit 2).
Error configError(const std::string& message) {
  return invalidArgument("configuration error: " + message);
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

/// A disaggregated role's configuration: `base`, then the [engine] keys of `path` (if given),
/// validated for an engine-only use. Errors (configuration errors) name the file, line and key.
Result<service::ServiceConfig> roleConfig(const service::ServiceConfig& base,
                                          const std::string& path, const char* flag) {
  if (path.empty()) return base;
  service::KeyOrigins origins;
  Result<service::ServiceConfig> layered = service::loadServiceConfigOver(base, path, origins);
  if (!layered) return configError(std::string(flag) + ": " + layered.error().message);
  Result<service::ServiceConfig> finished =
      service::finishServiceConfig(std::move(*layered), origins, service::ConfigUse::EngineOnly);
  if (!finished) return configError(std::string(flag) + ": " + finished.error().message);
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

/// The servers named by `submits` (--connect or --connect-decode) with their `cancels` (one per
/// server, or none: each submit port + 1). Errors name `submit_flag` / `cancel_flag`.
Result<std::vector<replay::LiveTarget>> serverTargets(const std::vector<std::string>& submits,
                                                      const std::vector<std::string>& cancels,
                                                      const std::string& submit_flag,
                                                      const std::string& cancel_flag) {
  if (!cancels.empty() && cancels.size() != submits.size()) {
    return invalidArgument(cancel_flag + ": give one per " + submit_flag + " (got " +
                           std::to_string(cancels.size()) + " for " +
                           std::to_string(submits.size()) + " servers), or none");
  }
  std::vector<replay::LiveTarget> targets;
  for (std::size_t i = 0; i < submits.size(); ++i) {
    replay::LiveTarget t{.submit_endpoint = submits[i]};
    if (auto parsed = parseEndpoint(submits[i]); !parsed) {
      return invalidArgument(submit_flag + ": " + parsed.error().message);
    }
    if (cancels.empty()) {
      auto cancel = replay::defaultCancelEndpoint(submits[i]);
      if (!cancel) return invalidArgument(submit_flag + ": " + cancel.error().message);
      t.cancel_endpoint = std::move(*cancel);
    } else {
      t.cancel_endpoint = cancels[i];
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

/// The offline fault plan: `[faults]` of --config and every --fault, --fault-seed, and
/// --request-timeout-s for the requests a hung worker holds (refused without a hang fault: it
/// would do nothing offline).
Status planOfflineFaults(const ReplayFlags& f, const GivenFlags& given,
                         const service::ServiceConfig& config,
                         replay::OfflineReplayOptions& options) {
  // Validated by resolveServeConfig already (the worker scopes are checked by the plan's
  // caller against the replay's own workers).
  auto specs =
      service::parseFaultSpecs(config.faults.inject, service::kMaxFleetWorkers, UINT32_MAX);
  if (!specs) return configError(specs.error().message);
  options.faults = {.specs = std::move(*specs),
                    .seed = config.faults.seed,
                    .request_timeout_ms = f.request_timeout_s * 1000.0};
  const bool hang =
      std::any_of(options.faults.specs.begin(), options.faults.specs.end(),
                  [](const service::FaultSpec& s) { return s.kind == service::FaultKind::Hang; });
  if (given.contains("--request-timeout-s") && !hang) {
    return invalidArgument(
        "--request-timeout-s: offline it ends only the requests a hung worker holds (a `hang` "
        "fault, --fault hang:...), and the plan has none; live it cancels any request");
  }
  return {};
}

/// The offline plan's options: the engine configuration (--config and the [engine] flags; per
/// role for a disaggregated run), the router, and the flags of the other mode refused.
Status planOffline(const ReplayFlags& f, const GivenFlags& given, ReplayPlan& plan) {
  for (const char* flag :
       {"--connect-cancel", "--curve-server-key-file", "--curve-secret-key-file",
        "--connect-kv-events", "--connect-kv-replay", "--router-block-size", "--worker-health",
        "--no-worker-health", "--worker-ack-timeout-ms", "--worker-down-after-ms",
        "--worker-stall-timeout-ms", "--migration-limit"}) {
    if (given.contains(flag)) return invalidArgument(std::string(flag) + " is for --mode live");
  }
  auto config = resolveServeConfig(f.serve, ConfigUse::EngineOnly);
  if (!config) return configError(config.error().message);
  std::optional<service::ServiceConfig> prefill_config;
  std::optional<service::ServiceConfig> decode_config;
  if (f.num_prefill_workers > 0) {
    for (const auto& [path, flag, out_config] :
         {std::tuple{&f.prefill_config, "--prefill-config", &prefill_config},
          std::tuple{&f.decode_config, "--decode-config", &decode_config}}) {
      MOCKER_TRY(*out_config, roleConfig(*config, *path, flag));
    }
  }
  MOCKER_TRY(const replay::RouterKind router, replay::parseRouterKind(f.router));
  if (given.contains("--decode-router") && f.num_prefill_workers == 0) {
    return invalidArgument(
        "--decode-router needs --num-prefill-workers (offline) or decode servers (live)");
  }
  if (f.num_prefill_workers > 0 && given.contains("--num-workers")) {
    return invalidArgument(
        "--num-workers is for aggregated workers; a disaggregated run has "
        "--num-prefill-workers + --num-decode-workers workers");
  }
  replay::OfflineReplayOptions options{
      .engine = config->engine,
      .num_workers = f.num_workers,
      .router = router,
      .router_seed = f.router_seed,
      .kv_router = {.overlap_weight = f.router_overlap_weight, .temperature = f.router_temperature},
  };
  if (plan.closed_loop) options.concurrency = f.concurrency;
  plan.num_workers = f.num_workers;
  MOCKER_TRY_VOID(planOfflineFaults(f, given, *config, options));
  plan.fault_log = config->faults.log;
  if (prefill_config) {
    MOCKER_TRY(const replay::RouterKind decode_router, replay::parseRouterKind(f.decode_router));
    options.disagg = replay::DisaggOptions{
        .num_prefill_workers = f.num_prefill_workers,
        .num_decode_workers = f.num_decode_workers,
        .prefill_engine = prefill_config->engine,
        .decode_engine = decode_config->engine,
        .decode_router = decode_router,
    };
    plan.num_workers = f.num_prefill_workers + f.num_decode_workers;
    plan.engine_config = roleSettings(*prefill_config, *decode_config);
  } else {
    plan.engine_config = engineSettings(*config);
    plan.gpu_kv_cache_tokens = engine::deploymentKvCacheTokens(config->engine);
  }
  if (!options.faults.specs.empty()) {
    std::vector<std::uint32_t> ranks(f.num_workers, config->engine.dp_size);
    if (options.disagg) {
      ranks.assign(f.num_prefill_workers, options.disagg->prefill_engine.dp_size);
      ranks.insert(ranks.end(), f.num_decode_workers, options.disagg->decode_engine.dp_size);
    }
    if (Status s =
            replay::checkOfflineFaults(options.faults.specs, ranks, options.disagg.has_value());
        !s) {
      return configError(s.error().message);
    }
  }
  plan.options = std::move(options);
  return {};
}

/// The live plan's options: the servers (prefill and decode), their KV endpoints for the kv
/// router, CURVE keys, timeouts; the offline-only flags and the engine flags refused.
Status planLive(const ReplayFlags& f, const GivenFlags& given, ReplayPlan& plan) {
  if (f.router == "kv_prefix") {
    return invalidArgument(
        "--router kv_prefix is offline only (live mode routes kv, round_robin or random between "
        "the --connect servers)");
  }
  if (given.contains("--num-workers")) {
    return invalidArgument(
        "--num-workers is offline only (in live mode give one --connect per server)");
  }
  if (f.num_prefill_workers > 0) {
    return invalidArgument(
        "--num-prefill-workers / --num-decode-workers are offline only (live disaggregation: "
        "--connect-prefill / --prefill-fleet and --connect-decode / --decode-fleet)");
  }
  if (given.contains("--decode-router") && f.connect_decode.empty()) {
    return invalidArgument(
        "--decode-router needs decode servers (--connect-decode or --decode-fleet)");
  }
  if (const auto flag = firstGivenServeFlag(f.serve)) {
    return invalidArgument(*flag +
                           " has no effect in live mode: each server runs with its own "
                           "configuration (give it to mocker serve)");
  }
  MOCKER_TRY(const replay::RouterKind router, replay::parseRouterKind(f.router));
  MOCKER_TRY(const replay::RouterKind decode_router, replay::parseRouterKind(f.decode_router));
  replay::LiveReplayOptions options{
      .decode_router = decode_router,
      .router = router,
      .router_seed = f.router_seed,
      .kv_router = {.overlap_weight = f.router_overlap_weight, .temperature = f.router_temperature},
      .kv_block_size = f.router_block_size,
      .request_timeout_ms = f.request_timeout_s * 1000.0,
      .connect_timeout_ms = f.connect_timeout_s * 1000.0,
      .stats_interval_ms = f.stats_interval_ms,
  };
  options.worker_health = {.enabled = f.worker_health,
                           .ack_timeout_ms = f.worker_ack_timeout_ms,
                           .down_after_ms = f.worker_down_after_ms,
                           .stall_timeout_ms = f.worker_stall_timeout_ms};
  options.migration_limit = f.migration_limit;
  if (f.connect.empty()) {
    return invalidArgument("live mode needs --connect tcp://HOST:PORT (a running `mocker serve`)");
  }
  MOCKER_TRY(options.targets,
             serverTargets(f.connect, f.connect_cancel, "--connect", "--connect-cancel"));
  MOCKER_TRY(options.decode_targets, serverTargets(f.connect_decode, f.connect_decode_cancel,
                                                   "--connect-decode", "--connect-decode-cancel"));
  if (router == replay::RouterKind::Kv) {
    if (!f.curve_secret_key_file.empty()) {
      return invalidArgument(
          "--router kv with CURVE servers is not supported (the KV-event subscription would "
          "need the CURVE keys too)");
    }
    MOCKER_TRY_VOID(addKvEndpoints(f, options.targets));
  }
  if (!f.curve_secret_key_file.empty()) {
    auto keys = net::loadCurveClientKeys(f.curve_server_key_file, f.curve_secret_key_file);
    if (!keys) return Error{ErrorCode::IoError, keys.error().message};
    options.curve = std::move(*keys);
  }
  if (plan.closed_loop) options.concurrency = f.concurrency;
  plan.num_workers =
      static_cast<std::uint32_t>(options.targets.size() + options.decode_targets.size());
  plan.servers = f.connect;
  plan.options = std::move(options);
  return {};
}

/// --slo-*-ms and the --goodput keys: each SLO only when given.
replay::SloSpec sloOf(const ReplayFlags& f, const GivenFlags& given) {
  const auto goodput_has = [&f](const char* key) {
    return std::any_of(f.goodput.begin(), f.goodput.end(),
                       [key](const std::string& item) { return item.starts_with(key); });
  };
  replay::SloSpec slo;
  if (given.contains("--slo-ttft-ms") || goodput_has("ttft:")) slo.ttft_ms = f.slo_ttft_ms;
  if (given.contains("--slo-tpot-ms") || goodput_has("tpot:")) slo.tpot_ms = f.slo_tpot_ms;
  if (given.contains("--slo-e2e-ms") || goodput_has("e2el:")) slo.e2e_ms = f.slo_e2e_ms;
  return slo;
}

}  // namespace

/// The effective [engine] settings as `mocker config --dump` prints them.
std::vector<replay::ConfigSetting> engineSettings(const service::ServiceConfig& config,
                                                  bool disaggregated) {
  service::ServiceConfig effective = config;
  effective.engine.block_size = engine::effectiveBlockSize(effective.engine);
  const bool roofline = effective.engine.timing_model == engine::TimingModelKind::Roofline;
  const bool tiers = effective.engine.num_g2_blocks > 0;
  // The KV capacity the deployment gives (vLLM's "GPU KV cache size") is part of the identity.
  if (roofline) effective.engine.num_gpu_blocks = engine::effectiveNumGpuBlocks(effective.engine);
  std::vector<replay::ConfigSetting> out;
  constexpr std::string_view kPrefix = "engine.";
  for (const std::string& key : service::configKeys()) {
    if (!key.starts_with(kPrefix)) continue;
    if (!roofline && service::isRooflineKey(key)) continue;
    // The handoff settings only matter to a disaggregated run, the offload settings (and the
    // block bytes) to a run with host tiers.
    if (!disaggregated &&
        (key == "engine.kv_transfer_bandwidth_gbps" || key == "engine.kv_transfer_charge" ||
         key == "engine.kv_hold_timeout_ms" || (key == "engine.kv_bytes_per_token" && !tiers))) {
      continue;
    }
    if (!tiers && (key.starts_with("engine.offload_") || key == "engine.num_g2_blocks" ||
                   key == "engine.num_g3_blocks")) {
      continue;
    }
    // The LoRA settings only matter to a run with adapters on.
    if (effective.engine.max_loras == 0 &&
        (key == "engine.max_loras" || key == "engine.max_cpu_loras" ||
         key == "engine.lora_load_ms")) {
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

Result<ReplayPlan> planReplay(const ReplayFlags& f, const GivenFlags& given) {
  if (given.contains("--mode") && f.mode == "offline" && !f.connect.empty()) {
    return invalidArgument("--connect is for --mode live (got --mode offline)");
  }
  ReplayPlan plan;
  plan.closed_loop = given.contains("--concurrency");
  if (wantsOpenAi(f, given)) {
    MOCKER_TRY_VOID(planOpenAi(f, given, plan));
    MOCKER_TRY(plan.format, workloadFormat(f));
    plan.router = "server";
    plan.slo = sloOf(f, given);
    return plan;
  }
  MOCKER_TRY_VOID(refuseOpenAiFlags(given));
  plan.mode = f.mode == "live" || !f.connect.empty() ? ReplayMode::Live : ReplayMode::Offline;
  plan.closed_loop = given.contains("--concurrency");
  if (f.router != "kv") {
    for (const char* flag : {"--router-overlap-weight", "--router-temperature",
                             "--connect-kv-events", "--connect-kv-replay", "--router-block-size"}) {
      if (given.contains(flag)) return invalidArgument(std::string(flag) + " is for --router kv");
    }
  }
  // The mode-specific configuration before the workload (a usage error before any file is read).
  MOCKER_TRY_VOID(plan.mode == ReplayMode::Offline ? planOffline(f, given, plan)
                                                   : planLive(f, given, plan));
  MOCKER_TRY(plan.format, workloadFormat(f));
  const bool disaggregated =
      plan.mode == ReplayMode::Offline
          ? std::get<replay::OfflineReplayOptions>(plan.options).disagg.has_value()
          : !std::get<replay::LiveReplayOptions>(plan.options).decode_targets.empty();
  plan.router =
      disaggregated ? f.router + " (prefill), " + f.decode_router + " (decode)" : f.router;
  plan.slo = sloOf(f, given);
  return plan;
}

int planExitCode(const Error& error) { return error.code == ErrorCode::InvalidArgument ? 2 : 1; }

}  // namespace mocker::tools
