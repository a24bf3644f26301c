// The roofline timing model: every term pinned by a hand-computed case, the coefficient table,
// the KV capacity against vLLM's, and the scheduler wiring (mixed passes; other models untouched).
#include "engine/roofline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/engine.h"
#include "engine/gpu_spec.h"
#include "engine/model_arch.h"
#include "engine/timing_model.h"
#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::Harness;
using testing::range;

ModelArch llama8b() {
  return {.name = "meta-llama/Llama-3.1-8B",
          .num_layers = 32,
          .hidden_size = 4096,
          .num_heads = 32,
          .num_kv_heads = 8,
          .head_dim = 128,
          .intermediate_size = 14336,
          .vocab_size = 128256};
}

ModelArch qwen3_32b() {
  return {.name = "Qwen/Qwen3-32B",
          .num_layers = 64,
          .hidden_size = 5120,
          .num_heads = 64,
          .num_kv_heads = 8,
          .head_dim = 128,
          .intermediate_size = 25600,
          .vocab_size = 151936};
}

ModelArch qwen3_30b_a3b() {
  return {.name = "Qwen/Qwen3-30B-A3B-Instruct-2507",
          .num_layers = 48,
          .hidden_size = 2048,
          .num_heads = 32,
          .num_kv_heads = 4,
          .head_dim = 128,
          .intermediate_size = 6144,
          .vocab_size = 151936,
          .num_experts = 128,
          .experts_per_token = 8,
          .moe_intermediate_size = 768};
}

/// Every efficiency 1 and every overhead 0: the terms are the bare roofline.
RooflineCoefficients ideal() {
  RooflineCoefficients c;
  for (const RooflineCoefficientInfo& e : rooflineCoefficientTable()) {
    c.*e.member = e.name.ends_with("efficiency") || e.name.ends_with("factor") ? 1.0 : 0.0;
  }
  return c;
}

/// The built-in GPU with its measured memory and attention efficiency scales set to 1, so the
/// hand-computed cases below are the bare roofline (MemoryScalesDivideTheirBandwidthTerms pins
/// the scales).
RooflineConfig deployment(ModelArch model, std::string_view gpu, std::uint32_t tp = 1) {
  GpuSpec spec = *findGpu(gpu);
  spec.memory_efficiency_scale = 1.0;
  spec.attention_efficiency_scale = 1.0;
  return {
      .model = std::move(model), .gpu = spec, .tensor_parallel_size = tp, .coefficients = ideal()};
}

TEST(RooflineTest, DecodeOfOneTokenIsTheWeightReadTime) {
  // Llama-3.1-8B, RTX 4090 (165.2 TFLOP/s, 1008 GB/s), one decode with 1023 tokens of context.
  // Per layer every GEMM is memory bound: weights 2 B x (4096x6144 + 4096x4096 + 4096x28672 +
  // 14336x4096) = 436,207,616 B plus activations in and out (2 B x (10240 + 8192 + 32768 +
  // 18432) = 139,264 B) plus elementwise traffic 2 B x (4x4096 + 2x5120 + 3x14336) = 139,264 B:
  // 436,486,144 B / 1008e9 B/s = 0.433022 ms. Attention reads 1024 tokens x 2 x 1024 x 2 B
  // = 4 MiB plus q and out (16 KiB): 4,210,688 B / 1008e9 = 4.1773e-3 ms. LM head: 4096 x
  // 128256 x 2 B + 2 x (4096 + 128256) = 1,050,935,680 B / 1008e9 = 1.042595 ms.
  const RooflineConfig c = deployment(llama8b(), "RTX4090");
  const std::vector<PassSequence> seqs = {{.new_tokens = 1, .context = 1023}};
  const RooflineBreakdown b = rooflinePass(c, seqs);
  EXPECT_NEAR(b.gemm_ms, 32 * 0.43302196825, 1e-8);
  EXPECT_NEAR(b.attention_ms, 32 * 4.177269841e-3, 1e-9);
  EXPECT_NEAR(b.lm_head_ms, 1.04259707937, 1e-9);
  EXPECT_EQ(b.moe_ms, 0.0);
  EXPECT_EQ(b.allreduce_ms, 0.0);
  EXPECT_EQ(b.overhead_ms, 0.0);
  EXPECT_NEAR(b.total_ms, 15.0329726984, 1e-8);
}

