// Scenario tests for the SGLang scheduler and radix cache (docs/engine.md) and extra TRT-LLM
// guaranteed-no-evict scenarios. Behaviours every engine type shares are in
// scheduler_shared_test.cpp. Engine-level scenarios go through Harness::step
// (per-step invariants + KV events replayed into a set == the cache); scenarios that need the
// scheduler's internal state (new_token_ratio, queue order) drive an SglangScheduler directly
// through `Direct`, which performs the same checks.
#include <gtest/gtest.h>

#include <set>

#include "engine/block_hash.h"
#include "engine/radix_cache.h"
#include "engine/sglang_scheduler.h"
#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::concat;
using testing::Harness;
using testing::range;
using testing::removedHashes;
using testing::storedEvents;

constexpr double kPrefill8 = 16.6229144639296;  // T_prefill(1, 8, 0)

/// The test defaults adapted to SGLang: 16 pages of 4 tokens.
EngineConfig sgConfig() { return testing::specConfig(EngineType::Sglang); }

std::vector<std::uint64_t> hashesOf(const std::vector<std::uint32_t>& tokens,
                                    std::uint32_t page = 4) {
  return sequenceHashes(tokens, page, HashSeeds{});
}

/// Drives one SglangScheduler directly, checking invariants and KV-event consistency per step.
class Direct {
 public:
  explicit Direct(EngineConfig config)
      : config_(std::move(config)), sched_(std::make_unique<SglangScheduler>(config_, 0)) {
    EXPECT_TRUE(validateEngineConfig(config_).has_value());
  }

  RequestId submit(std::vector<std::uint32_t> tokens, std::uint32_t max_output) {
    const RequestId id{next_id_++};
    sched_->submit(detail::AcceptedRequest{id, std::move(tokens), max_output, std::nullopt});
    return id;
  }

  const PassResult& step() {
    passes_.push_back(sched_->step(now_));
    const PassResult& p = passes_.back();
    now_ = p.end_ms;
    const Status ok = sched_->checkInvariants();
    EXPECT_TRUE(ok.has_value()) << "pass " << passes_.size() << ": "
                                << (ok ? "" : ok.error().message);
    for (const KvEvent& e : p.kv_events) {
      if (const auto* s = std::get_if<BlockStored>(&e)) {
        for (std::uint64_t h : s->block_hashes) EXPECT_TRUE(visible_.insert(h).second);
      } else if (const auto* r = std::get_if<BlockRemoved>(&e)) {
        EXPECT_EQ(visible_.erase(r->block_hash), 1u);
      }
    }
    const auto cached = sched_->cachedBlockHashes();
    EXPECT_EQ(std::set<std::uint64_t>(cached.begin(), cached.end()), visible_);
    return p;
  }

  SglangScheduler& sched() { return *sched_; }
  const std::vector<PassResult>& passes() const { return passes_; }

 private:
  EngineConfig config_;
  std::unique_ptr<SglangScheduler> sched_;
  std::uint64_t next_id_ = 1;
  double now_ = 0.0;
  std::set<std::uint64_t> visible_;
  std::vector<PassResult> passes_;
};

bool hasToken(const PassResult& p, RequestId id) {
  for (const auto& s : p.outputs) {
    if (s.id == id && s.token) return true;
  }
  return false;
}

TEST(SglangSchedulerTest, EngineCreateAcceptsSglang) {
  auto e = Engine::create(sgConfig());
  ASSERT_TRUE(e.has_value()) << e.error().toString();
  EXPECT_EQ(e->blockSize(), 4u);
  EngineConfig c = sgConfig();
  c.sglang.page_size = 0;  // unset ⇒ 1
  EXPECT_EQ(Engine::create(c)->blockSize(), 1u);
}

