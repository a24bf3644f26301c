// Default KV capacity parity, the decode-load choice and speculative decoding (engine/README.md
// "Configuration", "Timing" and "Speculative decoding"). Expected values are worked out by hand
// in the comments, not recorded from the implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "engine/speculative.h"
#include "engine/timing_model.h"
#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::Harness;
using testing::range;
using testing::specConfig;

// ---------------------------------------------------------------------------------------------
// Default capacity parity: with no num_gpu_blocks, every engine type holds 1 Mi tokens of KV.

TEST(CapacityParityTest, EveryEngineTypeHoldsOneMebiTokensByDefault) {
  struct Case {
    EngineType type;
    std::uint32_t block_size;  // 0 = engine default
    std::uint64_t blocks;
  };
  for (const Case& c : {Case{EngineType::Vllm, 0, 16384}, Case{EngineType::Trtllm, 0, 32768},
                        Case{EngineType::Sglang, 0, 1048576}, Case{EngineType::Vllm, 16, 65536},
                        Case{EngineType::Vllm, 3, 349526}}) {  // ceil(1048576 / 3)
    EngineConfig cfg{.engine_type = c.type, .block_size = c.block_size};
    ASSERT_FALSE(cfg.num_gpu_blocks.has_value());
    EXPECT_EQ(effectiveNumGpuBlocks(cfg), c.blocks) << toString(c.type);
    const Engine engine(cfg);
    const LoadMetrics m = engine.loadMetrics(0);
    EXPECT_EQ(m.total_blocks, c.blocks) << toString(c.type);
    EXPECT_GE(m.total_blocks * effectiveBlockSize(cfg), kDefaultKvCapacityTokens);
    EXPECT_LT((m.total_blocks - 1) * effectiveBlockSize(cfg), kDefaultKvCapacityTokens);
  }
  // An explicit value wins.
  EngineConfig cfg{.engine_type = EngineType::Sglang, .num_gpu_blocks = 16384};
  EXPECT_EQ(Engine(cfg).loadMetrics(0).total_blocks, 16384u);
}

// A default SGLang pool (1 Mi pages) runs a request like any other: the per-page structures grow
// with use, and the whole pool is usable (a 100,000-token prompt fits).
TEST(CapacityParityTest, DefaultSglangPoolServesLongPrompts) {
  EngineConfig cfg{.engine_type = EngineType::Sglang};
  Harness h(cfg);
  const RequestId id = h.submit(range(1, 100000), 2);
  h.runUntilIdle();
  const auto signals = h.signalsOf(id);
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals.back().terminal, Terminal::Completed);
}

// ---------------------------------------------------------------------------------------------
// decode_load: two ready requests sharing one full block (B 4, N 32, each len 8) ⇒ logical
// u = 16/128, physical u = 12/128 (3 resident blocks). P2 = [1..4] ++ [8, 9, 10] is admitted in
// the same pass as P1 = [1..7] and reuses P1's freshly finalised block 0 (hits = min(1, 6/4)).

double decodeLoadSecondPass(DecodeLoad load) {
  EngineConfig cfg = specConfig();
  cfg.num_gpu_blocks = 32;
  cfg.decode_load = load;
  Harness h(cfg);
  h.submit(range(1, 7), 2);
  h.submit(testing::concat(range(1, 4), {8, 9, 10}), 2);
  const PassResult& p1 = h.step();
  EXPECT_EQ(p1.admissions.size(), 2u);
  EXPECT_EQ(p1.admissions[1].reused_input_tokens, 4u);
  const PassResult& p2 = h.step();
  EXPECT_EQ(p2.load.active_blocks, 0u);  // both completed with their second token
  EXPECT_EQ(p2.outputs.size(), 2u);
  return p2.decode_ms;
}

TEST(DecodeLoadTest, LogicalCountsSharedBlocksOncePerRequest) {
  EngineConfig cfg = specConfig();
  const TimingModel timing(cfg);
  const double physical = timing.decodeMs(2, 12, 8, 128);
  const double logical = timing.decodeMs(2, 16, 8, 128);
  ASSERT_NE(physical, logical);
  EXPECT_DOUBLE_EQ(decodeLoadSecondPass(DecodeLoad::Physical), physical);
  EXPECT_DOUBLE_EQ(decodeLoadSecondPass(DecodeLoad::Logical), logical);
}

