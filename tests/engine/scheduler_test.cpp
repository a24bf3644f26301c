// Scenario tests for the vLLM scheduler and KV pool: the behaviours of docs/engine.md, pinned
// with small defaults (vllm, block_size 4, 16 blocks, polynomial timing). Behaviours
// every engine type shares are in scheduler_shared_test.cpp. Every step goes through
// Harness::step, which checks the per-step invariants.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <array>
#include <limits>
#include <random>

#include "engine/block_hash.h"
#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::concat;
using testing::Harness;
using testing::range;
using testing::removedHashes;
using testing::specConfig;
using testing::storedEvents;

constexpr double kPrefill8 = 16.6229144639296;  // T_prefill(1, 8, 0)

std::vector<std::uint64_t> hashesOf(const std::vector<std::uint32_t>& tokens) {
  return sequenceHashes(tokens, 4, HashSeeds{});
}

// Only full blocks are hashed; a 10-token prompt is stored as 2 blocks / 8 tokens.
TEST(SchedulerTest, PartialBlockIsNeverStored) {
  Harness h(specConfig());
  h.submit(range(1, 10), 1);
  const auto& p = h.step();
  const auto stored = storedEvents(p);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].block_hashes.size(), 2u);
  EXPECT_EQ(stored[0].token_ids, range(1, 8));
}

// The reference end times of one request (the rest of its timeline is checked for every
// engine type in scheduler_shared_test.cpp).
TEST(SchedulerTest, SingleRequestEndTimesMatchSpec) {
  Harness h(specConfig());
  h.submit(range(1, 8), 3);
  EXPECT_DOUBLE_EQ(h.step().end_ms, 28.7119769639296);
  EXPECT_NEAR(h.step().end_ms, 43.6739300889296, 1e-9);
  EXPECT_NEAR(h.step().end_ms, 58.6358832139296, 1e-9);
}

TEST(SchedulerTest, SyntheticTokenVectors) {
  EXPECT_EQ(syntheticToken(0, RequestId{1}, 0), 24979u);
  EXPECT_EQ(syntheticToken(0, RequestId{1}, 1), 7036u);
  EXPECT_EQ(syntheticToken(0, RequestId{2}, 0), 21348u);
  EXPECT_NE(syntheticToken(1, RequestId{1}, 0), 24979u);
}

// syntheticToken computes XXH3 from the words; the definition is XXH3-64 (seed 0) of the bytes
// token_seed (LE u64) ‖ id (LE u64) ‖ k (LE u32), here hashed by the library itself.
TEST(SchedulerTest, SyntheticTokenIsXxh3OfItsTwentyBytes) {
  const auto reference = [](std::uint64_t seed, std::uint64_t id, std::uint32_t k) {
    std::array<unsigned char, 20> buf{};
    for (std::size_t i = 0; i < 8; ++i) {
      buf[i] = static_cast<unsigned char>(seed >> (8 * i));
      buf[8 + i] = static_cast<unsigned char>(id >> (8 * i));
    }
    for (std::size_t i = 0; i < 4; ++i) buf[16 + i] = static_cast<unsigned char>(k >> (8 * i));
    return 1000 +
           static_cast<std::uint32_t>(XXH3_64bits_withSeed(buf.data(), buf.size(), 0) % 31000);
  };
  std::mt19937_64 rng(7);
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  for (int i = 0; i < 20000; ++i) {
    // Every byte position matters: full-width random words, and the extremes.
    const std::uint64_t seed = i % 7 == 0 ? kMax : i % 5 == 0 ? 0 : rng();
    const std::uint64_t id = i % 11 == 0 ? kMax : rng() >> (i % 64);
    const auto k = static_cast<std::uint32_t>(i % 13 == 0 ? 0xffffffffu : rng());
    ASSERT_EQ(syntheticToken(seed, RequestId{id}, k), reference(seed, id, k))
        << seed << " " << id << " " << k;
  }
}

