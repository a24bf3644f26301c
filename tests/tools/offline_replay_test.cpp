#include "tools/replay/offline_replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/tools/replay_test_util.h"
#include "tools/replay/collector.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/report_output.h"
#include "tools/replay/synthetic.h"

namespace mocker::replay {
namespace {

Workload parse(const std::string& text, bool require_timestamps = true) {
  auto w =
      parseMooncakeTrace(text, {.trace_block_size = 16, .require_timestamps = require_timestamps});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

using testing::smallEngine;

ReplayCollector replayOrDie(const Workload& w, const OfflineReplayOptions& options,
                            OfflineReplayStats* stats_out = nullptr) {
  ReplayCollector collector;
  auto stats = runOfflineReplay(w, options, collector);
  EXPECT_TRUE(stats.has_value()) << (stats ? "" : stats.error().toString());
  if (stats && stats_out) *stats_out = *stats;
  return collector;
}

// Turn 2 with delay 50 is submitted exactly 50 ms after turn 1's terminal.
TEST(OfflineReplayTest, LaterTurnArrivesExactlyDelayAfterPreviousTerminal) {
  const Workload w =
      parse(R"({"timestamp": 0, "output_length": 5, "hash_ids": [1, 2], "session_id": "s"})"
            "\n"
            R"({"timestamp": 1, "output_length": 3, "hash_ids": [3], "session_id": "x"})"
            "\n"
            R"({"output_length": 2, "hash_ids": [1, 2, 4], "session_id": "s", "delay": 50})"
            "\n");
  const ReplayCollector c = replayOrDie(w, {.engine = smallEngine()});
  ASSERT_EQ(c.requests().size(), 3u);
  // Dispatch order: s/0 at 0, x/0 at 1, s/1 after s/0 ended.
  const RequestRecord& first = c.requests()[0];
  const RequestRecord& second_turn = c.requests()[2];
  EXPECT_EQ(second_turn.info.session_id, "s");
  EXPECT_EQ(second_turn.info.turn_index, 1u);
  ASSERT_TRUE(first.terminal_ms.has_value());
  EXPECT_EQ(first.status, TerminalStatus::Completed);
  EXPECT_EQ(second_turn.arrival_ms, *first.terminal_ms + 50.0);
  ASSERT_TRUE(second_turn.first_admit_ms.has_value());
  EXPECT_GE(*second_turn.first_admit_ms, second_turn.arrival_ms);
  // The second turn reuses its session's prefix (blocks 1, 2 of 16 tokens each).
  EXPECT_EQ(second_turn.first_reused_input_tokens, 32u);
  EXPECT_EQ(second_turn.status, TerminalStatus::Completed);
}

TEST(OfflineReplayTest, ArrivalDuringAPassWaitsForThePassBoundary) {
  const Workload w = parse(R"({"timestamp": 0, "output_length": 3, "hash_ids": [1]})"
                           "\n"
                           R"({"timestamp": 5, "output_length": 1, "hash_ids": [2]})"
                           "\n");
  const ReplayCollector c = replayOrDie(w, {.engine = smallEngine()});
  ASSERT_EQ(c.requests().size(), 2u);
  EXPECT_EQ(c.requests()[0].first_admit_ms, 0.0);
  EXPECT_EQ(c.requests()[1].arrival_ms, 5.0);
  // Request 1 arrives during request 0's prefill pass and is admitted at that pass's end.
  ASSERT_FALSE(c.requests()[0].token_times_ms.empty());
  const double first_pass_end = c.requests()[0].token_times_ms.front();
  EXPECT_GT(first_pass_end, 5.0);
  EXPECT_EQ(c.requests()[1].first_admit_ms, first_pass_end);
}

// Concurrency 2 with four 1-token requests ⇒ requests 3 and 4 arrive at the
// terminal times of requests 1 and 2, and their TTFT excludes the wait for a slot.
TEST(OfflineReplayTest, ClosedLoopDispatchesOnTerminals) {
  const Workload w = parse(R"({"output_length": 1, "hash_ids": [1]})"
                           "\n"
                           R"({"output_length": 1, "hash_ids": [2]})"
                           "\n"
                           R"({"output_length": 1, "hash_ids": [3]})"
                           "\n"
                           R"({"output_length": 1, "hash_ids": [4]})"
                           "\n",
                           /*require_timestamps=*/false);
  const ReplayCollector c = replayOrDie(w, {.engine = smallEngine(), .concurrency = 2});
  const auto& r = c.requests();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].arrival_ms, 0.0);
  EXPECT_EQ(r[1].arrival_ms, 0.0);
  ASSERT_TRUE(r[0].terminal_ms && r[1].terminal_ms);
  EXPECT_EQ(r[2].arrival_ms, *r[0].terminal_ms);
  EXPECT_EQ(r[3].arrival_ms, *r[1].terminal_ms);
  EXPECT_GT(r[2].arrival_ms, 0.0);
  const RequestLatencies l3 = latenciesOf(r[2]);
  ASSERT_TRUE(l3.ttft_ms.has_value());
  // One prefill pass on an idle rank, like request 1: no slot wait included.
  EXPECT_EQ(*l3.ttft_ms, *latenciesOf(r[0]).ttft_ms);
  EXPECT_EQ(r[2].info.input_length, 16u);
}

TEST(OfflineReplayTest, ClosedLoopNeverExceedsTheConcurrency) {
  SyntheticSpec spec{.request_count = 40,
                     .input_tokens = {200, 80},
                     .output_tokens = {20, 15},
                     .arrival = {.kind = ArrivalKind::Burst},
                     .block_size = 16,
                     .seed = 3};
  auto w = generateSyntheticWorkload(spec);
  ASSERT_TRUE(w.has_value());
  const ReplayCollector c = replayOrDie(*w, {.engine = smallEngine(), .concurrency = 3});
  ASSERT_EQ(c.requests().size(), 40u);
  // At every arrival, at most 2 earlier requests are still in flight.
  for (std::size_t i = 0; i < c.requests().size(); ++i) {
    const double t = c.requests()[i].arrival_ms;
    int in_flight = 0;
    for (std::size_t j = 0; j < i; ++j) {
      if (*c.requests()[j].terminal_ms > t) ++in_flight;
    }
    EXPECT_LE(in_flight, 2) << "request " << i;
    EXPECT_EQ(c.requests()[i].status, TerminalStatus::Completed);
  }
}

TEST(OfflineReplayTest, SameInstantArrivalsAreSubmittedInTraceOrder) {
  const Workload w =
      parse(R"({"timestamp": 7, "output_length": 1, "hash_ids": [1], "request_id": "a"})"
            "\n"
            R"({"timestamp": 7, "output_length": 1, "hash_ids": [2], "request_id": "b"})"
            "\n"
            R"({"timestamp": 3, "output_length": 1, "hash_ids": [3], "request_id": "c"})"
            "\n");
  const ReplayCollector c = replayOrDie(w, {.engine = smallEngine()});
  ASSERT_EQ(c.requests().size(), 3u);
  EXPECT_EQ(c.requests()[0].info.request_id, "c");
  EXPECT_EQ(c.requests()[1].info.request_id, "a");
  EXPECT_EQ(c.requests()[2].info.request_id, "b");
}

TEST(OfflineReplayTest, ZeroTokenOutputCompletesWithoutTokens) {
  const Workload w = parse(R"({"timestamp": 0, "output_length": 0, "hash_ids": [1]})"
                           "\n");
  const ReplayCollector c = replayOrDie(w, {.engine = smallEngine()});
  ASSERT_EQ(c.requests().size(), 1u);
  EXPECT_EQ(c.requests()[0].status, TerminalStatus::Completed);
  EXPECT_TRUE(c.requests()[0].token_times_ms.empty());
}

// Length limits: with a 4-block pool of 16 tokens (L = 64), a 64-token prompt is rejected and a
// 48-token prompt asking for 20 tokens stops after 16; the report counts both by their limit and
// the per-request rows name it. A request that gets all its tokens names none.
TEST(OfflineReplayTest, LengthLimitedRequestsAreCountedPerLimit) {
  const Workload w =
      parse(R"({"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1, 2, 3, 4]})"
            "\n"
            R"({"timestamp": 1, "input_length": 48, "output_length": 20, "hash_ids": [5, 6, 7]})"
            "\n"
            R"({"timestamp": 2, "input_length": 16, "output_length": 2, "hash_ids": [8]})"
            "\n");
  engine::EngineConfig cfg = smallEngine();
  cfg.num_gpu_blocks = 4;
  const ReplayCollector c = replayOrDie(w, {.engine = cfg});
  ASSERT_EQ(c.requests().size(), 3u);
  EXPECT_EQ(c.requests()[0].status, TerminalStatus::Rejected);
  EXPECT_EQ(c.requests()[0].stop_reason, StopReason::KvCapacity);
  EXPECT_EQ(c.requests()[1].status, TerminalStatus::Completed);
  EXPECT_EQ(c.requests()[1].token_times_ms.size(), 16u);
  EXPECT_EQ(c.requests()[1].stop_reason, StopReason::KvCapacity);
  EXPECT_EQ(c.requests()[2].token_times_ms.size(), 2u);
  EXPECT_EQ(c.requests()[2].stop_reason, StopReason::None);
  const Report r = c.buildReport({});
  EXPECT_EQ(r.rejected_by.kv_capacity, 1u);
  EXPECT_EQ(r.cut_short_by.kv_capacity, 1u);
  EXPECT_EQ(r.cut_short_by.max_model_len + r.cut_short_by.max_num_batched_tokens +
                r.rejected_by.max_model_len + r.rejected_by.max_num_batched_tokens,
            0u);
}

