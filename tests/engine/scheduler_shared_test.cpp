// Behaviours every engine type shares, run once per type (TEST_P over vllm, trtllm, sglang) with
// small test defaults: 16 blocks (SGLang: pages) of 4 tokens, polynomial timing. Where the
// engines model a case differently the expected value comes from the EngineCase, never from the
// implementation. Every step goes through Harness::step, which checks the per-step invariants.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <ostream>
#include <string>
#include <utility>

#include "engine/block_hash.h"
#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::Harness;
using testing::range;
using testing::storedEvents;

constexpr double kPrefill8 = 16.6229144639296;  // T_prefill(1, 8, 0)

/// Polynomial T_decode for a KV usage fraction u.
double decodeMs(double u) { return std::max(1.0, -25.74 * u * u + 54.01 * u + 5.74); }

std::vector<std::uint64_t> hashesOf(const std::vector<std::uint32_t>& tokens) {
  return sequenceHashes(tokens, 4, HashSeeds{});
}

struct EngineCase {
  EngineType type;
  /// Decode time of passes 1–3 of range(1, 8) with 3 outputs. vLLM models KV usage by active
  /// blocks (3 blocks hold 9 and 10 tokens), SGLang by Σ len (8, 9, 10 tokens of 64).
  std::array<double, 3> decode_ms;
  /// Shortest prompt (with one output token) rejected outright by a 4-block pool: vLLM and
  /// TRT-LLM reject a prompt that fills the pool (prompt >= L = N·B), SGLang's strict budget
  /// check fails once the prompt needs all N pages.
  std::uint32_t oversized_prompt_len;
};

void PrintTo(const EngineCase& c, std::ostream* os) { *os << toString(c.type); }

std::string caseName(const ::testing::TestParamInfo<EngineCase>& info) {
  return std::string(toString(info.param.type));
}

class SchedulerSharedTest : public ::testing::TestWithParam<EngineCase> {
 protected:
  EngineType type() const { return GetParam().type; }
  EngineConfig config() const { return testing::specConfig(type()); }
};

// The timeline of one request — prefill over the whole prompt, the first token in
// the prompt-completion pass, its blocks Stored in that pass, nothing Stored for the partial tail.
TEST_P(SchedulerSharedTest, SingleRequestTimeline) {
  Harness h(config());
  const RequestId id = h.submit(range(1, 8), 3);
  const auto& p1 = h.step();
  EXPECT_DOUBLE_EQ(p1.prefill_ms, kPrefill8);
  EXPECT_DOUBLE_EQ(p1.decode_ms, GetParam().decode_ms[0]);
  EXPECT_DOUBLE_EQ(p1.end_ms, 28.7119769639296);
  const auto stored = storedEvents(p1);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].block_hashes, hashesOf(range(1, 8)));
  EXPECT_FALSE(stored[0].parent_block_hash.has_value());
  EXPECT_EQ(stored[0].token_ids, range(1, 8));
  EXPECT_EQ(stored[0].block_size, 4u);
  const auto& p2 = h.step();
  EXPECT_DOUBLE_EQ(p2.prefill_ms, 0.0);
  EXPECT_DOUBLE_EQ(p2.decode_ms, GetParam().decode_ms[1]);
  EXPECT_NEAR(p2.end_ms, p1.end_ms + GetParam().decode_ms[1], 1e-9);
  EXPECT_TRUE(p2.kv_events.empty());
  const auto& p3 = h.step();
  EXPECT_DOUBLE_EQ(p3.decode_ms, GetParam().decode_ms[2]);
  EXPECT_DOUBLE_EQ(p3.end_ms, p1.end_ms + p2.decode_ms + p3.decode_ms);
  EXPECT_TRUE(p3.kv_events.empty());
  EXPECT_FALSE(h.engine().hasWork());
  const auto sig = h.signalsOf(id);
  ASSERT_EQ(sig.size(), 3u);
  EXPECT_EQ(sig[0].token, 24979u);  // syntheticToken vectors, token_seed 0, id 1
  EXPECT_EQ(sig[1].token, 7036u);
  EXPECT_EQ(sig[0].cached_tokens, 0u);
  EXPECT_FALSE(sig[1].cached_tokens.has_value());
  EXPECT_EQ(sig[2].index, 2u);
  EXPECT_EQ(sig[0].terminal, Terminal::None);
  EXPECT_EQ(sig[2].terminal, Terminal::Completed);
  EXPECT_DOUBLE_EQ(sig[2].time_ms, p3.end_ms);
}

