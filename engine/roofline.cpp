#include "engine/roofline.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace mocker::engine {
namespace {

using C = RooflineCoefficients;

constexpr RooflineCoefficients kDefaults{};

const std::array<RooflineCoefficientInfo, kNumRooflineCoefficients> kTable{{
    {"pass_overhead_ms", &C::pass_overhead_ms, kDefaults.pass_overhead_ms, 0.0, 50.0,
     "fixed time of every pass (scheduling, input preparation, launch, synchronisation), ms"},
    {"sequence_overhead_us", &C::sequence_overhead_us, kDefaults.sequence_overhead_us, 0.0, 500.0,
     "time per scheduled sequence (metadata, sampling), us"},
    {"kernel_overhead_us", &C::kernel_overhead_us, kDefaults.kernel_overhead_us, 0.0, 100.0,
     "fixed time of each kernel (GEMM, attention, MoE, elementwise group), us"},
    {"gemm_compute_efficiency", &C::gemm_compute_efficiency, kDefaults.gemm_compute_efficiency,
     0.05, 1.0, "dense GEMM FLOP/s as a fraction of the GPU's BF16 peak"},
    {"gemm_memory_efficiency", &C::gemm_memory_efficiency, kDefaults.gemm_memory_efficiency, 0.05,
     1.0, "dense GEMM weight and activation traffic as a fraction of memory bandwidth"},
    {"attention_prefill_efficiency", &C::attention_prefill_efficiency,
     kDefaults.attention_prefill_efficiency, 0.02, 1.0,
     "attention FLOP/s as a fraction of the BF16 peak (prompt chunks)"},
    {"attention_decode_efficiency", &C::attention_decode_efficiency,
     kDefaults.attention_decode_efficiency, 0.02, 1.0,
     "attention KV-read bytes/s as a fraction of memory bandwidth (decodes)"},
    {"attention_mixed_decode_factor", &C::attention_mixed_decode_factor,
     kDefaults.attention_mixed_decode_factor, 0.05, 4.0,
     "multiplies the decode attention efficiency for decodes in a pass with a prompt chunk (which "
     "read KV per query head)"},
    {"moe_compute_efficiency", &C::moe_compute_efficiency, kDefaults.moe_compute_efficiency, 0.02,
     1.0, "expert GEMM FLOP/s as a fraction of the BF16 peak"},
    {"moe_memory_efficiency", &C::moe_memory_efficiency, kDefaults.moe_memory_efficiency, 0.02, 1.0,
     "expert weight reads as a fraction of memory bandwidth"},
    {"allreduce_efficiency", &C::allreduce_efficiency, kDefaults.allreduce_efficiency, 0.02, 1.0,
     "all-reduce bytes/s as a fraction of the interconnect bandwidth"},
    {"allreduce_latency_us", &C::allreduce_latency_us, kDefaults.allreduce_latency_us, 0.0, 500.0,
     "fixed latency of one all-reduce, us"},
}};

constexpr double kActBytes = 2.0;  // activations are bf16/fp16
/// Query rows one attention thread block covers in a prompt chunk (per query head); fitted with
/// attention_prefill_efficiency to the prompt-chunk attention profiles (docs/engine.md).
constexpr double kAttentionQueryTile = 64.0;

/// Per-GPU shapes and hardware rates, derived once per pass.
struct Shapes {
  double p, h, qd, kvd, heads, kv_heads, hd, inter, moe_inter, experts, topk, vocab, mats, wb, kvb;
  double ep;             ///< expert-parallel GPUs (1 = experts sharded by TP)
  double local_experts;  ///< experts one GPU holds
  double token_scale;    ///< tokens an expert GPU serves per token of this rank's batch (EP / TP)
  double flops_per_s, bytes_per_s, gemm_flops_per_s, gemm_bytes_per_s, attention_bytes_per_s, sms;
};

Shapes shapesOf(const RooflineConfig& c) {
  const ModelArch& m = c.model;
  Shapes s{};
  s.p = c.tensor_parallel_size;
  s.h = m.hidden_size;
  s.hd = m.head_dim;
  s.heads = m.num_heads / s.p;
  // vLLM replicates KV heads when TP exceeds their number.
  s.kv_heads = std::max(1.0, m.num_kv_heads / s.p);
  s.qd = s.heads * s.hd;
  s.kvd = s.kv_heads * s.hd;
  s.inter = m.num_experts == 0 ? m.intermediate_size / s.p : 0.0;
  s.ep = c.expert_parallel_size;
  s.moe_inter = s.ep > 1.0 ? m.moe_intermediate_size : m.moe_intermediate_size / s.p;
  s.experts = m.num_experts;
  s.local_experts = s.experts / s.ep;
  s.token_scale = s.ep > 1.0 ? s.ep / s.p : 1.0;
  s.topk = m.experts_per_token;
  s.vocab = m.vocab_size / s.p;
  s.mats = m.gated_mlp ? 3.0 : 2.0;
  s.wb = m.weight_bytes;
  s.kvb = m.kv_bytes;
  s.flops_per_s = c.gpu.bf16_tflops * 1e12;
  s.bytes_per_s = c.gpu.memory_bandwidth_gbps * 1e9;
  s.gemm_flops_per_s = s.flops_per_s * c.gpu.compute_efficiency_scale;
  s.gemm_bytes_per_s = s.bytes_per_s * c.gpu.memory_efficiency_scale;
  s.attention_bytes_per_s = s.bytes_per_s * c.gpu.attention_efficiency_scale;
  s.sms = c.gpu.sm_count;
  return s;
}

/// One GEMM kernel: launch + max(compute, memory), ms.
double gemmMs(const Shapes& s, const C& k, double flops, double bytes) {
  const double compute = flops / (s.gemm_flops_per_s * k.gemm_compute_efficiency);
  const double memory = bytes / (s.gemm_bytes_per_s * k.gemm_memory_efficiency);
  return k.kernel_overhead_us * 1e-3 + std::max(compute, memory) * 1e3;
}

/// A [tokens x in] · [in x out] GEMM with bf16 activations in and out.
double linearMs(const Shapes& s, const C& k, double tokens, double in, double out) {
  return gemmMs(s, k, 2.0 * tokens * in * out, in * out * s.wb + tokens * (in + out) * kActBytes);
}

/// Dense part of one layer: QKV, O, the dense MLP, and the elementwise kernels (2 norms with
/// residual, rotary, activation) as memory traffic.
double denseLayerMs(const Shapes& s, const C& k, double tokens) {
  double ms = linearMs(s, k, tokens, s.h, s.qd + 2.0 * s.kvd) + linearMs(s, k, tokens, s.qd, s.h);
  if (s.inter > 0.0) {
    ms += linearMs(s, k, tokens, s.h, (s.mats - 1.0) * s.inter) +
          linearMs(s, k, tokens, s.inter, s.h);
  }
  const double act = s.experts > 0 ? s.topk * s.moe_inter : s.inter;
  const double bytes = tokens * kActBytes * (4.0 * s.h + 2.0 * (s.qd + s.kvd) + 3.0 * act);
  ms += 4.0 * k.kernel_overhead_us * 1e-3 +
        bytes / (s.gemm_bytes_per_s * k.gemm_memory_efficiency) * 1e3;
  return ms;
}

/// Fraction of the GPU's thread-block slots the prompt chunks' attention keeps busy: one block
/// per (query head, query tile) of every chunk, run in waves of sm_count; the last wave's idle
/// slots are paid for (1 when the SM count is unknown or there is no chunk).
double attentionWaveUtilisation(const Shapes& s, std::span<const PassSequence> seqs) {
  double blocks = 0.0;
  for (const PassSequence& q : seqs) {
    if (q.new_tokens > 1) blocks += s.heads * std::ceil(q.new_tokens / kAttentionQueryTile);
  }
  if (s.sms < 1.0 || blocks <= 0.0) return 1.0;
  return blocks / (std::ceil(blocks / s.sms) * s.sms);
}

/// Attention of one layer: per sequence, max(causal FLOPs of its chunk over its context, KV
/// bytes it reads), summed; one kernel launch. Prompt-chunk FLOPs run at the wave utilisation;
/// decodes beside a prompt chunk go through the chunk's varlen kernel, which reads their K and V
/// once per query head (heads · head_dim per token instead of kv_heads · head_dim).
double attentionLayerMs(const Shapes& s, const C& k, std::span<const PassSequence> seqs) {
  const bool mixed =
      std::any_of(seqs.begin(), seqs.end(), [](const PassSequence& q) { return q.new_tokens > 1; });
  const double decode_efficiency =
      k.attention_decode_efficiency * (mixed ? k.attention_mixed_decode_factor : 1.0);
  const double prefill_flops_per_s =
      s.flops_per_s * k.attention_prefill_efficiency * attentionWaveUtilisation(s, seqs);
  double seconds = 0.0;
  for (const PassSequence& q : seqs) {
    const double n = q.new_tokens;
    const double ctx = static_cast<double>(q.context);
    const double flops = 4.0 * s.heads * s.hd * n * (ctx + (n + 1.0) / 2.0);
    const bool decode = q.new_tokens == 1;
    const double kv_width = decode && mixed ? s.qd : s.kvd;
    const double bytes = (ctx + n) * 2.0 * kv_width * s.kvb + n * 2.0 * s.qd * kActBytes;
    const double efficiency = decode ? decode_efficiency : k.attention_decode_efficiency;
    const double compute =
        flops / (decode ? s.flops_per_s * k.attention_prefill_efficiency : prefill_flops_per_s);
    seconds += std::max(compute, bytes / (s.attention_bytes_per_s * efficiency));
  }
  return k.kernel_overhead_us * 1e-3 + seconds * 1e3;
}

/// MoE block of one layer: router GEMM, then the experts the batch touches (2 fused kernels).
/// With expert parallelism this GPU holds local_experts whole experts and serves the tokens of
/// EP / TP ranks (token_scale); each token still has top-k / EP of its assignments here on
/// average, so the FLOPs are those of this rank's tokens, while the weight reads are the local
/// experts that all ranks' tokens touch.
double moeLayerMs(const Shapes& s, const C& k, double tokens) {
  if (s.experts == 0) return 0.0;
  const double router = linearMs(s, k, tokens, s.h, s.experts);
  const double served = tokens * s.token_scale;
  const double touched = s.local_experts / s.experts *
                         expectedDistinctExperts(static_cast<std::uint32_t>(s.experts),
                                                 static_cast<std::uint32_t>(s.topk), served);
  const double assignments = served * s.topk / s.ep;
  const double flops = 2.0 * assignments * s.mats * s.h * s.moe_inter;
  const double bytes = touched * s.mats * s.h * s.moe_inter * s.wb +
                       assignments * (2.0 * s.h + s.mats * s.moe_inter) * kActBytes;
  const double seconds = std::max(flops / (s.gemm_flops_per_s * k.moe_compute_efficiency),
                                  bytes / (s.bytes_per_s * k.moe_memory_efficiency));
  return router + 2.0 * k.kernel_overhead_us * 1e-3 + seconds * 1e3;
}

/// One collective over the interconnect moving `bytes` per GPU: latency + bytes / bandwidth,
/// the bandwidth scaled by the GPU's interconnect efficiency scale (PCIe vs NVLink).
double collectiveMs(const RooflineConfig& c, const C& k, double bytes) {
  const double bytes_per_s =
      c.gpu.interconnect_gbps * 1e9 * c.gpu.interconnect_efficiency_scale * k.allreduce_efficiency;
  return k.allreduce_latency_us * 1e-3 + bytes / bytes_per_s * 1e3;
}

/// Expert-parallel dispatch and combine of one MoE layer (vLLM's all-gather / reduce-scatter):
/// each GPU receives, then returns, the hidden states of the other EP − 1 GPUs' share of the
/// served tokens.
double expertDispatchLayerMs(const RooflineConfig& c, const Shapes& s, const C& k, double tokens) {
  if (s.experts == 0 || s.ep <= 1.0) return 0.0;
  const double bytes = (s.ep - 1.0) / s.ep * tokens * s.token_scale * s.h * kActBytes;
  return 2.0 * collectiveMs(c, k, bytes);
}

/// The two all-reduces of one layer (after attention and after the MLP), ring algorithm.
double allreduceLayerMs(const RooflineConfig& c, const C& k, double tokens) {
  const double p = c.tensor_parallel_size;
  if (p <= 1.0) return 0.0;
  const double bytes = tokens * c.model.hidden_size * kActBytes;
  return 2.0 * collectiveMs(c, k, 2.0 * (p - 1.0) / p * bytes);
}

std::string num(double v) { return std::to_string(v); }

}  // namespace

