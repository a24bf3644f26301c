#include "engine/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace mocker::engine {
namespace {

TEST(EngineConfigTest, DefaultsFollowTheSpec) {
  const EngineConfig c;
  EXPECT_EQ(c.engine_type, EngineType::Vllm);
  EXPECT_FALSE(c.num_gpu_blocks.has_value());  // 1 Mi tokens: 16384 blocks of 64
  EXPECT_EQ(effectiveNumGpuBlocks(c), 16384u);
  EXPECT_EQ(effectiveBlockSize(c), 64u);
  EXPECT_EQ(c.decode_load, DecodeLoad::Physical);
  EXPECT_FALSE(c.spec_num_draft_tokens.has_value());
  EXPECT_EQ(c.spec_accept_rates, (std::vector<double>{0.85, 0.3, 0, 0, 0}));
  EXPECT_EQ(c.spec_seed, 42u);
  EXPECT_EQ(c.max_num_seqs, 256u);
  EXPECT_EQ(c.max_num_batched_tokens, 8192u);
  EXPECT_TRUE(c.enable_prefix_caching);
  EXPECT_TRUE(c.enable_chunked_prefill);
  EXPECT_EQ(c.preemption_mode, PreemptionMode::Lifo);
  EXPECT_FALSE(c.max_model_len.has_value());
  EXPECT_EQ(c.hash_seed, 1337u);
  EXPECT_EQ(c.chain_seed, 1337u);
  EXPECT_EQ(effectiveBlockSize(EngineConfig{.engine_type = EngineType::Trtllm}), 32u);
  EXPECT_EQ(effectiveBlockSize(EngineConfig{.engine_type = EngineType::Sglang}), 1u);
  EXPECT_TRUE(validateEngineConfig(c).has_value());
}

struct BadConfig {
  const char* name;
  EngineConfig config;
  const char* fragment;
};

TEST(EngineConfigTest, ValidationNamesFieldAndRange) {
  const BadConfig cases[] = {
      {"zero blocks", {.num_gpu_blocks = 0}, "num_gpu_blocks must be >= 1"},
      {"model len", {.max_model_len = 1}, "max_model_len must be >= 2"},
      {"seqs", {.max_num_seqs = 0}, "max_num_seqs must be >= 1"},
      {"budget", {.max_num_batched_tokens = 0}, "max_num_batched_tokens must be >= 1"},
      {"dp", {.dp_size = 0}, "dp_size must be >= 1"},
      {"speedup", {.speedup_ratio = -1}, "speedup_ratio must be finite and >= 0"},
      {"speedup nan", {.speedup_ratio = std::nan("")}, "speedup_ratio"},
      {"decode speedup",
       {.decode_speedup_ratio = 0},
       "decode_speedup_ratio must be finite and > 0"},
      {"profile missing", {.timing_model = TimingModelKind::Interpolated}, "timing_profile_path"},
      {"fixed missing", {.timing_model = TimingModelKind::Fixed}, "fixed_prefill_ms is required"},
      {"fixed negative",
       {.timing_model = TimingModelKind::Fixed, .fixed_prefill_ms = 1, .fixed_decode_ms = -2},
       "fixed_decode_ms must be finite and >= 0"},
      {"sglang page",
       {.engine_type = EngineType::Sglang, .block_size = 16, .sglang = {.page_size = 32}},
       "sglang.page_size (32) must equal block_size (16)"},
      {"sglang chunk",
       {.engine_type = EngineType::Sglang,
        .block_size = 16,
        .sglang = {.chunked_prefill_size = 100}},
       "sglang.chunked_prefill_size must be >= 1 and divisible by block_size 16"},
      {"sglang conservativeness",
       {.engine_type = EngineType::Sglang, .sglang = {.schedule_conservativeness = 1.5}},
       "sglang.schedule_conservativeness"},
      {"sglang model len",
       {.engine_type = EngineType::Sglang, .max_model_len = 10},
       "max_model_len applies only"},
  };
  for (const auto& c : cases) {
    const Status s = validateEngineConfig(c.config);
    ASSERT_FALSE(s.has_value()) << c.name;
    EXPECT_NE(s.error().message.find(c.fragment), std::string::npos)
        << c.name << ": " << s.error().message;
    // The same rule as data: the message starts with the first field it names.
    const auto e = checkEngineConfig(c.config);
    ASSERT_TRUE(e.has_value()) << c.name;
    EXPECT_EQ(e->error, s.error()) << c.name;
    ASSERT_FALSE(e->fields.empty()) << c.name;
    EXPECT_EQ(e->error.message.rfind(e->fields.front(), 0), 0u)
        << c.name << ": " << e->error.message;
  }
}

TEST(EngineConfigTest, CheckNamesTheOffendingFieldFirstThenTheFieldsItWasCheckedAgainst) {
  struct Case {
    const char* name;
    EngineConfig config;
    std::vector<std::string> fields;
  };
  const Case cases[] = {
      {"zero blocks", {.num_gpu_blocks = 0}, {"num_gpu_blocks"}},
      {"dp too large", {.dp_size = 1025}, {"dp_size"}},
      {"decode speedup", {.decode_speedup_ratio = 0}, {"decode_speedup_ratio"}},
      {"sglang model len",
       {.engine_type = EngineType::Sglang, .max_model_len = 10},
       {"max_model_len", "engine_type"}},
      {"fixed missing",
       {.timing_model = TimingModelKind::Fixed, .fixed_prefill_ms = 1},
       {"fixed_decode_ms", "timing_model"}},
      {"profile missing",
       {.timing_model = TimingModelKind::Interpolated},
       {"timing_profile", "timing_model"}},
      {"sglang page",
       {.engine_type = EngineType::Sglang, .block_size = 16, .sglang = {.page_size = 32}},
       {"sglang.page_size", "block_size", "engine_type"}},
      {"sglang chunk",
       {.engine_type = EngineType::Sglang, .sglang = {.page_size = 3}},
       {"sglang.chunked_prefill_size", "block_size", "sglang.page_size", "engine_type"}},
      {"sglang range", {.sglang = {.clip_max_new_tokens = 0}}, {"sglang.clip_max_new_tokens"}},
  };
  for (const auto& c : cases) {
    const auto e = checkEngineConfig(c.config);
    ASSERT_TRUE(e.has_value()) << c.name;
    EXPECT_EQ(e->fields, c.fields) << c.name << ": " << e->error.message;
    EXPECT_EQ(e->error.code, ErrorCode::InvalidArgument) << c.name;
  }
  // Every profile rule names the profile, whichever array is wrong.
  EngineConfig profile{.timing_model = TimingModelKind::Interpolated};
  profile.timing_profile = TimingProfile{};
  const auto e = checkEngineConfig(profile);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->fields, std::vector<std::string>{"timing_profile"}) << e->error.message;
  EXPECT_EQ(e->error.message.rfind("timing_profile.prefill_isl must be a non-empty array", 0), 0u)
      << e->error.message;
  EXPECT_FALSE(checkEngineConfig(EngineConfig{}).has_value());
}