// Ratio constants, linear decay to the minimum over 600 passes, then it stays there.
TEST(SglangSchedulerTest, NewTokenRatioDecaysToMinimum) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 1024;
  Direct d(c);
  EXPECT_DOUBLE_EQ(d.sched().initNewTokenRatio(), 0.7);
  EXPECT_NEAR(d.sched().minNewTokenRatio(), 0.098, 1e-15);
  EXPECT_NEAR(d.sched().newTokenRatioDecay(), 0.0010033333333333333, 1e-15);
  EXPECT_DOUBLE_EQ(d.sched().newTokenRatio(), 0.7);
  d.submit(range(1, 4), 1000);
  d.step();
  EXPECT_NEAR(d.sched().newTokenRatio(), 0.7 - 0.602 / 600, 1e-15);
  for (int i = 1; i < 600; ++i) d.step();
  EXPECT_EQ(d.passes().back().load.preemptions_total, 0u);
  EXPECT_NEAR(d.sched().newTokenRatio(), 0.098, 1e-12);
  for (int i = 0; i < 50; ++i) d.step();
  EXPECT_NEAR(d.sched().newTokenRatio(), 0.098, 1e-12);

  c.sglang.schedule_conservativeness = 0.5;
  Direct half(c);
  EXPECT_DOUBLE_EQ(half.sched().initNewTokenRatio(), 0.35);
  EXPECT_NEAR(half.sched().minNewTokenRatio(), 0.049, 1e-15);
}

// A pass with nothing to do is not a pass: the ratio does not decay.
TEST(SglangSchedulerTest, IdleStepDoesNotDecayRatio) {
  Direct d(sgConfig());
  const auto& p = d.step();
  EXPECT_FALSE(p.did_work);
  EXPECT_EQ(p.end_ms, 0.0);
  EXPECT_DOUBLE_EQ(d.sched().newTokenRatio(), 0.7);
}

// A pass that prefills decodes only the requests that completed their prompt in it.
TEST(SglangSchedulerTest, ExclusiveExtendPass) {
  Harness h(sgConfig());
  const RequestId a = h.submit(range(1, 8), 5);
  const auto& p1 = h.step();
  EXPECT_TRUE(hasToken(p1, a));  // first token in its own extend pass
  const auto& p2 = h.step();     // decode pass
  EXPECT_TRUE(hasToken(p2, a));
  EXPECT_EQ(p2.fpm.scheduled.num_decode_requests, 1u);
  EXPECT_EQ(p2.fpm.scheduled.sum_decode_kv_tokens, 9u);
  const RequestId b = h.submit(range(101, 108), 3);
  const auto& p3 = h.step();
  EXPECT_FALSE(hasToken(p3, a)) << "running request decoded in an extend pass";
  EXPECT_TRUE(hasToken(p3, b));
  EXPECT_EQ(p3.fpm.scheduled.num_prefill_requests, 1u);
  EXPECT_EQ(p3.fpm.scheduled.num_decode_requests, 0u);
  EXPECT_EQ(p3.admissions.size(), 1u);
  const auto& p4 = h.step();  // both decode again
  EXPECT_TRUE(hasToken(p4, a));
  EXPECT_TRUE(hasToken(p4, b));
  EXPECT_EQ(p4.fpm.scheduled.num_decode_requests, 2u);
}

// Chunked prefill: page-aligned chunks, the partial request goes back to the FRONT of waiting,
// one admission event, the token arrives in the pass that completes the prompt.
TEST(SglangSchedulerTest, ChunkedPrefillReturnsToFront) {
  EngineConfig c = sgConfig();
  c.sglang.chunked_prefill_size = 8;
  Direct d(c);
  const RequestId a = d.submit(range(1, 20), 2);
  const RequestId b = d.submit(range(101, 104), 1);
  const auto& p1 = d.step();
  EXPECT_EQ(p1.fpm.scheduled.sum_prefill_tokens, 8u);
  EXPECT_EQ(p1.fpm.scheduled.sum_prefill_kv_tokens, 0u);
  EXPECT_DOUBLE_EQ(p1.prefill_ms, kPrefill8);
  ASSERT_EQ(p1.admissions.size(), 1u);
  EXPECT_EQ(p1.admissions[0].id, a);
  EXPECT_TRUE(p1.outputs.empty());
  EXPECT_EQ(d.sched().waitingOrder(), (std::vector<RequestId>{a, b}));
  EXPECT_EQ(d.sched().materializedTokens(a), 8u);
  EXPECT_EQ(p1.fpm.queued.num_prefill_requests, 2u);  // the partial request is queued again
  // Its complete pages are already cache-visible.
  ASSERT_EQ(storedEvents(p1).size(), 1u);
  EXPECT_EQ(storedEvents(p1)[0].block_hashes, hashesOf(range(1, 8)));
  const auto& p2 = d.step();
  EXPECT_EQ(p2.fpm.scheduled.sum_prefill_tokens, 8u);
  EXPECT_EQ(p2.fpm.scheduled.sum_prefill_kv_tokens, 8u);
  EXPECT_TRUE(p2.admissions.empty());
  EXPECT_TRUE(p2.outputs.empty());
  EXPECT_EQ(d.sched().waitingOrder().front(), a);
  const auto& p3 = d.step();  // last 4 tokens of A, then B fits the remaining chunk budget
  EXPECT_EQ(p3.fpm.scheduled.num_prefill_requests, 2u);
  EXPECT_EQ(p3.fpm.scheduled.sum_prefill_tokens, 8u);
  EXPECT_TRUE(hasToken(p3, a));
  EXPECT_TRUE(hasToken(p3, b));
  EXPECT_EQ(storedEvents(p3)[0].parent_block_hash, hashesOf(range(1, 20))[3]);
}

