#include "tools/replay_flags.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "tools/cli_options.h"

namespace mocker::tools {

namespace {

// Help groups that more than one of the functions below fills.
constexpr const char* kRunGroup = "Replay";
constexpr const char* kLiveGroup = "Live replay (--mode live)";

/// Input: the trace and how to read it.
void registerInputFlags(CLI::App& cmd, ReplayFlags& f) {
  cmd.add_option("trace", f.trace, "trace file (.jsonl = Mooncake, .csv = Azure)")
      ->option_text("TRACE");
  const char* input = "Input";
  cmd.add_option("--format", f.format,
                 "mooncake | mooncake-delta | agentic | azure | synthetic | synthetic-agentic "
                 "(default: .csv = azure; .jsonl / .json = the JSONL dialect its first lines "
                 "show, said on stderr)")
      ->check(CLI::IsMember({"mooncake", "mooncake-delta", "mooncake_delta", "agentic",
                             "agentic-mooncake", "agentic_mooncake", "azure", "synthetic",
                             "synthetic-agentic"}))
      ->group(input);
  cmd.add_option("--trace-block-size", f.trace_block_size,
                 "tokens per trace hash id (Mooncake 512)")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(input);
  cmd.add_option("--arrival-speedup-ratio", f.arrival_speedup_ratio,
                 "divide arrival times and inter-turn delays by this")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(input);
  cmd.add_flag("--skip-invalid", f.skip_invalid,
               std::string("skip malformed trace lines (reported on stderr) instead of "
                           "stopping") +
                   flagDefault(false))
      ->group(input);
}

/// The synthetic workload generator (--format synthetic).
void registerSyntheticFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* synth = "Synthetic workload (--format synthetic)";
  auto* num_requests =
      cmd.add_option("--num-requests", f.num_requests, "sessions to generate (required)")
          ->check(atLeast(1))
          ->group(synth);
  cmd.add_option("--num-prompts", f.num_prompts,
                 "vLLM bench's name: requests to generate, as single-turn sessions (= "
                 "--num-requests with --turns-per-session 1)")
      ->check(atLeast(1))
      ->excludes(num_requests)
      ->group(synth);
  cmd.add_option("--input-tokens-mean", f.input_mean, "prompt length mean (required)")
      ->check(greaterThan(0))
      ->group(synth);
  cmd.add_option("--input-tokens-stddev", f.input_stddev, "prompt length stddev")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--output-tokens-mean", f.output_mean,
                 "output length mean (required; samples are rounded, at least 1)")
      ->check(greaterThan(0))
      ->group(synth);
  cmd.add_option("--output-tokens-stddev", f.output_stddev, "output length stddev")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--arrival", f.arrival, "burst | constant | poisson | gamma | interval")
      ->check(CLI::IsMember({"burst", "constant", "poisson", "gamma", "interval"}))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--request-rate", f.request_rate, "sessions/s (constant, poisson, gamma)")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(synth);
  auto* smoothness =
      cmd.add_option("--gamma-smoothness", f.gamma_smoothness, "gamma shape (1 = Poisson)")
          ->check(greaterThan(0))
          ->capture_default_str()
          ->group(synth);
  cmd.add_option("--burstiness", f.burstiness,
                 "vLLM bench's name: gamma arrivals of this shape at --request-rate (= "
                 "--arrival gamma --gamma-smoothness X; 1 = Poisson, < 1 burstier)")
      ->check(greaterThan(0))
      ->excludes(smoothness)
      ->group(synth);
  cmd.add_option("--arrival-interval-ms", f.arrival_interval_ms, "gap for --arrival interval")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--shared-prefix-ratio", f.shared_prefix_ratio,
                 "fraction of each prompt taken from its group's shared prefix")
      ->check(between(0, 1))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--num-prefix-groups", f.num_prefix_groups, "prefix groups (0 = no sharing)")
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--loras", f.loras,
                 "LoRA adapters lora-1..lora-N, one per session with Zipf popularity "
                 "P(k) ~ 1/k (seeded; 0 = none; needs --max-loras > 0)")
      ->check(between(0, 4096))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--turns-per-session", f.turns_per_session, "turns per session")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--inter-turn-delay", f.inter_turn_delay, "none | constant | exponential")
      ->check(CLI::IsMember({"none", "constant", "exponential"}))
      ->capture_default_str()
      ->group(synth);
  cmd.add_option("--inter-turn-delay-ms", f.inter_turn_delay_ms,
                 "constant delay, or exponential mean")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(synth);
  cmd.add_flag("--session-context", f.session_context,
               "multi-turn sessions: each turn's prompt is the previous turn's prompt followed "
               "by its own new input (the conversation so far)")
      ->group(synth);
  cmd.add_option("--seed", f.seed, "RNG seed of the synthetic workload")
      ->capture_default_str()
      ->group(synth);
}

