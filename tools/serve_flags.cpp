#include "tools/serve_flags.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/closest_name.h"
#include "engine/roofline.h"
#include "tools/cli_options.h"

namespace mocker::tools {
namespace {

struct FlagSpec {
  const char* names;  ///< CLI11 name list; a boolean pair is "--x,!--no-x"
  const char* key;
  const char* help;
  bool boolean = false;
  /// Left out of --help: a key mocker refuses (detail::unsupportedKeyError); the flag exists
  /// only so that using it gets the reason instead of "unknown option".
  bool hidden = false;
};

struct Group {
  const char* name;
  std::initializer_list<FlagSpec> flags;
};

// clang-format off
const std::initializer_list<Group> kGroups = {
  {"Engine ([engine])", {
    {"--engine-type", "engine.engine_type", "scheduler: vllm | sglang | trtllm"},
    {"--num-gpu-blocks,--num-gpu-blocks-override", "engine.num_gpu_blocks", "KV blocks per DP rank (>= 1), or none = 1 Mi tokens (vllm 16384, trtllm 32768, sglang page 1: 1048576)"},
    {"--block-size", "engine.block_size", "tokens per block; 0 = engine default (vllm 64, trtllm 32, sglang page size)"},
    {"--max-model-len", "engine.max_model_len", "max prompt + output length (>= 2), or none"},
    {"--max-num-seqs,--max-running-requests", "engine.max_num_seqs", "max running requests (>= 1), or none = unbounded (SGLang: --max-running-requests)"},
    {"--max-num-batched-tokens", "engine.max_num_batched_tokens", "per-pass token budget (>= 1), or none = unbounded"},
    {"--enable-prefix-caching,!--no-enable-prefix-caching,!--disable-radix-cache", "engine.enable_prefix_caching", "prefix reuse and KV events (SGLang: --disable-radix-cache = off)", true},
    {"--enable-chunked-prefill,!--no-enable-chunked-prefill", "engine.enable_chunked_prefill", "split long prompts across passes", true},
    {"--enforce-eager,!--no-enforce-eager", "engine.enforce_eager", "vllm: no CUDA graphs (vLLM's --enforce-eager), so the roofline model does not pad passes to a capture size", true},
    {"--preemption-mode", "engine.preemption_mode", "lifo | fifo (vllm)"},
    {"--dp-size,--data-parallel-size", "engine.dp_size", "data-parallel ranks (>= 1)"},
    {"--hash-seed", "engine.hash_seed", "u64 seed of the block content hash"},
    {"--chain-seed", "engine.chain_seed", "u64 seed of the chained sequence hash"},
    {"--token-seed", "engine.token_seed", "u64 seed of synthetic output tokens"},
    {"--kv-event-visibility", "engine.kv_event_visibility", "pass_end | pass_start"},
    {"--startup-time", "engine.startup_time_s", "seconds to wait before accepting requests, or none"},
    {"--timing-model", "engine.timing_model", "polynomial | interpolated | fixed | roofline (model + GPU; see Roofline timing)"},
    {"--timing-profile", "engine.timing_profile_path", "JSON timing profile (required with --timing-model interpolated)"},
    {"--fixed-prefill-ms", "engine.fixed_prefill_ms", "prefill pass time with --timing-model fixed"},
    {"--fixed-decode-ms", "engine.fixed_decode_ms", "decode pass time with --timing-model fixed"},
    {"--speedup-ratio", "engine.speedup_ratio", "divide modelled time by this (>= 0; 0 = never wait)"},
    {"--decode-speedup-ratio", "engine.decode_speedup_ratio", "extra divisor for decode time (> 0; 1 with speculative decoding)"},
    {"--decode-load", "engine.decode_load", "what the decode load measures (vllm/trtllm): physical (resident KV blocks) | logical (sum of context lengths)"},
    {"--spec-num-draft-tokens", "engine.spec_num_draft_tokens", "speculative decoding: draft tokens per pass (in 1..5), or none = off"},
    {"--spec-accept-rates", "engine.spec_accept_rates", "acceptance probability of each draft position, comma-separated, each in [0, 1]"},
    {"--spec-seed", "engine.spec_seed", "u64 seed of the draft acceptance draws"},
    {"--worker-type", "engine.worker_type", "aggregated | prefill (hands each prefilled request off to a decode worker) | decode (accepts only handoff submits); serve.md \"Disaggregated prefill/decode (live)\" in /usr/share/doc/mocker (service/README.md in the sources)"},
    {"--kv-bytes-per-token", "engine.kv_bytes_per_token", "KV bytes per token a prefill-to-decode handoff or an offload-tier transfer moves (>= 1)"},
    {"--kv-transfer-bandwidth-gbps", "engine.kv_transfer_bandwidth_gbps", "disaggregated: handoff bandwidth in GB/s (1e9 B/s, > 0)"},
    {"--kv-transfer-charge", "engine.kv_transfer_charge", "disaggregated: full_prompt | missing_blocks (tokens a handoff pays for)"},
    {"--kv-hold-timeout-ms", "engine.kv_hold_timeout_ms", "disaggregated: modelled ms a prefill worker holds unreleased KV (>= 0), or none = forever"},
  }},
  {"KV offload tiers (vllm, trtllm; blocks evicted from the GPU go to host memory, a prefix hit there is copied back before the request runs; docs/engine.md \"KV offload tiers\")", {
    {"--num-g2-blocks", "engine.num_g2_blocks", "host-memory (G2, KV event medium CPU) blocks per DP rank; 0 = off (sglang: the HiCache host tier)"},
    {"--num-g3-blocks", "engine.num_g3_blocks", "disk (G3, medium DISK) blocks per DP rank, filled by G2's evictions; 0 = off (needs --num-g2-blocks; vllm/trtllm)"},
    {"--offload-batch-size", "engine.offload_batch_size", "evicted blocks per offload transfer, one transfer in flight per direction (>= 1)"},
    {"--offload-gpu-to-host-gbps", "engine.offload_gpu_to_host_gbps", "GPU to host bandwidth in GB/s (1e9 B/s, > 0; default 14, Dynamo KVBM's figure); a block is --kv-bytes-per-token x block size bytes (the roofline model's KV bytes per token per GPU with --timing-model roofline)"},
    {"--offload-host-to-gpu-gbps", "engine.offload_host_to_gpu_gbps", "host to GPU (onboarding) bandwidth in GB/s, shared by concurrent onboardings (> 0; default 14)"},
    {"--offload-host-to-disk-gbps", "engine.offload_host_to_disk_gbps", "host to disk bandwidth in GB/s (> 0; default 7, Dynamo KVBM's figure)"},
    {"--offload-disk-to-host-gbps", "engine.offload_disk_to_host_gbps", "disk to host bandwidth in GB/s (> 0; default 7)"},
  }},
  {"LoRA adapters (vllm, trtllm, aggregated workers; a request names one with `lora`; docs/engine.md \"LoRA adapters\")", {
    {"--max-loras", "engine.max_loras", "adapters at most in one pass (vLLM's --max-loras; 1 is vLLM's default once LoRA is on); a waiting request whose adapter would exceed it is skipped, not preempted; 0 = LoRA off (requests naming an adapter are refused)"},
    {"--max-cpu-loras", "engine.max_cpu_loras", "adapters resident in host memory, LRU (>= --max-loras), or none = --max-loras"},
    {"--lora-load-ms", "engine.lora_load_ms", "modelled ms added to a pass for each adapter it schedules that is not resident (>= 0; default 28: an 84 MB rank-16 Llama-3-8B adapter read at 3 GB/s)"},
  }},
  {"Roofline timing (--timing-model roofline; [engine], [engine.model], [engine.gpu_spec], [engine.roofline])", {
    {"--model-config", "engine.model_config_path", "Hugging Face config.json of the served model (Llama, Qwen2/3, Qwen3-MoE, Mixtral); [engine.model] keys override its fields"},
    {"--gpu", "engine.gpu", "built-in GPU: H100-SXM | H200 | A100-40GB | A100-80GB | L40S | RTX4090 | RTXPRO6000 | B200 (docs/engine.md lists the datasheets)"},
    {"--gpu-tflops", "engine.gpu_spec.tflops", "dense BF16 peak TFLOP/s (overrides --gpu's)"},
    {"--gpu-memory-bandwidth-gbps", "engine.gpu_spec.memory_bandwidth_gbps", "memory bandwidth, GB/s (overrides --gpu's)"},
    {"--gpu-memory-gib,--gpu-memory-gb", "engine.gpu_spec.memory_gib", "GPU memory in GiB as the driver reports it (overrides --gpu's)"},
    {"--gpu-interconnect-gbps", "engine.gpu_spec.interconnect_gbps", "per-direction GPU-to-GPU bandwidth for the TP all-reduce, GB/s (overrides --gpu's)"},
    {"--gpu-sm-count", "engine.gpu_spec.sm_count", "streaming multiprocessors: prompt-chunk attention runs in waves of this many blocks (overrides --gpu's; custom GPU: none = no wave quantisation)"},
    {"--gpu-compute-efficiency-scale", "engine.gpu_spec.compute_efficiency_scale", "multiplies the GEMM compute efficiencies on this GPU, (0, 4] (overrides --gpu's; custom GPU: 1)"},
    {"--gpu-interconnect-efficiency-scale", "engine.gpu_spec.interconnect_efficiency_scale", "multiplies the collective bandwidth (all-reduce, EP dispatch) on this GPU: measured NCCL bus bandwidth over link bandwidth, relative to NVLink's, (0, 4] (overrides --gpu's; custom GPU: 1)"},
    {"--gpu-memory-efficiency-scale", "engine.gpu_spec.memory_efficiency_scale", "multiplies the memory efficiency of dense GEMMs and elementwise kernels on this GPU: its measured memory-bound GEMM bandwidth fraction over the default, (0, 4] (overrides --gpu's; custom GPU: 1)"},
    {"--gpu-attention-efficiency-scale", "engine.gpu_spec.attention_efficiency_scale", "multiplies the attention KV-read efficiency on this GPU: its measured decode-attention bandwidth fraction over the default, (0, 4] (overrides --gpu's; custom GPU: 1)"},
    {"--tensor-parallel-size,--tp", "engine.tensor_parallel_size", "GPUs per engine (DP rank): divides weights, FLOPs and KV heads; adds 2 all-reduces per layer"},
    {"--enable-expert-parallel,!--no-enable-expert-parallel", "engine.enable_expert_parallel", "MoE: spread the experts over TP x DP GPUs (vLLM's flag): each holds num_experts / (TP x DP) and serves every rank's tokens; adds a dispatch and a combine per MoE layer", true},
    {"--gpu-memory-utilization", "engine.gpu_memory_utilization", "fraction of GPU memory vLLM may use (0, 1]; sizes the KV cache when --num-gpu-blocks is none"},
    {"--model-name", "engine.model.name", "model name (free text, shown in reports)"},
    {"--num-layers", "engine.model.num_layers", "decoder layers (overrides config.json)"},
    {"--hidden-size", "engine.model.hidden_size", "model dimension (overrides config.json)"},
    {"--num-heads", "engine.model.num_heads", "query heads (overrides config.json)"},
    {"--num-kv-heads", "engine.model.num_kv_heads", "key/value heads (overrides config.json; default = heads)"},
    {"--head-dim", "engine.model.head_dim", "per-head dimension (overrides config.json; default = hidden / heads)"},
    {"--intermediate-size", "engine.model.intermediate_size", "dense MLP hidden size (overrides config.json)"},
    {"--vocab-size", "engine.model.vocab_size", "vocabulary size (overrides config.json)"},
    {"--num-experts", "engine.model.num_experts", "routed experts per MoE layer, 0 = dense (overrides config.json)"},
    {"--experts-per-token", "engine.model.experts_per_token", "top-k experts per token (overrides config.json)"},
    {"--moe-intermediate-size", "engine.model.moe_intermediate_size", "one expert's MLP hidden size (overrides config.json)"},
    {"--weight-dtype,--dtype", "engine.model.weight_dtype", "bfloat16 | float16 | float32 (served as 16-bit) | fp8; \"\" = config.json torch_dtype"},
    {"--kv-dtype,--kv-cache-dtype", "engine.model.kv_dtype", "KV cache dtype: bfloat16 | float16 | fp8; \"\" = bfloat16"},
    {"--non-torch-memory-gib", "engine.roofline.non_torch_memory_gib", "GPU memory vLLM counts outside weights, KV and activations at start-up (cuBLAS workspaces, NCCL buffers), GiB (default 0.15)"},
  }},
  {"SGLang ([engine.sglang], engine type sglang)", {
    {"--sglang-schedule-policy,--schedule-policy", "engine.sglang.schedule_policy", "fcfs (alias fifo) | lpm"},
    {"--page-size,--sglang-page-size", "engine.sglang.page_size", "tokens per page (>= 1); 0 = unset: the block size if that is set, else 1"},
    {"--max-prefill-tokens", "engine.sglang.max_prefill_tokens", "per-pass prefill budget (>= 1)"},
    {"--chunked-prefill-size", "engine.sglang.chunked_prefill_size", "prefill chunk (multiple of the block size)"},
    {"--clip-max-new-tokens", "engine.sglang.clip_max_new_tokens", "cap on per-request output reservation (>= 1)"},
    {"--schedule-conservativeness", "engine.sglang.schedule_conservativeness", "0 <= x <= 1"},
  }},
  {"Live service ([service])", {
    {"--allow-empty-output,!--no-allow-empty-output", "service.allow_empty_output", "accept requests with a 0-token output", true},
    {"--max-buffered-outputs", "service.max_buffered_outputs", "undelivered outputs per request before it is abandoned (>= 1)"},
    {"--fpm-heartbeat-interval", "service.fpm_heartbeat_interval_s", "idle FPM heartbeat period in seconds (> 0)"},
    {"--submit-sndhwm", "service.submit_sndhwm", "submit ROUTER ZMQ_SNDHWM (0 = unlimited)"},
    {"--submit-rcvhwm", "service.submit_rcvhwm", "submit ROUTER ZMQ_RCVHWM (0 = unlimited)"},
    {"--max-message-size", "service.max_message_size", "ZMQ_MAXMSGSIZE in bytes (>= 1)"},
    {"--max-submit-backlog", "service.max_submit_backlog", "waiting requests before submit reads pause (>= 1)"},
    {"--linger-ms", "service.linger_ms", "ZMQ_LINGER on close (in 0..60000)"},
    {"--served-model-name", "service.served_model_name", "model_name label of the HTTP /metrics series"},
    {"--worker-label", "service.worker_label", "worker label of every /metrics series (fleets); empty = none"},
    {"--handoff-fetch-timeout-ms", "service.handoff_fetch_timeout_ms", "decode worker: wall ms to wait for a prefill worker's kv_fetch_reply (> 0)"},
    {"--max-handoff-sources", "service.max_handoff_sources", "decode worker: distinct prefill workers it connects to (>= 1)"},
  }},
  {"Limits ([limits]; a submit over one is answered with an error naming it)", {
    {"--max-requests-per-client", "limits.max_requests_per_client", "in-flight requests of one client: routing id, with CURVE its key (>= 1)"},
    {"--max-requests", "limits.max_requests", "in-flight requests in total (>= 1)"},
    {"--max-clients", "limits.max_clients", "clients with requests in flight (>= 1)"},
    {"--max-request-tokens", "limits.max_request_tokens", "prompt + output tokens of one request (>= 1)"},
  }},
  {"Failure drills ([faults]; see serve.md \"Failure drills\")", {
    {"--fault-seed", "faults.seed", "u64 seed of the faults' rate draws (same seed and workload: same faults)"},
    {"--fault-log", "faults.log", "JSONL fault log: one line per injected fault (time, kind, target)"},
    {"--faults-admin,!--no-faults-admin", "faults.admin", "admin API on the HTTP endpoint: GET/POST /admin/faults, DELETE /admin/faults/{id}", true},
    {"--faults-admin-key-file", "faults.admin_key_file", "bearer key file of the admin API (>= 16 printable characters); required when the HTTP endpoint is not loopback"},
  }},
  {"Security ([security]; CURVE, see serve.md \"Security\")", {
    {"--curve,!--no-curve", "security.curve", "CURVE on submit, cancel and kv_replay; only allow-listed client keys get in", true},
    {"--server-secret-key-file", "security.server_secret_key_file", "the service's Z85 secret key file (mocker keygen)"},
    {"--client-public-keys", "security.client_public_keys", "allow-listed client public keys, Z85, comma-separated"},
    {"--client-public-key-files", "security.client_public_key_files", "allow-listed client public key files, comma-separated"},
    {"--curve-publishers,!--no-curve-publishers", "security.curve_publishers", "CURVE on the kv_events and fpm PUBs too", true},
    {"--worker-public-key-files", "security.worker_public_key_files", "prefill worker: decode workers' public key files allowed on the CURVE handoff socket, comma-separated"},
    {"--worker-secret-key-file", "security.worker_secret_key_file", "decode worker: its Z85 secret key file toward prefill workers' handoff sockets (with --handoff-server-key-file)"},
    {"--handoff-server-key-file", "security.handoff_server_key_file", "decode worker: the prefill workers' public key file (their server key) for CURVE on handoff fetches"},
  }},
  {"Endpoints ([endpoints.*]; every socket binds unless --X-connect)", {
    {"--submit-endpoint", "endpoints.submit.endpoint", "submit ROUTER"},
    {"--submit-connect,!--submit-bind", "endpoints.submit.connect", "connect the submit socket instead of binding", true},
    {"--cancel-endpoint", "endpoints.cancel.endpoint", "cancel ROUTER"},
    {"--cancel-connect,!--cancel-bind", "endpoints.cancel.connect", "connect the cancel socket", true},
    {"--kv-events-endpoint", "endpoints.kv_events.endpoint", "KV-event PUB (+ dp_rank)"},
    {"--kv-events-connect,!--kv-events-bind", "endpoints.kv_events.connect", "connect the KV-event PUB (to a bound SUB)", true},
    {"--kv-replay-endpoint", "endpoints.kv_replay.endpoint", "KV-event replay ROUTER (+ dp_rank)"},
    {"--kv-replay-connect,!--kv-replay-bind", "endpoints.kv_replay.connect", "connect the replay ROUTER", true},
    {"--fpm-endpoint", "endpoints.fpm.endpoint", "forward-pass-metrics PUB (+ dp_rank)"},
    {"--fpm-connect,!--fpm-bind", "endpoints.fpm.connect", "connect the FPM PUB", true},
    {"--handoff-endpoint", "endpoints.handoff.endpoint", "prefill worker: handoff ROUTER for decode workers' kv_fetch / kv_release (named in each handoff ticket; default port 5561)"},
    {"--handoff-connect,!--handoff-bind", "endpoints.handoff.connect", "connect the handoff ROUTER", true},
    {"--handoff-advertise", "endpoints.handoff.advertise", "prefill worker: tcp://HOST:PORT put into handoff tickets instead of the bound endpoint (required for a wildcard bind)"},
    {"--http-endpoint", "endpoints.http.endpoint", "HTTP /metrics, /health, /ready: HOST:PORT (port 0 = ephemeral)"},
    {"--http,!--no-http", "endpoints.http.enabled", "serve the HTTP endpoint", true},
  }},
  {"KV events ([kv_events])", {
    {"--kv-events,!--no-kv-events", "kv_events.enabled", "publish KV events", true},
    {"--kv-replay,!--no-kv-replay", "kv_events.replay_enabled", "serve KV-event replays", true},
    {"--kv-events-topic", "kv_events.topic", "frame-0 topic (llm-d: kv@<pod>@<model>)"},
    {"--kv-events-hwm", "kv_events.hwm", "PUB ZMQ_SNDHWM (0 = unlimited)"},
    {"--kv-events-max-queue-size", "kv_events.max_queue_size", "refused: no publisher queue", false, true},
    {"--kv-events-buffer-steps", "kv_events.buffer_steps", "replay ring in batches (>= 1)"},
    {"--kv-events-layout", "kv_events.layout", "p6 | p7 | p8 | p9 | p12 | map | map26"},
    {"--kv-events-replay-layout", "kv_events.replay_layout", "r1 | r2"},
    {"--kv-events-parent-root", "kv_events.parent_root", "nil | zero"},
    {"--kv-events-force-uint64-hashes,!--no-kv-events-force-uint64-hashes", "kv_events.force_uint64_hashes", "always encode hashes as uint64", true},
    {"--kv-events-clear-on-start,!--no-kv-events-clear-on-start", "kv_events.clear_on_start", "publish AllBlocksCleared as batch 0", true},
  }},
  {"Forward-pass metrics ([fpm])", {
    {"--fpm,!--no-fpm", "fpm.enabled", "publish forward-pass metrics", true},
    {"--fpm-worker-id", "fpm.worker_id", "decimal u64 worker id"},
  }},
  {"Logging ([logging])", {
    {"--log-level", "logging.level", "trace | debug | info | warn | error | critical | off"},
    {"--log-format", "logging.format", "text | json (one JSON object per line)"},
    {"--log-stats-interval", "logging.stats_interval_s", "seconds between \"Running: N reqs, ...\" lines; 0 = off"},
  }},
  {"Fleet ([fleet])", {
    {"--num-workers", "fleet.num_workers", "simulated workers in this process, each with its own engine, ports and worker id (fpm.worker_id + i)"},
  }},
};
// clang-format on

/// vLLM's KVEventsConfig fields that mean the same here, and the key each one sets.
struct VllmKvEventsField {
  const char* name;
  const char* key;
};
constexpr VllmKvEventsField kVllmKvEventsFields[] = {
    {"enable_kv_cache_events", "kv_events.enabled"},
    {"publisher", "kv_events.enabled"},  // "zmq" | "null" (no publishing)
    {"endpoint", "endpoints.kv_events.endpoint"},
    {"replay_endpoint", "endpoints.kv_replay.endpoint"},
    {"buffer_steps", "kv_events.buffer_steps"},
    {"hwm", "kv_events.hwm"},
    {"max_queue_size", "kv_events.max_queue_size"},  // refused, with the reason
    {"topic", "kv_events.topic"},
};

/// A JSON scalar as command-line text for setConfigValue.
Result<std::string> jsonText(const nlohmann::json& v) {
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_string()) return v.get<std::string>();
  return invalidArgument(std::string("expected a boolean, integer or string, got ") +
                         v.type_name());
}

/// Applies vLLM's `--kv-events-config` JSON (KVEventsConfig) to `config`: the fields that mean
/// the same here, recorded as set by that flag; any other field is refused.
Status applyVllmKvEventsConfig(const std::string& text, service::ServiceConfig& config,
                               service::KeyOrigins& origins) {
  constexpr const char* kFlag = "--kv-events-config";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument(std::string(kFlag) + ": not JSON: " + e.what());
  }
  if (!j.is_object()) return invalidArgument(std::string(kFlag) + ": expected a JSON object");
  std::vector<std::string> names;
  for (const VllmKvEventsField& f : kVllmKvEventsFields) names.emplace_back(f.name);
  const auto set = [&](const std::string& field, const char* key,
                       const std::string& value) -> Status {
    if (auto st = service::setConfigValue(config, key, value); !st) {
      return invalidArgument(std::string(kFlag) + ": " + field + " (" + key +
                             "): " + st.error().message);
    }
    origins[key] = kFlag;
    return {};
  };
  for (const auto& [field, value] : j.items()) {
    // A named copy: clang 14 cannot capture a structured binding in a lambda.
    const std::string& field_name = field;
    const auto* spec =
        std::find_if(std::begin(kVllmKvEventsFields), std::end(kVllmKvEventsFields),
                     [&](const VllmKvEventsField& f) { return field_name == f.name; });
    if (spec == std::end(kVllmKvEventsFields)) {
      return invalidArgument(std::string(kFlag) + ": unknown or unsupported field '" + field + "'" +
                             didYouMean(field, names) + "; mocker takes " +
                             "enable_kv_cache_events, publisher, endpoint, replay_endpoint, "
                             "buffer_steps, hwm and topic");
    }
    if (field == "replay_endpoint" && value.is_null()) {  // vLLM: no replay socket
      MOCKER_TRY_VOID(set(field, "kv_events.replay_enabled", "false"));
      continue;
    }
    MOCKER_TRY(const std::string v, jsonText(value));
    if (field == "publisher") {
      if (v != "zmq" && v != "null") {
        return invalidArgument(std::string(kFlag) +
                               ": publisher: expected \"zmq\" or \"null\", got '" + v + "'");
      }
      if (v == "null") MOCKER_TRY_VOID(set(field, spec->key, "false"));
      continue;
    }
    MOCKER_TRY_VOID(set(field, spec->key, v));
    if (field == "endpoint") {
      // vLLM binds a wildcard, IPC or inproc endpoint and connects to any other.
      const bool bind = v.find('*') != std::string::npos || v.find("::") != std::string::npos ||
                        v.starts_with("ipc://") || v.starts_with("inproc://");
      MOCKER_TRY_VOID(set(field, "endpoints.kv_events.connect", bind ? "false" : "true"));
    }
    if (field == "replay_endpoint") {
      MOCKER_TRY_VOID(set(field, "kv_events.replay_enabled", "true"));
    }
  }
  return {};
}