TEST(RooflineTest, MemoryScalesDivideTheirBandwidthTerms) {
  // The RTX 4090 of the table: memory efficiency scale 1.13 (memory-bound dense GEMMs reach
  // 0.963 of its bandwidth in the kernel profiles), attention efficiency scale 1.27 (decode
  // attention 0.892). The one-token decode above is memory bound in every term, so its GEMMs,
  // elementwise kernels and LM head take 1 / 1.13 of the bare time and its attention 1 / 1.27.
  RooflineConfig c = deployment(llama8b(), "RTX4090");
  c.gpu = *findGpu("RTX4090");
  ASSERT_EQ(c.gpu.memory_efficiency_scale, 1.13);
  ASSERT_EQ(c.gpu.attention_efficiency_scale, 1.27);
  const std::vector<PassSequence> seqs = {{.new_tokens = 1, .context = 1023}};
  const RooflineBreakdown b = rooflinePass(c, seqs);
  EXPECT_NEAR(b.gemm_ms, 32 * 0.43302196825 / 1.13, 1e-8);
  EXPECT_NEAR(b.attention_ms, 32 * 4.177269841e-3 / 1.27, 1e-9);
  EXPECT_NEAR(b.lm_head_ms, 1.04259707937 / 1.13, 1e-9);
  // A compute-bound prefill is unchanged by either scale.
  const std::vector<PassSequence> prompt = {{.new_tokens = 2048, .context = 0}};
  RooflineConfig bare = deployment(llama8b(), "RTX4090");
  EXPECT_NEAR(rooflinePass(c, prompt).attention_ms, rooflinePass(bare, prompt).attention_ms, 1e-12);
  // GPUs without kernel profiles keep 1.
  EXPECT_EQ(findGpu("B200")->memory_efficiency_scale, 1.0);
  EXPECT_EQ(findGpu("L40S")->attention_efficiency_scale, 1.0);
}

TEST(RooflineTest, PrefillIsComputeBoundAndAttentionCausal) {
  // 2048 prompt tokens from scratch: every GEMM compute bound, 2 x 2048 x 218,103,808 weights
  // = 893.4 GFLOP per layer at the RTX 4090's 165.2e12 x its compute efficiency scale 1.3
  // = 4.159775 ms, plus elementwise 2048 x 139,264 B / 1008e9 = 0.28295 ms: 4.442724 ms.
  // Attention: 4 x 32 heads x 128 x 2048 x (0 + 2049/2) causal = 34.38 GFLOP / 165.2e12
  // = 0.208090 ms (32 heads x 32 query tiles = 1,024 blocks: 8 full waves of 128 SMs). One
  // sampled token: the LM head as for a decode.
  const RooflineConfig c = deployment(llama8b(), "RTX4090");
  ASSERT_EQ(c.gpu.compute_efficiency_scale, 1.3);
  const std::vector<PassSequence> seqs = {{.new_tokens = 2048, .context = 0}};
  const RooflineBreakdown b = rooflinePass(c, seqs);
  EXPECT_NEAR(b.gemm_ms / 32, 4.442723700188, 1e-9);
  EXPECT_NEAR(b.attention_ms / 32, 0.2080902880387, 1e-10);
  EXPECT_NEAR(b.total_ms, 149.868644702635, 1e-7);
}

TEST(RooflineTest, PromptAttentionPaysForItsLastPartialWave) {
  // A 100-token chunk after 4,000 tokens of context on the RTX 4090: 32 heads x ceil(100 / 64)
  // = 64 thread blocks on 128 SMs, one half-empty wave: the chunk's 4 x 32 x 128 x 100 x
  // (4000 + 101/2) = 6,636,339,200 FLOPs run at half the rate, 6.6363392e9 / (165.2e12 x 0.5)
  // = 0.0803431 ms (compute bound: the KV read is 18,432,000 B / 1008e9 = 0.0183 ms).
  RooflineConfig c = deployment(llama8b(), "RTX4090");
  const std::vector<PassSequence> chunk = {{.new_tokens = 100, .context = 4000}};
  EXPECT_NEAR(rooflinePass(c, chunk).attention_ms / 32, 0.08034308958838, 1e-11);
  // Two such chunks fill the wave: twice the FLOPs in the same time.
  const std::vector<PassSequence> two(2, {.new_tokens = 100, .context = 4000});
  EXPECT_NEAR(rooflinePass(c, two).attention_ms / 32, 0.08034308958838, 1e-11);
  // Decodes are not tiled (split-KV kernels fill the GPU), and an unknown SM count disables it.
  c.gpu.sm_count = 0;
  EXPECT_NEAR(rooflinePass(c, chunk).attention_ms / 32, 0.08034308958838 / 2, 1e-11);
}

