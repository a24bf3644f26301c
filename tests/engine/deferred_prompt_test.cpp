// Request::deferred_prompt: a prompt the engine produces only when it first needs it. Per engine
// type (vllm, trtllm, sglang): the same run as with the tokens given at submit — passes, signals,
// KV events (with their token lists), metrics — under prefix hits, preemption, a rejection and a
// cancel; when the source is asked (vLLM / TRT-LLM: at a request's first admission attempt, so a
// queue that is never reached costs no prompt; SGLang: at submit); what submit refuses.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::range;

/// A prompt source over fixed tokens that counts how often it was asked.
class CountingSource final : public PromptSource {
 public:
  CountingSource(std::vector<std::uint32_t> tokens, std::shared_ptr<int> calls)
      : tokens_(std::move(tokens)), calls_(std::move(calls)) {}
  std::uint32_t size() const override { return static_cast<std::uint32_t>(tokens_.size()); }
  void appendTo(std::vector<std::uint32_t>& out) const override {
    ++*calls_;
    out.insert(out.end(), tokens_.begin(), tokens_.end());
  }

 private:
  std::vector<std::uint32_t> tokens_;
  std::shared_ptr<int> calls_;
};

Request deferred(std::vector<std::uint32_t> tokens, std::uint32_t max_output,
                 const std::shared_ptr<int>& calls) {
  return {.max_output_tokens = max_output,
          .deferred_prompt = std::make_shared<CountingSource>(std::move(tokens), calls)};
}

class DeferredPromptTest : public ::testing::TestWithParam<EngineType> {
 protected:
  EngineConfig config() const { return testing::specConfig(GetParam()); }
  bool materializesAtSubmit() const { return GetParam() == EngineType::Sglang; }
};

// 14 requests over a 7-block pool: shared prefixes (hits), evictions and (vLLM) preemption, one
// prompt too long for the pool (rejected at the head), one request cancelled while it waits.
TEST_P(DeferredPromptTest, SameRunAsTokensGivenAtSubmit) {
  const auto run = [&](bool defer, std::shared_ptr<int> calls) {
    auto cfg = config();
    cfg.num_gpu_blocks = 7;
    Engine engine(cfg);
    std::vector<RequestId> ids;
    for (std::uint32_t i = 0; i < 14; ++i) {
      auto tokens = i == 5 ? range(1, 40) : range(1, 4 + 4 * (i % 3));
      tokens.push_back(100 + i);
      tokens.push_back(200 + i);
      const std::uint32_t max_output = 3 + i % 5;
      auto id = engine.submit(
          defer ? deferred(std::move(tokens), max_output, calls)
                : Request{.tokens = std::move(tokens), .max_output_tokens = max_output});
      EXPECT_TRUE(id.has_value());
      ids.push_back(*id);
    }
    EXPECT_TRUE(engine.checkInvariantsForTest(0).has_value());
    EXPECT_EQ(engine.cancel(ids[12]), CancelResult::Applied);
    std::vector<PassResult> passes;
    double now = 0.0;
    while (engine.hasWork() && passes.size() < 1000) {
      passes.push_back(engine.step(0, now));
      now = passes.back().end_ms;
      const Status ok = engine.checkInvariantsForTest(0);
      EXPECT_TRUE(ok.has_value()) << (ok ? "" : ok.error().message);
    }
    EXPECT_FALSE(engine.hasWork());
    return passes;
  };
  const auto calls = std::make_shared<int>(0);
  const std::vector<PassResult> given = run(false, calls);
  const std::vector<PassResult> later = run(true, calls);
  ASSERT_EQ(given.size(), later.size());
  bool rejected = false, preempted = false;
  for (std::size_t i = 0; i < given.size(); ++i) {
    const PassResult& a = given[i];
    const PassResult& b = later[i];
    SCOPED_TRACE("pass " + std::to_string(i));
    testing::expectSamePass(a, b, /*with_events=*/true);
    for (const OutputSignal& s : a.outputs) rejected |= s.terminal == Terminal::Rejected;
    preempted |= a.load.preemptions_total > 0;
  }
  EXPECT_TRUE(rejected);
  if (GetParam() == EngineType::Vllm) {
    EXPECT_TRUE(preempted);  // preempted requests keep their tokens for readmission
  }
  // Each prompt was produced at most once; the cancelled one (never at the head) and the
  // rejected one (refused by its length alone) only by SGLang.
  EXPECT_EQ(*calls, materializesAtSubmit() ? 14 : 12);
}

// A vLLM / TRT-LLM rank asks for a prompt when the request is first considered for admission:
// the requests behind a head that does not fit cost nothing.
TEST_P(DeferredPromptTest, ProducedAtTheFirstAdmissionAttempt) {
  auto cfg = config();
  cfg.num_gpu_blocks = 8;  // 32 tokens: one 20-token prompt runs at a time
  Engine engine(cfg);
  const auto calls = std::make_shared<int>(0);
  for (std::uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(engine.submit(deferred(range(100 * i + 1, 100 * i + 20), 8, calls)));
  }
  EXPECT_EQ(*calls, materializesAtSubmit() ? 10 : 0);
  engine.step(0, 0.0);
  EXPECT_EQ(engine.loadMetrics(0).running_requests, 1u);
  // The running request, and the head that did not fit behind it.
  EXPECT_EQ(*calls, materializesAtSubmit() ? 10 : 2);
  EXPECT_TRUE(engine.checkInvariantsForTest(0).has_value());
}

