// EngineConfig: every engine setting, with the Dynamo/vLLM key names and defaults (an aggregate
// with default member initialisers; build it with designated initialisers). checkEngineConfig()
// returns the first broken rule as data: the fields it is about and an error naming the field and
// the allowed range. The service's TOML/CLI loader and the replay tool fill this struct.
//
// Plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "engine/roofline.h"

namespace mocker::engine {

enum class EngineType { Vllm, Sglang, Trtllm };
enum class PreemptionMode { Lifo, Fifo };
enum class TimingModelKind { Polynomial, Interpolated, Fixed, Roofline };
enum class KvEventVisibility { PassEnd, PassStart };
enum class SchedulePolicy { Fcfs, Lpm };
/// What the decode polynomial's load u = active_kv / total_kv measures (README "Timing").
enum class DecodeLoad { Physical, Logical };
/// Role in a disaggregated deployment (README "Disaggregated prefill/decode").
enum class WorkerType { Aggregated, Prefill, Decode };
/// Which tokens a KV handoff pays transfer time for.
enum class KvTransferCharge { FullPrompt, MissingBlocks };

/// An interpolated timing profile (file format: service/README.md). Loaded from a file outside the
/// engine (tools/service); the engine only validates the arrays.
struct TimingProfile {
  std::vector<double> prefill_isl;              ///< strictly increasing
  std::vector<double> prefill_ttft_ms;          ///< same length as prefill_isl
  std::vector<double> decode_active_kv_tokens;  ///< strictly increasing (rows)
  std::vector<double> decode_context_length;    ///< strictly increasing (columns)
  std::vector<std::vector<double>> decode_itl;  ///< [rows][cols] milliseconds
};

/// SGLang scheduler settings; used only when engine_type = sglang.
struct SglangConfig {
  SchedulePolicy schedule_policy = SchedulePolicy::Fcfs;
  /// 0 = unset: block_size if that is set, else 1. Must equal block_size when both are set.
  std::uint32_t page_size = 0;
  std::uint32_t max_prefill_tokens = 16384;
  std::uint32_t chunked_prefill_size = 8192;
  std::uint32_t clip_max_new_tokens = 4096;
  double schedule_conservativeness = 1.0;
};

struct EngineConfig {
  EngineType engine_type = EngineType::Vllm;
  /// Per DP rank, >= 1; null = ceil(1,048,576 / block_size), so every engine type holds 1 Mi
  /// tokens of KV by default (effectiveNumGpuBlocks).
  std::optional<std::uint32_t> num_gpu_blocks;
  std::uint32_t block_size = 0;  ///< 0 = engine default (vllm 64, trtllm 32, sglang page)
  std::optional<std::uint32_t> max_model_len;                  ///< null = unlimited; else >= 2
  std::optional<std::uint32_t> max_num_seqs = 256;             ///< null = unbounded; else >= 1
  std::optional<std::uint32_t> max_num_batched_tokens = 8192;  ///< null = unbounded
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  /// vLLM's --enforce-eager: no CUDA graphs, so passes are not padded to a capture size
  /// (engineCudaGraphMaxTokens returns 0).
  bool enforce_eager = false;
  PreemptionMode preemption_mode = PreemptionMode::Lifo;
  std::uint32_t dp_size = 1;  ///< >= 1
  std::uint64_t hash_seed = kDefaultHashSeed;
  std::uint64_t chain_seed = kDefaultChainSeed;
  std::uint64_t token_seed = 0;  ///< seed of synthetic output token ids
  KvEventVisibility kv_event_visibility = KvEventVisibility::PassEnd;
  bool allow_empty_output = false;  ///< accept max_output_tokens = 0 at submit

