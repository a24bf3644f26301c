// Dynamo's KV-router cost, selection rule and load accounting (tools/replay/kv_router.h), on
// hand-computed cases and against a per-candidate reference model.
#include "tools/replay/kv_router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace mocker::replay {
namespace {

TEST(KvRouterCost, HandComputedCases) {
  // 100 prompt tokens, block 16, 3 blocks cached: 52 tokens to prefill = 3.25 blocks; plus 10
  // decode blocks.
  EXPECT_DOUBLE_EQ(
      kvCost(1.0,
             {.prompt_tokens = 100, .block_size = 16, .overlap_blocks = 3, .decode_blocks = 10}),
      13.25);
  // Queued prefill of earlier requests adds to the prefill term: (32 + 52) / 16 = 5.25.
  EXPECT_DOUBLE_EQ(kvCost(1.0, {.prompt_tokens = 100,
                                .block_size = 16,
                                .overlap_blocks = 3,
                                .queued_prefill_tokens = 32,
                                .decode_blocks = 10}),
                   15.25);
  // The weight scales only the prefill term: 2 × 5.25 + 10.
  EXPECT_DOUBLE_EQ(kvCost(2.0, {.prompt_tokens = 100,
                                .block_size = 16,
                                .overlap_blocks = 3,
                                .queued_prefill_tokens = 32,
                                .decode_blocks = 10}),
                   20.5);
  // Weight 0: pure load balancing.
  EXPECT_DOUBLE_EQ(
      kvCost(0.0,
             {.prompt_tokens = 100, .block_size = 16, .overlap_blocks = 0, .decode_blocks = 7}),
      7.0);
  // An overlap covering the whole prompt leaves nothing to prefill (never negative).
  EXPECT_DOUBLE_EQ(
      kvCost(1.0, {.prompt_tokens = 64, .block_size = 16, .overlap_blocks = 5, .decode_blocks = 4}),
      4.0);
  EXPECT_EQ(newPrefillTokens(64, 5, 16), 0u);
  EXPECT_EQ(newPrefillTokens(65, 4, 16), 1u);
}

TEST(KvRouterLoad, CountsDistinctActiveBlocksAndQueuedPrefill) {
  ActiveLoad load(2);
  const std::vector<std::uint64_t> a{1, 2, 3};
  const std::vector<std::uint64_t> b{1, 2, 4, 5};
  load.add(10, 0, a, 48);
  load.add(11, 0, b, 20);
  EXPECT_EQ(load.activeBlocks(0), 5u);  // {1, 2, 3, 4, 5}
  EXPECT_EQ(load.activeBlocks(1), 0u);
  EXPECT_EQ(load.queuedPrefillTokens(0), 68u);
  EXPECT_EQ(load.newBlocks(0, std::vector<std::uint64_t>{1, 6, 7}), 2u);
  EXPECT_EQ(load.newBlocks(1, std::vector<std::uint64_t>{1, 6, 7}), 3u);
  load.prefillDone(10);
  load.prefillDone(10);  // once only
  EXPECT_EQ(load.queuedPrefillTokens(0), 20u);
  load.remove(11);  // still queued: its prefill leaves too
  EXPECT_EQ(load.queuedPrefillTokens(0), 0u);
  EXPECT_EQ(load.activeBlocks(0), 3u);  // 1 and 2 are still held by request 10
  load.remove(10);
  load.remove(10);  // unknown: ignored
  EXPECT_EQ(load.activeBlocks(0), 0u);
  EXPECT_EQ(load.activeRequests(), 0u);
}

// The shared hash → holders index against one reference-counted set per candidate: many
// candidates holding the same hashes (inline holder, list holders, promotion on removal),
// duplicate hashes in one prompt, random removal order.
TEST(KvRouterLoad, SharedIndexMatchesPerCandidateSets) {
  constexpr std::uint32_t kCandidates = 5;
  std::mt19937_64 rng(7);
  ActiveLoad load(kCandidates);
  std::vector<std::map<std::uint64_t, int>> expected(kCandidates);
  std::map<std::uint64_t, std::pair<std::uint32_t, std::vector<std::uint64_t>>> active;
  std::uint64_t next = 1;
  for (int step = 0; step < 3000; ++step) {
    if (!active.empty() && rng() % 2 == 0) {
      auto it = active.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % active.size()));
      for (std::uint64_t h : it->second.second) {
        if (--expected[it->second.first][h] == 0) expected[it->second.first].erase(h);
      }
      load.remove(it->first);
      active.erase(it);
    } else {
      const auto candidate = static_cast<std::uint32_t>(rng() % kCandidates);
      std::vector<std::uint64_t> hashes(rng() % 6);
      for (std::uint64_t& h : hashes) h = rng() % 12;  // few hashes: heavy sharing, duplicates
      for (std::uint64_t h : hashes) ++expected[candidate][h];
      load.add(next, candidate, hashes, 0);
      active[next++] = {candidate, hashes};
    }
    std::vector<std::uint64_t> query(8);
    for (std::uint64_t& h : query) h = rng() % 14;
    std::vector<std::uint64_t> held;
    load.heldBlocks(query, held);
    ASSERT_EQ(held.size(), kCandidates);
    for (std::uint32_t c = 0; c < kCandidates; ++c) {
      ASSERT_EQ(load.activeBlocks(c), expected[c].size()) << "step " << step;
      std::uint64_t in = 0;
      for (std::uint64_t h : query) in += expected[c].contains(h) ? 1u : 0u;
      ASSERT_EQ(held[c], in) << "step " << step << " candidate " << c;
      ASSERT_EQ(load.newBlocks(c, query), query.size() - in);
    }
  }
}