/// The synthetic agentic sessions (--format synthetic-agentic).
void registerAgenticFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* agentic =
      "Synthetic agentic sessions (--format synthetic-agentic: --num-requests sessions of "
      "--turns-per-session LLM calls; --input-tokens-* is the user prompt, --output-tokens-* "
      "each call's output; the arrival flags and --seed apply)";
  cmd.add_option("--system-prompt-tokens", f.system_prompt_tokens,
                 "system prompt shared by every call of every session")
      ->capture_default_str()
      ->group(agentic);
  cmd.add_option("--tool-output-tokens-mean", f.tool_output_mean,
                 "tokens each tool result adds to the context (required)")
      ->check(greaterThan(0))
      ->group(agentic);
  cmd.add_option("--tool-output-tokens-stddev", f.tool_output_stddev, "its stddev")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(agentic);
  cmd.add_option("--tool-wait", f.tool_wait,
                 "none | constant | exponential: time a tool call takes between a call's end "
                 "and the next call")
      ->check(CLI::IsMember({"none", "constant", "exponential"}))
      ->capture_default_str()
      ->group(agentic);
  cmd.add_option("--tool-wait-ms", f.tool_wait_ms, "constant tool wait, or exponential mean")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(agentic);
  cmd.add_option("--subagent-probability", f.subagent_probability,
                 "chance that a call (not the last) spawns sub-agents, which the next call "
                 "waits for")
      ->check(between(0, 1))
      ->capture_default_str()
      ->group(agentic);
  cmd.add_option("--subagent-fanout", f.subagent_fanout, "sub-agent requests per spawn (in 1..64)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str()
      ->group(agentic);
}

