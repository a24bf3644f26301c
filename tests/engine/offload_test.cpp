// KV offload tiers (engine/README.md, "KV offload tiers"): the processor-sharing link, the LRU
// tier, and hand-computed engine timelines — a block evicted from the GPU is offloaded to host
// memory, a later prefix hit there is onboarded at the link's bandwidth before the request runs,
// two onboardings at once share the link — plus per-tier event order in a randomized soak (the
// harness replays every pass's events into one set per medium and compares with the tiers).
//
// Timeline settings: block_size 4, kv_bytes_per_token 1e6 ⇒ 4e6 bytes a block; every link at
// 1 GB/s = 1e6 bytes per ms ⇒ 4 ms a block alone on a link; timing_model fixed: a pass that
// computes prompt tokens costs 10 ms, one that samples 5 ms more.
#include <gtest/gtest.h>

#include <vector>

#include "engine/block_hash.h"
#include "engine/engine.h"
#include "engine/offload.h"
#include "tests/engine/engine_harness.h"

namespace mocker::engine {
namespace {

using testing::concat;
using testing::Harness;
using testing::range;

TEST(PsLinkTest, ConcurrentJobsShareTheBandwidth) {
  PsLink link(1.0);  // 1 byte per ms
  std::vector<std::uint64_t> done;
  link.add(1, 4.0, 0.0);
  EXPECT_EQ(link.nextCompletionMs(), 4.0);  // alone: 4 bytes in 4 ms
  link.add(2, 4.0, 0.0);
  EXPECT_EQ(link.nextCompletionMs(), 8.0);  // two at once: each at half speed
  link.advanceTo(8.0, done);
  EXPECT_EQ(done, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_TRUE(link.idle());
}

TEST(PsLinkTest, ALateJobSlowsTheFirst) {
  // Job 1 (8 bytes) alone for 4 ms (4 bytes left), then job 2 (4 bytes) joins: both have 4 left
  // at half speed ⇒ both end at 4 + 8 = 12 ms.
  PsLink link(1.0);
  std::vector<std::uint64_t> done;
  link.add(1, 8.0, 0.0);
  link.advanceTo(4.0, done);
  EXPECT_TRUE(done.empty());
  link.add(2, 4.0, 4.0);
  EXPECT_EQ(link.nextCompletionMs(), 12.0);
  // A third of 2 bytes at 6 ms: three share until it ends (2 bytes at 1/3 ⇒ 6 ms more).
  link.advanceTo(6.0, done);  // jobs 1 and 2 have 3 bytes left
  link.add(3, 2.0, 6.0);
  link.advanceTo(12.0, done);
  EXPECT_EQ(done, (std::vector<std::uint64_t>{3}));
  link.advanceTo(100.0, done);  // 1 byte each left at 12, two share ⇒ both at 14
  EXPECT_EQ(done, (std::vector<std::uint64_t>{3, 1, 2}));
}

TEST(TierLruTest, EvictsTheLeastRecentlyUsed) {
  TierLru t(2);
  EXPECT_EQ(t.insert(10), std::nullopt);
  EXPECT_EQ(t.insert(20), std::nullopt);
  t.touch(10);
  EXPECT_EQ(t.insert(30), 20u);
  EXPECT_EQ(t.hashes(), (std::vector<std::uint64_t>{10, 30}));
}

EngineConfig tierConfig(std::uint32_t gpu_blocks, std::uint32_t g2, std::uint32_t g3 = 0) {
  EngineConfig c;
  c.num_gpu_blocks = gpu_blocks;
  c.block_size = 4;
  c.timing_model = TimingModelKind::Fixed;
  c.fixed_prefill_ms = 10.0;
  c.fixed_decode_ms = 5.0;
  c.kv_bytes_per_token = 1000000;
  c.num_g2_blocks = g2;
  c.num_g3_blocks = g3;
  c.offload_batch_size = 1;
  c.offload_gpu_to_host_gbps = c.offload_host_to_gpu_gbps = 1.0;
  c.offload_host_to_disk_gbps = c.offload_disk_to_host_gbps = 1.0;
  return c;
}

std::vector<std::uint64_t> hashesOf(const std::vector<std::uint32_t>& tokens) {
  return sequenceHashes(tokens, 4, HashSeeds{});
}

BlockStored hostStored(std::uint64_t h, Medium m = Medium::Cpu) {
  return BlockStored{.block_hashes = {h}, .block_size = 4, .medium = m};
}

TEST(OffloadTest, EvictedBlocksGoToHostAndAHitThereOnboardsAtTheLinkBandwidth) {
  Harness h(tierConfig(3, 8));
  const auto a = range(1, 8);                           // 2 full blocks a0, a1
  const auto b = range(101, 111);                       // 11 tokens: b0, b1 + a partial block
  const auto c = concat(range(1, 8), {201, 202, 203});  // a0, a1 + 3 tokens
  const auto ah = hashesOf(a), bh = hashesOf(b);

  h.submit(a, 1);
  EXPECT_EQ(h.step().end_ms, 15.0);  // A computes, samples, completes: a0, a1 inactive
  h.submit(b, 1);
  // B needs 3 blocks: the free one, then a1 and a0 are evicted (leaf first). Each goes GPU→host
  // in its own batch, one batch at a time: a1 over [15, 19], a0 over [19, 23].
  const PassResult& pb = h.step();
  EXPECT_EQ(pb.end_ms, 30.0);
  ASSERT_EQ(pb.kv_events.size(), 3u);
  EXPECT_EQ(pb.kv_events[0], KvEvent(BlockRemoved{.block_hash = ah[1]}));
  EXPECT_EQ(pb.kv_events[1], KvEvent(BlockRemoved{.block_hash = ah[0]}));
  EXPECT_EQ(h.engine().nextTimerMs(0), 19.0);

  h.submit(c, 1);
  // At 30 both copies are in G2 (Stored CPU in completion order). C's prefix a0, a1 is there
  // (the recompute cap allows floor(10 / 4) = 2 blocks): C takes the 3 GPU blocks its admission
  // will need — the free one, then b1 and b0, evicted and on their way to host (b1 over
  // [30, 34], b0 over [34, 38]) — and parks while 8e6 bytes cross host→GPU: 8 ms.
  const PassResult& pc = h.step();
  EXPECT_TRUE(pc.did_work);
  EXPECT_TRUE(pc.admissions.empty());
  ASSERT_EQ(pc.kv_events.size(), 4u);
  EXPECT_EQ(pc.kv_events[0], KvEvent(hostStored(ah[1])));
  EXPECT_EQ(pc.kv_events[1], KvEvent(hostStored(ah[0])));
  EXPECT_EQ(pc.kv_events[2], KvEvent(BlockRemoved{.block_hash = bh[1]}));
  EXPECT_EQ(pc.kv_events[3], KvEvent(BlockRemoved{.block_hash = bh[0]}));
  EXPECT_EQ(pc.load.onboarding_requests, 1u);
  EXPECT_EQ(pc.load.waiting_requests, 1u);
  EXPECT_EQ(h.engine().nextTimerMs(0), 34.0);  // b1 reaches host memory

  h.advanceTo(34.0);
  const PassResult& p34 = h.step();
  ASSERT_EQ(p34.kv_events.size(), 1u);
  EXPECT_EQ(p34.kv_events[0], KvEvent(hostStored(bh[1])));
  EXPECT_TRUE(p34.admissions.empty());
  EXPECT_EQ(h.engine().nextTimerMs(0), 38.0);  // C's onboarding: 30 + 8

  h.advanceTo(38.0);
  const PassResult& p38 = h.step();
  // b0 reaches host memory; the onboarded blocks become visible on the GPU (one run with its
  // tokens); C is admitted with 8 tokens reused and computes 3 tokens: 38 + 10 + 5.
  ASSERT_EQ(p38.kv_events.size(), 2u);
  EXPECT_EQ(p38.kv_events[0], KvEvent(hostStored(bh[0])));
  const auto& run = std::get<BlockStored>(p38.kv_events[1]);
  EXPECT_EQ(run.block_hashes, (std::vector<std::uint64_t>{ah[0], ah[1]}));
  EXPECT_EQ(run.medium, Medium::Gpu);
  EXPECT_EQ(run.token_ids, a);
  ASSERT_EQ(p38.admissions.size(), 1u);
  EXPECT_EQ(p38.admissions[0].reused_input_tokens, 8u);
  EXPECT_EQ(p38.end_ms, 53.0);
  ASSERT_EQ(p38.outputs.size(), 1u);
  EXPECT_EQ(p38.outputs[0].cached_tokens, 8u);

  const TierMetrics& m = p38.load.tiers;
  EXPECT_EQ(m.g2_blocks, 4u);
  EXPECT_EQ(m.g2_capacity, 8u);
  EXPECT_EQ(m.g2_hit_blocks, 2u);
  EXPECT_EQ(m.g3_hit_blocks, 0u);
  EXPECT_EQ(m.offloaded_blocks, 4u);
  EXPECT_EQ(m.bytes_gpu_to_host, 16000000u);
  EXPECT_EQ(m.bytes_host_to_gpu, 8000000u);
  EXPECT_EQ(m.onboardings, 1u);
  EXPECT_EQ(m.onboard_ms_total, 8.0);
  EXPECT_EQ(p38.load.onboarding_requests, 0u);
}

TEST(OffloadTest, TwoOnboardingsAtOnceShareTheLink) {
  EngineConfig config = tierConfig(4, 8);
  config.offload_batch_size = 2;
  Harness h(config);
  const auto p1 = concat(range(1, 4), {5});    // one full block x
  const auto p2 = concat(range(11, 14), {5});  // one full block y
  h.submit(p1, 1);
  h.step();  // 0 → 15
  h.submit(p2, 1);
  h.step();  // 15 → 30; x and y cached, inactive; two blocks free
  h.submit(range(101, 115), 1);
  // 4 blocks: the two free ones, x and y evicted ⇒ one batch of 2 blocks: [30, 38].
  EXPECT_EQ(h.step().end_ms, 45.0);
  EXPECT_EQ(h.engine().nextTimerMs(0), 38.0);
  h.advanceTo(50.0);
  const auto c1 = h.submit(concat(range(1, 4), {9, 9}), 1);
  const auto c2 = h.submit(concat(range(11, 14), {9, 9}), 1);
  // Both find their block in G2 and park in the same pass at 50 (each with the 2 blocks its
  // admission needs): 4e6 bytes each, sharing the host→GPU link ⇒ both end at 50 + 8 (one alone
  // would end at 54). The blocks they evicted go to host meanwhile (first batch [50, 58]).
  const PassResult& park = h.step();
  EXPECT_EQ(park.load.onboarding_requests, 2u);
  EXPECT_EQ(h.engine().nextTimerMs(0), 58.0);
  h.advanceTo(58.0);
  const PassResult& run = h.step();
  ASSERT_EQ(run.admissions.size(), 2u);
  EXPECT_EQ(run.admissions[0].id, c1);
  EXPECT_EQ(run.admissions[1].id, c2);
  EXPECT_EQ(run.admissions[0].reused_input_tokens, 4u);
  EXPECT_EQ(run.load.tiers.onboard_ms_total, 16.0);
  EXPECT_EQ(run.load.tiers.onboard_ms_max, 8.0);
}

TEST(OffloadTest, HostEvictionsGoToDiskAndADiskHitCrossesBothLinks) {
  // G2 holds 1 block: a second offload evicts the first to G3 (Removed CPU, then Stored DISK
  // after 4 ms on the host→disk link). A hit on it onboards over disk→host (4 ms) then
  // host→GPU (4 ms).
  Harness h(tierConfig(3, 1, 4));
  const auto p1 = concat(range(1, 4), {5});
  const auto p2 = concat(range(11, 14), {5});
  const auto x = hashesOf(p1)[0];
  h.submit(p1, 1);
  h.step();  // 0 → 15
  h.submit(p2, 1);
  h.step();  // 15 → 30
  h.submit(range(101, 111), 1);
  h.step();  // 30 → 45: the free block, then x (released first) and y are evicted
  h.advanceTo(100.0);
  h.submit(concat(range(1, 4), {9, 9}), 1);
  h.runUntilIdle();
  const TierMetrics& m = h.passes().back().load.tiers;
  // x went to G2 at [30, 34], y at [34, 38] evicting x from G2 ⇒ x on disk over [38, 42].
  EXPECT_EQ(m.g3_hit_blocks, 1u);
  EXPECT_EQ(m.g2_hit_blocks, 0u);
  EXPECT_EQ(m.bytes_disk_to_host, 4000000u);
  // C's second block evicts b1 at 100; b1 reaches G2 at 104 and pushes y to disk too.
  EXPECT_EQ(m.bytes_host_to_disk, 8000000u);
  EXPECT_EQ(m.onboard_ms_total, 8.0);
  bool disk_stored = false;
  for (const PassResult& p : h.passes()) {
    for (const KvEvent& e : p.kv_events) {
      disk_stored |= e == KvEvent(hostStored(x, Medium::Disk));
    }
  }
  EXPECT_TRUE(disk_stored);
}

TEST(OffloadTest, TiersOffLeaveEventsAndMetricsUntouched) {
  Harness h(tierConfig(3, 0));
  h.submit(range(1, 8), 1);
  h.step();
  h.submit(range(101, 111), 1);
  const PassResult& p = h.step();
  EXPECT_EQ(p.load.tiers, TierMetrics{});
  EXPECT_EQ(h.engine().nextTimerMs(0), std::nullopt);
  for (const KvEvent& e : p.kv_events) {
    if (const auto* r = std::get_if<BlockRemoved>(&e)) {
      EXPECT_EQ(r->medium, Medium::Gpu);
    }
  }
}

TEST(OffloadTest, RefusesTiersItCannotModel) {
  EngineConfig c = tierConfig(3, 0, 4);
  EXPECT_EQ(checkEngineConfig(c)->fields.front(), "num_g3_blocks");
  c = tierConfig(3, 4, 8);
  c.engine_type = EngineType::Sglang;
  c.block_size = 0;
  c.sglang.page_size = 4;
  EXPECT_EQ(checkEngineConfig(c)->fields.front(), "num_g3_blocks");
  c = tierConfig(3, 4);
  c.enable_prefix_caching = false;
  EXPECT_EQ(checkEngineConfig(c)->fields.front(), "num_g2_blocks");
  c = tierConfig(3, 4);
  c.offload_host_to_gpu_gbps = 0.0;
  EXPECT_EQ(checkEngineConfig(c)->fields.front(), "offload_host_to_gpu_gbps");
  c = tierConfig(3, 4);
  c.offload_batch_size = 0;
  EXPECT_EQ(checkEngineConfig(c)->fields.front(), "offload_batch_size");
}

class OffloadSoakTest : public ::testing::TestWithParam<EngineType> {};

TEST_P(OffloadSoakTest, EventsStayInOrderPerTierAndNoBlockLeaks) {
  // Random prompts over a few shared prefixes, a GPU pool far smaller than the working set, G2
  // and G3 on, random cancels: the harness checks the invariants and every tier's events after
  // every pass; at the end every request has ended and no GPU block is held.
  EngineConfig c = tierConfig(12, 6, 10);
  c.engine_type = GetParam();
  c.offload_batch_size = 2;
  c.max_num_batched_tokens = 16;
  Harness h(c);
  testing::randomTierSoak(h, 60, 4, 3);
  h.runUntilIdle();
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
  EXPECT_GT(h.passes().back().load.tiers.g2_hit_blocks + h.passes().back().load.tiers.g3_hit_blocks,
            0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, OffloadSoakTest,
                         ::testing::Values(EngineType::Vllm, EngineType::Trtllm));

}  // namespace
}  // namespace mocker::engine
