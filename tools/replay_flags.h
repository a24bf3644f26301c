// The flags of `mocker replay` (tools/replay_command.h): their values (ReplayFlags), their
// registration on the CLI11 subcommand with help text, checks and groups, which of them the command
// line gave. The aliases that fold vLLM bench's and the fleet files' spellings into the native
// flags are tools/replay_aliases.h; what the flags mean together is tools/replay_plan.h.
//
//   ReplayFlags flags;
//   registerReplayFlags(*cmd, flags);                  // before parsing
//   const GivenFlags given = givenFlags(*cmd);         // after parsing
//   Status s = applyReplayAliases(flags, given);       // tools/replay_aliases.h
//
// ReplayFlags must outlive the CLI::App and must not move after registration (CLI11 holds
// pointers into it).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "tools/serve_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

/// Raw flag values, as CLI11 stores them.
struct ReplayFlags {
  std::string trace;
  std::string format;  ///< "" = by extension
  std::string mode = "offline";
  std::vector<std::string> connect;         ///< live: submit endpoints, one per server
  std::vector<std::string> connect_cancel;  ///< live: cancel endpoints (default: port + 1)
  std::string fleet_file;  ///< live: --fleet, every worker's submit and cancel endpoints
  // Live against an OpenAI-compatible HTTP server (--openai-url).
  std::string openai_url;                ///< http://HOST:PORT[/v1]
  bool chat = false;                     ///< /v1/chat/completions
  bool no_stream = false;                ///< --openai-url: `stream: false` requests
  std::uint32_t openai_connections = 0;  ///< --openai-url: connections opened before the start
  std::string api_key_file;              ///< a Bearer key, read from this file
  std::string tokenizer_file;            ///< a tokenizer.json: text prompts
  /// From --fleet: each worker's KV-event PUB and replay ROUTER endpoints, by rank (kv router).
  std::vector<std::vector<std::string>> fleet_kv_events;
  std::vector<std::vector<std::string>> fleet_kv_replay;
  std::string curve_server_key_file;  ///< live: CURVE, the servers' public key file
  std::string curve_secret_key_file;  ///< live: CURVE, this client's secret key file
  double request_timeout_s = 600.0;   ///< live: cancel a request after this long
  double connect_timeout_s = 10.0;    ///< live: start-up handshake with every server
  double stats_interval_ms = 1000.0;  ///< live: `stats` poll period, 0 = off
  // Live: worker health (tools/replay/worker_health.h).
  bool worker_health = true;
  double worker_ack_timeout_ms = 5000.0;
  double worker_down_after_ms = 2000.0;
  double worker_stall_timeout_ms = 30'000.0;
  std::uint32_t migration_limit = 0;  ///< live: re-sends per request when its server goes down
  // Trace options.
  std::uint32_t trace_block_size = 512;
  double arrival_speedup_ratio = 1.0;
  bool skip_invalid = false;
  // Synthetic workload.
  std::uint32_t num_requests = 0;
  std::uint32_t num_prompts = 0;  ///< vLLM's --num-prompts: num_requests single-turn sessions
  double input_mean = 0.0;
  double input_stddev = 0.0;
  double output_mean = 0.0;
  double output_stddev = 0.0;
  std::string arrival = "poisson";
  double request_rate = 1.0;
  double gamma_smoothness = 1.0;
  double burstiness = 1.0;  ///< vLLM's --burstiness: gamma arrivals with this shape
  double arrival_interval_ms = 0.0;
  double shared_prefix_ratio = 0.0;
  std::uint32_t num_prefix_groups = 0;
  std::uint32_t loras = 0;  ///< --loras: synthetic LoRA adapters (Zipf popularity)
  std::uint32_t turns_per_session = 1;
  std::string inter_turn_delay = "none";
  double inter_turn_delay_ms = 0.0;
  bool session_context = false;
  std::uint64_t seed = 0;
  // Synthetic agentic sessions (--format synthetic-agentic; also uses the flags above).
  std::uint32_t system_prompt_tokens = 0;
  double tool_output_mean = 0.0;
  double tool_output_stddev = 0.0;
  std::string tool_wait = "none";
  double tool_wait_ms = 0.0;
  double subagent_probability = 0.0;
  std::uint32_t subagent_fanout = 1;
  // Replay.
  std::uint32_t num_workers = 1;
  std::string router = "round_robin";
  std::uint64_t router_seed = 0;
  double router_overlap_weight = 1.0;          ///< kv: Dynamo's overlap_score_weight default
  double router_temperature = 0.0;             ///< kv: Dynamo's router_temperature default
  std::uint32_t router_block_size = 0;         ///< live kv: the servers' block size; 0 = theirs
  std::vector<std::string> connect_kv_events;  ///< live kv: KV-event PUBs (default: port + 2)
  std::vector<std::string> connect_kv_replay;  ///< live kv: replay ROUTERs (default: port + 3)
  std::uint32_t concurrency = 0;               ///< 0 = trace mode (timestamps)
  // Disaggregated prefill/decode (offline): both counts 0 = aggregated.
  std::uint32_t num_prefill_workers = 0;
  std::uint32_t num_decode_workers = 0;
  std::string prefill_config;  ///< TOML whose [engine] keys override the base for prefill workers
  std::string decode_config;   ///< the same for decode workers
  std::string decode_router = "round_robin";
  // Disaggregated prefill/decode (live): the prefill servers go to `connect` / `connect_cancel`.
  std::vector<std::string> connect_prefill;        ///< --connect-prefill (→ connect)
  std::vector<std::string> connect_decode;         ///< decode servers' submit endpoints
  std::vector<std::string> connect_decode_cancel;  ///< their cancel endpoints (default: port + 1)
  std::string prefill_fleet;                       ///< --prefill-fleet (→ fleet_file)
  std::string decode_fleet;                        ///< --decode-fleet (→ connect_decode, …)
  // Outputs.
  std::string report_json;
  std::string requests_jsonl;
  std::string report_html;
  double slo_ttft_ms = 0.0;  ///< 0 = not given (checked through the option's count)
  double slo_tpot_ms = 0.0;
  double slo_e2e_ms = 0.0;
  std::vector<std::string> goodput;  ///< vLLM's --goodput KEY:MS pairs (ttft, tpot, e2el)
  bool progress = true;
  ServeFlags serve;
};

/// The options the command line gave, by long name with dashes ("--router"): the checks that
/// depend on whether a flag was given rather than on its value read them.
using GivenFlags = std::set<std::string, std::less<>>;

/// Registers every `replay` flag on `cmd` (the subcommand), bound to `flags`, and its help footer.
void registerReplayFlags(CLI::App& cmd, ReplayFlags& flags);

/// The options of the parsed `cmd` that the command line gave.
GivenFlags givenFlags(const CLI::App& cmd);

}  // namespace mocker::tools