// A prompt larger than chunked_prefill_size never computes more than rem_chunk per pass.
TEST(SglangSchedulerTest, ChunkBudgetIsSharedAcrossRequests) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 64;
  c.sglang.chunked_prefill_size = 16;
  Direct d(c);
  d.submit(range(1, 12), 1);
  const RequestId b = d.submit(range(101, 140), 1);
  const auto& p1 = d.step();
  EXPECT_EQ(p1.fpm.scheduled.num_prefill_requests, 2u);
  EXPECT_EQ(p1.fpm.scheduled.sum_prefill_tokens, 16u);  // 12 + one page of B
  EXPECT_EQ(d.sched().materializedTokens(b), 4u);
}

// lpm: longest cached prefix first; fcfs keeps arrival order.
TEST(SglangSchedulerTest, LpmPrefersLongestCachedPrefix) {
  for (SchedulePolicy policy : {SchedulePolicy::Fcfs, SchedulePolicy::Lpm}) {
    EngineConfig c = sgConfig();
    c.max_num_seqs = 1;
    c.sglang.schedule_policy = policy;
    Direct d(c);
    d.submit(range(1, 16), 1);
    d.step();
    const RequestId cold = d.submit(range(201, 212), 1);
    const RequestId warm = d.submit(concat(range(1, 12), {77, 78}), 1);
    const auto& p = d.step();
    ASSERT_EQ(p.admissions.size(), 1u);
    if (policy == SchedulePolicy::Lpm) {
      EXPECT_EQ(p.admissions[0].id, warm);
      EXPECT_EQ(p.admissions[0].reused_input_tokens, 12u);
    } else {
      EXPECT_EQ(p.admissions[0].id, cold);
    }
  }
}

// lpm: among short-prefix requests, one whose first 32 tokens repeat an earlier one's is
// deprioritised behind the others.
TEST(SglangSchedulerTest, LpmDeprioritisesInBatchDuplicatePrefix) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 64;
  c.max_num_seqs = 1;
  c.sglang.schedule_policy = SchedulePolicy::Lpm;
  Direct d(c);
  const RequestId a = d.submit(concat(range(1, 32), {7}), 1);
  const RequestId b = d.submit(concat(range(1, 32), {8}), 1);
  const RequestId x = d.submit(range(500, 520), 1);
  const auto& p = d.step();
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].id, a);
  EXPECT_EQ(d.sched().waitingOrder(), (std::vector<RequestId>{x, b}));
  // Once A's prefix is cached, B has a 32-token cached prefix and goes before X.
  const auto& p2 = d.step();
  ASSERT_EQ(p2.admissions.size(), 1u);
  EXPECT_EQ(p2.admissions[0].id, b);
  EXPECT_EQ(p2.admissions[0].reused_input_tokens, 32u);
}