  // Timing.
  TimingModelKind timing_model = TimingModelKind::Polynomial;
  std::optional<TimingProfile> timing_profile;  ///< required iff timing_model = interpolated
  std::optional<double> fixed_prefill_ms;       ///< required iff timing_model = fixed
  std::optional<double> fixed_decode_ms;
  std::optional<RooflineConfig> roofline;  ///< required iff timing_model = roofline
  double speedup_ratio = 1.0;              ///< finite, >= 0; 0 = live mode does not wait
  double decode_speedup_ratio = 1.0;       ///< finite, > 0; must be 1 with speculative decoding
  DecodeLoad decode_load = DecodeLoad::Physical;  ///< vllm/trtllm decode load (README "Timing")

  // Speculative decoding (README "Speculative decoding").
  /// null = off; else 1..=5 draft tokens verified per pass.
  std::optional<std::uint32_t> spec_num_draft_tokens;
  /// Acceptance probability of draft position i (1-based) = spec_accept_rates[i - 1]; each in
  /// [0, 1], at most 5 entries; missing positions accept with probability 0.
  std::vector<double> spec_accept_rates = {0.85, 0.3, 0.0, 0.0, 0.0};
  std::uint64_t spec_seed = 42;

  // Disaggregated prefill/decode (README "Disaggregated prefill/decode").
  WorkerType worker_type = WorkerType::Aggregated;
  std::uint64_t kv_bytes_per_token = 131072;  ///< >= 1; KV bytes per token moved in a handoff
  double kv_transfer_bandwidth_gbps = 25.0;   ///< finite, > 0; decimal GB/s (1e9 B/s)
  KvTransferCharge kv_transfer_charge = KvTransferCharge::FullPrompt;
  /// >= 0 or null (hold forever): modelled ms a prefill worker holds handed-off KV unreleased.
  std::optional<double> kv_hold_timeout_ms = 60000.0;

  // KV offload tiers (README "KV offload tiers"; vllm and trtllm). 0 blocks = tier off.
  std::uint32_t num_g2_blocks = 0;         ///< host-memory (G2, medium CPU) blocks per rank
  std::uint32_t num_g3_blocks = 0;         ///< disk (G3, medium DISK) blocks; needs num_g2_blocks
  std::uint32_t offload_batch_size = 16;   ///< >= 1; evicted blocks per offload transfer
  double offload_gpu_to_host_gbps = 14.0;  ///< finite, > 0; decimal GB/s, GPU → host
  double offload_host_to_gpu_gbps = 14.0;  ///< host → GPU (onboarding)
  double offload_host_to_disk_gbps = 7.0;  ///< host → disk (G2 → G3)
  double offload_disk_to_host_gbps = 7.0;  ///< disk → host (onboarding from G3)

  // LoRA adapters (README "LoRA adapters"; vllm and trtllm, aggregated workers).
  /// Adapters at most in one pass (vLLM's --max-loras); 0 = LoRA off: a request naming an
  /// adapter is refused.
  std::uint32_t max_loras = 0;
  /// Adapters resident in host memory, LRU (vLLM's --max-cpu-loras); null = max_loras; else
  /// >= max_loras.
  std::optional<std::uint32_t> max_cpu_loras;
  /// Finite, >= 0: modelled ms a pass adds for each adapter it schedules that is not resident
  /// (loaded from storage; docs/engine.md "LoRA adapters" derives the default).
  double lora_load_ms = 28.0;