std::span<const RooflineCoefficientInfo> rooflineCoefficientTable() { return kTable; }

const RooflineCoefficientInfo* findRooflineCoefficient(std::string_view name) {
  for (const RooflineCoefficientInfo& e : kTable) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::optional<std::string> checkRooflineConfig(const RooflineConfig& c) {
  if (auto p = checkModelArch(c.model, "roofline.model.")) return p;
  if (auto p = checkGpuSpec(c.gpu, "roofline.gpu.")) return p;
  if (c.tensor_parallel_size < 1 || c.tensor_parallel_size > 64) {
    return "roofline.tensor_parallel_size must be in 1..=64 (got " +
           std::to_string(c.tensor_parallel_size) + ")";
  }
  if (c.expert_parallel_size < 1 || c.expert_parallel_size > 1024 ||
      (c.model.num_experts > 0 && c.model.num_experts % c.expert_parallel_size != 0) ||
      (c.expert_parallel_size > 1 && c.expert_parallel_size % c.tensor_parallel_size != 0)) {
    return "roofline.expert_parallel_size must be in 1..=1024, divide model.num_experts (" +
           std::to_string(c.model.num_experts) + ") and be a multiple of tensor_parallel_size (" +
           std::to_string(c.tensor_parallel_size) + ") (got " +
           std::to_string(c.expert_parallel_size) + ")";
  }
  if (c.model.num_heads % c.tensor_parallel_size != 0) {
    return "roofline.tensor_parallel_size must divide model.num_heads (" +
           std::to_string(c.model.num_heads) + ") (got " + std::to_string(c.tensor_parallel_size) +
           ")";
  }
  if (!(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0)) {
    return "roofline.gpu_memory_utilization must be in (0, 1] (got " +
           num(c.gpu_memory_utilization) + ")";
  }
  if (!(std::isfinite(c.non_torch_memory_gib) && c.non_torch_memory_gib >= 0.0)) {
    return "roofline.non_torch_memory_gib must be finite and >= 0 (got " +
           num(c.non_torch_memory_gib) + ")";
  }
  for (const RooflineCoefficientInfo& e : kTable) {
    const double v = c.coefficients.*e.member;
    if (!(v >= e.lower && v <= e.upper)) {
      return "roofline." + std::string(e.name) + " must be in [" + num(e.lower) + ", " +
             num(e.upper) + "] (got " + num(v) + ")";
    }
  }
  return std::nullopt;
}

double expectedDistinctExperts(std::uint32_t num_experts, std::uint32_t top_k, double tokens) {
  if (num_experts == 0 || tokens <= 0.0) return 0.0;
  const double e = num_experts;
  const double miss = 1.0 - std::min(1.0, static_cast<double>(top_k) / e);
  return e * (1.0 - std::pow(miss, tokens));
}

std::uint32_t vllmCudaGraphMaxTokens(std::uint32_t max_num_seqs,
                                     std::uint32_t max_num_batched_tokens) {
  constexpr std::uint64_t kMaxCapture = 512;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(
      {2 * std::uint64_t{max_num_seqs}, kMaxCapture, max_num_batched_tokens}));
}