/// The run: mode, workers, routers, closed loop.
void registerRunFlags(CLI::App& cmd, ReplayFlags& f) {
  cmd.add_option("--mode", f.mode,
                 "offline (in-process engines, virtual clock) | live (wall clock, against "
                 "running `mocker serve` instances given by --connect)")
      ->check(CLI::IsMember({"offline", "live"}))
      ->capture_default_str()
      ->group(kRunGroup);
  cmd.add_option("--num-workers", f.num_workers, "in-process workers (offline)")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(kRunGroup);
  cmd.add_option("--router", f.router,
                 "round_robin | kv | kv_prefix | random (between workers, or servers in live "
                 "mode; kv: Dynamo's KV-router cost, overlap weight x blocks to prefill + "
                 "active blocks; kv_prefix: longest cached prefix, offline only)")
      ->check(CLI::IsMember({"round_robin", "kv", "kv_prefix", "random"}))
      ->capture_default_str()
      ->group(kRunGroup);
  cmd.add_option("--router-seed", f.router_seed,
                 "seed of the random router and of the kv router's tie-breaks and sampling")
      ->capture_default_str()
      ->group(kRunGroup);
  cmd.add_option("--router-overlap-weight", f.router_overlap_weight,
                 "kv router: weight of the blocks to prefill against the active blocks "
                 "(Dynamo's default)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str()
      ->group(kRunGroup);
  cmd.add_option("--router-temperature", f.router_temperature,
                 "kv router: 0 = lowest cost wins; > 0 = softmax sampling over the normalised "
                 "costs (Dynamo's default 0)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str()
      ->group(kRunGroup);
  cmd.add_option("--concurrency", f.concurrency,
                 "closed loop: keep N requests in flight, ignoring first-turn timestamps")
      ->check(atLeast(1))
      ->group(kRunGroup);
}

/// Offline disaggregated prefill/decode.
void registerOfflineDisaggFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* disagg_group = "Disaggregated prefill/decode (offline)";
  auto* num_prefill =
      cmd.add_option("--num-prefill-workers", f.num_prefill_workers,
                     "prefill workers: compute prompts and hand their KV to decode workers "
                     "(with --num-decode-workers; replaces --num-workers)")
          ->check(atLeast(1))
          ->group(disagg_group);
  auto* num_decode = cmd.add_option("--num-decode-workers", f.num_decode_workers,
                                    "decode workers: generate every output token")
                         ->check(atLeast(1))
                         ->group(disagg_group);
  num_prefill->needs(num_decode);
  num_decode->needs(num_prefill);
  cmd.add_option("--prefill-config", f.prefill_config,
                 "TOML file whose [engine] keys override --config / the flags for the prefill "
                 "workers")
      ->option_text("FILE")
      ->needs(num_prefill)
      ->group(disagg_group);
  cmd.add_option("--decode-config", f.decode_config,
                 "the same for the decode workers (both sides need the same block size)")
      ->option_text("FILE")
      ->needs(num_prefill)
      ->group(disagg_group);
  cmd.add_option("--decode-router", f.decode_router,
                 "handoff to decode worker: round_robin | random | kv (kv = overlap credit 0: "
                 "fewest requests in flight); --router routes requests to prefill workers "
                 "(offline, or live with --connect-decode / --decode-fleet)")
      ->check(CLI::IsMember({"round_robin", "kv", "random"}))
      ->capture_default_str()
      ->group(disagg_group);
}

/// Live: the servers and their endpoints.
void registerLiveServerFlags(CLI::App& cmd, ReplayFlags& f) {
  cmd.add_option("--connect", f.connect,
                 "submit endpoint of a running `mocker serve` (tcp://HOST:PORT); repeat for "
                 "several servers; implies --mode live")
      ->option_text("EP")
      ->group(kLiveGroup);
  cmd.add_option("--connect-kv-events", f.connect_kv_events,
                 "--router kv: KV-event PUB endpoint of each --connect server's rank 0, in the "
                 "same order (default: the submit port + 2; rank r at port + r)")
      ->option_text("EP")
      ->group(kLiveGroup);
  cmd.add_option("--connect-kv-replay", f.connect_kv_replay,
                 "--router kv: KV replay ROUTER endpoint of each --connect server's rank 0, in "
                 "the same order (default: the submit port + 3; rank r at port + r)")
      ->option_text("EP")
      ->group(kLiveGroup);
  cmd.add_option("--router-block-size", f.router_block_size,
                 "--router kv: the servers' KV block size, for hashing prompts the way their "
                 "KV events do (default hash seeds). Default: the size every server reports at "
                 "start-up (with --connect or --fleet); given, a server that reports another "
                 "size is an error")
      ->check(atLeast(1))
      ->group(kLiveGroup);
  cmd.add_option("--connect-cancel", f.connect_cancel,
                 "cancel endpoint of each --connect server, in the same order (default: the "
                 "submit port + 1)")
      ->option_text("EP")
      ->group(kLiveGroup);
  cmd.add_option("--fleet", f.fleet_file,
                 "every worker of a `mocker serve --fleet-file FILE` (their submit and cancel "
                 "endpoints), instead of --connect; implies --mode live. Every request names the "
                 "model of --model "
                 "(default: the first of GET /v1/models)")
      ->option_text("FILE")
      ->group(kLiveGroup);
}

/// Live against an OpenAI-compatible HTTP server.
void registerOpenAiFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* group = "Live replay against an OpenAI-compatible server (--openai-url)";
  cmd.add_option(
         "--openai-url", f.openai_url,
         "send the requests over HTTP to an OpenAI-compatible server (`mocker gateway`, "
         "vLLM, SGLang, TensorRT-LLM) at http://HOST:PORT[/v1], streamed with usage, "
         "instead of --connect; implies --mode live. Every request names the model of --model "
         "(default: the first of GET /v1/models)")
      ->option_text("URL")
      ->group(group);
  cmd.add_flag("--chat", f.chat,
               "--openai-url: /v1/chat/completions with the prompt as one user message (text) "
               "instead of /v1/completions with a token-id prompt")
      ->group(group);
  cmd.add_flag("--no-stream", f.no_stream,
               "--openai-url: non-streaming requests (`stream: false`, one JSON body per answer): "
               "every output token is stamped when the body arrives (TTFT = E2E, no ITL), usage "
               "from the body")
      ->group(group);
  cmd.add_option("--openai-connections", f.openai_connections,
                 "--openai-url: open this many keep-alive connections before the first request "
                 "is sent (the clock starts after them), so that requests do not pay a TCP "
                 "handshake as the number in flight grows (default 0: opened as needed; at most "
                 "256, the most kept idle)")
      ->option_text("N")
      ->check(between(0, 256))
      ->group(group);
  cmd.add_option("--api-key-file", f.api_key_file,
                 "--openai-url: send `Authorization: Bearer KEY` with KEY the file's first line")
      ->option_text("FILE")
      ->group(group);
  cmd.add_option("--tokenizer", f.tokenizer_file,
                 "--openai-url: a Hugging Face tokenizer.json (byte-level BPE): prompts are sent "
                 "as the text these token ids decode to, for servers that need text (default: "
                 "token-id prompts; --chat without it spells the ids with the built-in tokenizer "
                 "of `mocker gateway`)")
      ->option_text("FILE")
      ->group(group);
}