/// vLLM's and SGLang's launch-line flags that have no configuration key of their own
/// (service/README.md, "vLLM and SGLang launch lines"): --host / --port (the HTTP endpoint, as
/// vLLM's API server), --model (the served model name unless --served-model-name is given),
/// --disable-log-stats (= --log-stats-interval 0). Serve only: left out of replay's --help.
void addLaunchLineFlags(CLI::App& app, ServeFlags& flags, ConfigUse use) {
  const char* group = use == ConfigUse::Serve ? "vLLM / SGLang launch line" : "";
  flags.host_option = app.add_option("--host", flags.host,
                                     "vLLM's API host: the HTTP endpoint's host (the ZeroMQ "
                                     "endpoints keep theirs: --submit-endpoint, …)")
                          ->option_text("HOST")
                          ->group(group);
  flags.port_option = app.add_option("--port", flags.port,
                                     "vLLM's API port: the HTTP endpoint's port (/metrics, "
                                     "/health, /ready; requests go to --submit-endpoint)")
                          ->check(between(0, 65535))
                          ->group(group);
  flags.model_option = app.add_option("--model", flags.model,
                                      "the model's name, as vLLM serves it: the model_name of "
                                      "/metrics unless --served-model-name is given")
                           ->option_text("NAME")
                           ->group(group);
  flags.disable_log_stats_option =
      app.add_flag("--disable-log-stats", flags.disable_log_stats,
                   "no periodic \"Running: …\" stats lines (= --log-stats-interval 0)")
          ->group(group);
}