TEST(RooflineTest, MixedPassCountsEveryTokenOnceAndEverySequencesAttention) {
  const RooflineConfig c = deployment(llama8b(), "RTX4090");
  const std::vector<PassSequence> prefill = {{.new_tokens = 500, .context = 0}};
  const std::vector<PassSequence> decodes(20, {.new_tokens = 1, .context = 700});
  std::vector<PassSequence> mixed = prefill;
  mixed.insert(mixed.end(), decodes.begin(), decodes.end());
  const RooflineBreakdown m = rooflinePass(c, mixed);
  const RooflineBreakdown p = rooflinePass(c, prefill);
  const RooflineBreakdown d = rooflinePass(c, decodes);
  // Attention is per sequence: additive, except that decodes beside a prompt chunk read K and V
  // once per query head (32), not per KV head (8): 701 x 2 x 4096 x 2 B + q and out 2 x 4096 x
  // 2 B = 11,501,568 B each instead of 701 x 2 x 1024 x 2 B + 16,384 B = 2,887,680 B.
  EXPECT_NEAR(d.attention_ms, 32 * 20 * 2887680.0 / 1008e9 * 1e3, 1e-9);
  EXPECT_NEAR(m.attention_ms, p.attention_ms + 32 * 20 * 11501568.0 / 1008e9 * 1e3, 1e-9);
  RooflineConfig fast = c;
  fast.coefficients.attention_mixed_decode_factor = 2.0;  // half of it from L2: 2x the rate
  EXPECT_NEAR(rooflinePass(fast, mixed).attention_ms,
              p.attention_ms + 32 * 20 * 11501568.0 / 1008e9 * 1e3 / 2, 1e-9);
  EXPECT_NEAR(rooflinePass(fast, decodes).attention_ms, d.attention_ms, 1e-12);
  // GEMMs read the weights once for the whole batch: the mixed pass costs less than the two
  // passes apart.
  EXPECT_LT(m.gemm_ms, p.gemm_ms + d.gemm_ms);
  EXPECT_GT(m.gemm_ms, p.gemm_ms);
}

TEST(RooflineTest, CudaGraphCaptureSizesAreVllmsDefaults) {
  // [1, 2, 4] + multiples of 8 below 256 + multiples of 16 from 256, up to the largest size.
  EXPECT_EQ(cudaGraphPaddedTokens(0, 512), 0u);
  EXPECT_EQ(cudaGraphPaddedTokens(1, 512), 1u);
  EXPECT_EQ(cudaGraphPaddedTokens(2, 512), 2u);
  EXPECT_EQ(cudaGraphPaddedTokens(3, 512), 4u);
  EXPECT_EQ(cudaGraphPaddedTokens(5, 512), 8u);
  EXPECT_EQ(cudaGraphPaddedTokens(27, 512), 32u);
  EXPECT_EQ(cudaGraphPaddedTokens(249, 512), 256u);
  EXPECT_EQ(cudaGraphPaddedTokens(257, 512), 272u);
  EXPECT_EQ(cudaGraphPaddedTokens(500, 512), 512u);
  EXPECT_EQ(cudaGraphPaddedTokens(513, 512), 513u);  // beyond the largest graph: eager
  EXPECT_EQ(cudaGraphPaddedTokens(90, 96), 96u);
  EXPECT_EQ(cudaGraphPaddedTokens(97, 100), 97u);  // 100 is no captured size: eager
  EXPECT_EQ(cudaGraphPaddedTokens(27, 0), 27u);    // no graphs
  // min(2 · max_num_seqs, 512, max_num_batched_tokens).
  EXPECT_EQ(vllmCudaGraphMaxTokens(128, 2048), 256u);
  EXPECT_EQ(vllmCudaGraphMaxTokens(256, 2048), 512u);
  EXPECT_EQ(vllmCudaGraphMaxTokens(256, 200), 200u);
  EngineConfig e{.max_num_seqs = 128, .max_num_batched_tokens = 2048};
  EXPECT_EQ(engineCudaGraphMaxTokens(e), 256u);
  e.spec_num_draft_tokens = 3;  // decode query length 4
  EXPECT_EQ(engineCudaGraphMaxTokens(e), 512u);
  e.max_num_seqs.reset();  // unbounded: vLLM's default 256
  e.spec_num_draft_tokens.reset();
  EXPECT_EQ(engineCudaGraphMaxTokens(e), 512u);
  e.enforce_eager = true;  // vLLM's --enforce-eager: no graphs, no padding
  EXPECT_EQ(engineCudaGraphMaxTokens(e), 0u);
  e.enforce_eager = false;
  e.engine_type = EngineType::Sglang;
  EXPECT_EQ(engineCudaGraphMaxTokens(e), 0u);
}