// lpm falls back to fcfs when more than 128 requests wait; at 128 it still sorts.
TEST(SglangSchedulerTest, LpmFallsBackToFcfsAbove128Waiting) {
  for (std::uint32_t cold_count : {127u, 128u}) {
    EngineConfig c = sgConfig();
    c.num_gpu_blocks = 64;
    c.max_num_seqs = 1;
    c.sglang.schedule_policy = SchedulePolicy::Lpm;
    Direct d(c);
    d.submit(range(1, 16), 1);
    d.step();
    const RequestId first_cold = d.submit(range(1000, 1011), 1);
    for (std::uint32_t i = 1; i < cold_count; ++i) {
      d.submit(range(2000 + 20 * i, 2000 + 20 * i + 11), 1);
    }
    const RequestId warm = d.submit(range(1, 14), 1);  // waiting = cold_count + 1
    const auto& p = d.step();
    ASSERT_EQ(p.admissions.size(), 1u);
    EXPECT_EQ(p.admissions[0].id, cold_count + 1 > 128 ? first_cold : warm)
        << "waiting " << cold_count + 1;
  }
}

// Retraction under memory pressure picks the request with the fewest generated tokens; it goes
// to the front of waiting with no KV, counts in preemptions_total and resets new_token_ratio.
TEST(SglangSchedulerTest, RetractionPicksFewestGeneratedAndResetsRatio) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 8;
  c.sglang.clip_max_new_tokens = 1;
  c.sglang.chunked_prefill_size = 8;
  Direct d(c);
  const RequestId a = d.submit(range(1, 8), 20);
  d.step();  // A prefilled, token 0
  d.step();  // token 1
  const RequestId b = d.submit(range(101, 108), 20);
  const auto& p3 = d.step();  // B prefilled (A idle)
  EXPECT_TRUE(hasToken(p3, b));
  EXPECT_FALSE(hasToken(p3, a));
  std::size_t retraction_pass = 0;
  for (int i = 0; i < 20 && retraction_pass == 0; ++i) {
    const auto& p = d.step();
    if (p.load.preemptions_total > 0) retraction_pass = d.passes().size();
  }
  ASSERT_NE(retraction_pass, 0u) << "pool never ran out";
  const PassResult& p = d.passes()[retraction_pass - 1];
  EXPECT_EQ(p.load.preemptions_total, 1u);
  EXPECT_TRUE(hasToken(p, a));
  EXPECT_FALSE(hasToken(p, b));
  EXPECT_EQ(d.sched().waitingOrder(), (std::vector<RequestId>{b}));
  EXPECT_EQ(d.sched().materializedTokens(b), 0u);
  EXPECT_EQ(p.fpm.queued.num_decode_requests, 1u);  // B has output tokens
  EXPECT_NEAR(d.sched().newTokenRatio(),
              d.sched().initNewTokenRatio() - d.sched().newTokenRatioDecay(), 1e-15);
  d.step();
  while (d.sched().hasWork()) d.step();
  std::uint32_t b_tokens = 0, a_tokens = 0;
  for (const auto& q : d.passes()) {
    for (const auto& s : q.outputs) {
      if (s.token) (s.id == a ? a_tokens : b_tokens) += 1;
    }
  }
  EXPECT_EQ(a_tokens, 20u);
  EXPECT_EQ(b_tokens, 20u);  // generated tokens survive retraction
}

// Ties on generated tokens: the earliest in running order is retracted (Dynamo's rule).
TEST(SglangSchedulerTest, RetractionTieTakesEarliestRunning) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 8;
  c.sglang.clip_max_new_tokens = 1;
  Direct d(c);
  const RequestId a = d.submit(range(1, 8), 20);
  const RequestId b = d.submit(range(101, 108), 20);
  const auto& p1 = d.step();
  ASSERT_EQ(p1.admissions.size(), 2u);
  while (d.passes().back().load.preemptions_total == 0) {
    ASSERT_LT(d.passes().size(), 20u);
    d.step();
  }
  EXPECT_EQ(d.sched().waitingOrder(), (std::vector<RequestId>{a}));
  EXPECT_EQ(d.sched().runningOrder(), (std::vector<RequestId>{b}));
}