std::uint32_t cudaGraphPaddedTokens(std::uint32_t tokens, std::uint32_t max_capture) {
  if (tokens == 0 || tokens > max_capture) return tokens;
  std::uint32_t padded = 0;
  if (tokens <= 4) {
    padded = tokens <= 2 ? tokens : 4;
  } else if (tokens <= 256) {
    padded = (tokens + 7) / 8 * 8;
  } else {
    padded = (tokens + 15) / 16 * 16;
  }
  return padded <= max_capture ? padded : tokens;
}

RooflineBreakdown rooflinePass(const RooflineConfig& c, std::span<const PassSequence> seqs,
                               std::uint32_t cuda_graph_max_tokens) {
  RooflineBreakdown b;
  if (seqs.empty()) return b;
  const C& k = c.coefficients;
  const Shapes s = shapesOf(c);
  std::uint64_t scheduled = 0;
  for (const PassSequence& q : seqs) scheduled += q.new_tokens;
  // Token-parallel kernels run on the padded batch of the captured graph.
  const double tokens =
      scheduled > cuda_graph_max_tokens
          ? static_cast<double>(scheduled)
          : cudaGraphPaddedTokens(static_cast<std::uint32_t>(scheduled), cuda_graph_max_tokens);
  const double layers = c.model.num_layers;
  const double n_seq = static_cast<double>(seqs.size());
  b.overhead_ms = k.pass_overhead_ms + n_seq * k.sequence_overhead_us * 1e-3;
  b.gemm_ms = layers * denseLayerMs(s, k, tokens);
  b.attention_ms = layers * attentionLayerMs(s, k, seqs);
  b.moe_ms = layers * moeLayerMs(s, k, tokens);
  b.allreduce_ms = layers * allreduceLayerMs(c, k, tokens);
  b.expert_dispatch_ms = layers * expertDispatchLayerMs(c, s, k, tokens);
  b.lm_head_ms = linearMs(s, k, n_seq, s.h, s.vocab);
  b.total_ms = b.overhead_ms + b.gemm_ms + b.attention_ms + b.moe_ms + b.allreduce_ms +
               b.expert_dispatch_ms + b.lm_head_ms;
  return b;
}

