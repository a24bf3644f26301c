// ModelArch's config.json parser and the GPU table.
#include "engine/model_arch.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/gpu_spec.h"

namespace mocker::engine {
namespace {

// The fields of the Hugging Face config.json files (abridged to what mocker reads plus a few
// it ignores).
constexpr std::string_view kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "vocab_size": 128256})";

constexpr std::string_view kQwen3Dense = R"({
  "architectures": ["Qwen3ForCausalLM"], "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 5120, "intermediate_size": 25600, "model_type": "qwen3",
  "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 151936})";

constexpr std::string_view kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "mlp_only_layers": [],
  "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
  "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 151936})";

TEST(ModelArchTest, ParsesLlamaWithDerivedHeadDim) {
  const auto m = parseHfModelConfig(kLlama);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->num_layers, 32u);
  EXPECT_EQ(m->hidden_size, 4096u);
  EXPECT_EQ(m->num_heads, 32u);
  EXPECT_EQ(m->num_kv_heads, 8u);
  EXPECT_EQ(m->head_dim, 128u);  // hidden / heads
  EXPECT_EQ(m->intermediate_size, 14336u);
  EXPECT_EQ(m->vocab_size, 128256u);
  EXPECT_EQ(m->num_experts, 0u);
  EXPECT_TRUE(m->gated_mlp);
  EXPECT_EQ(m->weight_bytes, 2.0);
  // 8.03 B parameters, 128 KiB of KV per token.
  EXPECT_NEAR(modelParameters(*m), 8.030e9, 0.001e9);
  EXPECT_EQ(kvBytesPerToken(*m), 131072.0);
}

TEST(ModelArchTest, ParsesQwen3DenseAndMoe) {
  const auto dense = parseHfModelConfig(kQwen3Dense);
  ASSERT_TRUE(dense.has_value()) << dense.error().message;
  EXPECT_EQ(dense->head_dim, 128u);  // explicit (hidden / heads would be 80)
  EXPECT_NEAR(modelParameters(*dense), 32.76e9, 0.1e9);
  const auto moe = parseHfModelConfig(kQwen3Moe);
  ASSERT_TRUE(moe.has_value()) << moe.error().message;
  EXPECT_EQ(moe->num_experts, 128u);
  EXPECT_EQ(moe->experts_per_token, 8u);
  EXPECT_EQ(moe->moe_intermediate_size, 768u);
  EXPECT_NEAR(modelParameters(*moe), 30.5e9, 0.2e9);  // "30B-A3B"
}

TEST(ModelArchTest, ErrorsNameTheField) {
  const auto check = [](std::string_view text, std::string_view want) {
    const auto m = parseHfModelConfig(text);
    ASSERT_FALSE(m.has_value()) << text;
    EXPECT_NE(m.error().message.find(want), std::string::npos) << m.error().message;
  };
  check("{", "not valid JSON");
  check("[1]", "JSON object");
  check(R"({"hidden_size": 8, "num_attention_heads": 2, "vocab_size": 10,
            "intermediate_size": 16})",
        "missing field 'num_hidden_layers'");
  check(R"({"num_hidden_layers": 2, "hidden_size": "8", "num_attention_heads": 2,
            "vocab_size": 10, "intermediate_size": 16})",
        "field 'hidden_size' must be an integer");
  check(R"({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
            "vocab_size": 10})",
        "missing field 'intermediate_size'");
  check(R"({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
            "vocab_size": 10, "num_experts": 4, "moe_intermediate_size": 4})",
        "missing field 'num_experts_per_tok'");
  check(R"({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
            "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 16})",
        "num_heads must be a multiple of num_kv_heads");
  check(R"({"num_hidden_layers": -2, "hidden_size": 8, "num_attention_heads": 2,
            "vocab_size": 10, "intermediate_size": 16})",
        "field 'num_hidden_layers' is out of range");
  check(R"({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 0,
            "vocab_size": 10, "intermediate_size": 16})",
        "num_attention_heads' must be >= 1");
  check(R"({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
            "vocab_size": 10, "intermediate_size": 16, "torch_dtype": "int3"})",
        "unknown dtype 'int3'");
}

TEST(ModelArchTest, MultimodalConfigUsesItsTextConfig) {
  const std::string wrapped =
      R"({"architectures": ["X"], "text_config": )" + std::string(kLlama) + "}";
  const auto m = parseHfModelConfig(wrapped);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->num_layers, 32u);
}

TEST(ModelArchTest, DtypeNames) {
  EXPECT_EQ(*parseDtypeBytes("x", "BFloat16"), 2.0);
  EXPECT_EQ(*parseDtypeBytes("x", "float32"), 2.0);  // served in 16 bits (vLLM dtype auto)
  EXPECT_EQ(*parseDtypeBytes("x", "fp8_e4m3"), 1.0);
  EXPECT_FALSE(parseDtypeBytes("x", "int4").has_value());
}

TEST(GpuSpecTest, TableHasTheDocumentedGpusAndAliases) {
  for (std::string_view name :
       {"H100-SXM", "H200", "A100-40GB", "A100-80GB", "L40S", "RTX4090", "RTXPRO6000", "B200"}) {
    const auto g = findGpu(name);
    ASSERT_TRUE(g.has_value()) << name;
    EXPECT_FALSE(checkGpuSpec(*g, "").has_value()) << name;
  }
  EXPECT_EQ(findGpu("h100 sxm")->name, "H100-SXM");
  EXPECT_EQ(findGpu("rtx_4090")->bf16_tflops, 165.2);
  EXPECT_EQ(findGpu("RTX PRO 6000 Blackwell")->memory_bandwidth_gbps, 1792.0);
  EXPECT_FALSE(findGpu("tpu").has_value());
  for (const GpuTableEntry& e : gpuTable()) EXPECT_FALSE(e.source.empty()) << e.spec.name;
  EXPECT_NE(gpuNameList(", ").find("RTX4090"), std::string::npos);
  GpuSpec bad = *findGpu("L40S");
  bad.memory_bandwidth_gbps = 0;
  EXPECT_NE(checkGpuSpec(bad, "gpu.")->find("gpu.memory_bandwidth_gbps"), std::string::npos);
}

}  // namespace
}  // namespace mocker::engine
