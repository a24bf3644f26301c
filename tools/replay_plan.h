// What a `mocker replay` command line asks for (tools/replay_command.h), decided before anything
// runs: planReplay turns the flags (tools/replay_flags.h, aliases already applied) into an
// offline plan (the in-process engines' options) or a live plan (the servers and how to reach
// them), or a usage error naming the flags. It reads only the files the flags name for
// configuration (--config, --prefill-config / --decode-config, the CURVE key files); the trace
// is read later, by the command.
//
//   ReplayFlags flags;  GivenFlags given;  ...   // parsed, aliases applied
//   Result<ReplayPlan> plan = planReplay(flags, given);
//   if (!plan) return planExitCode(plan.error());  // 2 usage / configuration, 1 unreadable key
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/result.h"
#include "tools/replay/collector.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/openai_replay.h"
#include "tools/replay/run_identity.h"
#include "tools/replay_flags.h"

namespace mocker::tools {

/// Where the engines run: in-process on a virtual clock, or in running `mocker serve` instances.
enum class ReplayMode : std::uint8_t { Offline, Live };

struct ReplayPlan {
  ReplayMode mode = ReplayMode::Offline;
  bool closed_loop = false;  ///< --concurrency given
  /// "mooncake", "mooncake-delta", "agentic", "azure", "synthetic" or "synthetic-agentic", from
  /// --format or the TRACE extension (a .jsonl trace's dialect is then guessed from its lines).
  std::string format;
  replay::SloSpec slo{};  ///< --slo-*-ms / --goodput, each only when given
  /// The run's options without a progress callback: OfflineReplayOptions when mode is Offline,
  /// LiveReplayOptions when Live against `mocker serve` instances, OpenAiReplayOptions when Live
  /// against an OpenAI-compatible HTTP server (--openai-url).
  std::variant<replay::OfflineReplayOptions, replay::LiveReplayOptions, replay::OpenAiReplayOptions>
      options;
  // The run identity as far as the flags decide it (tools/replay/run_identity.h).
  std::uint32_t num_workers = 1;       ///< workers (offline) or servers (live), both roles
  std::string router;                  ///< "kv", or "kv (prefill), round_robin (decode)"
  std::vector<std::string> servers{};  ///< live: the (prefill) servers
  std::vector<replay::ConfigSetting> engine_config{};  ///< offline: the effective [engine]
  /// Offline, aggregated: the KV cache in tokens when sized from the deployment (no
  /// num_gpu_blocks), as vLLM's "GPU KV cache size" line gives it.
  std::optional<std::uint64_t> gpu_kv_cache_tokens{};
  /// Offline: the JSONL fault log (`[faults] log`, --fault-log); "" = none.
  std::string fault_log{};
};

/// The plan for `flags` (aliases applied; `given` = the flags the command line gave). Errors:
/// InvalidArgument for a usage or configuration error (a flag of the other mode or router,
/// conflicting flags, endpoints that do not parse or cannot be derived, a configuration file that
/// does not load or validate, no workload described); IoError for a CURVE key file that cannot
/// be read. Every message names the flag or file.
Result<ReplayPlan> planReplay(const ReplayFlags& flags, const GivenFlags& given);

// The --openai-url plan (tools/replay_plan_openai.cpp), used by planReplay.
/// Whether the command line asks for a replay against an OpenAI-compatible server.
bool wantsOpenAi(const ReplayFlags& flags, const GivenFlags& given);
/// The live plan against --openai-url: the ZeroMQ-server, router and engine flags refused (usage
/// errors), the API key file read (IoError when it cannot be), the tokenizer file loaded.
Status planOpenAi(const ReplayFlags& flags, const GivenFlags& given, ReplayPlan& plan);
/// Usage errors for --chat / --api-key-file / --tokenizer without --openai-url.
Status refuseOpenAiFlags(const GivenFlags& given);

/// The exit code of a planning error: 2 for InvalidArgument (usage), 1 otherwise.
int planExitCode(const Error& error);

/// The effective [engine] settings as `mocker config --dump` prints them, keys without the
/// "engine." prefix; the handoff keys only when `disaggregated`, the roofline keys only with the
/// roofline timing model.
std::vector<replay::ConfigSetting> engineSettings(const service::ServiceConfig& config,
                                                  bool disaggregated = false);

}  // namespace mocker::tools