/// Applies the launch-line flags of addLaunchLineFlags over `config`, before the key flags.
Status applyLaunchLineFlags(const ServeFlags& flags, service::ServiceConfig& config,
                            service::KeyOrigins& origins, ConfigUse use) {
  const auto given = [](const CLI::Option* o) { return o != nullptr && o->count() > 0; };
  const auto keyGiven = [&flags](std::string_view key) {
    for (const ServeFlags::Binding& b : flags.bindings) {
      if (b.key == key && b.option->count() > 0) return b.flag;
    }
    return std::string();
  };
  for (const CLI::Option* o :
       {flags.host_option, flags.port_option, flags.model_option, flags.disable_log_stats_option}) {
    if (given(o) && use == ConfigUse::EngineOnly) {
      return invalidArgument(("--" + o->get_lnames().front()) +
                             " has no effect here: only the engine runs (no HTTP endpoint, "
                             "metrics or logging)");
    }
  }
  if (given(flags.host_option) || given(flags.port_option)) {
    if (const std::string f = keyGiven("endpoints.http.endpoint"); !f.empty()) {
      return invalidArgument("give " + f + " or --host / --port, not both");
    }
    const std::string current =
        service::configValueText(config, "endpoints.http.endpoint").value_or("");
    const std::size_t colon = current.rfind(':');
    std::string host = colon == std::string::npos ? current : current.substr(0, colon);
    std::string port = colon == std::string::npos ? "8000" : current.substr(colon + 1);
    if (given(flags.host_option)) host = flags.host;
    if (given(flags.port_option)) port = std::to_string(flags.port);
    if (auto st = service::setConfigValue(config, "endpoints.http.endpoint", host + ":" + port);
        !st) {
      return Error{st.error().code, "--host / --port: " + st.error().message};
    }
    origins["endpoints.http.endpoint"] = given(flags.host_option) ? "--host" : "--port";
  }
  if (given(flags.model_option) && keyGiven("service.served_model_name").empty()) {
    MOCKER_TRY_VOID(service::setConfigValue(config, "service.served_model_name", flags.model));
    origins["service.served_model_name"] = "--model";
  }
  if (given(flags.disable_log_stats_option)) {
    if (const std::string f = keyGiven("logging.stats_interval_s"); !f.empty()) {
      return invalidArgument("give " + f + " or --disable-log-stats, not both");
    }
    MOCKER_TRY_VOID(service::setConfigValue(config, "logging.stats_interval_s", "0"));
    origins["logging.stats_interval_s"] = "--disable-log-stats";
  }
  return {};
}

