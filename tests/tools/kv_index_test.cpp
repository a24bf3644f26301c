#include "tools/index/kv_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/block_hash.h"
#include "engine/engine.h"
#include "engine/offline_driver.h"
#include "tools/index/tiered_kv_index.h"

namespace mocker::index {
namespace {

using Hashes = std::vector<std::uint64_t>;

constexpr WorkerRank kW0{0, 0};
constexpr WorkerRank kW1{1, 0};
constexpr WorkerRank kW1R1{1, 1};

std::uint32_t overlapOf(const std::vector<Overlap>& overlaps, WorkerRank source) {
  for (const Overlap& o : overlaps) {
    if (o.source == source) return o.blocks;
  }
  ADD_FAILURE() << "source " << source.worker_id << "/" << source.dp_rank << " not listed";
  return 0;
}

TEST(KvIndexTest, StoredBlocksAreCountedPerSource) {
  KvIndex index;
  index.applyStored(kW0, Hashes{10, 11, 12}, std::nullopt);
  index.applyStored(kW1, Hashes{10, 11}, std::nullopt);
  EXPECT_EQ(index.numBlocks(kW0), 3u);
  EXPECT_EQ(index.numBlocks(kW1), 2u);
  EXPECT_EQ(index.numBlocksIndexed(), 5u);
  EXPECT_EQ(index.numDistinctHashes(), 3u);
  EXPECT_EQ(index.snapshot(kW0), (Hashes{10, 11, 12}));
  EXPECT_EQ(index.snapshot(kW1), (Hashes{10, 11}));
  EXPECT_EQ(index.counters().stored_events, 2u);
  EXPECT_EQ(index.counters().blocks_stored, 5u);
}

TEST(KvIndexTest, OverlapCountsLeadingBlocksOnlyPerSource) {
  KvIndex index;
  index.registerSource(kW0);
  index.registerSource(kW1);
  index.registerSource(kW1R1);
  index.applyStored(kW0, Hashes{1, 2, 3, 4}, std::nullopt);
  index.applyStored(kW1, Hashes{1, 2}, std::nullopt);
  index.applyStored(kW1, Hashes{4}, 3);  // holds 4 but not 3: the walk stops at 3
  index.applyStored(kW1R1, Hashes{1}, std::nullopt);

  const auto overlaps = index.overlapsByHashes(Hashes{1, 2, 3, 4, 5});
  ASSERT_EQ(overlaps.size(), 3u);
  EXPECT_EQ(overlaps[0], (Overlap{kW0, 4}));  // dense registration order
  EXPECT_EQ(overlaps[1], (Overlap{kW1, 2}));
  EXPECT_EQ(overlaps[2], (Overlap{kW1R1, 1}));
  EXPECT_EQ(index.counters().stored_with_unknown_parent, 1u);

  const auto per_worker = KvIndex::perWorker(overlaps);
  EXPECT_EQ(per_worker.at(0), 4u);
  EXPECT_EQ(per_worker.at(1), 2u);  // the best of its ranks

  // A first-block miss scores 0 everywhere; a fully held query scores its length.
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{9, 1, 2}), kW0), 0u);
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{1, 2, 3}), kW0), 3u);
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{}), kW0), 0u);
}

TEST(KvIndexTest, RemovedDropsOnlyThatSourcesCopy) {
  KvIndex index;
  index.applyStored(kW0, Hashes{1, 2, 3}, std::nullopt);
  index.applyStored(kW1, Hashes{1, 2, 3}, std::nullopt);
  index.applyRemoved(kW0, Hashes{3});
  EXPECT_EQ(index.snapshot(kW0), (Hashes{1, 2}));
  EXPECT_EQ(index.snapshot(kW1), (Hashes{1, 2, 3}));
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{1, 2, 3}), kW0), 2u);
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{1, 2, 3}), kW1), 3u);

  index.applyRemoved(kW1, Hashes{3});
  EXPECT_EQ(index.numDistinctHashes(), 2u);  // nobody holds 3 any more
  index.applyRemoved(kW1, Hashes{3, 77});    // not held: counted, not fatal
  EXPECT_EQ(index.counters().unknown_removes, 2u);
  EXPECT_EQ(index.counters().blocks_removed, 2u);
  EXPECT_EQ(index.numBlocksIndexed(), 4u);
}