/// Live disaggregated prefill/decode: the two server sets.
void registerLiveDisaggFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* live_disagg_group = "Disaggregated prefill/decode (live)";
  cmd.add_option("--connect-prefill", f.connect_prefill,
                 "submit endpoint of a `mocker serve --worker-type prefill` (repeat; instead "
                 "of --connect, whose --connect-cancel / --connect-kv-* flags it takes); "
                 "with --connect-decode or --decode-fleet")
      ->option_text("EP")
      ->group(live_disagg_group);
  cmd.add_option("--connect-decode", f.connect_decode,
                 "submit endpoint of a `mocker serve --worker-type decode` (repeat): handoffs "
                 "go there, routed by --decode-router")
      ->option_text("EP")
      ->group(live_disagg_group);
  cmd.add_option("--connect-decode-cancel", f.connect_decode_cancel,
                 "cancel endpoint of each --connect-decode server, in the same order (default: "
                 "the submit port + 1)")
      ->option_text("EP")
      ->group(live_disagg_group);
  cmd.add_option("--prefill-fleet", f.prefill_fleet,
                 "the prefill servers: every worker of a `mocker serve --worker-type prefill "
                 "--fleet-file FILE` (as --fleet)")
      ->option_text("FILE")
      ->group(live_disagg_group);
  cmd.add_option("--decode-fleet", f.decode_fleet,
                 "the decode servers: every worker of a `mocker serve --worker-type decode "
                 "--fleet-file FILE`")
      ->option_text("FILE")
      ->group(live_disagg_group);
}

/// Live: when a server counts as down and gets no more requests (worker_health.h).
void registerWorkerHealthFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* group = "Live: workers that fail";
  cmd.add_flag("--worker-health,!--no-worker-health", f.worker_health,
               std::string("route around servers that are down: a server is suspect when its "
                           "connection closed or a request had no ack in time, down when it "
                           "stays suspect too long or holds work and streams nothing; it then "
                           "gets no new request and the requests it holds are migrated "
                           "(--migration-limit) or end failed; disaggregated, the prefill and "
                           "the decode servers alike") +
                   flagDefault(true))
      ->group(group);
  cmd.add_option("--worker-ack-timeout-ms", f.worker_ack_timeout_ms,
                 "a server that has not acknowledged a request within this long is suspect "
                 "(0 = off; any message from it clears it)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--worker-down-after-ms", f.worker_down_after_ms,
                 "a suspect server is declared down after this long (a closed connection is "
                 "cleared only by a new handshake: a server back on the endpoint)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--worker-stall-timeout-ms", f.worker_stall_timeout_ms,
                 "a server that holds requests and has sent no output for any of them for this "
                 "long is hung: declared down at once, for the rest of the run (0 = off)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(group);
  cmd.add_option(
         "--migration-limit", f.migration_limit,
         "how many times one request may be migrated: re-sent, when its server is declared "
         "down, to a server up with its prompt plus the tokens it streamed so far, for the "
         "rest of its output; a submit that cannot be sent is migrated the same way; a request "
         "that streamed every token and lost only its finish ends completed, not re-sent "
         "(Dynamo's --migration-limit; 0 = never: the requests fail)")
      ->capture_default_str()
      ->group(group);
}