// Page-granularity events (page_size 4): Stored when a page completes — for generated tokens in
// the pass that appends the token — with the previous page's hash as parent.
TEST(SglangSchedulerTest, PageEventsAtPageGranularity) {
  Harness h(sgConfig());
  const RequestId id = h.submit(range(1, 10), 3);
  const auto& p1 = h.step();
  const auto s1 = storedEvents(p1);
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0].block_hashes, hashesOf(range(1, 8)));
  EXPECT_FALSE(s1[0].parent_block_hash.has_value());
  EXPECT_EQ(s1[0].token_ids, range(1, 8));
  EXPECT_EQ(s1[0].block_size, 4u);
  const auto& p2 = h.step();  // appends g1 ⇒ page [9, 10, g0, g1] completes now
  const auto sig = h.signalsOf(id);
  ASSERT_EQ(sig.size(), 2u);
  const std::vector<std::uint32_t> all = concat(range(1, 10), {*sig[0].token, *sig[1].token});
  const auto s2 = storedEvents(p2);
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0].block_hashes, std::vector<std::uint64_t>{hashesOf(all)[2]});
  EXPECT_EQ(s2[0].parent_block_hash, hashesOf(all)[1]);
  EXPECT_EQ(s2[0].token_ids, (std::vector<std::uint32_t>{9, 10, *sig[0].token, *sig[1].token}));
  const auto& p3 = h.step();
  EXPECT_TRUE(p3.kv_events.empty());  // the partial tail page is freed, not stored
  EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 3u);
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
}

// page_size 1 (the SGLang default): every token is a page, so events are per token.
TEST(SglangSchedulerTest, PageSizeOneGivesPerTokenEvents) {
  EngineConfig c = sgConfig();
  c.sglang.page_size = 0;  // default 1
  c.num_gpu_blocks = 64;
  Harness h(c);
  const RequestId id = h.submit(range(1, 5), 2);
  const auto& p1 = h.step();
  const auto s = storedEvents(p1);
  ASSERT_EQ(s.size(), 2u);  // the prompt's run, then the first generated token's page
  EXPECT_EQ(s[0].block_hashes, hashesOf(range(1, 5), 1));
  EXPECT_EQ(s[0].block_size, 1u);
  EXPECT_EQ(s[0].token_ids, range(1, 5));
  const std::uint32_t g0 = *h.signalsOf(id)[0].token;
  EXPECT_EQ(s[1].block_hashes,
            std::vector<std::uint64_t>{hashesOf(concat(range(1, 5), {g0}), 1)[5]});
  EXPECT_EQ(s[1].parent_block_hash, hashesOf(range(1, 5), 1)[4]);
  EXPECT_EQ(s[1].token_ids, std::vector<std::uint32_t>{g0});
  h.runUntilIdle();
  EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 7u);
}

// Eviction removes the oldest unlocked leaf first; Removed events precede the Stored of the
// allocation that needed the room; a later decode page evicts the next leaf.
TEST(SglangSchedulerTest, LeafFirstEvictionWithRemovedEvents) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 4;
  Harness h(c);
  h.submit(range(1, 12), 1);
  h.step();
  const auto x = hashesOf(range(1, 12));
  EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 3u);
  h.submit(range(201, 208), 1);
  const auto& p = h.step();
  ASSERT_EQ(p.kv_events.size(), 3u);
  EXPECT_EQ(std::get<BlockRemoved>(p.kv_events[0]).block_hash, x[2]);
  const auto& stored = std::get<BlockStored>(p.kv_events[1]);
  EXPECT_EQ(stored.block_hashes, hashesOf(range(201, 208)));
  EXPECT_EQ(std::get<BlockRemoved>(p.kv_events[2]).block_hash, x[1]);  // first token's page
}

// Cached prefix reuse: the radix match is limited to prompt_len − 1 tokens, page-floored; a
// page that is already in the tree is shared (no Stored); a new suffix is Stored with a parent.
// (The repeated block-aligned prompt at the start is checked for every engine type in
// scheduler_shared_test.cpp, RepeatedPromptRecomputesLastBlock.)
TEST(SglangSchedulerTest, CachedPrefixReuse) {
  Harness h(sgConfig());
  h.submit(range(1, 16), 1);
  h.runUntilIdle();
  h.submit(range(1, 16), 1);
  h.step();

  h.submit(range(1, 13), 1);  // floor(12 / 4) = 3 pages
  EXPECT_EQ(h.step().admissions[0].reused_input_tokens, 12u);
  h.submit(range(1, 12), 1);  // floor(11 / 4) = 2 pages
  EXPECT_EQ(h.step().admissions[0].reused_input_tokens, 8u);

  h.submit(concat(range(1, 8), range(90, 97)), 1);
  const auto& q = h.step();
  EXPECT_EQ(q.admissions[0].reused_input_tokens, 8u);
  const auto stored = storedEvents(q);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].block_hashes.size(), 2u);
  EXPECT_EQ(stored[0].parent_block_hash, hashesOf(range(1, 16))[1]);
  const LoadMetrics m = h.engine().loadMetrics(0);
  EXPECT_EQ(m.prefix_cache_queries_tokens, 16u + 16 + 13 + 12 + 16);
  EXPECT_EQ(m.prefix_cache_hits_tokens, 12u + 12 + 8 + 8);
}