// max_output 1 ⇒ the token and `completed` in pass 1; the blocks stay cached, inactive.
TEST(SchedulerTest, FirstTokenInPromptCompletionPass) {
  Harness h(specConfig());
  const RequestId id = h.submit(range(1, 8), 1);
  const auto& p = h.step();
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].id, id);
  EXPECT_TRUE(p.outputs[0].token.has_value());
  EXPECT_EQ(p.outputs[0].terminal, Terminal::Completed);
  EXPECT_EQ(p.load.active_blocks, 0u);
  EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 2u);
  EXPECT_TRUE(removedHashes(p).empty());
}

// The recompute rule does not apply to a request with nothing to generate: a fully cached prompt
// reuses all of it, and the only (terminal) signal carries the prefix hits.
TEST(SchedulerTest, ZeroOutputReportsCachedTokensOnItsTerminal) {
  auto cfg = specConfig();
  cfg.allow_empty_output = true;
  Harness h(cfg);
  h.submit(range(1, 16), 1);
  h.runUntilIdle();
  const RequestId id = h.submit(range(1, 16), 0);
  const auto& p = h.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 16u);
  const auto sig = h.signalsOf(id);
  ASSERT_EQ(sig.size(), 1u);
  EXPECT_EQ(sig[0].cached_tokens, 16u);
  EXPECT_EQ(p.fpm.scheduled.num_decode_requests, 0u);  // terminal right after scheduling
}

TEST(SchedulerTest, ZeroOutputIsRefusedByDefault) {
  Engine engine(specConfig());
  const auto r = engine.submit(Request{.tokens = range(1, 8), .max_output_tokens = 0});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("max_output_tokens"), std::string::npos);
}

// Chunked prefill over three passes.
TEST(SchedulerTest, ChunkedPrefillSplitsPromptAcrossPasses) {
  auto cfg = specConfig();
  cfg.max_num_batched_tokens = 8;
  Harness h(cfg);
  const RequestId id = h.submit(range(1, 20), 1);
  const std::uint64_t want_tokens[] = {8, 8, 4};
  const std::uint64_t want_kv[] = {0, 8, 16};
  const double want_prefill[] = {kPrefill8, kPrefill8, 16.5621604959824};
  for (int i = 0; i < 3; ++i) {
    const auto& p = h.step();
    EXPECT_EQ(p.fpm.scheduled.sum_prefill_tokens, want_tokens[i]) << "pass " << i + 1;
    EXPECT_EQ(p.fpm.scheduled.sum_prefill_kv_tokens, want_kv[i]) << "pass " << i + 1;
    EXPECT_NEAR(p.prefill_ms, want_prefill[i], 1e-9) << "pass " << i + 1;
    EXPECT_EQ(p.outputs.size(), i == 2 ? 1u : 0u) << "pass " << i + 1;
  }
  EXPECT_EQ(h.signalsOf(id).size(), 1u);
  EXPECT_FALSE(h.engine().hasWork());
}

// Running requests spend the budget before waiting ones are admitted.
TEST(SchedulerTest, RunningRequestsSpendBudgetFirst) {
  auto cfg = specConfig();
  cfg.max_num_batched_tokens = 4;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 12), 4);
  const auto& p1 = h.step();
  ASSERT_EQ(p1.admissions.size(), 1u);
  EXPECT_EQ(p1.fpm.scheduled.sum_prefill_tokens, 4u);
  const RequestId b = h.submit(range(101, 104), 1);
  const auto& p2 = h.step();  // A takes all 4 tokens; B waits
  EXPECT_TRUE(p2.admissions.empty());
  EXPECT_EQ(p2.fpm.queued.num_prefill_requests, 1u);
  const auto& p3 = h.step();  // A finishes its prompt and samples its first token
  EXPECT_TRUE(p3.admissions.empty());
  ASSERT_EQ(p3.outputs.size(), 1u);
  EXPECT_EQ(p3.outputs[0].id, a);
  const auto& p4 = h.step();  // A decodes (1 token); B admitted with the other 3
  ASSERT_EQ(p4.admissions.size(), 1u);
  EXPECT_EQ(p4.admissions[0].id, b);
  EXPECT_EQ(p4.fpm.scheduled.num_decode_requests, 1u);
  EXPECT_EQ(p4.fpm.scheduled.sum_prefill_tokens, 3u);
}