TEST(OfflineReplayTest, DpRanksAndWorkersGetRequestsRoundRobin) {
  std::string text;
  for (int i = 0; i < 12; ++i) {
    text += R"({"timestamp": )" + std::to_string(i) + R"(, "output_length": 2, "hash_ids": [)" +
            std::to_string(i + 1) + "]}\n";
  }
  const Workload w = parse(text);
  engine::EngineConfig config = smallEngine();
  config.dp_size = 2;
  OfflineReplayStats stats;
  const ReplayCollector c = replayOrDie(w, {.engine = config, .num_workers = 3}, &stats);
  EXPECT_EQ(stats.per_worker, (std::vector<std::uint64_t>{4, 4, 4}));
  std::vector<std::uint32_t> ranks_seen;
  for (const EngineSample& s : c.engineSamples()) ranks_seen.push_back(s.dp_rank);
  std::sort(ranks_seen.begin(), ranks_seen.end());
  ranks_seen.erase(std::unique(ranks_seen.begin(), ranks_seen.end()), ranks_seen.end());
  EXPECT_EQ(ranks_seen, (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5}));  // worker · 2 + rank
}

TEST(OfflineReplayTest, RejectsBadOptionsBeforeSimulating) {
  const Workload w = parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})"
                           "\n");
  ReplayCollector c;
  EXPECT_FALSE(runOfflineReplay(w, {.engine = smallEngine(), .num_workers = 0}, c).has_value());
  EXPECT_FALSE(runOfflineReplay(w, {.engine = smallEngine(), .concurrency = 0}, c).has_value());
  engine::EngineConfig bad = smallEngine();
  bad.num_gpu_blocks = 0;
  const auto r = runOfflineReplay(w, {.engine = bad}, c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("num_gpu_blocks"), std::string::npos);
  const Workload untimed = parse(R"({"output_length": 1, "hash_ids": [1]})"
                                 "\n",
                                 /*require_timestamps=*/false);
  EXPECT_FALSE(runOfflineReplay(untimed, {.engine = smallEngine()}, c).has_value());
  EXPECT_TRUE(c.requests().empty());
}