  SglangConfig sglang;
};

/// A broken validation rule, as data: which fields it is about and what is wrong.
struct ConfigError {
  /// EngineConfig field paths the rule concerns, the offending field first, then the fields it
  /// was checked against ("sglang.page_size", "block_size"). Nested fields are dotted
  /// ("sglang.page_size"); every timing-profile rule names "timing_profile".
  std::vector<std::string> fields;
  /// InvalidArgument; the message starts with fields.front() and gives the allowed range
  /// ("num_gpu_blocks must be >= 1 (got 0)", "timing_profile.prefill_isl must be …").
  Error error;
};

/// Checks every field in a fixed order; the first broken rule, or nullopt if the config is valid.
std::optional<ConfigError> checkEngineConfig(const EngineConfig& config);

/// checkEngineConfig as a Status (the error only), for callers that need no field names.
Status validateEngineConfig(const EngineConfig& config);

/// block_size after applying the engine default (vllm 64, trtllm 32, sglang page_size).
std::uint32_t effectiveBlockSize(const EngineConfig& config);

/// Tokens of KV every engine type holds when num_gpu_blocks is not set (1 Mi).
inline constexpr std::uint64_t kDefaultKvCapacityTokens = 1u << 20;

/// num_gpu_blocks; when it is null, the roofline deployment's KV capacity (rooflineKvCapacity)
/// if timing_model = roofline, else ceil(kDefaultKvCapacityTokens / effective block size) (vllm
/// 16384, trtllm 32768, sglang page 1: 1,048,576). REQUIRES: a valid config.
std::uint32_t effectiveNumGpuBlocks(const EngineConfig& config);

/// The roofline KV capacity for this engine's block size and batch limits (the token budget:
/// max_num_batched_tokens, or sglang.chunked_prefill_size for sglang, 8192 when unbounded; the
/// sampled sequences: max_num_seqs, 256 when unbounded). REQUIRES: config.roofline.
Result<KvCapacity> engineKvCapacity(const EngineConfig& config);

/// The largest CUDA-graph capture size the roofline model pads passes to (rooflinePass): for the
/// vllm engine type vLLM's default, min(2 · max_num_seqs · (1 + spec_num_draft_tokens), 512,
/// max_num_batched_tokens) (256 sequences and 8192 tokens when unbounded); 0 (eager, no
/// padding) for sglang and trtllm, whose graphs mocker does not model.
std::uint32_t engineCudaGraphMaxTokens(const EngineConfig& config);

/// KV tokens per DP rank when the roofline deployment sizes the cache (timing_model = roofline,
/// num_gpu_blocks unset): effectiveNumGpuBlocks × effective block size; else nullopt.
/// REQUIRES: a valid config.
std::optional<std::uint64_t> deploymentKvCacheTokens(const EngineConfig& config);

/// vLLM's start-up line for a KV capacity: "GPU KV cache size: 617,440 tokens".
std::string gpuKvCacheSizeText(std::uint64_t tokens);

/// max_cpu_loras, or max_loras when it is null.
inline std::uint32_t effectiveMaxCpuLoras(const EngineConfig& config) {
  return config.max_cpu_loras.value_or(config.max_loras);
}

/// Most draft tokens speculative decoding accepts (spec_num_draft_tokens, spec_accept_rates).
inline constexpr std::uint32_t kMaxSpecDraftTokens = 5;

/// Lower-case names used in config files and on the CLI, and their parsers (case-insensitive).
std::string_view toString(EngineType v);
std::string_view toString(PreemptionMode v);
std::string_view toString(TimingModelKind v);
std::string_view toString(KvEventVisibility v);
std::string_view toString(SchedulePolicy v);
std::string_view toString(DecodeLoad v);
std::string_view toString(WorkerType v);
std::string_view toString(KvTransferCharge v);
Result<EngineType> parseEngineType(std::string_view s);
Result<PreemptionMode> parsePreemptionMode(std::string_view s);
Result<TimingModelKind> parseTimingModelKind(std::string_view s);
Result<KvEventVisibility> parseKvEventVisibility(std::string_view s);
Result<SchedulePolicy> parseSchedulePolicy(std::string_view s);  ///< fcfs (alias fifo) | lpm
Result<DecodeLoad> parseDecodeLoad(std::string_view s);          ///< physical | logical
Result<WorkerType> parseWorkerType(std::string_view s);          ///< aggregated | prefill | decode
Result<KvTransferCharge> parseKvTransferCharge(
    std::string_view s);  ///< full_prompt | missing_blocks

/// Modelled KV transfer time of `tokens` tokens of a handoff: tokens · kv_bytes_per_token /
/// (kv_transfer_bandwidth_gbps · 1e9) · 1000 ms, divided by speedup_ratio (0 counts as 1).
double kvTransferMs(const EngineConfig& config, std::uint64_t tokens);

}  // namespace mocker::engine