double weightBytesPerGpu(const RooflineConfig& c) {
  const ModelArch& m = c.model;
  const double experts = static_cast<double>(m.num_experts) * m.num_layers *
                         (m.gated_mlp ? 3.0 : 2.0) * m.hidden_size * m.moe_intermediate_size;
  const double ep = c.expert_parallel_size > 1 ? c.expert_parallel_size : c.tensor_parallel_size;
  return ((modelParameters(m) - experts) / c.tensor_parallel_size + experts / ep) * m.weight_bytes;
}

Result<KvCapacity> rooflineKvCapacity(const RooflineConfig& c, std::uint32_t block_size,
                                      std::uint32_t max_num_batched_tokens,
                                      std::uint32_t max_num_seqs) {
  const Shapes s = shapesOf(c);
  KvCapacity kv;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  kv.memory_bytes = c.gpu.memory_gib * kGiB * c.gpu_memory_utilization;
  kv.weight_bytes = weightBytesPerGpu(c);
  // Profiling pass: the largest live activations of one layer (hidden states, QKV, MLP or
  // expert intermediates) for the token budget, then the sampler's peak over the logits of
  // every sampled sequence (kSamplerProfileBytesPerLogit).
  const double act = s.experts > 0 ? s.topk * s.moe_inter : s.inter;
  kv.activation_bytes =
      max_num_batched_tokens * kActBytes * (4.0 * s.h + 2.0 * (s.qd + 2.0 * s.kvd) + 3.0 * act) +
      static_cast<double>(max_num_seqs) * c.model.vocab_size * kSamplerProfileBytesPerLogit;
  kv.non_torch_bytes = c.non_torch_memory_gib * kGiB;
  kv.kv_bytes = kv.memory_bytes - kv.weight_bytes - kv.activation_bytes - kv.non_torch_bytes;
  const double per_block = static_cast<double>(block_size) * kvBytesPerToken(c.model) *
                           (s.kv_heads / c.model.num_kv_heads);
  if (!(kv.kv_bytes > per_block)) {
    return invalidArgument("roofline.gpu_memory_utilization: no memory left for the KV cache (" +
                           num(kv.memory_bytes / kGiB) + " GiB usable − " +
                           num(kv.weight_bytes / kGiB) + " GiB weights − " +
                           num(kv.activation_bytes / kGiB) + " GiB activations − " +
                           num(kv.non_torch_bytes / kGiB) + " GiB non-torch memory)");
  }
  kv.num_blocks = static_cast<std::uint64_t>(std::floor(kv.kv_bytes / per_block));
  return kv;
}

}  // namespace mocker::engine