TEST(RooflineTest, CudaGraphPaddingChargesThePaddedBatchToTheGemms) {
  // 27 decodes (context 1023) on Llama-3.1-8B / RTX 4090 run the 32-token graph. Per layer the
  // memory-bound GEMMs read 436,207,616 B of weights plus 2 B x 69,632 activations in and out
  // and 2 B x 69,632 of elementwise traffic per token = 278,528 B per token: 32 layers x
  // (436,207,616 + 32 x 278,528) / 1008e9 = 14.1308099 ms instead of 14.0865991 ms at 27.
  const RooflineConfig c = deployment(llama8b(), "RTX4090");
  const std::vector<PassSequence> decodes(27, {.new_tokens = 1, .context = 1023});
  const RooflineBreakdown eager = rooflinePass(c, decodes);
  const RooflineBreakdown graph = rooflinePass(c, decodes, 512);
  EXPECT_NEAR(eager.gemm_ms, 14.0865991111, 1e-9);
  EXPECT_NEAR(graph.gemm_ms, 14.1308099048, 1e-9);
  // Attention and the LM head see the 27 real sequences.
  EXPECT_EQ(graph.attention_ms, eager.attention_ms);
  EXPECT_EQ(graph.lm_head_ms, eager.lm_head_ms);
  // A compute-bound 300-token chunk runs the 304-token graph: its GEMMs cost those of 304
  // tokens, its attention that of 300.
  const std::vector<PassSequence> chunk = {{.new_tokens = 300, .context = 0}};
  const std::vector<PassSequence> chunk304 = {{.new_tokens = 304, .context = 0}};
  EXPECT_EQ(rooflinePass(c, chunk, 512).gemm_ms, rooflinePass(c, chunk304).gemm_ms);
  EXPECT_EQ(rooflinePass(c, chunk, 512).attention_ms, rooflinePass(c, chunk).attention_ms);
  // Beyond the largest graph the pass runs eager, unpadded.
  const std::vector<PassSequence> big = {{.new_tokens = 600, .context = 0}};
  EXPECT_EQ(rooflinePass(c, big, 512).total_ms, rooflinePass(c, big).total_ms);
}

TEST(RooflineTest, DecodeCostPerTokenFallsSteeplyWithBatchSize) {
  RooflineConfig c = deployment(llama8b(), "RTX4090");
  c.coefficients = RooflineCoefficients{};
  const auto per_token = [&](std::size_t batch) {
    const std::vector<PassSequence> seqs(batch, {.new_tokens = 1, .context = 1000});
    return rooflinePass(c, seqs).total_ms / static_cast<double>(batch);
  };
  EXPECT_LT(per_token(64), per_token(1) / 20);
}