/// Registers one flag bound to its config key (type and default from the key table).
void addBinding(CLI::App& app, ServeFlags& flags, ConfigUse use, const FlagSpec& spec,
                const char* group) {
  static const service::ServiceConfig defaults;
  ServeFlags::Binding& b = flags.bindings.emplace_back();
  const std::string names = spec.names;
  b.flag = names.substr(0, names.find(','));
  b.key = spec.key;
  b.boolean = spec.boolean;
  // Type and default come from the key table, so every flag's help shows them.
  const std::string value = service::configValueText(defaults, spec.key).value_or("");
  std::string help = std::string(spec.help) + "  [" + spec.key + "]";
  if (spec.boolean) {
    b.option = app.add_flag(names, b.value, help + flagDefault(value == "true"));
  } else {
    b.option = app.add_option(names, b.text, help)
                   ->option_text(service::configKeyType(spec.key).value_or("TEXT"))
                   ->default_str(value);  // "" (an unset path or key) shows none
  }
  // CLI11: an empty group is hidden. A flag that has no effect for `use` stays registered
  // (using it gets the reason from resolveServeConfig) but is left out of --help.
  const bool applies = use == ConfigUse::Serve || isEngineOnlyKey(spec.key);
  b.option->group(spec.hidden || !applies ? "" : group);
}

}  // namespace