TEST(KvRouterSelect, LowestCostOfOverlapAgainstLoad) {
  // Candidate 0 caches the whole 4-block prompt but runs 10 other blocks; candidate 1 is idle.
  // Cost 0 = 1 × 0 + (10 + 4) = 14; cost 1 = 1 × 4 + 4 = 8 → 1. With weight 4: 14 vs 20 → 0.
  const std::vector<std::uint64_t> prompt{1, 2, 3, 4};
  const std::vector<std::uint64_t> other{11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const std::vector<std::uint32_t> overlaps{4, 0};
  for (const auto& [weight, expected, cost0, cost1] :
       std::vector<std::tuple<double, std::uint32_t, double, double>>{{1.0, 1, 14, 8},
                                                                      {4.0, 0, 14, 20}}) {
    KvCostRouter router(2, 16, {.overlap_weight = weight}, 0);
    router.load().add(1, 0, other, 0);
    EXPECT_EQ(router.select(prompt, 64, overlaps, {}), expected) << weight;
    EXPECT_DOUBLE_EQ(router.lastCosts()[0], cost0);
    EXPECT_DOUBLE_EQ(router.lastCosts()[1], cost1);
  }
}

TEST(KvRouterSelect, TiesGoToTheSmallestTreeThenAtRandom) {
  SplitMix64 rng(1);
  const std::vector<double> costs{3, 1, 1, 1};
  EXPECT_EQ(selectByCost(costs, std::vector<std::uint64_t>{0, 9, 5, 7}, 0.0, rng), 2u);
  // Equal trees: every tied candidate is picked sometimes, never the dearer one.
  std::set<std::size_t> picked;
  for (int i = 0; i < 200; ++i) picked.insert(selectByCost(costs, {}, 0.0, rng));
  EXPECT_EQ(picked, (std::set<std::size_t>{1, 2, 3}));
}

TEST(KvRouterSelect, SameSeedSameChoicesAtEveryTemperature) {
  const std::vector<double> costs{4, 1, 2, 1, 8};
  for (const double t : {0.0, 0.1, 1.0, 10.0}) {
    const auto draw = [&](std::uint64_t seed) {
      SplitMix64 rng(seed);
      std::vector<std::size_t> v;
      for (int i = 0; i < 64; ++i) v.push_back(selectByCost(costs, {}, t, rng));
      return v;
    };
    EXPECT_EQ(draw(7), draw(7)) << t;
    EXPECT_NE(draw(7), draw(8)) << t;
  }
}

TEST(KvRouterSelect, SoftmaxFollowsTheNormalisedCosts) {
  // Costs 0 and 10 normalise to 0 and 1: P(dearer) = e^(−1/T) / (1 + e^(−1/T)).
  const std::vector<double> costs{0, 10};
  for (const double t : {0.25, 1.0, 4.0}) {
    SplitMix64 rng(42);
    int dearer = 0;
    constexpr int kDraws = 20000;
    for (int i = 0; i < kDraws; ++i) dearer += selectByCost(costs, {}, t, rng) == 1 ? 1 : 0;
    const double p = std::exp(-1.0 / t) / (1.0 + std::exp(-1.0 / t));
    EXPECT_NEAR(static_cast<double>(dearer) / kDraws, p, 0.015) << t;
  }
  // Equal costs: uniform.
  SplitMix64 rng(3);
  const std::vector<double> flat{2, 2, 2, 2};
  std::vector<int> hits(4, 0);
  for (int i = 0; i < 4000; ++i) ++hits[selectByCost(flat, {}, 1.0, rng)];
  for (const int h : hits) EXPECT_NEAR(h, 1000, 150);
}

TEST(KvRouterConfig, RejectsNegativeAndNonFinite) {
  EXPECT_TRUE(validateKvRouterConfig({}));
  EXPECT_FALSE(validateKvRouterConfig({.overlap_weight = -0.5}));
  EXPECT_FALSE(validateKvRouterConfig({.overlap_weight = INFINITY}));
  EXPECT_FALSE(validateKvRouterConfig({.temperature = -1}));
  EXPECT_FALSE(validateKvRouterConfig({.temperature = NAN}));
}

}  // namespace
}  // namespace mocker::replay