TEST(RooflineTest, MoeReadsOnlyTheExpertsItsTokensTouch) {
  EXPECT_DOUBLE_EQ(expectedDistinctExperts(128, 8, 1), 8.0);
  EXPECT_NEAR(expectedDistinctExperts(128, 8, 2), 128 * (1 - (120.0 / 128) * (120.0 / 128)), 1e-12);
  EXPECT_NEAR(expectedDistinctExperts(128, 8, 1000), 128.0, 1e-9);
  EXPECT_EQ(expectedDistinctExperts(0, 0, 10), 0.0);
  // Qwen3-30B-A3B on an RTX PRO 6000 (503.8 TFLOP/s, 1792 GB/s), one decode token: the router
  // GEMM (2048 x 128 x 2 B + 2 x (2048 + 128) B = 528,640 B) and 8 experts x 3 x 2048 x 768 x 2
  // B = 75,497,472 B plus 8 x (2 x 2048 + 3 x 768) x 2 B = 102,400 B, all memory bound:
  // (528,640 + 75,599,872) / 1792e9 = 0.0424824 ms per layer, 48 layers.
  const RooflineConfig c = deployment(qwen3_30b_a3b(), "RTXPRO6000");
  const std::vector<PassSequence> one = {{.new_tokens = 1, .context = 0}};
  EXPECT_NEAR(rooflinePass(c, one).moe_ms, 48 * (528640.0 + 75599872.0) / 1792e9 * 1e3, 1e-9);
  // No dense MLP in an all-MoE model: the dense GEMMs are QKV and O only.
  const std::vector<PassSequence> many(512, {.new_tokens = 1, .context = 0});
  const double touched = expectedDistinctExperts(128, 8, 512);
  EXPECT_GT(touched, 127.0);
  EXPECT_GT(rooflinePass(c, many).moe_ms, 10 * rooflinePass(c, one).moe_ms);
}

TEST(RooflineTest, ExpertParallelHoldsPartOfTheExpertsAndAddsDispatchAndCombine) {
  // Qwen3-30B-A3B, DP 2 x EP 2 on RTX PRO 6000s (TP 1): each GPU holds 64 of the 128 experts
  // and serves the tokens of both ranks. One decode token per rank: 2 tokens route to 64 x (1 -
  // (120/128)^2) = 7.75 distinct local experts on average, read at 3 x 2048 x 768 x 2 B =
  // 9,437,184 B each = 73,138,176 B, plus 2 x 8 / 2 = 8 assignments' activations 8 x (2 x 2048
  // + 3 x 768) x 2 B = 102,400 B and the router GEMM 528,640 B: 73,769,216 B / 1792e9 per layer.
  RooflineConfig c = deployment(qwen3_30b_a3b(), "RTXPRO6000");
  c.expert_parallel_size = 2;
  ASSERT_EQ(checkRooflineConfig(c), std::nullopt);
  const std::vector<PassSequence> one = {{.new_tokens = 1, .context = 0}};
  const RooflineBreakdown b = rooflinePass(c, one);
  EXPECT_NEAR(b.moe_ms, 48 * 73769216.0 / 1792e9 * 1e3, 1e-9);
  // Dispatch and combine: each moves (2 - 1) / 2 x 2 tokens x 2048 x 2 B = 4,096 B over PCIe
  // Gen5 (64 GB/s at the RTX PRO 6000's interconnect efficiency scale 0.5: 32e9 B/s), 2 per
  // layer; with the 36 us latency of a collective on top.
  EXPECT_NEAR(b.expert_dispatch_ms, 48 * 2 * 4096.0 / 32e9 * 1e3, 1e-12);
  EXPECT_EQ(b.allreduce_ms, 0.0);
  c.coefficients.allreduce_latency_us = 36.0;
  EXPECT_NEAR(rooflinePass(c, one).expert_dispatch_ms, 48 * 2 * (4096.0 / 32e9 * 1e3 + 0.036),
              1e-12);
  // Weights per GPU: 1,541,081,088 non-expert parameters + 28,991,029,248 / 2 expert ones.
  EXPECT_NEAR(weightBytesPerGpu(c), (1541081088.0 + 28991029248.0 / 2) * 2, 1.0);
  c.expert_parallel_size = 1;
  EXPECT_NEAR(weightBytesPerGpu(c), (1541081088.0 + 28991029248.0) * 2, 1.0);
  EXPECT_EQ(rooflinePass(c, one).expert_dispatch_ms, 0.0);
  // More KV room with half the experts.
  c.coefficients = RooflineCoefficients{};
  const auto without = rooflineKvCapacity(c, 16, 2048, 128);
  c.expert_parallel_size = 2;
  const auto with = rooflineKvCapacity(c, 16, 2048, 128);
  ASSERT_TRUE(without.has_value() && with.has_value());
  EXPECT_NEAR(with->kv_bytes - without->kv_bytes, 28991029248.0, 1.0);
  // EP must divide the experts and be a multiple of TP.
  c.expert_parallel_size = 3;
  EXPECT_NE(checkRooflineConfig(c).value_or("").find("roofline.expert_parallel_size"),
            std::string::npos);
}