void addServeFlags(CLI::App& app, ServeFlags& flags, ConfigUse use) {
  app.add_option(
         "--config", flags.config_path,
         use == ConfigUse::EngineOnly
             ? "TOML configuration file (example: /usr/share/doc/mocker/mocker.example.toml "
               "when installed, docs/mocker.example.toml in the sources); only its "
               "[engine] table and [faults] inject / seed / log are read; flags override it"
             : "TOML configuration file (example: /usr/share/doc/mocker/mocker.example.toml "
               "when installed, docs/mocker.example.toml in the sources); flags override "
               "it")
      ->group("Configuration")
      ->option_text("FILE");
  flags.kv_events_config_option =
      app.add_option(
             "--kv-events-config", flags.kv_events_config,
             "vLLM's KV-events JSON, e.g. '{\"enable_kv_cache_events\": true, "
             "\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\"}': enable_kv_cache_events, "
             "publisher (zmq | null), endpoint (bound if it has * or is ipc/inproc, else "
             "connected, as vLLM does), replay_endpoint (null = no replay), buffer_steps, "
             "hwm, topic; absent fields keep their value; the flags below override it")
          ->option_text("JSON")
          ->group(use == ConfigUse::Serve ? "KV events ([kv_events])" : "");
  addLaunchLineFlags(app, flags, use);
  flags.fault_option =
      app.add_option(
             "--fault", flags.faults,
             use == ConfigUse::Serve
                 ? "inject a fault (repeatable; appended to [faults.inject]): "
                   "KIND[:KEY=VALUE]..., KIND crash | hang | slow | error | abort | drop | "
                   "drop_unhealable | suppress | duplicate | reorder | delay | truncate_ring | "
                   "fpm_stop | metrics_freeze | fetch_not_found | fetch_late | fetch_never | "
                   "restart | silent, "
                   "e.g. crash:after_passes=100, slow:factor=3:worker=1, "
                   "restart:at_ms=5000:cleared=false:down_ms=500, "
                   "error:rate=0.05:code=resource_exhausted, abort:tokens=5:match=req-*, "
                   "silent:rate=0.01, drop:after_passes=50, delay:ms=200:rate=0.01; "
                   "keys in serve.md \"Failure drills\""
                 : "offline: inject a fault into the simulated workers (repeatable; appended "
                   "to the --config file's [faults] inject list), the syntax of mocker serve "
                   "--fault: KIND[:KEY=VALUE]..., KIND crash | hang | slow | error | abort "
                   "(the other kinds need a live run and are refused), e.g. "
                   "crash:after_passes=100:worker=1, slow:factor=2:worker=0, "
                   "error:rate=0.05, abort:tokens=5:match=r1*, hang:at_ms=2000:worker=2; "
                   "README \"Failure drills offline\"")
          ->option_text("SPEC")
          ->group("Failure drills ([faults]; see serve.md \"Failure drills\")");
  for (const Group& group : kGroups) {
    for (const FlagSpec& spec : group.flags) {
      // An engine-only command (`mocker replay`) has a --num-workers of its own (offline workers).
      if (use == ConfigUse::EngineOnly && std::string_view(spec.key) == "fleet.num_workers") {
        continue;
      }
      addBinding(app, flags, use, spec, group.name);
    }
    if (std::string_view(group.name).starts_with("Roofline")) {
      // One flag per fitted coefficient, named after the engine's table.
      for (const engine::RooflineCoefficientInfo& c : engine::rooflineCoefficientTable()) {
        std::string flag = "--roofline-" + std::string(c.name);
        std::replace(flag.begin(), flag.end(), '_', '-');
        const std::string key = "engine.roofline." + std::string(c.name);
        const std::string help = std::string(c.doc) + " (bounds " + std::to_string(c.lower) +
                                 " .. " + std::to_string(c.upper) + ")";
        addBinding(app, flags, use, {flag.c_str(), key.c_str(), help.c_str()}, group.name);
      }
    }
  }
}