TEST(OfflineReplayTest, RouterNamesRoundTrip) {
  for (const RouterKind k :
       {RouterKind::RoundRobin, RouterKind::Kv, RouterKind::Random, RouterKind::KvPrefix}) {
    EXPECT_EQ(*parseRouterKind(toString(k)), k);
  }
  EXPECT_FALSE(parseRouterKind("nearest").has_value());
}

/// Prefix-heavy workload: 16 groups, 90 % of every prompt shared within its group.
Workload prefixHeavy() {
  auto w = generateSyntheticWorkload({.request_count = 400,
                                      .input_tokens = {2048, 256},
                                      .output_tokens = {32, 8},
                                      .arrival = {.kind = ArrivalKind::Poisson, .rate_per_s = 40},
                                      .shared_prefix_ratio = 0.9,
                                      .num_prefix_groups = 16,
                                      .block_size = 64,
                                      .seed = 11});
  EXPECT_TRUE(w.has_value());
  return std::move(*w);
}

Report replayWithRouter(const Workload& w, RouterKind router, OfflineReplayStats* stats) {
  // A cache of 160 × 64 tokens per worker holds only a few groups' prefixes: where a group's
  // requests land decides whether its prefix is still cached.
  engine::EngineConfig config{.num_gpu_blocks = 160, .max_num_seqs = 8};
  ReplayCollector c = replayOrDie(
      w, {.engine = config, .num_workers = 4, .router = router, .router_seed = 5}, stats);
  return c.buildReport({});
}