TEST(RooflineTest, TensorParallelSplitsWeightsAndAddsTwoAllReducesPerLayer) {
  // Qwen3-32B over 2 RTX PRO 6000 (PCIe Gen5, 64 GB/s per direction, interconnect efficiency
  // scale 0.5 — NCCL's measured bus bandwidth on PCIe is half NVLink's share of its link), 100
  // tokens: each all-reduce moves 2 (p-1)/p x 100 x 5120 x 2 B = 1,024,000 B / (64e9 x 0.5) =
  // 0.032 ms; 2 per layer, 64 layers = 4.096 ms.
  const RooflineConfig tp2 = deployment(qwen3_32b(), "RTXPRO6000", 2);
  const std::vector<PassSequence> seqs = {{.new_tokens = 100, .context = 0}};
  EXPECT_NEAR(rooflinePass(tp2, seqs).allreduce_ms, 4.096, 1e-12);
  RooflineConfig latency = tp2;
  latency.coefficients.allreduce_latency_us = 10.0;
  EXPECT_NEAR(rooflinePass(latency, seqs).allreduce_ms, 4.096 + 64 * 2 * 0.010, 1e-12);
  // With allreduce_efficiency 0.7 (the default) the bandwidth is 64e9 x 0.5 x 0.7 = 22.4e9 B/s,
  // the NCCL bus bandwidth measured on such servers (22.2 GB/s).
  RooflineConfig nvlink_share = tp2;
  nvlink_share.coefficients.allreduce_efficiency = 0.7;
  EXPECT_NEAR(rooflinePass(nvlink_share, seqs).allreduce_ms, 64 * 2 * 1024000.0 / 22.4e9 * 1e3,
              1e-12);
  // A GPU without the scale (1, NVLink-like) moves it at the link's full rate.
  RooflineConfig unscaled = tp2;
  unscaled.gpu.interconnect_efficiency_scale = 1.0;
  EXPECT_NEAR(rooflinePass(unscaled, seqs).allreduce_ms, 2.048, 1e-12);
  // A decode reads half the weights per GPU: memory-bound GEMM time about halves.
  const RooflineConfig tp1 = deployment(qwen3_32b(), "RTXPRO6000", 1);
  const std::vector<PassSequence> decode = {{.new_tokens = 1, .context = 0}};
  EXPECT_NEAR(rooflinePass(tp2, decode).gemm_ms / rooflinePass(tp1, decode).gemm_ms, 0.5, 0.01);
  EXPECT_EQ(rooflinePass(tp1, seqs).allreduce_ms, 0.0);
}

TEST(RooflineTest, OverheadsAndEfficienciesScaleTheirTerms) {
  RooflineConfig c = deployment(llama8b(), "RTX4090");
  const std::vector<PassSequence> seqs(4, {.new_tokens = 1, .context = 100});
  const RooflineBreakdown base = rooflinePass(c, seqs);
  c.coefficients.pass_overhead_ms = 3.0;
  c.coefficients.sequence_overhead_us = 50.0;
  EXPECT_NEAR(rooflinePass(c, seqs).overhead_ms, 3.0 + 4 * 0.05, 1e-12);
  c.coefficients.gemm_memory_efficiency = 0.5;  // memory-bound decode GEMMs take twice as long
  EXPECT_NEAR(rooflinePass(c, seqs).gemm_ms, 2 * base.gemm_ms, 1e-9);
  c.coefficients.kernel_overhead_us = 5.0;  // 4 GEMMs + 4 elementwise kernels per layer
  EXPECT_NEAR(rooflinePass(c, seqs).gemm_ms, 2 * base.gemm_ms + 32 * 8 * 0.005, 1e-9);
  EXPECT_EQ(rooflinePass(c, {}).total_ms, 0.0);
}