TEST(EngineConfigTest, ProfileArraysAreChecked) {
  EngineConfig c{.timing_model = TimingModelKind::Interpolated};
  c.timing_profile = TimingProfile{.prefill_isl = {1, 1},
                                   .prefill_ttft_ms = {1, 2},
                                   .decode_active_kv_tokens = {1},
                                   .decode_context_length = {1},
                                   .decode_itl = {{1}}};
  auto s = validateEngineConfig(c);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("prefill_isl must be strictly increasing"), std::string::npos);
  c.timing_profile->prefill_isl = {1, 2};
  c.timing_profile->decode_itl = {{1, 2}};
  s = validateEngineConfig(c);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("decode_itl[0]"), std::string::npos);
}

TEST(EngineConfigTest, EnumParsersAreCaseInsensitiveAndListChoices) {
  EXPECT_EQ(*parseEngineType("SGLang"), EngineType::Sglang);
  EXPECT_EQ(*parsePreemptionMode("FIFO"), PreemptionMode::Fifo);
  EXPECT_EQ(*parseSchedulePolicy("fifo"), SchedulePolicy::Fcfs);
  EXPECT_EQ(toString(EngineType::Trtllm), "trtllm");
  const auto bad = parseEngineType("tgi");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message,
            "engine_type: unknown value 'tgi' (allowed: vllm | sglang | trtllm)");
}

}  // namespace
}  // namespace mocker::engine
