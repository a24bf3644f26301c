// Roofline timing model (docs/engine.md, "Roofline timing"): the duration of one forward pass from
// the model's architecture, the GPU's peak FLOP/s and memory bandwidth, the tensor-parallel degree
// and the batch's actual composition (each scheduled sequence's new tokens and context), every
// term scaled by an efficiency or overhead coefficient from rooflineCoefficientTable().
//
// Pure functions of plain values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "engine/gpu_spec.h"
#include "engine/model_arch.h"

namespace mocker::engine {

/// Efficiencies (fractions of the hardware peak) and overheads. Defaults: the fit to the
/// per-operator kernel profiles (data/calibration/README.md); every member is listed in
/// rooflineCoefficientTable() with its bounds.
struct RooflineCoefficients {
  double pass_overhead_ms = 1.0;          ///< fixed per pass (scheduling, launch, sync)
  double sequence_overhead_us = 2.0;      ///< per scheduled sequence (input prep, sampling)
  double kernel_overhead_us = 8.0;        ///< per kernel launch (GEMM, attention, MoE, norm group)
  double gemm_compute_efficiency = 0.75;  ///< dense GEMM FLOP/s / peak
  double gemm_memory_efficiency = 0.85;   ///< dense GEMM and elementwise bytes/s / bandwidth
  double attention_prefill_efficiency = 0.5;  ///< attention FLOP/s / peak (prefill chunks)
  double attention_decode_efficiency = 0.7;   ///< attention KV-read bytes/s / bandwidth (decodes)
  /// Multiplies attention_decode_efficiency for decodes in a pass that also has a prompt chunk:
  /// the varlen prefill kernel reads their KV once per query head, not once per KV head (no
  /// sharing across a GQA group), partly from L2 (hence a factor above 1).
  double attention_mixed_decode_factor = 2.0;
  double moe_compute_efficiency = 0.5;  ///< expert GEMM FLOP/s / peak
  double moe_memory_efficiency = 0.8;   ///< expert-weight bytes/s / bandwidth
  double allreduce_efficiency = 0.7;    ///< all-reduce bytes/s / interconnect bandwidth
  double allreduce_latency_us = 36.0;   ///< fixed latency of one collective (all-reduce, EP)
};

/// One fitted coefficient: name (config key under [engine.roofline]), the member, its default,
/// bounds for a bounded optimiser (inclusive) and a one-line description.
struct RooflineCoefficientInfo {
  std::string_view name;
  double RooflineCoefficients::*member;
  double default_value;
  double lower;
  double upper;
  std::string_view doc;
};

inline constexpr std::size_t kNumRooflineCoefficients = 12;

/// Every coefficient (kNumRooflineCoefficients), in a fixed order. Calibration fits exactly
/// these, by name.
std::span<const RooflineCoefficientInfo> rooflineCoefficientTable();

/// The table entry named `name`, or nullptr.
const RooflineCoefficientInfo* findRooflineCoefficient(std::string_view name);

/// Default non-torch memory (GiB): set so that the RTX 4090 run's KV cache (Llama-3.1-8B, 0.9,
/// budget 2048, 256 sequences) comes out at the 2,588 blocks vLLM 0.19 reported. It is of the
/// order vLLM logs as "non-torch memory" on one GPU (0.1–0.2 GiB); tensor parallelism adds NCCL
/// buffers that this default does not model.
inline constexpr double kDefaultNonTorchMemoryGib = 0.15;

/// Bytes per logit (sequence x vocabulary entry) at the peak of vLLM's start-up sampler run,
/// which samples max_num_seqs dummy sequences with top-k and top-p on (vLLM 0.19's PyTorch
/// path, FlashInfer's sampler being opt-in there): the model-dtype logits (2), their fp32 copy
/// (4), the sorted values (4) and int64 sort indices (8), the sorted softmax and its in-place
/// cumulative sum (4), and the top-k and top-p boolean masks (1 + 1).
inline constexpr double kSamplerProfileBytesPerLogit = 24.0;

/// The deployment the roofline model describes.
struct RooflineConfig {
  ModelArch model;
  GpuSpec gpu;
  std::uint32_t tensor_parallel_size = 1;  ///< GPUs one engine (DP rank) spans; >= 1
  /// GPUs the experts are spread over (vLLM --enable-expert-parallel: TP × DP); 1 = no expert
  /// parallelism (experts sharded by TP like dense MLPs). Each GPU holds num_experts / EP whole
  /// experts and serves the tokens of EP / TP data-parallel ranks, assumed to run batches like
  /// this one; the MoE layer adds a dispatch and a combine collective.
  std::uint32_t expert_parallel_size = 1;
  double gpu_memory_utilization = 0.9;  ///< vLLM's flag: fraction of GPU memory to use
  /// Memory per GPU that vLLM's start-up profile counts outside weights, KV and activations
  /// (the non-torch increase: cuBLAS workspaces, NCCL buffers), GiB.
  double non_torch_memory_gib = kDefaultNonTorchMemoryGib;
  RooflineCoefficients coefficients;
};

/// The first broken rule as a message naming the field ("roofline.tensor_parallel_size must be
/// ..."), or nullopt. Checks the model, the GPU, TP, memory utilisation and every coefficient
/// against its table bounds.
std::optional<std::string> checkRooflineConfig(const RooflineConfig& config);

/// One sequence of a pass: `new_tokens` computed this pass (a prompt chunk, or 1 for a decode)
/// after `context` tokens already in KV. A pass with any sequence of more than one new token is
/// "mixed": its one-token sequences (decodes) read KV at the mixed-decode rate.
struct PassSequence {
  std::uint32_t new_tokens = 0;
  std::uint64_t context = 0;
};

/// A pass's time split by term, milliseconds (total = sum of the others).
struct RooflineBreakdown {
  double overhead_ms = 0.0;   ///< pass + per-sequence overheads (per-kernel ones are in each term)
  double gemm_ms = 0.0;       ///< QKV, O, dense MLP and elementwise traffic
  double attention_ms = 0.0;  ///< prefill FLOPs and decode KV reads
  double moe_ms = 0.0;        ///< router + touched experts
  double allreduce_ms = 0.0;  ///< TP all-reduce (2 per layer)
  double expert_dispatch_ms = 0.0;  ///< EP dispatch + combine (2 collectives per MoE layer)
  double lm_head_ms = 0.0;          ///< logits of each sequence's last token
  double total_ms = 0.0;
};

/// The modelled duration of one pass over `sequences` (empty = 0). `cuda_graph_max_tokens`: the
/// largest CUDA-graph capture size of the engine (vllmCudaGraphMaxTokens; 0 = eager): a pass of at
/// most that many tokens runs its token-parallel kernels (dense GEMMs, elementwise kernels, MoE,
/// collectives) on cudaGraphPaddedTokens() tokens; attention and the LM head see the real batch.
RooflineBreakdown rooflinePass(const RooflineConfig& config,
                               std::span<const PassSequence> sequences,
                               std::uint32_t cuda_graph_max_tokens = 0);

/// vLLM's default largest CUDA-graph capture size (VllmConfig._set_cudagraph_sizes, no
/// speculative decoding): min(2 · max_num_seqs, 512, max_num_batched_tokens).
std::uint32_t vllmCudaGraphMaxTokens(std::uint32_t max_num_seqs,
                                     std::uint32_t max_num_batched_tokens);

/// The captured size a pass of `tokens` scheduled tokens is padded to: the smallest of vLLM's
/// default capture sizes — 1, 2, 4, multiples of 8 below 256, multiples of 16 from 256 — that is
/// >= tokens and <= max_capture; `tokens` itself when there is none (eager: a larger pass, or
/// max_capture = 0).
std::uint32_t cudaGraphPaddedTokens(std::uint32_t tokens, std::uint32_t max_capture);

/// Expected distinct experts touched when `tokens` tokens each route to top-k of E experts,
/// uniformly: E · (1 − (1 − k/E)^tokens).
double expectedDistinctExperts(std::uint32_t num_experts, std::uint32_t top_k, double tokens);

/// Weight bytes one GPU holds: (non-expert parameters / TP + expert parameters / EP) ·
/// weight_bytes (without EP, expert parameters are divided by TP as well).
double weightBytesPerGpu(const RooflineConfig& config);

/// KV cache blocks that fit on one GPU, as vLLM sizes it: (memory · gpu_memory_utilization −
/// weights per GPU − activation peak − non-torch memory) / (block_size · KV bytes per token per
/// GPU), floored. The activation peak is that of a profiling pass with
/// `max_num_batched_tokens` tokens and `max_num_seqs` sampled sequences. Error (naming
/// gpu_memory_utilization) when nothing is left for KV.
struct KvCapacity {
  double memory_bytes = 0.0;
  double weight_bytes = 0.0;
  double activation_bytes = 0.0;
  double non_torch_bytes = 0.0;
  double kv_bytes = 0.0;  ///< left for the KV cache
  std::uint64_t num_blocks = 0;
};
Result<KvCapacity> rooflineKvCapacity(const RooflineConfig& config, std::uint32_t block_size,
                                      std::uint32_t max_num_batched_tokens,
                                      std::uint32_t max_num_seqs);

}  // namespace mocker::engine