TEST(RooflineTest, CoefficientTableCoversEveryMemberWithSaneBounds) {
  const auto table = rooflineCoefficientTable();
  ASSERT_EQ(table.size(), kNumRooflineCoefficients);
  const RooflineCoefficients defaults;
  std::set<std::string_view> names;
  std::vector<double RooflineCoefficients::*> members;
  for (const RooflineCoefficientInfo& e : table) {
    EXPECT_TRUE(names.insert(e.name).second) << e.name;
    EXPECT_EQ(std::count(members.begin(), members.end(), e.member), 0) << e.name;
    members.push_back(e.member);
    EXPECT_EQ(defaults.*e.member, e.default_value) << e.name;
    EXPECT_LE(e.lower, e.default_value) << e.name;
    EXPECT_GE(e.upper, e.default_value) << e.name;
    EXPECT_LT(e.lower, e.upper) << e.name;
    EXPECT_FALSE(e.doc.empty()) << e.name;
    EXPECT_EQ(findRooflineCoefficient(e.name), &e);
  }
  // Every double member of the struct is in the table.
  EXPECT_EQ(sizeof(RooflineCoefficients), table.size() * sizeof(double));
  EXPECT_EQ(findRooflineCoefficient("nope"), nullptr);
}

TEST(RooflineTest, KvCapacityFollowsVllmsMemoryProfile) {
  // The recorded rtx4090 run: Llama-3.1-8B, RTX 4090 (25,250,627,584 B), gpu_memory_utilization
  // 0.9, max_num_batched_tokens 2048, max_num_seqs 256, block 16: vLLM reported 2,588 blocks.
  RooflineConfig c = deployment(llama8b(), "RTX4090");
  c.coefficients = RooflineCoefficients{};
  const auto kv = rooflineKvCapacity(c, 16, 2048, 256);
  ASSERT_TRUE(kv.has_value()) << kv.error().message;
  // Weights: 8,030,261,248 parameters x 2 B = 14.96 GiB ("Model loading took 14.99 GiB").
  EXPECT_NEAR(modelParameters(c.model), 8030261248.0, 1.0);
  // The non-torch default is set to reproduce this run: within a block or two.
  EXPECT_NEAR(static_cast<double>(kv->num_blocks), 2588.0, 2.0);
  EXPECT_EQ(kvBytesPerToken(c.model), 131072.0);
  // max_num_seqs enters through the start-up sampler run: 24 B per logit (vocabulary 128,256),
  // so 128 sequences instead of 256 free 128 x 128,256 x 24 B = 394,002,432 B, 187.9 blocks of
  // 2 MiB (16 tokens x 128 KiB).
  const auto kv128 = rooflineKvCapacity(c, 16, 2048, 128);
  ASSERT_TRUE(kv128.has_value());
  EXPECT_DOUBLE_EQ(kv->activation_bytes - kv128->activation_bytes, 394002432.0);
  EXPECT_GE(kv128->num_blocks - kv->num_blocks, 187u);
  EXPECT_LE(kv128->num_blocks - kv->num_blocks, 188u);
  // No room: a clear error naming the field.
  c.gpu_memory_utilization = 0.5;
  const auto none = rooflineKvCapacity(c, 16, 2048, 256);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("roofline.gpu_memory_utilization"), std::string::npos);
}

TEST(RooflineTest, EngineConfigRequiresAndValidatesTheDeployment) {
  EngineConfig c{.timing_model = TimingModelKind::Roofline};
  auto e = checkEngineConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->fields.front(), "roofline");
  c.roofline = deployment(llama8b(), "RTX4090");
  c.roofline->coefficients = RooflineCoefficients{};
  EXPECT_FALSE(checkEngineConfig(c).has_value());
  c.roofline->tensor_parallel_size = 3;
  e = checkEngineConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->error.message.find("roofline.tensor_parallel_size must divide"), std::string::npos);
  c.roofline->tensor_parallel_size = 1;
  c.roofline->coefficients.gemm_compute_efficiency = 2.0;
  e = checkEngineConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->error.message.find("roofline.gemm_compute_efficiency must be in"),
            std::string::npos);
  // The deployment without timing_model = roofline is refused, not ignored.
  EngineConfig stray;
  stray.roofline = deployment(llama8b(), "RTX4090");
  ASSERT_TRUE(checkEngineConfig(stray).has_value());
}