/// Live: CURVE, timeouts, stats polling; and the progress bar.
void registerLiveConnectionFlags(CLI::App& cmd, ReplayFlags& f) {
  auto* curve_server =
      cmd.add_option("--curve-server-key-file", f.curve_server_key_file,
                     "CURVE: the servers' public key file (NAME.pub of their key pair; every "
                     "--connect server uses it)")
          ->option_text("FILE")
          ->group(kLiveGroup);
  auto* curve_secret =
      cmd.add_option("--curve-secret-key-file", f.curve_secret_key_file,
                     "CURVE: this client's secret key file (NAME.key of `mocker keygen`; its "
                     "public key must be on every server's allow-list)")
          ->option_text("FILE")
          ->group(kLiveGroup);
  curve_server->needs(curve_secret);
  curve_secret->needs(curve_server);
  cmd.add_option("--request-timeout-s", f.request_timeout_s,
                 "cancel a request (counted cancelled) that has not ended after this long; "
                 "offline (model time): the requests a hung worker holds (a `hang` --fault) "
                 "end so")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(kLiveGroup);
  cmd.add_option("--connect-timeout-s", f.connect_timeout_s,
                 "every server must answer a start-up `stats` request within this long")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(kLiveGroup);
  cmd.add_option("--stats-interval-ms", f.stats_interval_ms,
                 "poll each server's `stats` this often for KV usage / batch size (0 = off)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(kLiveGroup);

  registerWorkerHealthFlags(cmd, f);

  cmd.add_flag("--progress,!--no-progress", f.progress,
               std::string("progress bar on stderr (only on a terminal, after one second)") +
                   flagDefault(true))
      ->group(kRunGroup);
}

/// The report outputs and SLOs; the engine flags (offline) and the help footer.
void registerReportFlags(CLI::App& cmd, ReplayFlags& f) {
  const char* out_group = "Report";
  cmd.add_option("--report-json", f.report_json,
                 "write the JSON report (with the run identity: version, git revision, trace "
                 "SHA-256, engine config, date, command line)")
      ->option_text("FILE")
      ->group(out_group);
  cmd.add_option("--requests-jsonl", f.requests_jsonl,
                 "write per-request timelines (JSONL), and the run identity to FILE.run.json")
      ->option_text("FILE")
      ->group(out_group);
  cmd.add_option("--report-html", f.report_html, "write a self-contained HTML report")
      ->option_text("FILE")
      ->group(out_group);
  auto* slo_ttft = cmd.add_option("--slo-ttft-ms", f.slo_ttft_ms,
                                  "goodput SLO on TTFT (a good request has TTFT <= this)")
                       ->check(atLeast(0))
                       ->group(out_group);
  auto* slo_tpot = cmd.add_option("--slo-tpot-ms", f.slo_tpot_ms, "goodput SLO on TPOT")
                       ->check(atLeast(0))
                       ->group(out_group);
  auto* slo_e2e = cmd.add_option("--slo-e2e-ms", f.slo_e2e_ms, "goodput SLO on end-to-end latency")
                      ->check(atLeast(0))
                      ->group(out_group);
  cmd.add_option("--goodput", f.goodput,
                 "vLLM bench's form of the SLOs: KEY:MS pairs, keys ttft, tpot, e2el (= "
                 "--slo-ttft-ms / --slo-tpot-ms / --slo-e2e-ms)")
      ->option_text("KEY:MS ...")
      ->excludes(slo_ttft)
      ->excludes(slo_tpot)
      ->excludes(slo_e2e)
      ->group(out_group);

  addServeFlags(cmd, f.serve, ConfigUse::EngineOnly);
  cmd.footer(
      "Offline mode runs the engines in-process with the --config / [engine] settings above. "
      "Offline, --speedup-ratio R models a GPU R times faster (every pass takes 1/R of the "
      "time, so latencies shrink); it does not make the replay itself faster, which runs on a "
      "virtual clock as fast as it can (--arrival-speedup-ratio compresses the trace's arrivals). "
      "Live mode (--mode live --connect tcp://HOST:PORT ...) drives running `mocker serve` "
      "instances on the wall clock and takes none of the settings above (each server has its own; "
      "give the servers --allow-empty-output to replay 0-token outputs, which offline always "
      "accepts). See replay.md in /usr/share/doc/mocker (tools/replay/README.md in the sources).");
}

}  // namespace

void registerReplayFlags(CLI::App& cmd, ReplayFlags& flags) {
  registerInputFlags(cmd, flags);
  registerSyntheticFlags(cmd, flags);
  registerAgenticFlags(cmd, flags);
  registerRunFlags(cmd, flags);
  registerOfflineDisaggFlags(cmd, flags);
  registerLiveServerFlags(cmd, flags);
  registerLiveDisaggFlags(cmd, flags);
  registerOpenAiFlags(cmd, flags);
  registerLiveConnectionFlags(cmd, flags);
  registerReportFlags(cmd, flags);
}

GivenFlags givenFlags(const CLI::App& cmd) {
  GivenFlags given;
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->count() == 0) continue;
    for (const std::string& name : opt->get_lnames()) given.insert("--" + name);
  }
  return given;
}

}  // namespace mocker::tools