// With 4 workers and a prefix-heavy trace, kv routing reuses more of the prefix cache than
// round robin.
TEST(OfflineReplayTest, KvRouterReusesMorePrefixThanRoundRobin) {
  const Workload w = prefixHeavy();
  OfflineReplayStats rr_stats, kv_stats, random_stats;
  const Report rr = replayWithRouter(w, RouterKind::RoundRobin, &rr_stats);
  const Report kv = replayWithRouter(w, RouterKind::Kv, &kv_stats);
  const Report rnd = replayWithRouter(w, RouterKind::Random, &random_stats);
  ASSERT_TRUE(rr.prefix_cache_reused_ratio && kv.prefix_cache_reused_ratio &&
              rnd.prefix_cache_reused_ratio);
  std::printf(
      "prefix reuse ratio, 4 workers, 400 requests, 16 groups: round_robin %.4f, "
      "random %.4f, kv %.4f (kv routed %llu of 400 to a cached prefix)\n",
      *rr.prefix_cache_reused_ratio, *rnd.prefix_cache_reused_ratio, *kv.prefix_cache_reused_ratio,
      static_cast<unsigned long long>(kv_stats.kv_routed_hits));
  EXPECT_GT(*kv.prefix_cache_reused_ratio, *rr.prefix_cache_reused_ratio);
  EXPECT_GT(*kv.prefix_cache_reused_ratio, *rnd.prefix_cache_reused_ratio);
  EXPECT_EQ(kv.completed_requests, 400u);
  EXPECT_EQ(rr.completed_requests, 400u);
  EXPECT_GT(kv_stats.kv_events, 0u);
  // Every worker got work under every router (kv spreads the groups by load).
  for (const auto* s : {&rr_stats, &kv_stats, &random_stats}) {
    for (const std::uint64_t n : s->per_worker) EXPECT_GT(n, 0u);
  }
}

TEST(OfflineReplayTest, KvPrefixRouterTieBreaksByLoadThenLowestWorker) {
  // Nothing cached anywhere: the first request goes to worker 0, the second (while the first is
  // in flight) to worker 1, and so on; once request 0 has ended, its prefix pulls request 4 back.
  const Workload w = parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1, 2]})"
                           "\n"
                           R"({"timestamp": 0, "output_length": 1, "hash_ids": [3, 4]})"
                           "\n"
                           R"({"timestamp": 0, "output_length": 1, "hash_ids": [5, 6]})"
                           "\n"
                           R"({"timestamp": 1000, "output_length": 1, "hash_ids": [7, 8]})"
                           "\n"
                           R"({"timestamp": 2000, "output_length": 1, "hash_ids": [3, 4, 9]})"
                           "\n");
  OfflineReplayStats stats;
  replayOrDie(w, {.engine = smallEngine(), .num_workers = 3, .router = RouterKind::KvPrefix},
              &stats);
  // Workers: r0 → 0, r1 → 1, r2 → 2, r3 (all idle, no overlap) → 0, r4 (prefix on 1) → 1.
  EXPECT_EQ(stats.per_worker, (std::vector<std::uint64_t>{2, 2, 1}));
  EXPECT_EQ(stats.kv_routed_hits, 1u);
}

/// `n` single-turn requests with nothing in common, 1 s apart: each ends long before the next.
Workload lowLoad(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text += R"({"timestamp": )" + std::to_string(i * 1000) +
            R"(, "output_length": 2, "hash_ids": [)" + std::to_string(2 * i + 1) + ", " +
            std::to_string(2 * i + 2) + "]}\n";
  }
  return parse(text);
}

// At low load every request meets the same cost everywhere (no overlap, no load): Dynamo's
// random tie-break spreads them, where the prefix-only rule sent all of them to worker 0.
TEST(OfflineReplayTest, KvRouterAtLowLoadGivesEveryWorkerRequests) {
  const Workload w = lowLoad(64);
  OfflineReplayStats kv, prefix;
  replayOrDie(w, {.engine = smallEngine(), .num_workers = 8, .router = RouterKind::Kv}, &kv);
  replayOrDie(w, {.engine = smallEngine(), .num_workers = 8, .router = RouterKind::KvPrefix},
              &prefix);
  for (const std::uint64_t n : kv.per_worker) EXPECT_GT(n, 0u);
  EXPECT_EQ(prefix.per_worker[0], 64u);
}