// clip_max_new_tokens caps each request's output reservation at admission.
TEST(SglangSchedulerTest, ClipMaxNewTokensCapsReservation) {
  for (std::uint32_t clip : {8u, 4096u}) {
    EngineConfig c = sgConfig();  // 64 token slots
    c.sglang.clip_max_new_tokens = clip;
    Harness h(c);
    h.submit(range(1, 8), 100);
    h.submit(range(101, 108), 100);
    const auto& p = h.step();
    // clip 8: 8 + 8 charged each fits; clip 4096: A's reservation (capped to the pool) leaves
    // no room for B.
    EXPECT_EQ(p.admissions.size(), clip == 8 ? 2u : 1u) << "clip " << clip;
  }
}

// Running requests' remaining outputs × new_token_ratio are held back from new prefills.
TEST(SglangSchedulerTest, RunningReserveBlocksAdmission) {
  EngineConfig c = sgConfig();
  c.sglang.chunked_prefill_size = 8;
  Harness h(c);
  h.submit(range(1, 8), 55);  // admitted: 8 + min(55, room 55) < 64
  h.step();
  const RequestId b = h.submit(range(101, 108), 4);
  const auto& p = h.step();
  // rem_total = (64 − 12 held) − 3 page slack − 54 × 0.6990 = 11.3 ≤ 8 + 4.
  EXPECT_TRUE(p.admissions.empty());
  EXPECT_EQ(p.fpm.queued.num_prefill_requests, 1u);
  EXPECT_TRUE(h.signalsOf(b).empty());
}

// Our rule: generation stops once the sequence needs every page of the pool.
TEST(SglangSchedulerTest, LoneSequenceStopsBeforeOutgrowingPool) {
  EngineConfig c = sgConfig();
  c.num_gpu_blocks = 4;
  Harness h(c);
  const RequestId id = h.submit(range(1, 8), 100);
  h.runUntilIdle();
  const auto sig = h.signalsOf(id);
  ASSERT_EQ(sig.size(), 5u);  // len 13 needs the 4th page
  EXPECT_EQ(sig.back().terminal, Terminal::Completed);
}

// Cancellation releases everything: a running request's locks and pages, and a waiting partial
// prefill's pages; a second cancel is a no-op.
TEST(SglangSchedulerTest, CancelReleasesLocksAndPages) {
  EngineConfig c = sgConfig();
  c.sglang.chunked_prefill_size = 8;
  Harness h(c);
  const RequestId a = h.submit(range(1, 8), 10);
  h.step();
  const RequestId b = h.submit(range(101, 124), 10);
  h.step();  // B's first chunk: B is a waiting partial prefill holding 2 pages
  EXPECT_GT(h.engine().loadMetrics(0).active_blocks, 3u);
  EXPECT_EQ(h.engine().cancel(b), CancelResult::Applied);
  EXPECT_EQ(h.engine().cancel(a), CancelResult::Applied);
  EXPECT_EQ(h.engine().cancel(a), CancelResult::Noop);
  EXPECT_TRUE(h.engine().checkInvariantsForTest(0).has_value());
  const LoadMetrics m = h.engine().loadMetrics(0);
  EXPECT_EQ(m.active_blocks, 0u);
  EXPECT_EQ(m.running_requests, 0u);
  EXPECT_EQ(m.waiting_requests, 0u);
  EXPECT_FALSE(h.engine().hasWork());
  ASSERT_TRUE(h.engine().resetPrefixCache(0).has_value());
  EXPECT_TRUE(h.engine().cachedBlockHashes(0).empty());
}

// ---- TRT-LLM guaranteed-no-evict, beyond scheduler_test.cpp ----

EngineConfig trtConfig() { return testing::specConfig(EngineType::Trtllm); }