TEST(DecodeLoadTest, ParsesAndValidates) {
  EXPECT_EQ(parseDecodeLoad("LOGICAL").value(), DecodeLoad::Logical);
  EXPECT_EQ(parseDecodeLoad("physical").value(), DecodeLoad::Physical);
  const auto bad = parseDecodeLoad("virtual");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("decode_load"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Speculative decoding.

EngineConfig specDecoding(EngineType type, std::uint32_t k, std::vector<double> rates) {
  EngineConfig cfg = specConfig(type);
  cfg.spec_num_draft_tokens = k;
  cfg.spec_accept_rates = std::move(rates);
  return cfg;
}

/// Tokens emitted per pass for request `id`, pass by pass until it ends (passes without its
/// tokens included).
std::vector<std::size_t> tokensPerPass(const Harness& h, RequestId id) {
  std::vector<std::size_t> out;
  for (const PassResult& p : h.passes()) {
    std::size_t n = 0;
    for (const OutputSignal& s : p.outputs) {
      if (s.id == id && s.token) ++n;
    }
    out.push_back(n);
  }
  return out;
}

class SpecBurstTest : public ::testing::TestWithParam<EngineType> {};

// Speculative decoding, worked example: k = 2, rates [1, 1], max_output 7 ⇒ bursts 3
// (prompt-completion pass), 3, 1.
TEST_P(SpecBurstTest, AlwaysAcceptedDraftsGiveBurstsOfThree) {
  Harness h(specDecoding(GetParam(), 2, {1.0, 1.0}));
  const RequestId id = h.submit(range(1, 8), 7);
  h.runUntilIdle();
  EXPECT_EQ(tokensPerPass(h, id), (std::vector<std::size_t>{3, 3, 1}));
  const auto signals = h.signalsOf(id);
  ASSERT_EQ(signals.size(), 7u);
  for (std::uint32_t i = 0; i < 7; ++i) {
    EXPECT_EQ(signals[i].index, i);
    EXPECT_EQ(signals[i].token, syntheticToken(0, id, i));
    EXPECT_EQ(signals[i].terminal, i == 6 ? Terminal::Completed : Terminal::None);
  }
  EXPECT_EQ(signals.back().limit, LengthLimit::None);
  // A burst's tokens share the pass's end time.
  for (std::size_t pass = 0; pass < 3; ++pass) {
    for (const OutputSignal& s : h.passes()[pass].outputs) {
      EXPECT_EQ(s.time_ms, h.passes()[pass].end_ms);
    }
  }
}

TEST_P(SpecBurstTest, TwoRequestsAdmittedTogetherEmitSixTokensInTheirFirstPass) {
  Harness h(specDecoding(GetParam(), 2, {1.0, 1.0}));
  h.submit(range(1, 8), 7);
  h.submit(range(101, 108), 7);
  const PassResult& p = h.step();
  EXPECT_EQ(p.admissions.size(), 2u);
  EXPECT_EQ(p.outputs.size(), 6u);
}

TEST_P(SpecBurstTest, NeverAcceptedDraftsGiveOneTokenPerPass) {
  Harness plain(specConfig(GetParam()));
  Harness h(specDecoding(GetParam(), 2, {0.0, 0.0}));
  const RequestId a = plain.submit(range(1, 8), 5);
  const RequestId b = h.submit(range(1, 8), 5);
  plain.runUntilIdle();
  h.runUntilIdle();
  EXPECT_EQ(tokensPerPass(h, b), (std::vector<std::size_t>{1, 1, 1, 1, 1}));
  // Same token timeline as without drafts: one decode-time call per pass at the same lengths.
  const auto with = h.signalsOf(b);
  const auto without = plain.signalsOf(a);
  ASSERT_EQ(with.size(), without.size());
  for (std::size_t i = 0; i < with.size(); ++i) EXPECT_EQ(with[i].token, without[i].token);
}

// One decode-time call per pass at the pre-burst lengths: the pass time does not depend on how
// many drafts are accepted.
TEST_P(SpecBurstTest, DecodeTimeDoesNotDependOnAcceptedDrafts) {
  Harness all(specDecoding(GetParam(), 2, {1.0, 1.0}));
  Harness none(specDecoding(GetParam(), 2, {0.0, 0.0}));
  all.submit(range(1, 8), 7);
  none.submit(range(1, 8), 7);
  EXPECT_EQ(all.step().decode_ms, none.step().decode_ms);
  EXPECT_EQ(all.passes()[0].prefill_ms, none.passes()[0].prefill_ms);
}

// The burst drawn by the engine is specBurst at the request's decode step j, clamped to what
// remains; the run is reproducible and changes with spec_seed.
TEST_P(SpecBurstTest, BurstsFollowTheCounterBasedDraws) {
  const auto run = [&](std::uint64_t seed) {
    EngineConfig cfg = specDecoding(GetParam(), 3, {0.7, 0.6, 0.5});
    cfg.num_gpu_blocks = 64;
    cfg.spec_seed = seed;
    Harness h(cfg);
    std::vector<RequestId> ids;
    for (std::uint32_t r = 0; r < 4; ++r)
      ids.push_back(h.submit(range(100 * r + 1, 100 * r + 6), 40));
    h.runUntilIdle();
    // Check every request's bursts against the draws.
    for (RequestId id : ids) {
      std::uint32_t step = 0, generated = 0;
      for (std::size_t n : tokensPerPass(h, id)) {
        if (n == 0) continue;
        EXPECT_EQ(n, specBurst(cfg, 0, id, step++, 40 - generated)) << "request " << id.value();
        generated += static_cast<std::uint32_t>(n);
      }
      EXPECT_EQ(generated, 40u);
    }
    std::vector<std::vector<std::size_t>> bursts;
    for (RequestId id : ids) bursts.push_back(tokensPerPass(h, id));
    return bursts;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

INSTANTIATE_TEST_SUITE_P(Engines, SpecBurstTest,
                         ::testing::Values(EngineType::Vllm, EngineType::Sglang,
                                           EngineType::Trtllm),
                         [](const ::testing::TestParamInfo<EngineType>& param_info) {
                           return std::string(toString(param_info.param));
                         });

// A burst is clamped to max_output and to the effective length limit, and the stream still names
// the limit that cut it. vLLM, 4 blocks of 4 (L = 16): prompt 8, max_output 20, k = 5 always
// accepted ⇒ bursts of 6 would need len 14 → 20; the first is 6 (len 14), the second is clamped
// to L − len = 2 and ends with a kv capacity reason.
TEST(SpecClampTest, BurstStopsAtTheEffectiveLimit) {
  EngineConfig cfg = specDecoding(EngineType::Vllm, 5, {1, 1, 1, 1, 1});
  cfg.num_gpu_blocks = 4;
  Harness h(cfg);
  const RequestId id = h.submit(range(1, 8), 20);
  h.runUntilIdle();
  EXPECT_EQ(tokensPerPass(h, id), (std::vector<std::size_t>{6, 2}));
  EXPECT_EQ(h.signalsOf(id).back().terminal, Terminal::Completed);
  EXPECT_EQ(h.signalsOf(id).back().limit, LengthLimit::KvCapacity);
}

// Worst-case KV is acquired before the draws, preempting like any allocation. vLLM N = 6, B = 4,
// k = 2 always accepted; A = [1..4], B = [11..14], max 12 each.
//   pass 1  both admitted with KV for 4 + 2 drafts (2 blocks each), 3 tokens each (len 7)
//   pass 2  KV for 6 + 1 + 2 = 9 tokens: 3 blocks each (6 in use), 3 tokens each (len 10)
//   pass 3  9 + 1 + 2 = 12 tokens: still 3 blocks each; len 13
//   pass 4  A needs 12 + 1 + 2 = 15 tokens = 4 blocks, none free ⇒ B (LIFO) is preempted; A's
//           remaining 3 tokens come in one burst and A completes; B is readmitted later.
TEST(SpecPreemptionTest, WorstCaseBurstKvPreempts) {
  EngineConfig cfg = specDecoding(EngineType::Vllm, 2, {1.0, 1.0});
  cfg.num_gpu_blocks = 6;
  Harness h(cfg);
  const RequestId a = h.submit(range(1, 4), 12);
  const RequestId b = h.submit(range(11, 14), 12);
  for (int i = 0; i < 3; ++i) h.step();
  EXPECT_EQ(h.passes()[2].load.active_blocks, 6u);
  EXPECT_EQ(h.passes()[2].load.preemptions_total, 0u);
  const PassResult& p4 = h.step();
  EXPECT_EQ(p4.load.preemptions_total, 1u);
  h.runUntilIdle();
  EXPECT_EQ(tokensPerPass(h, a)[3], 3u);
  for (RequestId id : {a, b}) {
    const auto signals = h.signalsOf(id);
    ASSERT_EQ(signals.size(), 12u);
    for (std::uint32_t i = 0; i < 12; ++i) EXPECT_EQ(signals[i].index, i);
    EXPECT_EQ(signals.back().terminal, Terminal::Completed);
    EXPECT_EQ(signals.back().limit, LengthLimit::None);
  }
  bool readmitted = false;
  for (const PassResult& p : h.passes()) {
    for (const Admission& adm : p.admissions) readmitted |= adm.id == b && adm.is_readmission;
  }
  EXPECT_TRUE(readmitted);
}

// With drafts on, a non-empty prefix hit gives up one more cached block: [1..16] again reuses
// 8 tokens instead of 12 (vLLM) — the drafter needs the last block's hidden states.
TEST(SpecPrefixTest, APrefixHitGivesUpOneMoreBlock) {
  for (const bool spec : {false, true}) {
    EngineConfig cfg = spec ? specDecoding(EngineType::Vllm, 1, {0.5}) : specConfig();
    Harness h(cfg);
    h.submit(range(1, 16), 1);
    h.runUntilIdle();
    h.submit(range(1, 16), 1);
    const PassResult& p = h.step();
    ASSERT_EQ(p.admissions.size(), 1u);
    EXPECT_EQ(p.admissions[0].reused_input_tokens, spec ? 8u : 12u);
  }
}

// The empirical mean over >= 100,000 draws is within 1 % of 1 + p1 + p1·p2 + …; rates 0 and 1
// are exact.
TEST(SpecDrawTest, EmpiricalMeanMatchesTheExpectedBurst) {
  struct Case {
    std::uint32_t k;
    std::vector<double> rates;
  };
  for (const Case& c :
       {Case{2, {0.85, 0.3}}, Case{5, {0.85, 0.3, 0, 0, 0}}, Case{3, {0.7, 0.6, 0.5}},
        Case{5, {0.9, 0.9, 0.9, 0.9, 0.9}}, Case{1, {0.5}}}) {
    EngineConfig cfg;
    cfg.spec_num_draft_tokens = c.k;
    cfg.spec_accept_rates = c.rates;
    const double expected = specExpectedBurst(cfg);
    double sum = 0;
    constexpr std::uint32_t kRequests = 1000, kSteps = 200;  // 200,000 bursts
    for (std::uint32_t id = 1; id <= kRequests; ++id) {
      for (std::uint32_t j = 0; j < kSteps; ++j) sum += specBurst(cfg, 0, RequestId{id}, j, 1000);
    }
    const double mean = sum / (double{kRequests} * kSteps);
    EXPECT_NEAR(mean, expected, 0.01 * expected) << "k " << c.k;
  }
  EngineConfig cfg;
  cfg.spec_num_draft_tokens = 3;
  cfg.spec_accept_rates = {1, 1, 0};
  EXPECT_DOUBLE_EQ(specExpectedBurst(cfg), 3.0);
  for (std::uint32_t id = 1; id <= 1000; ++id) {
    EXPECT_EQ(specBurst(cfg, 0, RequestId{id}, id, 1000), 3u);
    EXPECT_EQ(specBurst(cfg, 0, RequestId{id}, id, 2), 2u);  // clamped to what remains
  }
  cfg.spec_accept_rates = {};  // missing positions never accept
  for (std::uint32_t id = 1; id <= 1000; ++id)
    EXPECT_EQ(specBurst(cfg, 0, RequestId{id}, 0, 9), 1u);
}

TEST(SpecDrawTest, UniformDependsOnEveryInput) {
  const double u = specUniform(42, 0, RequestId{1}, 0, 1);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
  EXPECT_EQ(u, specUniform(42, 0, RequestId{1}, 0, 1));
  EXPECT_NE(u, specUniform(43, 0, RequestId{1}, 0, 1));
  EXPECT_EQ(specUniform(43, 0, RequestId{1}, 0, 1), specUniform(42, 1, RequestId{1}, 0, 1));
  EXPECT_NE(u, specUniform(42, 0, RequestId{2}, 0, 1));
  EXPECT_NE(u, specUniform(42, 0, RequestId{1}, 1, 1));
  EXPECT_NE(u, specUniform(42, 0, RequestId{1}, 0, 2));
}

TEST(SpecConfigTest, Validation) {
  const auto error = [](EngineConfig c) {
    const auto e = checkEngineConfig(c);
    return e ? e->error.message : std::string();
  };
  EngineConfig c;
  c.spec_num_draft_tokens = 0;
  EXPECT_EQ(error(c).rfind("spec_num_draft_tokens must be in 1..=5", 0), 0u) << error(c);
  c.spec_num_draft_tokens = 6;
  EXPECT_EQ(error(c).rfind("spec_num_draft_tokens must be in 1..=5", 0), 0u);
  c.spec_num_draft_tokens = 5;
  EXPECT_EQ(error(c), "");
  c.spec_accept_rates = {0.5, 1.5};
  EXPECT_EQ(error(c).rfind("spec_accept_rates must be finite and in [0, 1]", 0), 0u) << error(c);
  c.spec_accept_rates = {0, 0, 0, 0, 0, 0};
  EXPECT_EQ(error(c).rfind("spec_accept_rates must be at most 5 rates", 0), 0u) << error(c);
  c.spec_accept_rates = {0.5};
  c.decode_speedup_ratio = 2;
  EXPECT_EQ(error(c).rfind("decode_speedup_ratio must be 1 when spec_num_draft_tokens", 0), 0u)
      << error(c);
  c.spec_num_draft_tokens.reset();
  EXPECT_EQ(error(c), "");  // rates are range-checked but unused while drafts are off
}

}  // namespace
}  // namespace mocker::engine
