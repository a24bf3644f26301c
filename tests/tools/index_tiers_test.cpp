// `mocker index`'s per-tier overlap ("tiers": true, tools/index/README.md "Query protocol"): a
// hand-built index, and the answer equal to what the engine then reuses from each tier when the
// same prompt is admitted after a run with host and disk tiers (docs/engine.md, "KV offload
// tiers").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/block_hash.h"
#include "engine/engine.h"
#include "engine/offline_driver.h"
#include "tools/index/query_answer.h"
#include "tools/index/tiered_kv_index.h"

namespace mocker::index {
namespace {

using Hashes = std::vector<std::uint64_t>;

TEST(IndexTierQuery, GpuPrefixThenHostElseDiskUntilTheFirstMiss) {
  TieredKvIndex tiers;
  const WorkerRank w{3, 0};
  tiers.gpu().applyStored(w, Hashes{10, 11}, std::nullopt);
  tiers.tier(engine::Medium::Cpu).applyStored(w, Hashes{12, 14, 10}, std::nullopt);
  tiers.tier(engine::Medium::Disk).applyStored(w, Hashes{12, 13, 14, 15, 17}, std::nullopt);
  // Rank 1 of worker 3 has only host blocks (its GPU view has seen nothing).
  tiers.tier(engine::Medium::Cpu).applyStored({3, 1}, Hashes{10}, std::nullopt);
  const Hashes chain{10, 11, 12, 13, 14, 15, 16, 17};
  OverlapQuery q{.block_hashes = chain};
  const OverlapReply plain = answerOverlap(tiers, q, {}, {});
  ASSERT_EQ(plain.workers.size(), 1u);
  EXPECT_EQ(plain.workers[0].ranks, (std::vector<RankOverlap>{{.dp_rank = 0, .blocks = 2}}));
  q.tiers = true;
  const OverlapReply r = answerOverlap(tiers, q, {}, {});
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].blocks, 2u);
  // 10, 11 on the GPU; 12 host (also on disk: host first), 13 disk, 14 host, 15 disk; 16 is
  // nowhere, so 17 (on disk) does not count.
  EXPECT_EQ(r.workers[0].ranks,
            (std::vector<RankOverlap>{{.dp_rank = 0, .blocks = 2, .tiers = TierBlocks{2, 2, 2}},
                                      {.dp_rank = 1, .blocks = 0, .tiers = TierBlocks{0, 1, 0}}}));
}

// A small GPU pool with host and disk tiers under prompts that share prefixes (the setting of
// TieredKvIndexTest.PerTierViewEqualsTheEnginesAfterEveryPass). The index is fed every pass's
// events; then each group's prompt is asked per tier and admitted: the engine reuses exactly
// the GPU / host / disk blocks the index answered (its onboarding counters and the admission's
// reused tokens).
TEST(IndexTierQuery, AnswerEqualsWhatTheEngineReusesPerTierAfterARunWithOffload) {
  engine::EngineConfig c;
  c.num_gpu_blocks = 24;
  c.block_size = 4;
  c.num_g2_blocks = 16;
  c.num_g3_blocks = 32;
  c.offload_batch_size = 4;
  c.kv_bytes_per_token = 100000;
  engine::Engine e(c);
  engine::OfflineDriver driver(e);
  std::uint32_t state = 12345;
  const auto next = [&] { return state = state * 1103515245u + 12345u, (state >> 8) % 1000; };
  const auto groupPrompt = [](std::uint32_t group, std::uint32_t len) {
    std::vector<std::uint32_t> prompt;
    for (std::uint32_t t = 0; t < len; ++t) prompt.push_back(group * 1000 + t);
    return prompt;
  };
  for (std::uint32_t i = 0; i < 80; ++i) {
    std::vector<std::uint32_t> prompt = groupPrompt(next() % 6, 16 + 4 * (next() % 4));
    for (std::uint32_t t = next() % 9; t > 0; --t) prompt.push_back(50000 + next());
    driver.add({.arrival_ms = 20.0 * i,
                .request = {.tokens = std::move(prompt), .max_output_tokens = 1 + next() % 8}});
  }
  TieredKvIndex index;
  const WorkerRank w{0, 0};
  std::uint32_t admissions = 0, reused = 0;
  const auto observe = [&](const engine::PassResult& p, engine::OfflineDriver&) {
    for (const engine::KvEvent& ev : p.kv_events) index.apply(ev, w);
    for (const engine::Admission& a : p.admissions) ++admissions, reused += a.reused_input_tokens;
  };
  driver.run(observe);
  TierBlocks total;
  // Probes of 6 full blocks + 1 token (so the recompute-the-last-block rule caps nothing), one
  // at a time on the idle engine.
  // Each group twice: the repeat finds the first probe's blocks on the GPU.
  for (std::uint32_t k = 0; k < 12; ++k) {
    const std::uint32_t group = k / 2;
    SCOPED_TRACE("probe " + std::to_string(k));
    // Transfers still in flight end first (their tier events reach the index), so the index
    // is current when it answers.
    double now = driver.nowMs();
    for (int guard = 0; guard < 1000; ++guard) {
      const std::optional<double> timer = e.nextTimerMs(0);
      if (!timer) break;
      now = std::max(now, *timer);
      for (const engine::KvEvent& ev : e.step(0, now).kv_events) index.apply(ev, w);
    }
    ASSERT_EQ(e.nextTimerMs(0), std::nullopt);
    std::vector<std::uint32_t> prompt = groupPrompt(group, 25);
    const OverlapReply r =
        answerOverlap(index, {.tokens = prompt, .tiers = true}, {.block_size = 4, .seeds = {}}, {});
    ASSERT_EQ(r.workers.size(), 1u);
    ASSERT_EQ(r.workers[0].ranks.size(), 1u);
    const TierBlocks answer = r.workers[0].ranks[0].tiers.value();
    const engine::TierMetrics before = e.loadMetrics(0).tiers;
    admissions = reused = 0;
    driver.add({.arrival_ms = now + 1000.0,
                .request = {.tokens = std::move(prompt), .max_output_tokens = 1}});
    driver.run(observe);
    ASSERT_EQ(admissions, 1u);
    const engine::TierMetrics& after = e.loadMetrics(0).tiers;
    EXPECT_EQ(after.g2_hit_blocks - before.g2_hit_blocks, answer.cpu);
    EXPECT_EQ(after.g3_hit_blocks - before.g3_hit_blocks, answer.disk);
    EXPECT_EQ(reused, 4 * (answer.gpu + answer.cpu + answer.disk));
    total.gpu += answer.gpu;
    total.cpu += answer.cpu;
    total.disk += answer.disk;
  }
  // Every tier answered some hits, so each comparison above was exercised.
  EXPECT_GT(total.gpu, 0u);
  EXPECT_GT(total.cpu, 0u);
  EXPECT_GT(total.disk, 0u);
}

}  // namespace
}  // namespace mocker::index