TEST(RooflineTest, KvCapacitySizesTheEngineWhenNumGpuBlocksIsUnset) {
  EngineConfig c{.block_size = 16,
                 .max_num_seqs = 256,
                 .max_num_batched_tokens = 2048,
                 .timing_model = TimingModelKind::Roofline};
  c.roofline = deployment(llama8b(), "RTX4090");
  c.roofline->coefficients = RooflineCoefficients{};
  const auto kv = engineKvCapacity(c);
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(effectiveNumGpuBlocks(c), kv->num_blocks);
  // The start-up line and the reports' identity: blocks x block size, as vLLM logs it.
  EXPECT_EQ(deploymentKvCacheTokens(c), kv->num_blocks * 16);
  EXPECT_EQ(gpuKvCacheSizeText(617440), "GPU KV cache size: 617,440 tokens");
  EXPECT_EQ(gpuKvCacheSizeText(999), "GPU KV cache size: 999 tokens");
  EXPECT_EQ(gpuKvCacheSizeText(1000), "GPU KV cache size: 1,000 tokens");
  EXPECT_EQ(gpuKvCacheSizeText(1234567890), "GPU KV cache size: 1,234,567,890 tokens");
  c.num_gpu_blocks = 100;
  EXPECT_EQ(effectiveNumGpuBlocks(c), 100u);
  EXPECT_EQ(deploymentKvCacheTokens(c), std::nullopt);  // given, not computed
  c.num_gpu_blocks.reset();
  c.timing_model = TimingModelKind::Polynomial;
  EXPECT_EQ(deploymentKvCacheTokens(c), std::nullopt);
}

EngineConfig rooflineEngine(EngineType type) {
  EngineConfig c{.engine_type = type,
                 .num_gpu_blocks = 1000,
                 .block_size = 16,
                 .max_num_batched_tokens = 256,
                 .timing_model = TimingModelKind::Roofline};
  if (type == EngineType::Sglang) c.sglang.chunked_prefill_size = 256;
  c.roofline = deployment(llama8b(), "RTX4090");
  c.roofline->coefficients = RooflineCoefficients{};
  return c;
}

double totalMs(const EngineConfig& c, const std::vector<PassSequence>& seqs) {
  return rooflinePass(*c.roofline, seqs, engineCudaGraphMaxTokens(c)).total_ms;
}

TEST(RooflineTest, VllmTimesTheMixedPassFromItsSequences) {
  const EngineConfig c = rooflineEngine(EngineType::Vllm);
  Harness h(c);
  const RequestId a = h.submit(range(1, 100), 3);
  // Pass 1: a's 100-token prompt; the pass is all prefill.
  const PassResult& p1 = h.step();
  EXPECT_DOUBLE_EQ(p1.prefill_ms + p1.decode_ms, totalMs(c, {{100, 0}}));
  EXPECT_EQ(p1.decode_ms, 0.0);
  // Pass 2: b's first 255-token chunk (budget 256 minus a's decode) with a's decode.
  h.submit(range(1000, 1400), 2);
  const PassResult& p2 = h.step();
  const double decode = totalMs(c, {{1, 100}});
  EXPECT_DOUBLE_EQ(p2.decode_ms, decode);
  EXPECT_NEAR(p2.prefill_ms + p2.decode_ms, totalMs(c, {{255, 0}, {1, 100}}), 1e-9);
  EXPECT_LT(p2.prefill_ms, totalMs(c, {{255, 0}}));  // the weights are read once
  h.runUntilIdle();
  EXPECT_EQ(h.signalsOf(a).size(), 3u);
}

TEST(RooflineTest, SglangTimesExtendAndDecodePasses) {
  const EngineConfig c = rooflineEngine(EngineType::Sglang);
  Harness h(c);
  h.submit(range(1, 100), 3);
  const PassResult& p1 = h.step();  // extend: the prompt, its first token included
  EXPECT_DOUBLE_EQ(p1.prefill_ms, totalMs(c, {{100, 0}}));
  EXPECT_EQ(p1.decode_ms, 0.0);
  const PassResult& p2 = h.step();  // decode: the first token over the 100 of the prompt
  EXPECT_EQ(p2.prefill_ms, 0.0);
  EXPECT_DOUBLE_EQ(p2.decode_ms, totalMs(c, {{1, 100}}));
}

TEST(RooflineTest, SpeedupRatiosScaleRooflineTimes) {
  EngineConfig c = rooflineEngine(EngineType::Vllm);
  c.speedup_ratio = 2.0;
  Harness h(c);
  h.submit(range(1, 100), 2);
  EXPECT_DOUBLE_EQ(h.step().prefill_ms, totalMs(c, {{100, 0}}) / 2);
  EXPECT_DOUBLE_EQ(h.step().decode_ms, totalMs(c, {{1, 100}}) / 2);
}

}  // namespace
}  // namespace mocker::engine