// At submit max_output is clamped to N·B − prompt: the request completes when it fills the pool.
TEST(TrtllmSchedulerTest, OutputClampedToPool) {
  EngineConfig c = trtConfig();
  c.num_gpu_blocks = 4;  // 16 tokens
  Harness h(c);
  const RequestId id = h.submit(range(1, 8), 100);
  h.runUntilIdle();
  const auto sig = h.signalsOf(id);
  ASSERT_EQ(sig.size(), 8u);
  EXPECT_EQ(sig.back().terminal, Terminal::Completed);
  EXPECT_EQ(h.engine().loadMetrics(0).preemptions_total, 0u);
}

// A prompt that fills the pool is rejected at the head; max_model_len clamps the output too.
TEST(TrtllmSchedulerTest, PromptFillingPoolRejectedAndMaxModelLenClamps) {
  EngineConfig c = trtConfig();
  c.num_gpu_blocks = 4;
  c.max_model_len = 12;
  Harness h(c);
  const RequestId big = h.submit(range(1, 16), 1);
  const RequestId ok = h.submit(range(101, 108), 100);
  h.runUntilIdle();
  const auto bs = h.signalsOf(big);
  ASSERT_EQ(bs.size(), 1u);
  EXPECT_EQ(bs[0].terminal, Terminal::Rejected);
  EXPECT_EQ(h.signalsOf(ok).size(), 4u);  // 12 − 8
}

// Admission reserves prompt + max_output for every running request: a small follower waits
// although its own blocks would fit, and nothing is ever preempted.
TEST(TrtllmSchedulerTest, ReservationCountsRunningRequestsRemainingBlocks) {
  EngineConfig c = trtConfig();
  c.num_gpu_blocks = 8;
  Harness h(c);
  const RequestId a = h.submit(range(1, 4), 24);     // reserves 7 blocks
  const RequestId b = h.submit(range(101, 104), 4);  // needs 2 blocks: 1 available
  const auto& p1 = h.step();
  ASSERT_EQ(p1.admissions.size(), 1u);
  EXPECT_EQ(p1.admissions[0].id, a);
  bool a_done = false;
  while (h.engine().hasWork()) {
    const auto& p = h.step();
    for (const auto& adm : p.admissions) {
      if (adm.id == b) {
        EXPECT_TRUE(a_done);
      }
    }
    for (const auto& s : p.outputs) a_done |= s.id == a && s.terminal == Terminal::Completed;
    EXPECT_EQ(p.load.preemptions_total, 0u);
  }
  EXPECT_EQ(h.signalsOf(b).size(), 4u);
}

// The recompute rule does not apply: a prompt with a fully cached prefix reuses every full block.
TEST(TrtllmSchedulerTest, NoRecomputeOfLastBlockOnPartialHit) {
  Harness h(trtConfig());
  h.submit(range(1, 16), 1);
  h.runUntilIdle();
  h.submit(concat(range(1, 16), {50, 51}), 1);
  const auto& p = h.step();
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 16u);
  EXPECT_EQ(p.fpm.scheduled.sum_prefill_tokens, 2u);
}

// Eviction order when a victim's parent becomes a leaf: the parent is evicted next only if it is
// then the oldest unlocked leaf (a chain); otherwise it waits in the leaf set behind older
// leaves. Pins the order of the chain shortcut in RadixCache::evict.
TEST(RadixCacheTest, ChainEvictionKeepsOldestLeafFirstOrder) {
  RadixCache cache(5);
  std::vector<KvEvent> events;
  const auto build = [&](BlockHash first, BlockHash second) {
    cache.allocatePrivate(2, events);
    RadixCache::PageRef parent;
    cache.insert(parent, first);
    cache.insert(parent, second);
    return std::vector<BlockHash>{first, second};
  };
  const auto a = build(BlockHash{11}, BlockHash{12});
  const auto b = build(BlockHash{21}, BlockHash{22});
  cache.releasePath(a);
  cache.releasePath(b);
  // Touch a's first page: it becomes the most recently used page, younger than all of b.
  const std::vector<BlockHash> a0{BlockHash{11}};
  cache.lockPath(a0);
  cache.releasePath(a0);
  ASSERT_TRUE(events.empty());

  const std::vector<std::span<const BlockHash>> no_locks;
  cache.allocatePrivate(4, events);  // 1 free page + 3 evictions
  EXPECT_TRUE(cache.checkInvariants(no_locks).has_value());
  cache.allocatePrivate(1, events);
  EXPECT_TRUE(cache.checkInvariants(no_locks).has_value());
  std::vector<std::uint64_t> removed;
  for (const KvEvent& e : events) removed.push_back(std::get<BlockRemoved>(e).block_hash);
  // 12 (oldest leaf); its parent 11 is the youngest node, so it waits and 22 goes next; 22's
  // parent 21 is then the oldest leaf, evicted in the same call (chain); 11 last.
  EXPECT_EQ(removed, (std::vector<std::uint64_t>{12, 22, 21, 11}));
  EXPECT_EQ(cache.numCached(), 0u);
  EXPECT_EQ(cache.numPrivate(), 5u);
}