// With chunking off a prompt runs in one pass or waits; one over the budget is rejected.
TEST(SchedulerTest, ChunkingOffWaitsForBudgetAndRejectsOversizedPrompt) {
  auto cfg = specConfig();
  cfg.max_num_batched_tokens = 8;
  cfg.enable_chunked_prefill = false;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 6), 2);
  const RequestId b = h.submit(range(11, 15), 1);
  const auto& p1 = h.step();
  ASSERT_EQ(p1.admissions.size(), 1u);
  EXPECT_EQ(p1.admissions[0].id, a);
  const auto& p2 = h.step();
  ASSERT_EQ(p2.admissions.size(), 1u);
  EXPECT_EQ(p2.admissions[0].id, b);
  h.runUntilIdle();
  const RequestId c = h.submit(range(21, 29), 1);
  const auto& p = h.step();
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].id, c);
  EXPECT_EQ(p.outputs[0].terminal, Terminal::Rejected);
  EXPECT_FALSE(p.outputs[0].token.has_value());
}

// A blocked head is never overtaken; nothing is preempted for admission.
TEST(SchedulerTest, StrictHeadOfLineAdmission) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 10;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 32), 8);
  h.step();
  const RequestId b = h.submit(range(101, 116), 1);
  const RequestId c = h.submit(range(201, 204), 1);
  bool a_done = false;
  while (!a_done) {
    const auto& p = h.step();
    for (const auto& s : p.outputs) a_done |= s.id == a && s.terminal == Terminal::Completed;
    if (!a_done) {
      EXPECT_TRUE(p.admissions.empty());
      EXPECT_EQ(p.load.preemptions_total, 0u);
    }
  }
  const auto& next = h.step();
  ASSERT_EQ(next.admissions.size(), 2u);
  EXPECT_EQ(next.admissions[0].id, b);
  EXPECT_EQ(next.admissions[1].id, c);
  EXPECT_EQ(h.passes().back().load.preemptions_total, 0u);
}

// max_model_len rejects long prompts and stops generation at the limit.
TEST(SchedulerTest, MaxModelLenRejectsAndTruncates) {
  auto cfg = specConfig();
  cfg.max_model_len = 16;
  Harness h(cfg);
  const RequestId too_long = h.submit(range(1, 16), 4);
  const RequestId ok = h.submit(range(101, 110), 10);
  h.runUntilIdle();
  const auto rejected = h.signalsOf(too_long);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].terminal, Terminal::Rejected);
  const auto sig = h.signalsOf(ok);
  ASSERT_EQ(sig.size(), 6u);
  EXPECT_EQ(sig.back().terminal, Terminal::Completed);
}

// A partial prefix hit stores only the new blocks, parented on the shared prefix.
TEST(SchedulerTest, PartialPrefixReuseStoresSuffixWithParent) {
  Harness h(specConfig());
  h.submit(range(1, 16), 1);
  h.runUntilIdle();
  const auto prompt = concat(range(1, 8), range(90, 97));
  h.submit(prompt, 1);
  const auto& p = h.step();
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 8u);
  const auto stored = storedEvents(p);
  ASSERT_EQ(stored.size(), 1u);
  const auto s = hashesOf(prompt);
  EXPECT_EQ(stored[0].block_hashes, (std::vector<std::uint64_t>{s[2], s[3]}));
  EXPECT_EQ(stored[0].parent_block_hash, hashesOf(range(1, 16))[1]);
  EXPECT_EQ(stored[0].token_ids, range(90, 97));
}

// A block completed by generated tokens is stored in the pass that computes them.
TEST(SchedulerTest, DecodeFillsBlockStoredOnePassLater) {
  Harness h(specConfig());
  const RequestId id = h.submit(range(1, 6), 4);
  h.step();
  h.step();
  const auto& p3 = h.step();
  const auto stored = storedEvents(p3);
  ASSERT_EQ(stored.size(), 1u);
  const auto sig = h.signalsOf(id);
  ASSERT_GE(sig.size(), 2u);
  const std::vector<std::uint32_t> block1 = {5, 6, *sig[0].token, *sig[1].token};
  EXPECT_EQ(stored[0].token_ids, block1);
  EXPECT_EQ(stored[0].parent_block_hash, hashesOf(range(1, 4))[0]);
  h.runUntilIdle();
  EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 2u);  // g3 never computed: no third block
}

