// Table-driven scheduler scenarios (TensorRT-LLM capacitySchedulerTest style): a config, the
// arrivals (submitted just before a given step), and expected rows that must hold for every step
// in [first_step, last_step]. Rows were derived by hand from engine.md §4–§6 (the token
// timelines above each table), not recorded from the implementation. Harness::step checks the
// per-step invariants as usual.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mocker::engine