// Page size 1 with KV events off keys the radix tree by tokens; switched on mid-run it is re-keyed
// by sequence hashes. Three runs under constant eviction (events on throughout, off throughout,
// off then on at pass 6) give the same passes and the same cached pages after every pass, and
// the switched run's events from then on are the always-on run's.
TEST(SglangSchedulerTest, PageSizeOneTokenKeysChangeNoOutputAndSwitchOnMidRun) {
  struct Run {
    std::vector<PassResult> passes;
    std::vector<std::vector<std::uint64_t>> cached;  // after each pass
  };
  const auto run = [](std::optional<std::size_t> events_on_at) {
    EngineConfig c = sgConfig();
    c.sglang.page_size = 1;
    c.num_gpu_blocks = 48;
    c.sglang.schedule_policy = SchedulePolicy::Lpm;
    Engine engine(c);
    engine.setKvEvents(events_on_at == std::size_t{0});
    for (std::uint32_t i = 0; i < 14; ++i) {
      // Shared prefixes of 3-15 tokens, then divergence: hits, splits and evictions.
      auto tokens = range(1, 3 + 4 * (i % 4));
      tokens.push_back(100 + i % 5);
      tokens.push_back(200 + i);
      EXPECT_TRUE(engine.submit({.tokens = std::move(tokens), .max_output_tokens = 2 + i % 5}));
    }
    Run out;
    double now = 0.0;
    while (engine.hasWork() && out.passes.size() < 1000) {
      if (events_on_at && out.passes.size() == *events_on_at) engine.setKvEvents(true);
      out.passes.push_back(engine.step(0, now));
      now = out.passes.back().end_ms;
      out.cached.push_back(engine.cachedBlockHashes(0));
      const Status ok = engine.checkInvariantsForTest(0);
      EXPECT_TRUE(ok.has_value()) << (ok ? "" : ok.error().message);
    }
    EXPECT_FALSE(engine.hasWork());
    return out;
  };
  constexpr std::size_t kSwitch = 6;
  const Run on = run(0);
  const Run off = run(std::nullopt);
  const Run switched = run(kSwitch);
  ASSERT_GT(on.passes.size(), kSwitch + 2);
  std::size_t removed_after_switch = 0;
  for (const Run* other : {&off, &switched}) {
    ASSERT_EQ(other->passes.size(), on.passes.size());
    for (std::size_t i = 0; i < on.passes.size(); ++i) {
      SCOPED_TRACE("pass " + std::to_string(i));
      const PassResult& a = on.passes[i];
      const PassResult& b = other->passes[i];
      EXPECT_EQ(a.end_ms, b.end_ms);
      EXPECT_EQ(a.did_work, b.did_work);
      EXPECT_EQ(a.admissions, b.admissions);
      EXPECT_EQ(a.outputs, b.outputs);
      EXPECT_EQ(a.fpm, b.fpm);
      EXPECT_EQ(on.cached[i], other->cached[i]);
      if (other == &off) {
        EXPECT_TRUE(b.kv_events.empty());
      }
      if (other == &switched && i >= kSwitch) {
        EXPECT_EQ(a.kv_events, b.kv_events);
        removed_after_switch += removedHashes(b).size();
      }
    }
  }
  EXPECT_GT(removed_after_switch, 0u);  // evictions happen after the switch
}

}  // namespace
}  // namespace mocker::engine