// Zero output (allowed by flag) ⇒ no decode time, one terminal signal without a token.
TEST_P(SchedulerSharedTest, ZeroOutputCompletesWithoutToken) {
  auto cfg = config();
  cfg.allow_empty_output = true;
  Harness h(cfg);
  const RequestId id = h.submit(range(1, 8), 0);
  const auto& p = h.step();
  EXPECT_DOUBLE_EQ(p.end_ms, kPrefill8);
  EXPECT_EQ(p.decode_ms, 0.0);
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].id, id);
  EXPECT_FALSE(p.outputs[0].token.has_value());
  EXPECT_EQ(p.outputs[0].terminal, Terminal::Completed);
  EXPECT_EQ(p.fpm.scheduled.num_prefill_requests, 1u);
  EXPECT_EQ(p.fpm.scheduled.num_decode_requests, 0u);
  EXPECT_FALSE(h.engine().hasWork());
}

// A prompt that can never fit is rejected at the head (for SGLang by our rule); the follower
// runs in the same pass, and its signals come before the rejection.
TEST_P(SchedulerSharedTest, OversizedPromptRejectedFollowerAdmitted) {
  auto cfg = config();
  cfg.num_gpu_blocks = 4;
  Harness h(cfg);
  const RequestId big = h.submit(range(1, GetParam().oversized_prompt_len), 1);
  const RequestId small = h.submit(range(101, 104), 1);
  const auto& p = h.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].id, small);
  ASSERT_EQ(p.outputs.size(), 2u);
  EXPECT_EQ(p.outputs[0].id, small);
  EXPECT_EQ(p.outputs[0].terminal, Terminal::Completed);
  EXPECT_EQ(p.outputs[1].id, big);
  EXPECT_EQ(p.outputs[1].terminal, Terminal::Rejected);
}

// The shortest rejected prompt is the boundary: one token less is admitted.
TEST_P(SchedulerSharedTest, PromptJustBelowOversizedIsAdmitted) {
  auto cfg = config();
  cfg.num_gpu_blocks = 4;
  Harness h(cfg);
  const RequestId id = h.submit(range(1, GetParam().oversized_prompt_len - 1), 1);
  const auto& p = h.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].id, id);
  h.runUntilIdle();
  ASSERT_FALSE(h.signalsOf(id).empty());
  EXPECT_NE(h.signalsOf(id).back().terminal, Terminal::Rejected);
}

// A repeated block-aligned prompt reuses all but its last block (at least one
// token is recomputed), stores nothing new, and reports the reuse on its first token.
// Not TRT-LLM, which reuses every full block (TrtllmFullyCachedPromptSkipsPrefill).
using RecomputingSchedulerTest = SchedulerSharedTest;
TEST_P(RecomputingSchedulerTest, RepeatedPromptRecomputesLastBlock) {
  Harness h(config());
  h.submit(range(1, 16), 1);
  h.runUntilIdle();
  const RequestId again = h.submit(range(1, 16), 1);
  const auto& p = h.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 12u);
  EXPECT_FALSE(p.admissions[0].is_readmission);
  EXPECT_EQ(p.fpm.scheduled.sum_prefill_tokens, 4u);
  EXPECT_EQ(p.fpm.scheduled.sum_prefill_kv_tokens, 12u);
  EXPECT_TRUE(p.kv_events.empty());
  EXPECT_EQ(h.signalsOf(again)[0].cached_tokens, 12u);
  EXPECT_DOUBLE_EQ(p.prefill_ms, 16.5621604959824);  // T_prefill(1, 16, 12): 4 tokens
}