// LIFO preemption evicts the newest request, which waits at the head.
TEST(SchedulerTest, LifoPreemptsNewestRequest) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 4;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 8), 8);
  const RequestId b = h.submit(range(101, 108), 8);
  const auto& p1 = h.step();
  EXPECT_EQ(p1.admissions.size(), 2u);
  EXPECT_EQ(p1.load.active_blocks, 4u);
  const auto& p2 = h.step();
  EXPECT_EQ(removedHashes(p2), (std::vector<std::uint64_t>{hashesOf(range(101, 108))[1]}));
  EXPECT_TRUE(p2.admissions.empty());
  EXPECT_EQ(p2.load.preemptions_total, 1u);
  EXPECT_EQ(p2.load.waiting_requests, 1u);
  ASSERT_EQ(p2.outputs.size(), 1u);
  EXPECT_EQ(p2.outputs[0].id, a);
  EXPECT_EQ(p2.fpm.queued.num_decode_requests, 1u);
  EXPECT_EQ(p2.fpm.queued.sum_decode_kv_tokens, 9u);
  EXPECT_EQ(p2.fpm.queued.num_prefill_requests, 0u);
  const auto& p3 = h.step();
  EXPECT_TRUE(p3.admissions.empty());  // B needs 3 blocks, 1 available
  h.runUntilIdle();
  const auto sb = h.signalsOf(b);
  ASSERT_EQ(sb.size(), 8u);
  EXPECT_EQ(sb.back().terminal, Terminal::Completed);
}

// FIFO preempts the oldest running request (here the one being scheduled).
TEST(SchedulerTest, FifoPreemptsOldestRequest) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 4;
  cfg.preemption_mode = PreemptionMode::Fifo;
  Harness h(cfg);
  h.submit(range(1, 8), 8);
  const RequestId b = h.submit(range(101, 108), 8);
  h.step();
  const auto& p2 = h.step();
  EXPECT_EQ(removedHashes(p2), (std::vector<std::uint64_t>{hashesOf(range(1, 8))[1]}));
  ASSERT_EQ(p2.outputs.size(), 1u);
  EXPECT_EQ(p2.outputs[0].id, b);
  EXPECT_EQ(p2.load.preemptions_total, 1u);
  h.runUntilIdle();
}

// A victim already scheduled in the pass gives its token back and emits nothing.
TEST(SchedulerTest, PreemptedVictimRefundsBudget) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 4;
  cfg.preemption_mode = PreemptionMode::Fifo;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 7), 8);
  const RequestId b = h.submit(range(101, 108), 8);
  h.step();
  const auto& p2 = h.step();
  ASSERT_EQ(p2.kv_events.size(), 2u);
  const auto* stored = std::get_if<BlockStored>(&p2.kv_events[0]);
  ASSERT_NE(stored, nullptr);
  const std::uint64_t a_s1 = stored->block_hashes.at(0);
  const auto* removed = std::get_if<BlockRemoved>(&p2.kv_events[1]);
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->block_hash, a_s1);
  EXPECT_EQ(p2.fpm.scheduled.num_decode_requests, 1u);
  EXPECT_EQ(p2.fpm.scheduled.sum_decode_kv_tokens, 9u);
  ASSERT_EQ(p2.outputs.size(), 1u);
  EXPECT_EQ(p2.outputs[0].id, b);
  h.runUntilIdle();
  EXPECT_EQ(h.signalsOf(a).size(), 8u);
}