// Same seed ⇒ the same routing (temperature 0 and > 0); another seed ⇒ another one.
TEST(OfflineReplayTest, KvRouterIsDeterministicPerSeed) {
  const Workload w = prefixHeavy();
  for (const double temperature : {0.0, 0.5}) {
    const auto run = [&](std::uint64_t seed) {
      OfflineReplayStats stats;
      const ReplayCollector c = replayOrDie(w,
                                            {.engine = {.num_gpu_blocks = 160, .max_num_seqs = 8},
                                             .num_workers = 4,
                                             .router = RouterKind::Kv,
                                             .router_seed = seed,
                                             .kv_router = {.temperature = temperature}},
                                            &stats);
      return std::make_pair(stats.per_worker, c.buildReport({}).prefix_cache_reused_ratio);
    };
    const auto a = run(1);
    EXPECT_EQ(a, run(1)) << "temperature " << temperature;
    EXPECT_NE(a.first, run(2).first) << "temperature " << temperature;
  }
}

// A follow-up sharing a prompt's prefix goes back to the worker that served it (its overlap
// saves more prefill than the idle workers' empty load), and unrelated prompts arriving while
// it is busy go elsewhere (its active blocks make it dearer).
TEST(OfflineReplayTest, KvRouterFollowsThePrefixAndAvoidsTheLoad) {
  const Workload w = parse(R"({"timestamp": 0, "output_length": 50, "hash_ids": [1, 2, 3, 4]})"
                           "\n"
                           R"({"timestamp": 1, "output_length": 1, "hash_ids": [5, 6]})"
                           "\n"
                           R"({"timestamp": 2, "output_length": 1, "hash_ids": [7, 8]})"
                           "\n"
                           R"({"timestamp": 1000, "output_length": 1, "hash_ids": [1, 2, 3, 4, 9]})"
                           "\n");
  OfflineReplayStats stats;
  const ReplayCollector c = replayOrDie(
      w, {.engine = smallEngine(), .num_workers = 2, .router = RouterKind::Kv, .router_seed = 3},
      &stats);
  // r0 lands on some worker A; r1 and r2 (no overlap) avoid A's 4 active blocks; r3 reuses A.
  EXPECT_EQ(stats.per_worker[0] + stats.per_worker[1], 4u);
  EXPECT_EQ(stats.kv_routed_hits, 1u);
  const Report report = c.buildReport({});
  // r3 reused the 4 blocks (64 tokens) of r0's prompt.
  ASSERT_TRUE(report.prefix_cache_reused_ratio);
  EXPECT_GT(*report.prefix_cache_reused_ratio, 0.0);
  EXPECT_EQ(std::max(stats.per_worker[0], stats.per_worker[1]), 2u);
}

TEST(OfflineReplayTest, KvRouterRejectsBadWeights) {
  ReplayCollector c;
  const Workload w = lowLoad(1);
  auto r = runOfflineReplay(
      w, {.engine = smallEngine(), .router = RouterKind::Kv, .kv_router = {.overlap_weight = -1}},
      c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("overlap weight"), std::string::npos);
  r = runOfflineReplay(
      w, {.engine = smallEngine(), .router = RouterKind::Kv, .kv_router = {.temperature = NAN}}, c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("temperature"), std::string::npos);
}

