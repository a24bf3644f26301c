// `mocker replay TRACE [options]`: loads a Mooncake JSONL or Azure CSV trace (or generates a
// synthetic workload), replays it and prints the AIPerf-style report; optionally writes the JSON
// report, per-request JSONL timelines and a self-contained HTML page
// (docs/traces.md, docs/metrics.md; tools/replay/README.md).
//
// Modes: `offline` (default; in-process engines on a virtual clock, tools/replay/offline_replay.h)
// and `live` (`--mode live --connect tcp://HOST:PORT …`: a wall-clock load driver against running
// `mocker serve` instances, tools/replay/live_replay.h). Offline engine settings come from the
// shared serve flags (--config FILE and one flag per [engine] key); live mode ignores them (the
// servers have their own configuration).
//
//   ReplayCommand replay(app);            // registers the subcommand before app.parse()
//   if (replay.parsed()) return replay.run(out, err);
//
// Call from the main thread. Not copyable or movable: CLI11 holds pointers into it.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/result.h"
#include "tools/serve_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

/// Where the engines run: in-process on a virtual clock, or in running `mocker serve` instances.
enum class ReplayMode : std::uint8_t { Offline, Live };

/// Raw flag values, as CLI11 stores them.
struct ReplayFlags {
  std::string trace;
  std::string format;  ///< "" = by extension
  std::string mode = "offline";
  std::vector<std::string> connect;         ///< live: submit endpoints, one per server
  std::vector<std::string> connect_cancel;  ///< live: cancel endpoints (default: port + 1)
  std::string fleet_file;  ///< live: --fleet, every worker's submit and cancel endpoints
  /// From --fleet: each worker's KV-event PUB and replay ROUTER endpoints, by rank (kv router).
  std::vector<std::vector<std::string>> fleet_kv_events;
  std::vector<std::vector<std::string>> fleet_kv_replay;
  std::string curve_server_key_file;  ///< live: CURVE, the servers' public key file
  std::string curve_secret_key_file;  ///< live: CURVE, this client's secret key file
  double request_timeout_s = 600.0;   ///< live: cancel a request after this long
  double connect_timeout_s = 10.0;    ///< live: start-up handshake with every server
  double stats_interval_ms = 1000.0;  ///< live: `stats` poll period, 0 = off
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

class ReplayCommand final {
 public:
  /// Registers the `replay` subcommand and all its flags on `app`.
  explicit ReplayCommand(CLI::App& app);
  ReplayCommand(const ReplayCommand&) = delete;
  ReplayCommand& operator=(const ReplayCommand&) = delete;

  /// True when the command line selected `replay`.
  bool parsed() const;

  /// Runs the parsed command. Returns the exit code: 0 ok, 1 bad input or runtime error
  /// (unreadable/malformed trace, an output path that cannot be written — checked before the
  /// run —, or a run in which every request was rejected), 2 configuration/usage error. The
  /// report table goes to `out`; errors, warnings and the progress bar (only when `err` is
  /// std::cerr on a terminal and the run lasts more than a second) go to `err`. `command_line`
  /// (argv, program name first) is recorded in the reports' run identity.
  int run(std::ostream& out, std::ostream& err, const std::vector<std::string>& command_line = {});

 private:
  /// Folds vLLM's spellings (--num-prompts, --burstiness, --goodput) into the native flags.
  Status applyAliases();

  CLI::App* cmd_ = nullptr;
  ReplayFlags flags_;
};

}  // namespace mocker::tools