TEST(KvIndexTest, DuplicateStoreIsCountedOnce) {
  KvIndex index;
  index.applyStored(kW0, Hashes{5, 6}, std::nullopt);
  index.applyStored(kW0, Hashes{6, 7}, 5);
  EXPECT_EQ(index.numBlocks(kW0), 3u);
  EXPECT_EQ(index.counters().duplicate_stores, 1u);
  EXPECT_EQ(index.counters().stored_with_unknown_parent, 0u);
}

TEST(KvIndexTest, ClearedEmptiesOneSourceOnly) {
  KvIndex index;
  index.applyStored(kW0, Hashes{1, 2}, std::nullopt);
  index.applyStored(kW1, Hashes{1, 3}, std::nullopt);
  index.applyStored(kW1R1, Hashes{4}, std::nullopt);
  index.applyCleared(kW1);
  EXPECT_TRUE(index.snapshot(kW1).empty());
  EXPECT_EQ(index.numBlocks(kW1), 0u);
  EXPECT_EQ(index.snapshot(kW0), (Hashes{1, 2}));
  EXPECT_EQ(index.snapshot(kW1R1), (Hashes{4}));
  EXPECT_EQ(index.numBlocksIndexed(), 3u);
  EXPECT_EQ(index.numDistinctHashes(), 3u);  // 3 is gone
  EXPECT_EQ(index.counters().cleared_events, 1u);
  // The index keeps working after the rebuild.
  index.applyStored(kW1, Hashes{1}, std::nullopt);
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{1, 2}), kW1), 1u);
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{1, 2}), kW0), 2u);
}

TEST(KvIndexTest, RemoveWorkerDropsEveryRank) {
  KvIndex index;
  index.applyStored(kW0, Hashes{1}, std::nullopt);
  index.applyStored(kW1, Hashes{1, 2}, std::nullopt);
  index.applyStored(kW1R1, Hashes{3}, std::nullopt);
  index.removeWorker(1);
  EXPECT_TRUE(index.snapshot(kW1).empty());
  EXPECT_TRUE(index.snapshot(kW1R1).empty());
  EXPECT_EQ(index.snapshot(kW0), (Hashes{1}));
  EXPECT_EQ(index.numBlocksIndexed(), 1u);
  EXPECT_EQ(index.numDistinctHashes(), 1u);
}

TEST(KvIndexTest, MoreThanSixtyFourSourcesUseTheOverflowSets) {
  KvIndex index;
  constexpr std::uint32_t kSources = 70;
  for (std::uint32_t w = 0; w < kSources; ++w) {
    // Worker w holds the first (w % 5) + 1 blocks of the chain 100, 101, ...
    Hashes chain;
    for (std::uint32_t i = 0; i <= w % 5; ++i) chain.push_back(100 + i);
    index.applyStored({w, 0}, chain, std::nullopt);
  }
  const auto overlaps = index.overlapsByHashes(Hashes{100, 101, 102, 103, 104, 105});
  ASSERT_EQ(overlaps.size(), kSources);
  for (std::uint32_t w = 0; w < kSources; ++w) {
    EXPECT_EQ(overlaps[w].blocks, w % 5 + 1) << "worker " << w;
  }
  index.applyRemoved({68, 0}, Hashes{100});  // 68 % 5 = 3: it held 100..103
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{100, 101}), {68, 0}), 0u);
  EXPECT_EQ(index.snapshot({68, 0}), (Hashes{101, 102, 103}));
  index.removeWorker(69);
  EXPECT_TRUE(index.snapshot({69, 0}).empty());
  EXPECT_EQ(overlapOf(index.overlapsByHashes(Hashes{100}), {65, 0}), 1u);
}

TEST(KvIndexTest, ManyBlocksSurviveGrowthAndDeletion) {
  KvIndex index;
  Hashes all;
  for (std::uint64_t i = 0; i < 20000; ++i) all.push_back(i * 7919);  // sequential-ish keys
  index.applyStored(kW0, all, std::nullopt);
  Hashes removed, kept;
  for (std::size_t i = 0; i < all.size(); ++i) (i % 3 == 0 ? removed : kept).push_back(all[i]);
  index.applyRemoved(kW0, removed);
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(index.snapshot(kW0), kept);
  EXPECT_EQ(index.numDistinctHashes(), kept.size());
  for (const std::uint64_t h : removed) {
    ASSERT_EQ(overlapOf(index.overlapsByHashes(Hashes{h}), kW0), 0u) << h;
  }
  for (const std::uint64_t h : kept) {
    ASSERT_EQ(overlapOf(index.overlapsByHashes(Hashes{h}), kW0), 1u) << h;
  }
}

