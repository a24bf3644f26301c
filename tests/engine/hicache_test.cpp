// SGLang's hierarchical cache in --engine-type sglang (engine/SGLANG.md, "Hierarchical cache"):
// hand-computed timelines — pages the tree stores are written through to host memory, a later
// radix match that continues there is loaded back at the link's bandwidth before the request
// runs, two loads at once share the link, a host hit under the load-back threshold is
// recomputed — and a randomized soak in which the harness checks every pass's events per tier
// against the engine's tiers.
//
// Timeline settings: page size 16, kv_bytes_per_token 250,000 ⇒ 4e6 bytes a page; every link at
// 1 GB/s = 1e6 bytes per ms ⇒ 4 ms a page alone on a link; offload batches of one page;
// timing_model fixed: an extend pass costs 10 ms of prefill plus 5 ms for the first tokens.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/block_hash.h"
#include "engine/engine.h"
#include "tests/engine/engine_harness.h"

namespace mocker::engine {
namespace {

using testing::concat;
using testing::Harness;
using testing::range;

constexpr std::uint32_t kPage = 16;

EngineConfig hiCacheConfig(std::uint32_t gpu_pages, std::uint32_t host_pages) {
  EngineConfig c;
  c.engine_type = EngineType::Sglang;
  c.num_gpu_blocks = gpu_pages;
  c.sglang.page_size = kPage;
  c.timing_model = TimingModelKind::Fixed;
  c.fixed_prefill_ms = 10.0;
  c.fixed_decode_ms = 5.0;
  c.kv_bytes_per_token = 250000;
  c.num_g2_blocks = host_pages;
  c.offload_batch_size = 1;
  c.offload_gpu_to_host_gbps = c.offload_host_to_gpu_gbps = 1.0;
  return c;
}

std::vector<std::uint64_t> hashesOf(const std::vector<std::uint32_t>& tokens) {
  return sequenceHashes(tokens, kPage, HashSeeds{});
}

KvEvent hostStored(std::uint64_t h) {
  return BlockStored{.block_hashes = {h}, .block_size = kPage, .medium = Medium::Cpu};
}

KvEvent gpuRemoved(std::uint64_t h) { return BlockRemoved{.block_hash = h}; }

TEST(HiCacheTest, WrittenThroughPagesAreLoadedBackAtTheLinkBandwidth) {
  Harness h(hiCacheConfig(4, 8));
  const auto a = range(1, 32);                           // pages a0, a1
  const auto b = range(101, 143);                        // 43 tokens: b0, b1 + 11
  const auto c = concat(range(1, 32), {201, 202, 203});  // a0, a1 + 3 tokens
  const auto ah = hashesOf(a), bh = hashesOf(b);

  h.submit(a, 1);
  // A computes a0, a1 (Stored GPU), samples its token into a third page and completes: 15 ms.
  // Write-through: a0 crosses GPU→host over [0, 4], a1 over [4, 8].
  const PassResult& pa = h.step();
  EXPECT_EQ(pa.end_ms, 15.0);
  ASSERT_EQ(pa.kv_events.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(pa.kv_events[0]).block_hashes,
            (std::vector<std::uint64_t>{ah[0], ah[1]}));
  EXPECT_EQ(h.engine().nextTimerMs(0), 4.0);

  h.submit(b, 1);
  // At 15 both copies are in host memory (Stored CPU, in completion order). B needs 3 pages:
  // the 2 free ones and a1 (the leaf) is evicted — its host copy stays. b0, b1 are written
  // through over [15, 19] and [19, 23].
  const PassResult& pb = h.step();
  EXPECT_EQ(pb.end_ms, 30.0);
  ASSERT_EQ(pb.kv_events.size(), 4u);
  EXPECT_EQ(pb.kv_events[0], hostStored(ah[0]));
  EXPECT_EQ(pb.kv_events[1], hostStored(ah[1]));
  EXPECT_EQ(pb.kv_events[2], gpuRemoved(ah[1]));
  EXPECT_EQ(std::get<BlockStored>(pb.kv_events[3]).block_hashes,
            (std::vector<std::uint64_t>{bh[0], bh[1]}));

  h.submit(c, 1);
  // C's match: a0 on the device, a1 in host memory (the match stops one token short of the
  // prompt: floor(34 / 16) = 2 pages). 16 tokens >= the load-back threshold: C locks a0, takes
  // the free page for a1 and parks while 4e6 bytes cross host→GPU: [30, 34].
  const PassResult& pc = h.step();
  EXPECT_TRUE(pc.did_work);
  EXPECT_TRUE(pc.admissions.empty());
  EXPECT_EQ(pc.end_ms, 30.0);
  ASSERT_EQ(pc.kv_events.size(), 2u);
  EXPECT_EQ(pc.kv_events[0], hostStored(bh[0]));
  EXPECT_EQ(pc.kv_events[1], hostStored(bh[1]));
  EXPECT_EQ(pc.load.onboarding_requests, 1u);
  EXPECT_EQ(pc.load.waiting_requests, 1u);
  EXPECT_EQ(h.engine().nextTimerMs(0), 34.0);

  h.advanceTo(34.0);
  const PassResult& p34 = h.step();
  // a1 is back on the device (Stored GPU under a0, with its tokens; already in host memory: no
  // copy). C is admitted with 32 tokens reused and computes 3: its third page evicts b1.
  // 34 + 10 + 5.
  ASSERT_EQ(p34.kv_events.size(), 2u);
  const auto& back = std::get<BlockStored>(p34.kv_events[0]);
  EXPECT_EQ(back.block_hashes, (std::vector<std::uint64_t>{ah[1]}));
  EXPECT_EQ(back.parent_block_hash, ah[0]);
  EXPECT_EQ(back.medium, Medium::Gpu);
  EXPECT_EQ(back.token_ids, range(17, 32));
  EXPECT_EQ(p34.kv_events[1], gpuRemoved(bh[1]));
  ASSERT_EQ(p34.admissions.size(), 1u);
  EXPECT_EQ(p34.admissions[0].reused_input_tokens, 32u);
  EXPECT_EQ(p34.end_ms, 49.0);
  ASSERT_EQ(p34.outputs.size(), 1u);
  EXPECT_EQ(p34.outputs[0].cached_tokens, 32u);
  EXPECT_EQ(p34.fpm.scheduled.sum_prefill_tokens, 3u);
  EXPECT_EQ(p34.fpm.scheduled.sum_prefill_kv_tokens, 32u);

  const TierMetrics& m = p34.load.tiers;
  EXPECT_EQ(m.g2_blocks, 4u);
  EXPECT_EQ(m.g2_capacity, 8u);
  EXPECT_EQ(m.g2_hit_blocks, 1u);
  EXPECT_EQ(m.offloaded_blocks, 4u);
  EXPECT_EQ(m.bytes_gpu_to_host, 16000000u);
  EXPECT_EQ(m.bytes_host_to_gpu, 4000000u);
  EXPECT_EQ(m.onboardings, 1u);
  EXPECT_EQ(m.onboard_ms_total, 4.0);
  EXPECT_EQ(p34.load.onboarding_requests, 0u);
  EXPECT_EQ(p34.load.prefix_cache_hits_tokens, 32u);
}

TEST(HiCacheTest, TwoLoadsAtOnceShareTheLink) {
  EngineConfig config = hiCacheConfig(8, 16);
  config.offload_batch_size = 2;
  Harness h(config);
  const auto p1 = concat(range(1, 32), {7});   // x0, x1
  const auto p2 = concat(range(41, 72), {7});  // y0, y1
  h.submit(p1, 1);
  h.step();  // 0 → 15; x0, x1 written through over [0, 8]
  h.submit(p2, 1);
  h.step();  // 15 → 30; y0, y1 over [15, 23]
  h.submit(range(101, 212), 1);
  // 112 tokens: 7 pages + 1 for its token = all 8: x and y are evicted from the device (their
  // host copies stay). Its 7 pages are written through in batches of 2 over [30, 58].
  EXPECT_EQ(h.step().end_ms, 45.0);
  h.advanceTo(60.0);
  const auto c1 = h.submit(concat(range(1, 32), {9, 9}), 1);
  const auto c2 = h.submit(concat(range(41, 72), {9, 9}), 1);
  // Both find their 2 pages in host memory and park in the same pass at 60: 8e6 bytes each,
  // sharing the host→GPU link ⇒ both end at 60 + 16 (one alone would end at 68).
  const PassResult& park = h.step();
  EXPECT_EQ(park.load.onboarding_requests, 2u);
  EXPECT_EQ(h.engine().nextTimerMs(0), 76.0);
  h.advanceTo(76.0);
  const PassResult& run = h.step();
  ASSERT_EQ(run.admissions.size(), 2u);
  EXPECT_EQ(run.admissions[0].id, c1);
  EXPECT_EQ(run.admissions[1].id, c2);
  EXPECT_EQ(run.admissions[0].reused_input_tokens, 32u);
  EXPECT_EQ(run.load.tiers.onboard_ms_total, 32.0);
  EXPECT_EQ(run.load.tiers.onboard_ms_max, 16.0);
  EXPECT_EQ(run.load.tiers.g2_hit_blocks, 4u);
}

TEST(HiCacheTest, AHostHitUnderTheThresholdIsRecomputed) {
  // Page size 4: a one-page host hit is 4 tokens, under SGLang's load_back_threshold of 10.
  EngineConfig config = hiCacheConfig(4, 8);
  config.sglang.page_size = 4;
  Harness h(config);
  h.submit(range(1, 8), 1);
  h.step();  // 0 → 15: pages a0, a1 written through
  h.submit(range(101, 111), 1);
  h.step();  // 15 → 30: a1 evicted, its host copy stays
  h.submit(concat(range(1, 8), {9, 9}), 1);
  const PassResult& p = h.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 4u);  // a0 only: a1 is recomputed
  EXPECT_EQ(p.load.onboarding_requests, 0u);
  EXPECT_EQ(p.load.tiers.g2_hit_blocks, 0u);
}

TEST(HiCacheTest, ACancelledLoadFreesItsPagesAndItsCopyRunsOn) {
  Harness h(hiCacheConfig(4, 8));
  h.submit(range(1, 32), 1);
  h.step();
  h.submit(range(101, 143), 1);
  h.step();
  const auto c = h.submit(concat(range(1, 32), {201}), 1);
  EXPECT_EQ(h.step().load.onboarding_requests, 1u);
  EXPECT_EQ(h.engine().cancel(c), CancelResult::Applied);
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
  EXPECT_EQ(h.engine().loadMetrics(0).onboarding_requests, 0u);
  EXPECT_FALSE(h.engine().hasWork(0));
  // The copy still ends at 34; nothing is published for it.
  h.advanceTo(34.0);
  const PassResult& p = h.step();
  EXPECT_TRUE(p.kv_events.empty());
  EXPECT_EQ(p.load.tiers.onboardings, 1u);
}

TEST(HiCacheTest, KvEventsOffKeepTheTreeKeyedByHashesAndTheOutputsTheSame) {
  // Page size 1 would key the tree by tokens with events off; a host tier keeps hash keys, so
  // the run with events off produces the same outputs as the one with them on.
  EngineConfig config = hiCacheConfig(48, 96);
  config.sglang.page_size = 1;
  std::vector<std::vector<OutputSignal>> outputs;
  for (bool events : {true, false}) {
    Harness h(config);
    h.engine().setKvEvents(events);
    std::mt19937 mt(3);
    for (int i = 0; i < 30; ++i) {
      const auto group = static_cast<std::uint32_t>(mt() % 8);
      auto prompt =
          range(1000 * group + 1, 1000 * group + 12 + static_cast<std::uint32_t>(mt() % 8));
      h.submit(prompt, static_cast<std::uint32_t>(1 + mt() % 3));
      if (i % 3 == 2) h.runUntilIdle();
    }
    h.runUntilIdle();
    outputs.emplace_back();
    for (const PassResult& p : h.passes()) {
      outputs.back().insert(outputs.back().end(), p.outputs.begin(), p.outputs.end());
    }
    EXPECT_GT(h.passes().back().load.tiers.g2_hit_blocks, 0u);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(HiCacheTest, RefusesAStorageTier) {
  EngineConfig c = hiCacheConfig(4, 8);
  EXPECT_FALSE(checkEngineConfig(c).has_value());
  c.num_g3_blocks = 8;
  EXPECT_EQ(checkEngineConfig(c)->fields.front(), "num_g3_blocks");
}

TEST(HiCacheTest, SoakEventsStayInOrderPerTierAndNoPageLeaks) {
  // Random prompts over a few shared prefixes, a device pool far smaller than the working set,
  // random cancels: the harness checks the invariants and every tier's events after every pass.
  EngineConfig c = hiCacheConfig(12, 40);
  c.sglang.page_size = 4;
  c.offload_batch_size = 2;
  c.sglang.chunked_prefill_size = 16;
  Harness h(c);
  testing::randomTierSoak(h, 80, 12, 4);
  h.runUntilIdle();
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
  EXPECT_GT(h.passes().back().load.tiers.g2_hit_blocks, 0u);
}

}  // namespace
}  // namespace mocker::engine