// Eviction is leaf-first and LRU, one Removed per hash, before the Stored it enables.
// X = [1..16] would fill the 16-token pool and be rejected (its prompt reaches L), so X is
// [1..15]: it leaves s_0..s_2 inactive and its partial block free; Y (3 blocks) takes the free
// block, then evicts s_2 and s_1 in that order.
TEST(SchedulerTest, LeafFirstEviction) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 4;
  Harness h(cfg);
  h.submit(range(1, 15), 1);
  h.step();
  h.submit(range(201, 212), 1);
  const auto& p = h.step();
  const auto x = hashesOf(range(1, 15));
  ASSERT_EQ(p.kv_events.size(), 3u);
  EXPECT_EQ(std::get<BlockRemoved>(p.kv_events[0]).block_hash, x[2]);
  EXPECT_EQ(std::get<BlockRemoved>(p.kv_events[1]).block_hash, x[1]);
  const auto& s = std::get<BlockStored>(p.kv_events[2]);
  EXPECT_EQ(s.block_hashes, hashesOf(range(201, 212)));
  EXPECT_FALSE(s.parent_block_hash.has_value());
}

// With two copies of a hash, evicting one is silent; evicting the last one is Removed.
TEST(SchedulerTest, RemovedOnlyWhenLastCopyEvicted) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 8;
  Harness h(cfg);
  h.submit(range(1, 16), 1);
  h.submit(range(1, 16), 1);  // second copy of s_3 (recomputed last block)
  h.step();
  // LRU now: A.s3, B.s3, s2, s1, s0; 3 free blocks.
  h.submit(range(101, 116), 1);  // needs 4 ⇒ evicts one copy of s3: no event
  const auto& p2 = h.step();
  EXPECT_TRUE(removedHashes(p2).empty());
  h.submit(range(201, 204), 1);  // needs 1 ⇒ evicts the last copy of s3
  const auto& p3 = h.step();
  EXPECT_EQ(removedHashes(p3), (std::vector<std::uint64_t>{hashesOf(range(1, 16))[3]}));
}

// An admission that cannot be satisfied changes nothing.
TEST(SchedulerTest, BlockedAdmissionChangesNothing) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 6;
  Harness h(cfg);
  h.submit(range(1, 8), 1);
  h.step();                     // 2 inactive blocks
  h.submit(range(11, 24), 20);  // running: 14 prompt tokens in 4 blocks, no growth for a pass
  h.step();
  const auto before = h.engine().cachedBlockHashes(0);
  h.submit(range(1, 12), 1);  // needs 3 blocks; 2 available
  const auto& p = h.step();
  EXPECT_TRUE(p.admissions.empty());
  EXPECT_TRUE(p.kv_events.empty());
  EXPECT_EQ(h.engine().cachedBlockHashes(0), before);
}

// Speedup ratios scale durations.
TEST(SchedulerTest, SpeedupRatioHalvesDurations) {
  auto cfg = specConfig();
  cfg.speedup_ratio = 2;
  Harness h(cfg);
  h.submit(range(1, 8), 3);
  EXPECT_DOUBLE_EQ(h.step().end_ms, 28.7119769639296 / 2);
  auto cfg2 = specConfig();
  cfg2.decode_speedup_ratio = 2;
  Harness h2(cfg2);
  h2.submit(range(1, 8), 3);
  const auto& p = h2.step();
  EXPECT_DOUBLE_EQ(p.prefill_ms, kPrefill8);
  EXPECT_DOUBLE_EQ(p.end_ms, kPrefill8 + 6.04453125);
}

// Speedup 0 leaves virtual time unscaled.
TEST(SchedulerTest, SpeedupZeroKeepsVirtualTime) {
  auto cfg = specConfig();
  cfg.speedup_ratio = 0;
  Harness h(cfg);
  h.submit(range(1, 8), 3);
  h.runUntilIdle();
  EXPECT_NEAR(h.now(), 58.6358832139296, 1e-9);
}

// FPM prefill-length variance over one pass.
TEST(SchedulerTest, FpmPrefillVariance) {
  Harness h(specConfig());
  h.submit(range(1, 4), 1);
  h.submit(range(11, 22), 1);
  const auto& p = h.step();
  EXPECT_EQ(p.fpm.scheduled.num_prefill_requests, 2u);
  EXPECT_DOUBLE_EQ(p.fpm.scheduled.var_prefill_length, 16.0);
  EXPECT_EQ(p.fpm.scheduled.sum_prefill_tokens, 16u);
  EXPECT_DOUBLE_EQ(p.fpm.wall_time, (p.end_ms - p.start_ms) / 1000.0);
}