// The kv routers hash a prompt under its LoRA adapter as the engine does (docs/engine.md, "LoRA
// adapters"): adapter A's blocks are a hit for A again, and no hit for adapter B or the base
// model with the same prompt. A goes to worker 0; B (no hit) too (all idle, lowest); the base
// model's request (no hit) to worker 1 (0 is busy with B). While B and the base request still
// run, A again: a router hashing it as the base model would send it to worker 1 (the base
// blocks) and reuse nothing; hashed under A it goes back to worker 0.
TEST(OfflineReplayTest, KvRoutersScoreAPrefixOnlyForItsOwnAdapter) {
  const Workload w =
      parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1, 2], "lora": "A"})"
            "\n"
            R"({"timestamp": 1000, "output_length": 1000, "hash_ids": [1, 2], "lora": "B"})"
            "\n"
            R"({"timestamp": 1001, "output_length": 1000, "hash_ids": [1, 2]})"
            "\n"
            R"({"timestamp": 2000, "output_length": 1, "hash_ids": [1, 2], "lora": "A"})"
            "\n");
  engine::EngineConfig config = smallEngine();
  config.max_loras = 2;
  for (const RouterKind kind : {RouterKind::KvPrefix, RouterKind::Kv}) {
    OfflineReplayStats stats;
    const ReplayCollector c =
        replayOrDie(w, {.engine = config, .num_workers = 3, .router = kind}, &stats);
    ASSERT_EQ(c.requests().size(), 4u);
    EXPECT_EQ(stats.kv_routed_hits, 1u) << toString(kind);  // the second A only
    EXPECT_EQ(c.requests()[1].first_reused_input_tokens, 0u);
    EXPECT_EQ(c.requests()[2].first_reused_input_tokens, 0u);
    // The same 2-block prompt: its last block is recomputed (vLLM's rule), the first reused.
    EXPECT_EQ(c.requests()[3].first_reused_input_tokens, 16u) << toString(kind);
  }
}

// Per-adapter rows, hand-computed (one worker; fixed timing: a pass that computes prompt tokens
// and emits the first token takes 10 + 2 ms, a decode pass 2 ms, plus 5 ms to load an adapter
// that is not resident; the requests 1 s apart run alone): the base model's row first, then A
// and B; the same bytes twice.
TEST(OfflineReplayTest, ReportHasARowPerAdapter) {
  const Workload w =
      parse(R"({"timestamp": 0, "output_length": 2, "hash_ids": [1, 2], "lora": "A"})"
            "\n"
            R"({"timestamp": 1000, "output_length": 2, "hash_ids": [1, 2, 3], "lora": "A"})"
            "\n"
            R"({"timestamp": 2000, "output_length": 2, "hash_ids": [1, 2]})"
            "\n"
            R"({"timestamp": 3000, "output_length": 2, "hash_ids": [5], "lora": "B"})"
            "\n");
  engine::EngineConfig config = smallEngine();
  config.max_loras = 2;
  config.lora_load_ms = 5.0;
  const auto run = [&] { return replayOrDie(w, {.engine = config}).buildReport({}); };
  const Report report = run();
  ASSERT_EQ(report.adapters.size(), 3u);
  const AdapterReport& base = report.adapters[0];
  const AdapterReport& a = report.adapters[1];
  const AdapterReport& b = report.adapters[2];
  EXPECT_EQ(base.adapter, std::nullopt);
  EXPECT_EQ(base.requests, 1u);
  EXPECT_EQ(base.completed_requests, 1u);
  EXPECT_EQ(base.ttft_p50_ms, 12.0);  // A's blocks are no hit for the base model
  EXPECT_EQ(base.e2e_p50_ms, 14.0);
  EXPECT_EQ(base.prefix_cache_reused_ratio, 0.0);
  EXPECT_EQ(a.adapter, std::optional<std::string>("A"));
  EXPECT_EQ(a.requests, 2u);
  EXPECT_EQ(a.completed_requests, 2u);
  EXPECT_EQ(a.ttft_p50_ms, 14.5);  // 17 (with the load) and 12 (resident)
  EXPECT_EQ(a.e2e_p50_ms, 16.5);
  EXPECT_EQ(a.prefix_cache_reused_ratio, 32.0 / 80.0);  // the second reuses 32 of 48 tokens
  EXPECT_EQ(b.adapter, std::optional<std::string>("B"));
  EXPECT_EQ(b.ttft_p50_ms, 17.0);
  EXPECT_EQ(b.e2e_p50_ms, 19.0);
  const std::string json = formatReportJson(report);
  EXPECT_NE(json.find(R"("adapter": "A")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("adapter": null)"), std::string::npos);
  EXPECT_EQ(json, formatReportJson(run()));
  const std::string text = formatReportTable(report);
  EXPECT_NE(text.find("2 requests (completed 2), TTFT p50 14.500 ms, E2E p50 16.500 ms, prefix "
                      "reuse 40.00 %"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("LoRA (base model)"), std::string::npos);
  // Without adapters: no rows, no key.
  const Report plain = replayOrDie(lowLoad(2), {.engine = smallEngine()}).buildReport({});
  EXPECT_TRUE(plain.adapters.empty());
  EXPECT_EQ(formatReportJson(plain).find("lora_adapters"), std::string::npos);
}

}  // namespace
}  // namespace mocker::replay