// Prefix caching off ⇒ no sharing and no events at all, whether identical prompts run
// together or one after the other.
TEST_P(SchedulerSharedTest, PrefixCachingOffSharesNothingAndEmitsNoEvents) {
  auto cfg = config();
  cfg.enable_prefix_caching = false;
  Harness h(cfg);
  h.submit(range(1, 16), 2);
  h.submit(range(1, 16), 2);
  h.runUntilIdle();
  h.submit(range(1, 16), 2);
  const auto& p = h.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 0u);
  h.runUntilIdle();
  for (const auto& q : h.passes()) {
    EXPECT_TRUE(q.kv_events.empty());
    for (const auto& a : q.admissions) EXPECT_EQ(a.reused_input_tokens, 0u);
  }
  EXPECT_TRUE(h.engine().cachedBlockHashes(0).empty());
}

// Identical prompts admitted together share the blocks the first one just made visible.
TEST_P(SchedulerSharedTest, ConcurrentIdenticalPromptsShareWithinOnePass) {
  Harness h(config());
  h.submit(range(1, 16), 2);
  h.submit(range(1, 16), 2);
  const auto& p = h.step();
  ASSERT_EQ(p.admissions.size(), 2u);
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 0u);
  EXPECT_EQ(p.admissions[1].reused_input_tokens, type() == EngineType::Trtllm ? 16u : 12u);
  const auto stored = storedEvents(p);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].block_hashes.size(), 4u);
}

TEST_P(SchedulerSharedTest, MaxNumSeqsCapsRunning) {
  auto cfg = config();
  cfg.max_num_seqs = 2;
  Harness h(cfg);
  for (std::uint32_t i = 0; i < 5; ++i) h.submit(range(100 * i + 1, 100 * i + 4), 3);
  const auto& p = h.step();
  EXPECT_EQ(p.admissions.size(), 2u);
  EXPECT_EQ(p.load.running_requests, 2u);
  EXPECT_EQ(p.load.waiting_requests, 3u);
  h.runUntilIdle();
}

// The prefix cache can be reset only while no block is active; the reset is one
// AllBlocksCleared and empties the cache.
TEST_P(SchedulerSharedTest, ResetPrefixCacheOnlyWhenIdle) {
  Harness h(config());
  h.submit(range(1, 8), 3);
  h.step();
  EXPECT_FALSE(h.engine().resetPrefixCache(0).has_value());
  h.runUntilIdle();
  const auto ev = h.engine().resetPrefixCache(0);
  ASSERT_TRUE(ev.has_value());
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(*ev));
  EXPECT_TRUE(h.engine().cachedBlockHashes(0).empty());
}

// Same config and inputs ⇒ the same signals and KV events, in a tight pool (preemption or
// retraction, eviction) and, for SGLang, under lpm ordering.
/// Bytes the allocator has handed out and not taken back (heap and mmapped chunks).
std::size_t heapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Memory follows work, never what a client asks for: a queued request with max_output_tokens
// 1,000,000 costs O(prompt) (its 16 token ids, its record and queue slot), not 4 B × 1,000,000.
// Admission and a few decode passes add only the blocks and tokens actually used.
TEST_P(SchedulerSharedTest, QueuedRequestCostsItsPromptNotItsMaxOutput) {
  constexpr std::uint32_t kRequests = 64;
  constexpr std::uint32_t kMaxOutput = 1'000'000;
  auto cfg = config();
  cfg.num_gpu_blocks = 4096;
  Engine engine(cfg);
  engine.submit(Request{.tokens = range(1, 16), .max_output_tokens = kMaxOutput}).value();
  const std::size_t before = heapInUse();
  for (std::uint32_t i = 0; i < kRequests; ++i) {
    engine.submit(Request{.tokens = range(100 + i, 115 + i), .max_output_tokens = kMaxOutput})
        .value();
  }
  const std::size_t queued = heapInUse() - std::min(before, heapInUse());
  EXPECT_LT(queued / kRequests, 1024u) << "bytes per queued request";
  double now = 0.0;
  for (int pass = 0; pass < 8; ++pass) now = engine.step(0, now).end_ms;
  const std::size_t running = heapInUse() - std::min(before, heapInUse());
  EXPECT_LT(running / kRequests, 4096u) << "bytes per request after 8 passes";
  EXPECT_EQ(engine.loadMetrics(0).running_requests + engine.loadMetrics(0).waiting_requests,
            kRequests + 1);
}