TEST(KvIndexTest, OverlapByTokensHashesWithTheEngineRule) {
  KvIndex index;
  const std::vector<std::uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  const engine::HashSeeds seeds{};
  const Hashes hashes = engine::sequenceHashes(tokens, 4, seeds);
  ASSERT_EQ(hashes.size(), 3u);
  index.applyStored(kW0, Hashes{hashes[0], hashes[1]}, std::nullopt);
  EXPECT_EQ(overlapOf(index.overlapsByTokens(tokens, 4, seeds), kW0), 2u);
  // Different seeds give different hashes: no overlap.
  EXPECT_EQ(overlapOf(index.overlapsByTokens(tokens, 4, {.hash_seed = 1, .chain_seed = 2}), kW0),
            0u);
}

TEST(KvIndexTest, DiffSnapshotReportsBothDirections) {
  KvIndex index;
  index.applyStored(kW0, Hashes{1, 2, 3}, std::nullopt);
  const SnapshotDiff diff = diffSnapshot(index, kW0, {4, 3, 2, 2});
  EXPECT_EQ(diff.missing_in_index, (Hashes{4}));
  EXPECT_EQ(diff.extra_in_index, (Hashes{1}));
  EXPECT_FALSE(diff.empty());
  EXPECT_TRUE(diffSnapshot(index, kW0, {3, 1, 2}).empty());
}

// Fed with a real engine's KV events, the index reproduces the engine's own cached-block set
// after every pass, under eviction pressure and on two DP ranks.
TEST(KvIndexTest, TracksAnEngineThroughEvictions) {
  engine::Engine engine(engine::EngineConfig{
      .num_gpu_blocks = 24, .block_size = 4, .max_num_batched_tokens = 64, .dp_size = 2});
  KvIndex index;
  std::uint64_t state = 12345;
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 33);
  };
  std::vector<double> clock(2, 0.0);
  for (int i = 0; i < 60; ++i) {
    engine::Request r;
    const std::uint32_t prefix = next() % 4;  // four shared prefixes
    for (std::uint32_t t = 0; t < 12; ++t) r.tokens.push_back(prefix * 100 + t);
    const std::uint32_t extra = next() % 10;
    for (std::uint32_t t = 0; t < extra; ++t) r.tokens.push_back(next() % 1000);
    r.max_output_tokens = 1 + next() % 6;
    r.dp_rank = static_cast<std::uint32_t>(i % 2);
    ASSERT_TRUE(engine.submit(std::move(r)).has_value());
    for (std::uint32_t rank = 0; rank < 2; ++rank) {
      for (int s = 0; s < 2 && engine.hasWork(rank); ++s) {
        const engine::PassResult pass = engine.step(rank, clock[rank]);
        clock[rank] = pass.end_ms;
        for (const engine::KvEvent& e : pass.kv_events) index.apply(e, {7, rank});
        ASSERT_EQ(index.snapshot({7, rank}), engine.cachedBlockHashes(rank))
            << "request " << i << " rank " << rank;
      }
    }
  }
  EXPECT_GT(index.counters().blocks_removed, 0u) << "the test should exercise evictions";
  EXPECT_EQ(index.counters().unknown_removes, 0u);
  EXPECT_EQ(index.counters().duplicate_stores, 0u);
}

}  // namespace
}  // namespace mocker::index

// ---- TieredKvIndex: one view per KV tier (docs/engine.md, "KV offload tiers") ----

