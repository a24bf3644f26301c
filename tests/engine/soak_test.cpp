// Randomized soak: thousands of seeded requests with shared prefixes, random cancellations and a
// tiny pool that forces preemption and eviction. The harness checks the invariants after every
// step (pool accounting, budget, max_num_seqs, events replayed into a set == cached hashes);
// here we also check that every request ends exactly once, that the pool drains, that a waiting
// head never waits forever once the running queue is empty, that every stream ending
// short of its max_output_tokens names the limit that cut it (and no other stream names one),
// that reuse stays within [0, 1] (an admission never reports more reused input than its prompt,
// even when a preempted request is readmitted on its own generated blocks), and that every
// request's tokens arrive exactly once, in index order (speculative bursts included).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <random>

#include "engine_harness.h"

namespace mocker::engine {
namespace {

struct SoakCase {
  const char* name;
  EngineConfig config;
};

void PrintTo(const SoakCase& c, std::ostream* os) { *os << c.name; }

class SoakTest : public ::testing::TestWithParam<SoakCase> {};

TEST_P(SoakTest, InvariantsHoldAndPoolDrains) {
  EngineConfig cfg = GetParam().config;
  testing::Harness h(cfg);
  std::mt19937_64 rng(12345);
  const auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return static_cast<std::uint32_t>(lo + rng() % (hi - lo + 1));
  };
  // A few shared prefixes of 0..5 blocks.
  std::vector<std::vector<std::uint32_t>> prefixes;
  for (std::uint32_t g = 0; g < 6; ++g) {
    prefixes.push_back(testing::range(1000 * g + 1, 1000 * g + 4 * g + 1));
  }
  std::map<RequestId, int> terminals;
  std::map<RequestId, std::uint32_t> max_output;
  std::map<RequestId, std::uint32_t> prompt_len;
  std::map<RequestId, std::uint32_t> next_index;
  std::uint64_t readmissions = 0;
  std::vector<RequestId> live;
  std::uint32_t submitted = 0;
  constexpr std::uint32_t kRequests = 3000;
  std::uint64_t cancels = 0;
  std::uint64_t short_streams = 0, full_streams = 0;
  int guard = 0;
  while ((submitted < kRequests || h.engine().hasWork()) && ++guard < 200000) {
    const std::uint32_t arrivals = submitted < kRequests ? uniform(0, 3) : 0;
    for (std::uint32_t i = 0; i < arrivals; ++i, ++submitted) {
      auto tokens = prefixes[uniform(0, 5)];
      const std::uint32_t extra = uniform(1, 14);
      for (std::uint32_t t = 0; t < extra; ++t) tokens.push_back(uniform(1, 50000));
      // One request in 16 asks for more than the pool can hold next to its prompt.
      const std::uint32_t max_out = rng() % 16 == 0 ? uniform(13, 48) : uniform(1, 12);
      const RequestId id = h.submit(tokens, max_out);
      max_output[id] = max_out;
      prompt_len[id] = static_cast<std::uint32_t>(tokens.size());
      live.push_back(id);
      terminals[id] = 0;
    }
    if (!live.empty() && rng() % 10 == 0) {
      const std::size_t pick = rng() % live.size();
      if (h.engine().cancel(live[pick]) == CancelResult::Applied) {
        ++terminals[live[pick]];
        ++cancels;
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    if (h.engine().hasWork()) {
      const LoadMetrics before = h.engine().loadMetrics(0);
      const auto& p = h.step();
      ASSERT_FALSE(::testing::Test::HasFailure()) << "invariant broken";
      if (before.running_requests == 0 && before.waiting_requests > 0) {
        ASSERT_TRUE(p.did_work) << "pass " << guard << ": the waiting head is stuck";
        // vLLM / TRT-LLM: the head itself moves — admitted or rejected — in that very pass
        // (SGLang may instead continue a partial prefill, which re-queues the request).
        const bool head_moved =
            !p.admissions.empty() ||
            std::any_of(p.outputs.begin(), p.outputs.end(),
                        [](const OutputSignal& s) { return s.terminal == Terminal::Rejected; });
        if (cfg.engine_type != EngineType::Sglang) {
          ASSERT_TRUE(head_moved) << "pass " << guard << ": the waiting head was not admitted";
        }
      }
      for (const Admission& a : p.admissions) {
        EXPECT_LE(a.reused_input_tokens, prompt_len[a.id]) << "request " << a.id.value();
        readmissions += a.is_readmission ? 1 : 0;
      }
      EXPECT_GE(p.load.prefix_cache_hit_rate, 0.0);
      EXPECT_LE(p.load.prefix_cache_hit_rate, 1.0);
      for (const auto& s : p.outputs) {
        if (s.token) {
          EXPECT_EQ(s.index, next_index[s.id]++) << "request " << s.id.value();
          EXPECT_EQ(s.time_ms, p.end_ms);
        }
        if (s.terminal != Terminal::None) ++terminals[s.id];
        if (s.terminal == Terminal::Completed) {
          const std::uint32_t emitted = s.token ? s.index + 1 : s.index;
          ++(emitted < max_output[s.id] ? short_streams : full_streams);
          EXPECT_EQ(s.limit != LengthLimit::None, emitted < max_output[s.id])
              << "request " << s.id.value() << ": " << emitted << " of " << max_output[s.id];
        } else if (s.terminal == Terminal::Rejected) {
          EXPECT_NE(s.limit, LengthLimit::None) << "a rejection names its limit";
        } else {
          EXPECT_EQ(s.limit, LengthLimit::None);
        }
      }
    }
  }
  EXPECT_EQ(submitted, kRequests);
  EXPECT_FALSE(h.engine().hasWork());
  for (const auto& [id, n] : terminals) EXPECT_EQ(n, 1) << "request " << id.value();
  const LoadMetrics m = h.engine().loadMetrics(0);
  EXPECT_EQ(m.active_blocks, 0u);
  EXPECT_EQ(m.running_requests, 0u);
  EXPECT_EQ(m.waiting_requests, 0u);
  EXPECT_GT(cancels, 0u);
  EXPECT_GT(full_streams, 0u);
  EXPECT_GT(short_streams, 0u) << "no stream reached the length limit";
  if (cfg.engine_type != EngineType::Trtllm) {
    EXPECT_GT(m.preemptions_total, 0u) << "pool was not small enough to force preemption";
    EXPECT_GT(readmissions, 0u);
  }
  if (cfg.enable_prefix_caching) {
    EXPECT_GT(m.prefix_cache_hits_tokens, 0u);
  }
}

EngineConfig tiny(EngineConfig c) {
  c.num_gpu_blocks = 12;
  c.block_size = 4;
  c.max_num_batched_tokens = 24;
  c.max_num_seqs = 6;
  return c;
}

// SGLang: 12 pages of 4 tokens, 8-token chunks and a 16-token prefill budget, so chunking,
// retraction and eviction all happen.
EngineConfig tinySglang(SchedulePolicy policy, bool prefix_caching) {
  EngineConfig c = tiny({.engine_type = EngineType::Sglang});
  c.max_num_batched_tokens = std::nullopt;  // does not apply to SGLang
  c.enable_prefix_caching = prefix_caching;
  c.sglang.schedule_policy = policy;
  c.sglang.chunked_prefill_size = 8;
  c.sglang.max_prefill_tokens = 16;
  c.sglang.clip_max_new_tokens = 4;
  return c;
}

// SGLang's default page size 1: per-token radix nodes and events.
EngineConfig tinySglangPage1() {
  EngineConfig c = tinySglang(SchedulePolicy::Lpm, true);
  c.block_size = 0;
  c.num_gpu_blocks = 48;
  c.sglang.chunked_prefill_size = 7;
  return c;
}

// Speculative decoding: 3 drafts, often accepted, so bursts of up to 4 tokens need worst-case KV
// up front in a pool that is already tight.
EngineConfig speculative(EngineConfig c) {
  c.spec_num_draft_tokens = 3;
  c.spec_accept_rates = {0.8, 0.6, 0.5};
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Engines, SoakTest,
    ::testing::Values(
        SoakCase{"vllm_lifo", tiny({})},
        SoakCase{"vllm_fifo", tiny({.preemption_mode = PreemptionMode::Fifo})},
        SoakCase{"vllm_no_chunking", tiny({.enable_chunked_prefill = false})},
        SoakCase{"vllm_no_prefix_cache", tiny({.enable_prefix_caching = false})},
        SoakCase{"trtllm", tiny({.engine_type = EngineType::Trtllm})},
        SoakCase{"sglang_fcfs", tinySglang(SchedulePolicy::Fcfs, true)},
        SoakCase{"sglang_lpm", tinySglang(SchedulePolicy::Lpm, true)},
        SoakCase{"sglang_no_prefix_cache", tinySglang(SchedulePolicy::Fcfs, false)},
        SoakCase{"sglang_page1_lpm", tinySglangPage1()},
        SoakCase{"vllm_spec", speculative(tiny({}))},
        SoakCase{"vllm_spec_no_chunking", speculative(tiny({.enable_chunked_prefill = false}))},
        SoakCase{"trtllm_spec", speculative(tiny({.engine_type = EngineType::Trtllm}))},
        SoakCase{"sglang_spec", speculative(tinySglang(SchedulePolicy::Fcfs, true))}),
    [](const ::testing::TestParamInfo<SoakCase>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace mocker::engine
