// Table-driven scheduler scenarios (TensorRT-LLM capacitySchedulerTest style): a config, the
// arrivals (submitted just before a given step), and expected rows that must hold for every step
// in [first_step, last_step]. Rows were derived by hand from the rules in README.md (the token
// timelines above each table), not recorded from the implementation. Harness::step checks the
// per-step invariants as usual.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::range;

struct Arrival {
  int step;  // submitted just before this step (1-based)
  std::vector<std::uint32_t> prompt;
  std::uint32_t max_output;
};

struct Row {
  int first_step;
  int last_step;
  std::uint64_t running;
  std::uint64_t waiting;
  std::uint64_t active_blocks;
  std::uint64_t preemptions_total;
  std::size_t outputs;  // signals emitted by the pass
};

struct Scenario {
  const char* name;
  EngineConfig config;
  std::vector<Arrival> arrivals;
  std::vector<Row> rows;
};

EngineConfig base(EngineConfig c) {
  c.block_size = 4;
  return c;
}

const Scenario kScenarios[] = {
    // [1..8], max 3: KV grows 8 → 9 → 10 tokens; the third token completes and releases.
    {"single_request",
     base({.num_gpu_blocks = 16}),
     {{1, range(1, 8), 3}},
     {{1, 1, 1, 0, 2, 0, 1}, {2, 2, 1, 0, 3, 0, 1}, {3, 3, 0, 0, 0, 0, 1}}},
    // 20-token prompt, budget 8: chunks 8 | 8 | 4, the only token in pass 3.
    {"chunked_prefill",
     base({.num_gpu_blocks = 16, .max_num_batched_tokens = 8}),
     {{1, range(1, 20), 1}},
     {{1, 1, 1, 0, 2, 0, 0}, {2, 2, 1, 0, 4, 0, 0}, {3, 3, 0, 0, 0, 0, 1}}},
    // N = 4. A=[1..8], B=[101..108], max 8 each.
    //   pass 1  both prefill (4 blocks), one token each
    //   pass 2  A needs a 3rd block ⇒ B preempted (LIFO), B.s1 evicted; no admission
    //   3–5     A computes tokens 10..12 in 3 blocks; B needs 3, 1 free ⇒ waits
    //   6–7     A's 13th token needs a 4th block (B.s0 evicted)
    //   8       A's 8th token: completes, releases; B was checked before the release
    //   9       B readmitted, recomputes 9 tokens (3 blocks), emits its 2nd token
    //   10–12   3 blocks; 13–14: 4 blocks; 15: B's 8th token, completes
    {"lifo_preemption",
     base({.num_gpu_blocks = 4}),
     {{1, range(1, 8), 8}, {1, range(101, 108), 8}},
     {{1, 1, 2, 0, 4, 0, 2},
      {2, 2, 1, 1, 3, 1, 1},
      {3, 5, 1, 1, 3, 1, 1},
      {6, 7, 1, 1, 4, 1, 1},
      {8, 8, 0, 1, 0, 1, 1},
      {9, 12, 1, 0, 3, 1, 1},
      {13, 14, 1, 0, 4, 1, 1},
      {15, 15, 0, 0, 0, 1, 1}}},
    // N = 10. A (32 tokens, max 8) runs; B (16) and C (4) arrive at pass 2. A grows to 9 blocks
    // (pass 2–5) then 10 (6–7) and completes in pass 8; B at the head needs 4 blocks, so neither
    // B nor the 1-block C is admitted before pass 9 (strict head-of-line), where both run.
    {"strict_head_of_line",
     base({.num_gpu_blocks = 10}),
     {{1, range(1, 32), 8}, {2, range(101, 116), 1}, {2, range(201, 204), 1}},
     {{1, 1, 1, 0, 8, 0, 1},
      {2, 5, 1, 2, 9, 0, 1},
      {6, 7, 1, 2, 10, 0, 1},
      {8, 8, 0, 2, 0, 0, 1},
      {9, 9, 0, 0, 0, 0, 2}}},
    // TRT-LLM, N = 10: A and B (8 + 16 tokens ⇒ 6 blocks reserved each). A runs alone; its KV
    // grows 8 → 23 computed tokens (2..6 blocks); B waits until A completes in pass 16, then runs.
    {"trtllm_reservation",
     base({.engine_type = EngineType::Trtllm, .num_gpu_blocks = 10}),
     {{1, range(1, 8), 16}, {1, range(101, 108), 16}},
     {{1, 1, 1, 1, 2, 0, 1},
      {2, 5, 1, 1, 3, 0, 1},
      {6, 9, 1, 1, 4, 0, 1},
      {10, 13, 1, 1, 5, 0, 1},
      {14, 15, 1, 1, 6, 0, 1},
      {16, 16, 0, 1, 0, 0, 1},
      {17, 17, 1, 0, 2, 0, 1}}},
};

class ScenarioTableTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ScenarioTableTest, RowsHoldAtEveryStep) {
  const Scenario& sc = GetParam();
  testing::Harness h(sc.config);
  int last = 0;
  for (const Row& row : sc.rows) last = std::max(last, row.last_step);
  for (int step = 1; step <= last; ++step) {
    for (const Arrival& a : sc.arrivals) {
      if (a.step == step) h.submit(a.prompt, a.max_output);
    }
    const PassResult& p = h.step();
    for (const Row& row : sc.rows) {
      if (step < row.first_step || step > row.last_step) continue;
      EXPECT_EQ(p.load.running_requests, row.running) << sc.name << " step " << step;
      EXPECT_EQ(p.load.waiting_requests, row.waiting) << sc.name << " step " << step;
      EXPECT_EQ(p.load.active_blocks, row.active_blocks) << sc.name << " step " << step;
      EXPECT_EQ(p.load.preemptions_total, row.preemptions_total) << sc.name << " step " << step;
      EXPECT_EQ(p.outputs.size(), row.outputs) << sc.name << " step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ScenarioTableTest, ::testing::ValuesIn(kScenarios),
                         [](const ::testing::TestParamInfo<Scenario>& param_info) {
                           return std::string(param_info.param.name);
                         });

// §5.5 / §14 items 38, 39 and 11: the effective length limit L = min(max_model_len, N·B,
// max_num_batched_tokens if chunking is off) — SGLang: (N − 1)·B + 1 by our rule (SGLANG.md) —
// rejects a prompt of >= L tokens and stops generation at L; a stream that ends short of its
// max_output_tokens names the binding limit, one that ends with its last requested token does
// not. Expected values are worked out by hand in each row's comment.
struct LengthCase {
  const char* name;
  EngineConfig config;
  std::uint32_t prompt_len;
  std::uint32_t max_output;
  Terminal terminal;
  std::uint32_t tokens;  // output tokens before the terminal
  LengthLimit limit;
};

EngineConfig chunkingOff(EngineType type, std::uint32_t budget, std::uint32_t blocks) {
  return base({.engine_type = type,
               .num_gpu_blocks = blocks,
               .max_num_batched_tokens = budget,
               .enable_chunked_prefill = false});
}

EngineConfig sglangPool(std::uint32_t pages) {
  EngineConfig c{.engine_type = EngineType::Sglang, .num_gpu_blocks = pages};
  c.sglang.page_size = 4;
  return c;
}

constexpr auto kBudget = LengthLimit::MaxNumBatchedTokens;
constexpr auto kPool = LengthLimit::KvCapacity;
constexpr auto kModel = LengthLimit::MaxModelLen;

const LengthCase kLengthCases[] = {
    // §14.38: budget 16, chunking off, 100 blocks ⇒ L = 16 (budget).
    {"item38_vllm_prompt16_rejected", chunkingOff(EngineType::Vllm, 16, 100), 16, 1,
     Terminal::Rejected, 0, kBudget},
    {"item38_vllm_prompt12_stops_after4", chunkingOff(EngineType::Vllm, 16, 100), 12, 10,
     Terminal::Completed, 4, kBudget},
    {"item38_trtllm_prompt16_rejected", chunkingOff(EngineType::Trtllm, 16, 100), 16, 1,
     Terminal::Rejected, 0, kBudget},
    {"item38_trtllm_prompt12_stops_after4", chunkingOff(EngineType::Trtllm, 16, 100), 12, 10,
     Terminal::Completed, 4, kBudget},
    // 12 + 4 = L exactly: the last requested token reaches L, the stream is complete.
    {"item38_vllm_tie_is_complete", chunkingOff(EngineType::Vllm, 16, 100), 12, 4,
     Terminal::Completed, 4, LengthLimit::None},
    // §14.39: 4 blocks of 4, no max_model_len ⇒ L = 16 (kv capacity).
    {"item39_vllm_prompt16_rejected", base({.num_gpu_blocks = 4}), 16, 1, Terminal::Rejected, 0,
     kPool},
    {"item39_vllm_prompt15_stops_after1", base({.num_gpu_blocks = 4}), 15, 3, Terminal::Completed,
     1, kPool},
    {"item39_trtllm_prompt16_rejected",
     base({.engine_type = EngineType::Trtllm, .num_gpu_blocks = 4}), 16, 1, Terminal::Rejected, 0,
     kPool},
    {"item39_trtllm_prompt15_stops_after1",
     base({.engine_type = EngineType::Trtllm, .num_gpu_blocks = 4}), 15, 3, Terminal::Completed, 1,
     kPool},
    // §14.11: max_model_len 16 (pool 64 tokens) ⇒ L = 16 (max_model_len).
    {"item11_vllm_prompt16_rejected", base({.num_gpu_blocks = 16, .max_model_len = 16}), 16, 4,
     Terminal::Rejected, 0, kModel},
    {"item11_vllm_prompt10_stops_after6", base({.num_gpu_blocks = 16, .max_model_len = 16}), 10, 10,
     Terminal::Completed, 6, kModel},
    // Ties between limits name the first of max_model_len, kv capacity, max_num_batched_tokens.
    {"tie_model_len_and_pool", base({.num_gpu_blocks = 4, .max_model_len = 16}), 10, 10,
     Terminal::Completed, 6, kModel},
    {"tie_pool_and_budget", chunkingOff(EngineType::Vllm, 16, 4), 10, 10, Terminal::Completed, 6,
     kPool},
    // SGLang, 4 pages of 4: L = 13 (a sequence needing all 4 pages stops).
    {"sglang_prompt13_rejected", sglangPool(4), 13, 1, Terminal::Rejected, 0, kPool},
    {"sglang_prompt12_stops_after1", sglangPool(4), 12, 3, Terminal::Completed, 1, kPool},
    {"sglang_tie_is_complete", sglangPool(4), 8, 5, Terminal::Completed, 5, LengthLimit::None},
};

class LengthLimitTest : public ::testing::TestWithParam<LengthCase> {};

TEST_P(LengthLimitTest, TerminalTokensAndReason) {
  const LengthCase& c = GetParam();
  testing::Harness h(c.config);
  const RequestId id = h.submit(range(1, c.prompt_len), c.max_output);
  h.runUntilIdle();
  const auto signals = h.signalsOf(id);
  ASSERT_FALSE(signals.empty());
  const OutputSignal& last = signals.back();
  EXPECT_EQ(last.terminal, c.terminal);
  EXPECT_EQ(last.limit, c.limit) << lengthLimitName(last.limit);
  const auto tokens = std::count_if(signals.begin(), signals.end(),
                                    [](const OutputSignal& s) { return s.token.has_value(); });
  EXPECT_EQ(tokens, c.tokens);
  for (std::size_t i = 0; i + 1 < signals.size(); ++i) {
    EXPECT_EQ(signals[i].limit, LengthLimit::None) << "only the terminal names a limit";
  }
}

INSTANTIATE_TEST_SUITE_P(Limits, LengthLimitTest, ::testing::ValuesIn(kLengthCases),
                         [](const ::testing::TestParamInfo<LengthCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// §14.38, last clause: with chunking off, once the running queue is empty the waiting head is
// admitted or rejected in the next pass — for every prompt length and every output length,
// including preempted requests (whose len includes generated tokens) being readmitted.
TEST(LengthLimitTest, ChunkingOffNoRequestWaitsForeverOnceRunningIsEmpty) {
  for (std::uint32_t blocks : {4u, 6u, 100u}) {
    for (auto mode : {PreemptionMode::Lifo, PreemptionMode::Fifo}) {
      EngineConfig cfg = chunkingOff(EngineType::Vllm, 16, blocks);
      cfg.preemption_mode = mode;
      cfg.enable_prefix_caching = false;
      testing::Harness h(cfg);
      for (std::uint32_t p = 1; p <= 20; ++p) h.submit(range(100 * p, 100 * p + p - 1), 3 * p);
      for (int pass = 0; pass < 10000 && h.engine().hasWork(); ++pass) {
        const LoadMetrics before = h.engine().loadMetrics(0);
        const PassResult& out = h.step();
        if (before.running_requests == 0 && before.waiting_requests > 0) {
          const bool progressed =
              !out.admissions.empty() ||
              std::any_of(out.outputs.begin(), out.outputs.end(),
                          [](const OutputSignal& s) { return s.terminal == Terminal::Rejected; });
          ASSERT_TRUE(progressed) << blocks << " blocks, pass " << pass << ": head stuck";
        }
      }
      EXPECT_FALSE(h.engine().hasWork()) << blocks << " blocks";
    }
  }
}

}  // namespace
}  // namespace mocker::engine
