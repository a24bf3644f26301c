// The roofline deployment keys: buildRooflineConfig, the TOML/CLI surface and its errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <tuple>

#include "engine/roofline.h"
#include "service/config.h"

namespace mocker::service {
namespace {

const std::string kModels = std::string(MOCKER_SOURCE_DIR_FOR_TEST) + "/data/calibration/models/";

TEST(RooflineSettingsTest, ConfigJsonPlusOverridesPlusGpu) {
  RooflineSettings s;
  s.model_config_path = "x.json";
  s.num_layers = 2;  // overrides the file
  s.gpu = "rtx 4090";
  s.gpu_memory_bandwidth_gbps = 900.0;  // overrides the table
  s.kv_dtype = "fp8";
  const auto c = buildRooflineConfig(s, R"({"num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
      "vocab_size": 128256})");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->model.num_layers, 2u);
  EXPECT_EQ(c->model.head_dim, 128u);
  EXPECT_EQ(c->model.kv_bytes, 1.0);
  EXPECT_EQ(c->gpu.name, "RTX4090");
  EXPECT_EQ(c->gpu.bf16_tflops, 165.2);
  EXPECT_EQ(c->gpu.memory_bandwidth_gbps, 900.0);
  // The table's SM count and compute efficiency scale, unless overridden.
  EXPECT_EQ(c->gpu.sm_count, 128u);
  EXPECT_EQ(c->gpu.compute_efficiency_scale, 1.3);
  EXPECT_EQ(c->gpu.interconnect_efficiency_scale, 1.0);
  EXPECT_EQ(c->gpu.memory_efficiency_scale, 1.13);
  EXPECT_EQ(c->gpu.attention_efficiency_scale, 1.27);
  const std::string_view mha = R"({"num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256})";
  // Overrides of the named GPU; a custom GPU: SM count unknown (no wave quantisation), scale 1.
  RooflineSettings over = s;
  over.gpu_sm_count = 100;
  over.gpu_compute_efficiency_scale = 1.0;
  over.gpu_interconnect_efficiency_scale = 0.25;
  over.gpu_memory_efficiency_scale = 1.5;
  over.gpu_attention_efficiency_scale = 0.5;
  RooflineSettings custom = s;
  custom.gpu.clear();
  custom.gpu_tflops = 100.0;
  custom.gpu_memory_gib = 40.0;
  custom.gpu_interconnect_gbps = 32.0;
  const std::tuple<const RooflineSettings*, std::uint32_t, double, double, double, double> cases[] =
      {{&over, 100u, 1.0, 0.25, 1.5, 0.5}, {&custom, 0u, 1.0, 1.0, 1.0, 1.0}};
  for (const auto& [settings, sms, scale, link_scale, memory_scale, attention_scale] : cases) {
    const auto built = buildRooflineConfig(*settings, mha);
    ASSERT_TRUE(built.has_value()) << built.error().message;
    EXPECT_EQ(built->gpu.sm_count, sms);
    EXPECT_EQ(built->gpu.compute_efficiency_scale, scale);
    EXPECT_EQ(built->gpu.interconnect_efficiency_scale, link_scale);
    EXPECT_EQ(built->gpu.memory_efficiency_scale, memory_scale);
    EXPECT_EQ(built->gpu.attention_efficiency_scale, attention_scale);
  }
  // A bad scale is named.
  custom.gpu_compute_efficiency_scale = 9.0;
  const auto bad = buildRooflineConfig(custom, mha);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("engine.gpu_spec.compute_efficiency_scale must be in (0, 4]"),
            std::string::npos)
      << bad.error().message;
  custom.gpu_compute_efficiency_scale = 1.0;
  custom.gpu_interconnect_efficiency_scale = 0.0;
  const auto bad_link = buildRooflineConfig(custom, mha);
  ASSERT_FALSE(bad_link.has_value());
  EXPECT_NE(bad_link.error().message.find(
                "engine.gpu_spec.interconnect_efficiency_scale must be in (0, 4]"),
            std::string::npos)
      << bad_link.error().message;
  custom.gpu_interconnect_efficiency_scale = 1.0;
  custom.gpu_attention_efficiency_scale = -1.0;
  const auto bad_attention = buildRooflineConfig(custom, mha);
  ASSERT_FALSE(bad_attention.has_value());
  EXPECT_NE(bad_attention.error().message.find(
                "engine.gpu_spec.attention_efficiency_scale must be in (0, 4]"),
            std::string::npos)
      << bad_attention.error().message;
}