// Cancel semantics.
TEST(SchedulerTest, CancelWaitingRunningAndFinished) {
  auto cfg = specConfig();
  cfg.max_num_seqs = 1;
  Harness h(cfg);
  const RequestId running = h.submit(range(1, 8), 5);
  const RequestId waiting = h.submit(range(11, 18), 5);
  h.step();
  EXPECT_EQ(h.engine().cancel(waiting), CancelResult::Applied);
  EXPECT_EQ(h.engine().cancel(waiting), CancelResult::Noop);
  EXPECT_EQ(h.engine().loadMetrics(0).waiting_requests, 0u);
  EXPECT_EQ(h.engine().cancel(running), CancelResult::Applied);
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
  EXPECT_FALSE(h.engine().hasWork());
  EXPECT_EQ(h.engine().checkInvariantsForTest(0).has_value(), true);
  const RequestId done = h.submit(range(21, 24), 1);
  h.runUntilIdle();
  EXPECT_EQ(h.engine().cancel(done), CancelResult::Noop);
  EXPECT_EQ(h.engine().cancel(RequestId{999}), CancelResult::Noop);
  EXPECT_TRUE(h.signalsOf(waiting).empty()) << "signal after cancel";
}

TEST(SchedulerTest, DiscardOutputsDropsOnlyThatRequest) {
  Harness h(specConfig());
  const RequestId a = h.submit(range(1, 8), 2);
  const RequestId b = h.submit(range(11, 18), 2);
  PassResult p = h.step();
  ASSERT_EQ(p.outputs.size(), 2u);
  discardOutputs(p, a);
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].id, b);
}

TEST(SchedulerTest, PlannedOutputTokensAreAuthoritative) {
  Harness h(specConfig());
  auto id = h.engine().submit(Request{.tokens = range(1, 8),
                                      .max_output_tokens = 10,
                                      .output_token_ids = std::vector<std::uint32_t>{7, 8, 9}});
  ASSERT_TRUE(id.has_value());
  h.runUntilIdle();
  const auto sig = h.signalsOf(*id);
  ASSERT_EQ(sig.size(), 3u);
  EXPECT_EQ(sig[0].token, 7u);
  EXPECT_EQ(sig[2].token, 9u);
  EXPECT_EQ(sig[2].terminal, Terminal::Completed);
}

TEST(SchedulerTest, InvalidRequestsAreRefusedWithReason) {
  Engine engine(specConfig());
  const auto empty = engine.submit(Request{.tokens = {}, .max_output_tokens = 1});
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().message.find("prompt"), std::string::npos);
  const auto rank = engine.submit(Request{.tokens = {1}, .max_output_tokens = 1, .dp_rank = 1});
  ASSERT_FALSE(rank.has_value());
  EXPECT_NE(rank.error().message.find("dp_rank"), std::string::npos);
  const auto empty_plan = engine.submit(Request{
      .tokens = {1}, .max_output_tokens = 4, .output_token_ids = std::vector<std::uint32_t>{}});
  EXPECT_FALSE(empty_plan.has_value());
  EXPECT_FALSE(engine.hasWork());
}

TEST(SchedulerTest, ReadmissionAfterPreemptionIsMarked) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 4;
  Harness h(cfg);
  h.submit(range(1, 8), 8);
  const RequestId b = h.submit(range(101, 108), 8);
  h.runUntilIdle();
  int readmissions = 0;
  for (const auto& p : h.passes()) {
    for (const auto& a : p.admissions) {
      if (a.id == b && a.is_readmission) ++readmissions;
    }
  }
  EXPECT_GE(readmissions, 1);
}