Result<service::ServiceConfig> resolveServeConfig(const ServeFlags& flags, ConfigUse use) {
  service::KeyOrigins origins;
  service::ServiceConfig config;
  if (!flags.config_path.empty()) {
    MOCKER_TRY(config,
               service::loadServiceConfigOver(std::move(config), flags.config_path, origins));
  }
  if (flags.kv_events_config_option != nullptr && flags.kv_events_config_option->count() > 0) {
    if (use == ConfigUse::EngineOnly) {
      return invalidArgument(
          "--kv-events-config has no effect here: only the engine runs (no sockets or "
          "publishers), so only [engine] keys apply");
    }
    MOCKER_TRY_VOID(applyVllmKvEventsConfig(flags.kv_events_config, config, origins));
  }
  MOCKER_TRY_VOID(applyLaunchLineFlags(flags, config, origins, use));
  for (const ServeFlags::Binding& b : flags.bindings) {
    if (b.option->count() == 0) continue;
    if (use == ConfigUse::EngineOnly && !isEngineOnlyKey(b.key)) {
      return invalidArgument(b.flag + ": " + b.key +
                             " has no effect here: only the engine runs (no sockets, publishers, "
                             "logging or start-up delay, and 0-token outputs are always "
                             "accepted), so only [engine] keys and the fault plan (--fault, "
                             "--fault-seed, --fault-log) apply");
    }
    const std::string text = b.boolean ? (b.value ? "true" : "false") : b.text;
    if (auto st = service::setConfigValue(config, b.key, text); !st) {
      return Error{st.error().code, b.flag + ": " + b.key + ": " + st.error().message};
    }
    origins[b.key] = b.flag;
  }
  if (flags.fault_option != nullptr && flags.fault_option->count() > 0) {
    config.faults.inject.insert(config.faults.inject.end(), flags.faults.begin(),
                                flags.faults.end());
    origins["faults.inject"] = "--fault";
  }
  return service::finishServiceConfig(std::move(config), origins, use);
}

bool isEngineOnlyKey(std::string_view key) {
  return isEngineKey(key) || key == "faults.seed" || key == "faults.log";
}

bool isEngineKey(std::string_view key) {
  // engine.startup_time_s lives in [engine] but is the service's delay before reading submits.
  return key.starts_with("engine.") && key != "engine.startup_time_s";
}

std::optional<std::string> firstGivenServeFlag(const ServeFlags& flags, bool with_model) {
  if (!flags.config_path.empty()) return "--config";
  if (flags.fault_option != nullptr && flags.fault_option->count() > 0) return "--fault";
  if (flags.kv_events_config_option != nullptr && flags.kv_events_config_option->count() > 0) {
    return "--kv-events-config";
  }
  for (const ServeFlags::Binding& b : flags.bindings) {
    if (b.option->count() > 0) return b.flag;
  }
  for (const CLI::Option* o :
       {flags.host_option, flags.port_option, with_model ? flags.model_option : nullptr,
        flags.disable_log_stats_option}) {
    if (o != nullptr && o->count() > 0) return ("--" + o->get_lnames().front());
  }
  return std::nullopt;
}

}  // namespace mocker::tools