TEST(RooflineSettingsTest, ErrorsNameTheKey) {
  const auto error = [](const RooflineSettings& s, std::string_view text = "") {
    const auto c = buildRooflineConfig(s, text);
    return c ? std::string() : c.error().message;
  };
  RooflineSettings s;
  s.gpu = "H100";
  EXPECT_NE(error(s).find("engine.model.num_layers is required"), std::string::npos);
  s.num_layers = 2;
  s.hidden_size = 64;
  s.num_heads = 4;
  s.vocab_size = 100;
  EXPECT_NE(error(s).find("engine.model.intermediate_size must be >= 1"), std::string::npos);
  s.intermediate_size = 128;
  EXPECT_EQ(error(s), "");
  s.gpu = "TPU";
  EXPECT_NE(error(s).find("engine.gpu: unknown GPU 'TPU' (known: H100-SXM"), std::string::npos);
  s.gpu = "";
  EXPECT_NE(error(s).find("engine.gpu_spec.tflops is required"), std::string::npos);
  s.gpu_tflops = 100;
  s.gpu_memory_bandwidth_gbps = 1000;
  s.gpu_memory_gib = 10;
  s.gpu_interconnect_gbps = -1;
  EXPECT_NE(error(s).find("engine.gpu_spec.interconnect_gbps must be finite and > 0"),
            std::string::npos);
  s.gpu_interconnect_gbps = 10;
  EXPECT_EQ(error(s), "");
  s.weight_dtype = "int2";
  EXPECT_NE(error(s).find("engine.model.weight_dtype: unknown dtype 'int2'"), std::string::npos);
  s.weight_dtype = "";
  s.model_config_path = "m.json";
  EXPECT_NE(error(s, "{").find("engine.model_config_path (m.json): config.json: not valid JSON"),
            std::string::npos);
}

TEST(RooflineSettingsTest, TomlProfileAppliesCoefficientsAndSizesTheKvCache) {
  std::string toml = "[engine]\ntiming_model = \"roofline\"\ngpu = \"RTX4090\"\n";
  toml += "model_config_path = \"";
  toml += kModels;
  toml += "Llama-3.1-8B.json\"\nblock_size = 16\nmax_num_batched_tokens = 2048\n";
  toml += "[engine.roofline]\npass_overhead_ms = 3.5\nattention_mixed_decode_factor = 0.25\n";
  const auto c = parseServiceConfig(toml, "p.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  ASSERT_TRUE(c->engine.roofline.has_value());
  EXPECT_EQ(c->engine.roofline->coefficients.pass_overhead_ms, 3.5);
  EXPECT_EQ(c->engine.roofline->coefficients.attention_mixed_decode_factor, 0.25);
  EXPECT_EQ(c->engine.roofline->model.num_layers, 32u);
  EXPECT_EQ(c->engine.kv_bytes_per_token, 131072u);  // from the architecture
  const std::uint32_t blocks = engine::effectiveNumGpuBlocks(c->engine);
  EXPECT_GT(blocks, 2400u);
  EXPECT_LT(blocks, 2800u);
  // Every coefficient is a key of [engine.roofline], and the dump loads back.
  const std::string dump = dumpServiceConfig(*c);
  for (const engine::RooflineCoefficientInfo& e : engine::rooflineCoefficientTable()) {
    std::string line = "\n";
    line += e.name;
    line += " = ";
    EXPECT_NE(dump.find(line), std::string::npos) << e.name;
  }
  const auto again = parseServiceConfig(dump, "dump.toml");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_TRUE(*again == *c);
}

TEST(RooflineSettingsTest, ExpertParallelSpansEveryRanksGpus) {
  // vLLM's --enable-expert-parallel with DP 2 and TP 1: the experts spread over 2 GPUs.
  std::string toml = "[engine]\ntiming_model = \"roofline\"\ngpu = \"RTXPRO6000\"\n";
  toml += "model_config_path = \"";
  toml += kModels;
  toml += "Qwen3-30B-A3B-Instruct-2507.json\"\ndp_size = 2\nenable_expert_parallel = true\n";
  const auto c = parseServiceConfig(toml, "p.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->engine.roofline->expert_parallel_size, 2u);
  const auto again = parseServiceConfig(dumpServiceConfig(*c), "dump.toml");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->engine.roofline->expert_parallel_size, 2u);
  // Off by default; refused without the roofline model.
  const auto off = parseServiceConfig(toml.substr(0, toml.find("enable_expert")), "p.toml");
  ASSERT_TRUE(off.has_value()) << off.error().message;
  EXPECT_EQ(off->engine.roofline->expert_parallel_size, 1u);
  const auto alone = parseServiceConfig("[engine]\nenable_expert_parallel = true\n", "p.toml");
  ASSERT_FALSE(alone.has_value());
  EXPECT_NE(alone.error().message.find("engine.enable_expert_parallel applies only to "
                                       "timing_model = roofline"),
            std::string::npos)
      << alone.error().message;
}

TEST(RooflineSettingsTest, DeploymentKeysNeedTheRooflineModel) {
  const auto c = parseServiceConfig("[engine]\ngpu = \"H100\"\n", "p.toml");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(
      c.error().message.find("p.toml:2:7: engine.gpu applies only to timing_model = roofline"),
      std::string::npos)
      << c.error().message;
  const auto bad = parseServiceConfig(
      "[engine]\ntiming_model = \"roofline\"\ngpu = \"RTX4090\"\n[engine.model]\n"
      "num_layers = 2\nhidden_size = 64\nnum_heads = 4\nvocab_size = 100\n"
      "intermediate_size = 128\n[engine.roofline]\ngemm_compute_efficiency = 3\n",
      "p.toml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("roofline.gemm_compute_efficiency must be in [0.05"),
            std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace mocker::service