namespace mocker::index {
namespace {

TEST(TieredKvIndexTest, WireMediumNamesTheTier) {
  EXPECT_EQ(parseMedium(std::nullopt), engine::Medium::Gpu);  // vLLM before `medium`
  EXPECT_EQ(parseMedium("GPU"), engine::Medium::Gpu);
  EXPECT_EQ(parseMedium("CPU"), engine::Medium::Cpu);
  EXPECT_EQ(parseMedium("DISK"), engine::Medium::Disk);
  EXPECT_EQ(parseMedium("cpu"), std::nullopt);  // vLLM's constants are upper case
  TieredKvIndex tiers;
  EXPECT_TRUE(tiers.applyStored(kW0, "CPU", Hashes{7}, std::nullopt));
  EXPECT_FALSE(tiers.applyStored(kW0, "NVME", Hashes{8}, std::nullopt));
  EXPECT_TRUE(tiers.applyStored(kW0, std::nullopt, Hashes{9}, std::nullopt));
  EXPECT_EQ(tiers.tier(engine::Medium::Cpu).snapshot(kW0), (Hashes{7}));
  EXPECT_EQ(tiers.gpu().snapshot(kW0), (Hashes{9}));
  EXPECT_EQ(tiers.unknownMediumEvents(), 1u);
  EXPECT_TRUE(tiers.applyRemoved(kW0, "CPU", Hashes{7}));
  EXPECT_TRUE(tiers.tier(engine::Medium::Cpu).snapshot(kW0).empty());
}

// Feeds every pass of a run of prompts sharing prefixes into a tiered index, whose three views
// must equal the engine's tiers after each pass; returns the engine's host hits.
std::uint64_t checkTierViewsOverARun(const engine::EngineConfig& c) {
  engine::Engine e(c);
  engine::OfflineDriver driver(e);
  std::uint32_t state = 12345;
  const auto next = [&] { return state = state * 1103515245u + 12345u, (state >> 8) % 1000; };
  for (std::uint32_t i = 0; i < 80; ++i) {
    std::vector<std::uint32_t> prompt;
    const std::uint32_t group = next() % 6;
    for (std::uint32_t t = 0; t < 16 + 4 * (next() % 4); ++t) prompt.push_back(group * 1000 + t);
    for (std::uint32_t t = next() % 9; t > 0; --t) prompt.push_back(50000 + next());
    driver.add({.arrival_ms = 20.0 * i,
                .request = {.tokens = std::move(prompt), .max_output_tokens = 1 + next() % 8}});
  }
  TieredKvIndex index;
  std::uint64_t passes = 0, checked_cpu = 0;
  driver.run([&](const engine::PassResult& p, engine::OfflineDriver&) {
    ++passes;
    for (const engine::KvEvent& ev : p.kv_events) index.apply(ev, kW0);
    for (engine::Medium m : {engine::Medium::Gpu, engine::Medium::Cpu, engine::Medium::Disk}) {
      ASSERT_EQ(index.tier(m).snapshot(kW0), e.tierBlockHashes(0, m))
          << "pass " << passes << ", " << engine::mediumName(m);
    }
    checked_cpu += index.tier(engine::Medium::Cpu).numBlocks(kW0);
    EXPECT_EQ(index.tier(engine::Medium::Cpu).counters().unknown_removes, 0u);
    EXPECT_EQ(index.tier(engine::Medium::Cpu).counters().duplicate_stores, 0u);
  });
  EXPECT_GT(checked_cpu, 0u);  // the host tier was used
  return e.loadMetrics(0).tiers.g2_hit_blocks;
}

TEST(TieredKvIndexTest, PerTierViewEqualsTheEnginesAfterEveryPass) {
  // A small GPU pool with host and disk tiers.
  engine::EngineConfig c;
  c.num_gpu_blocks = 24;
  c.block_size = 4;
  c.num_g2_blocks = 16;
  c.num_g3_blocks = 32;
  c.offload_batch_size = 4;
  c.kv_bytes_per_token = 100000;
  EXPECT_GT(checkTierViewsOverARun(c), 0u);
}

TEST(TieredKvIndexTest, SglangHiCachePerTierViewEqualsTheEnginesAfterEveryPass) {
  // SGLang mode's host tier (HiCache, written through) under a small device pool.
  engine::EngineConfig c;
  c.engine_type = engine::EngineType::Sglang;
  c.num_gpu_blocks = 24;
  c.sglang.page_size = 4;
  c.num_g2_blocks = 16;
  c.offload_batch_size = 4;
  c.kv_bytes_per_token = 100000;
  EXPECT_GT(checkTierViewsOverARun(c), 0u);
}

}  // namespace
}  // namespace mocker::index