// A request preempted after generating tokens and readmitted on its own cached blocks
// reuses more cached tokens than its prompt, but reports at most its prompt as reused input,
// so reuse ratios stay <= 1. X runs ahead of A (a 2-token prompt); when the pool runs
// out, LIFO preempts A; A comes back after X completes and hits its own inactive blocks.
TEST(SchedulerTest, ReusedInputNeverExceedsThePrompt) {
  auto cfg = specConfig();
  cfg.num_gpu_blocks = 8;
  Harness h(cfg);
  h.submit(range(101, 104), 14);
  const RequestId a = h.submit({1, 2}, 24);
  h.runUntilIdle();
  std::uint64_t hits_before = 0;
  bool readmitted_with_hits = false;
  for (const auto& p : h.passes()) {
    for (const auto& adm : p.admissions) {
      if (adm.id != a) continue;
      EXPECT_LE(adm.reused_input_tokens, 2u);
      if (adm.is_readmission && p.load.prefix_cache_hits_tokens - hits_before > 2) {
        readmitted_with_hits = true;
      }
    }
    EXPECT_LE(p.load.prefix_cache_hit_rate, 1.0);
    hits_before = p.load.prefix_cache_hits_tokens;
  }
  EXPECT_TRUE(readmitted_with_hits) << "the scenario must readmit A on more than its prompt";
  const auto sig = h.signalsOf(a);
  ASSERT_FALSE(sig.empty());
  EXPECT_EQ(sig.back().terminal, Terminal::Completed);
  EXPECT_EQ(sig.back().index, 23u);
}

// DP ranks have their own pools, clocks and events; an out-of-range rank is refused.
TEST(SchedulerTest, DpRanksAreIndependent) {
  auto cfg = specConfig();
  cfg.dp_size = 2;
  Harness h(cfg);
  h.submit(range(1, 8), 2, 1);
  EXPECT_FALSE(h.engine().hasWork(0));
  EXPECT_TRUE(h.engine().hasWork(1));
  const auto& p = h.step(1);
  EXPECT_EQ(p.dp_rank, 1u);
  EXPECT_EQ(storedEvents(p).size(), 1u);
  EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 0u);
  EXPECT_EQ(h.engine().cachedBlockHashes(1).size(), 2u);
  EXPECT_FALSE(h.engine().submit(Request{.tokens = {1}, .max_output_tokens = 1, .dp_rank = 2}));
}

// TRT-LLM reserves prompt + max output up front and never preempts.
TEST(SchedulerTest, TrtllmReservesToCompletion) {
  auto cfg = specConfig();
  cfg.engine_type = EngineType::Trtllm;
  cfg.num_gpu_blocks = 10;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 8), 16);
  const RequestId b = h.submit(range(101, 108), 16);
  bool a_done = false;
  while (h.engine().hasWork()) {
    const auto& p = h.step();
    for (const auto& adm : p.admissions) {
      if (adm.id == b) {
        EXPECT_TRUE(a_done) << "B admitted before A completed";
      }
    }
    for (const auto& s : p.outputs) a_done |= s.id == a && s.terminal == Terminal::Completed;
    EXPECT_EQ(p.load.preemptions_total, 0u);
  }
  EXPECT_EQ(h.signalsOf(a).size(), 16u);
  EXPECT_EQ(h.signalsOf(b).size(), 16u);
}

TEST(SchedulerTest, TrtllmFullyCachedPromptSkipsPrefill) {
  auto cfg = specConfig();
  cfg.engine_type = EngineType::Trtllm;
  Harness h(cfg);
  h.submit(range(1, 16), 1);
  h.runUntilIdle();
  h.submit(range(1, 16), 1);
  const auto& p = h.step();
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 16u);
  EXPECT_EQ(p.prefill_ms, 0.0);
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_TRUE(p.outputs[0].token.has_value());
}

// A worker restart (the service's `restart` fault) swaps in a fresh engine: nothing cached, and
// its ids continue after the old engine's, so no id names two requests.
TEST(SchedulerTest, FreshEngineContinuesTheIdsOfTheOneItReplaces) {
  Harness old(specConfig());
  old.submit(range(1, 8), 1);
  const RequestId second = old.submit(range(1, 8), 1);
  old.runUntilIdle();
  Engine fresh(specConfig());
  fresh.continueIdsAfter(old.engine());
  EXPECT_TRUE(fresh.cachedBlockHashes(0).empty());
  const auto id = fresh.submit(Request{.tokens = range(1, 8), .max_output_tokens = 1});
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->value(), second.value() + 1);
  const PassResult p = fresh.step(0, 0.0);
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].cached_tokens, 0u);  // the old engine's cache is gone
}

}  // namespace
}  // namespace mocker::engine