TEST_P(DeferredPromptTest, SubmitRefusesTokensBesideItAndAnEmptyOne) {
  Engine engine(config());
  const auto calls = std::make_shared<int>(0);
  Request both = deferred(range(1, 4), 2, calls);
  both.tokens = range(1, 4);
  EXPECT_FALSE(engine.submit(both).has_value());
  EXPECT_FALSE(engine.submit(deferred({}, 2, calls)).has_value());
  EXPECT_TRUE(engine.submit(deferred(range(1, 4), 2, calls)).has_value());
  EXPECT_FALSE(engine.submit(deferred(range(1, 4), 0, calls)).has_value());  // zero output
}

// Steps rank 0 pass after pass (each starting at the previous one's end) until the engine is
// idle (at most 1,000 passes); the passes.
std::vector<PassResult> runUntilIdle(Engine& engine) {
  std::vector<PassResult> passes;
  double now = 0.0;
  while (engine.hasWork() && passes.size() < 1000) {
    passes.push_back(engine.step(0, now));
    now = passes.back().end_ms;
  }
  return passes;
}

// Engine::setKvEventTokens(false) (the offline replay's KV-aware routers, with deferred
// prompts): the same run, every BlockStored without its token ids.
TEST_P(DeferredPromptTest, KvEventsWithoutTokensAreTheSameRunWithoutTokenIds) {
  const auto run = [&](bool tokens) {
    auto cfg = config();
    cfg.num_gpu_blocks = 7;
    Engine engine(cfg);
    engine.setKvEventTokens(tokens);
    const auto calls = std::make_shared<int>(0);
    for (std::uint32_t i = 0; i < 10; ++i) {
      auto prompt = range(1, 4 + 4 * (i % 3));
      prompt.push_back(100 + i);
      EXPECT_TRUE(engine.submit(deferred(std::move(prompt), 2 + i % 3, calls)).has_value());
    }
    return runUntilIdle(engine);
  };
  const std::vector<PassResult> with = run(true);
  const std::vector<PassResult> without = run(false);
  ASSERT_EQ(with.size(), without.size());
  std::size_t stored = 0;
  for (std::size_t i = 0; i < with.size(); ++i) {
    SCOPED_TRACE("pass " + std::to_string(i));
    EXPECT_EQ(with[i].outputs, without[i].outputs);
    EXPECT_EQ(with[i].end_ms, without[i].end_ms);
    std::vector<KvEvent> expected = with[i].kv_events;
    for (KvEvent& e : expected) {
      if (auto* s = std::get_if<BlockStored>(&e)) {
        EXPECT_FALSE(s->token_ids.empty());
        s->token_ids.clear();
        ++stored;
      }
    }
    EXPECT_EQ(without[i].kv_events, expected);
  }
  EXPECT_GT(stored, 0u);
}

// Request::prompt_hashes (the KV router's hashes handed over): the same run as hashed by the
// engine; a count other than the prompt's full blocks is refused.
TEST_P(DeferredPromptTest, PromptHashesGivenAreTheSameRun) {
  const auto run = [&](bool give) {
    auto cfg = config();
    cfg.num_gpu_blocks = 7;
    Engine engine(cfg);
    const auto calls = std::make_shared<int>(0);
    for (std::uint32_t i = 0; i < 10; ++i) {
      auto prompt = range(1, 4 + 4 * (i % 3));
      prompt.push_back(100 + i);
      Request r = deferred(prompt, 2 + i % 3, calls);
      if (give)
        r.prompt_hashes =
            sequenceHashes(prompt, engine.blockSize(), {cfg.hash_seed, cfg.chain_seed});
      EXPECT_TRUE(engine.submit(std::move(r)).has_value());
    }
    return runUntilIdle(engine);
  };
  const std::vector<PassResult> hashed = run(false);
  const std::vector<PassResult> given = run(true);
  ASSERT_EQ(hashed.size(), given.size());
  for (std::size_t i = 0; i < hashed.size(); ++i) {
    EXPECT_EQ(hashed[i].outputs, given[i].outputs);
    EXPECT_EQ(hashed[i].admissions, given[i].admissions);
    EXPECT_EQ(hashed[i].kv_events, given[i].kv_events);
    EXPECT_EQ(hashed[i].end_ms, given[i].end_ms);
  }
  Engine engine(config());
  const auto calls = std::make_shared<int>(0);
  Request wrong = deferred(range(1, 4 * engine.blockSize()), 2, calls);
  wrong.prompt_hashes = {1, 2, 3};
  EXPECT_FALSE(engine.submit(std::move(wrong)).has_value());
}

INSTANTIATE_TEST_SUITE_P(EngineTypes, DeferredPromptTest,
                         ::testing::Values(EngineType::Vllm, EngineType::Trtllm,
                                           EngineType::Sglang),
                         [](const ::testing::TestParamInfo<EngineType>& param) {
                           return std::string(toString(param.param));
                         });

}  // namespace
}  // namespace mocker::engine