TEST_P(SchedulerSharedTest, SameInputsSameRun) {
  struct Setup {
    std::uint32_t num_gpu_blocks;
    std::uint32_t num_requests;
    std::uint64_t token_seed;
  };
  for (const Setup& setup : {Setup{6, 6, 42}, Setup{10, 8, 0}}) {
    const auto run = [&] {
      auto cfg = config();
      cfg.num_gpu_blocks = setup.num_gpu_blocks;
      cfg.token_seed = setup.token_seed;
      cfg.sglang.schedule_policy = SchedulePolicy::Lpm;  // ignored by vllm and trtllm
      Harness h(cfg);
      for (std::uint32_t i = 0; i < setup.num_requests; ++i) {
        h.submit(range(1, 4 + 3 * i), 5 + i);
      }
      h.runUntilIdle();
      std::vector<OutputSignal> out;
      std::vector<KvEvent> events;
      for (const auto& p : h.passes()) {
        out.insert(out.end(), p.outputs.begin(), p.outputs.end());
        events.insert(events.end(), p.kv_events.begin(), p.kv_events.end());
      }
      return std::pair(out, events);
    };
    EXPECT_EQ(run(), run()) << setup.num_gpu_blocks << " blocks";
  }
}

// Engine::setKvEvents(false) changes nothing but the (then empty) kv_events: the same passes,
// outputs, timing, did_work and metrics under constant eviction (SGLang builds no events at all,
// and must still report a pass whose only work was an eviction as work).
TEST_P(SchedulerSharedTest, KvEventsOffChangesNothingElse) {
  const auto run = [&](bool events) {
    auto cfg = config();
    cfg.num_gpu_blocks = 7;
    Engine engine(cfg);
    engine.setKvEvents(events);
    EXPECT_EQ(engine.kvEvents(), events);
    for (std::uint32_t i = 0; i < 12; ++i) {
      // Prompts share their first 4-12 tokens and then diverge: hits, splits and evictions.
      auto tokens = range(1, 4 + 4 * (i % 3));
      tokens.push_back(100 + i);
      tokens.push_back(200 + i);
      EXPECT_TRUE(engine.submit({.tokens = std::move(tokens), .max_output_tokens = 3 + i % 4}));
    }
    std::vector<PassResult> passes;
    double now = 0.0;
    std::size_t events_seen = 0;
    while (engine.hasWork() && passes.size() < 1000) {
      passes.push_back(engine.step(0, now));
      now = passes.back().end_ms;
      events_seen += passes.back().kv_events.size();
      passes.back().kv_events.clear();
    }
    EXPECT_FALSE(engine.hasWork());
    return std::pair(std::move(passes), events_seen);
  };
  const auto [with, with_events] = run(true);
  const auto [without, without_events] = run(false);
  EXPECT_GT(with_events, 20u);
  EXPECT_EQ(without_events, 0u);
  ASSERT_EQ(with.size(), without.size());
  for (std::size_t i = 0; i < with.size(); ++i) {
    const PassResult& a = with[i];
    const PassResult& b = without[i];
    SCOPED_TRACE("pass " + std::to_string(i));
    testing::expectSamePass(a, b, /*with_events=*/false);
  }
}

const EngineCase kVllm{EngineType::Vllm, {12.0890625, 14.961953125, 14.961953125}, 16};
const EngineCase kTrtllm{EngineType::Trtllm, {12.0890625, 14.961953125, 14.961953125}, 16};
const EngineCase kSglang{
    EngineType::Sglang, {decodeMs(8.0 / 64), decodeMs(9.0 / 64), decodeMs(10.0 / 64)}, 13};

INSTANTIATE_TEST_SUITE_P(EngineTypes, SchedulerSharedTest,
                         ::testing::Values(kVllm, kTrtllm, kSglang), caseName);
INSTANTIATE_TEST_SUITE_P(EngineTypes, RecomputingSchedulerTest, ::testing::Values(kVllm, kSglang),
                         caseName);

}  // namespace
}  // namespace mocker::engine
