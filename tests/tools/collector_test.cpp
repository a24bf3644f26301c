#include "tools/replay/collector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tools/replay/random.h"
#include "tools/replay/stats.h"

namespace mocker::replay {
namespace {

// The service names a length limit first in an output's `reason` (protocol/README.md §1.2);
// live replay reads it back from there.
TEST(StopReasonTest, ParsesTheLimitAWireReasonStartsWith) {
  EXPECT_EQ(parseWireStopReason("max_model_len: the sequence reached the model length limit"),
            StopReason::MaxModelLen);
  EXPECT_EQ(parseWireStopReason("kv capacity: the prompt leaves no room"), StopReason::KvCapacity);
  EXPECT_EQ(parseWireStopReason("max_num_batched_tokens: with chunked prefill off"),
            StopReason::MaxNumBatchedTokens);
  EXPECT_EQ(parseWireStopReason(""), StopReason::None);
  EXPECT_EQ(parseWireStopReason("cancelled"), StopReason::None);
  EXPECT_EQ(parseWireStopReason("kv capacity"), StopReason::None);  // the prefix includes ": "
  EXPECT_STREQ(stopReasonName(StopReason::KvCapacity), "kv_capacity");
}

TEST(StatsTest, LinearPercentilesAndPopulationStd) {
  const Distribution d = summarize({40, 10, 30, 20});
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.mean, 25.0);
  EXPECT_DOUBLE_EQ(d.min, 10.0);
  EXPECT_DOUBLE_EQ(d.max, 40.0);
  EXPECT_DOUBLE_EQ(d.p50, 25.0);
  EXPECT_DOUBLE_EQ(d.p75, 32.5);
  EXPECT_DOUBLE_EQ(d.p90, 37.0);
  EXPECT_DOUBLE_EQ(d.p95, 38.5);
  EXPECT_DOUBLE_EQ(d.p99, 39.7);
  EXPECT_DOUBLE_EQ(d.std, std::sqrt(125.0));  // ≈ 11.1803
}

TEST(StatsTest, SingleSampleAndEmpty) {
  const Distribution one = summarize({7.5});
  EXPECT_EQ(one.count, 1u);
  for (const double v : {one.mean, one.min, one.max, one.p50, one.p75, one.p90, one.p95, one.p99}) {
    EXPECT_EQ(v, 7.5);
  }
  EXPECT_EQ(one.std, 0.0);
  EXPECT_EQ(summarize({}).count, 0u);
}

TEST(StatsTest, PercentileEndpoints) {
  const std::vector<double> xs = {1, 2, 4, 8, 16};
  EXPECT_EQ(percentileLinear(xs, 0), 1.0);
  EXPECT_EQ(percentileLinear(xs, 100), 16.0);
  EXPECT_EQ(percentileLinear(xs, 50), 4.0);
  EXPECT_DOUBLE_EQ(percentileLinear(xs, 62.5), 6.0);  // h = 2.5
}

// Reference for the fast paths below: the plain definition (std::sort, then the same sums).
Distribution naiveSummary(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return summarizeSorted(samples);
}

void expectBitIdentical(const Distribution& got, const Distribution& want, const char* what) {
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.mean, want.mean) << what;
  EXPECT_EQ(got.min, want.min) << what;
  EXPECT_EQ(got.max, want.max) << what;
  EXPECT_EQ(got.p50, want.p50) << what;
  EXPECT_EQ(got.p75, want.p75) << what;
  EXPECT_EQ(got.p90, want.p90) << what;
  EXPECT_EQ(got.p95, want.p95) << what;
  EXPECT_EQ(got.p99, want.p99) << what;
  EXPECT_EQ(got.std, want.std) << what;
}

void expectSameAsStdSort(std::vector<double> xs) {
  std::vector<double> want = xs;
  std::sort(want.begin(), want.end());
  sortSamples(xs);
  ASSERT_EQ(xs.size(), want.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint64_t>(xs[i]), std::bit_cast<std::uint64_t>(want[i]))
        << "index " << i << ": " << xs[i] << " vs " << want[i];
  }
}

/// Negatives, zeros, tiny and huge magnitudes and infinities, so that every byte position and
/// the sign handling matter; `num_distinct` bounds how many different values appear.
std::vector<double> mixedSamples(std::size_t n, std::size_t num_distinct, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<double> pool;
  for (std::size_t i = 0; i < num_distinct; ++i) {
    const double u = rng.uniform();
    switch (i % 5) {
      case 0:
        pool.push_back(std::round(u * 200.0) / 8.0);
        break;
      case 1:
        pool.push_back(-u * 1e6);
        break;
      case 2:
        pool.push_back(u * 1e-300);
        break;
      case 3:
        pool.push_back(std::ldexp(u, static_cast<int>(rng.uniformIndex(200)) - 100));
        break;
      default:
        pool.push_back(u);
    }
  }
  pool[0] = 0.0;
  pool[1] = std::numeric_limits<double>::infinity();
  pool[2] = -std::numeric_limits<double>::infinity();
  std::vector<double> xs;
  for (std::size_t i = 0; i < n; ++i) xs.push_back(pool[rng.uniformIndex(pool.size())]);
  return xs;
}

TEST(StatsTest, SortSamplesMatchesStdSortWhenValuesAreMostlyDistinct) {
  expectSameAsStdSort(mixedSamples(50'000, 50'000, 42));  // radix path
  expectSameAsStdSort(mixedSamples(40'000, 12'000, 43));  // about 1/4 distinct
}

TEST(StatsTest, SortSamplesMatchesStdSortWhenValuesRepeat) {
  expectSameAsStdSort(mixedSamples(50'000, 40, 44));     // counting path, small table
  expectSameAsStdSort(mixedSamples(80'000, 9'000, 45));  // counting path, table grows 4 times
  expectSameAsStdSort(std::vector<double>(10'000, 5.75));
}

TEST(StatsTest, SortSamplesOrdersNegativeZeroFirst) {
  for (const std::size_t num_distinct : {3u, 6'000u}) {  // counting path, radix path
    std::vector<double> xs = mixedSamples(5'000, num_distinct, 46);
    for (double& x : xs) x = std::abs(x) + 1.0;
    xs[10] = 0.0;
    xs[20] = -0.0;
    sortSamples(xs);
    EXPECT_TRUE(std::signbit(xs[0])) << num_distinct;
    EXPECT_EQ(xs[0], 0.0) << num_distinct;
    EXPECT_FALSE(std::signbit(xs[1])) << num_distinct;
    EXPECT_EQ(xs[1], 0.0) << num_distinct;
    EXPECT_GE(xs[2], 1.0) << num_distinct;
  }
}

TEST(StatsTest, SummarizeIsBitIdenticalToSortThenSum) {
  SplitMix64 rng(7);
  for (const std::size_t n : {1u, 2u, 100u, 4095u, 4096u, 30'000u}) {
    std::vector<double> xs;
    for (std::size_t i = 0; i < n; ++i) xs.push_back(rng.uniform() * 1000.0 - 10.0);
    expectBitIdentical(summarize(xs), naiveSummary(xs), "n");
  }
}

RequestInfo info(const char* session, std::uint32_t input, std::uint32_t output) {
  return RequestInfo{.session_id = session,
                     .turn_index = 0,
                     .request_id = std::nullopt,
                     .input_length = input,
                     .requested_output_length = output};
}

// Timeline (ms):
//   A: arrives 0, admitted 5 (reuse 0), tokens 10, 20, 40, completed 40.
//   B: arrives 10, admitted 12 (reuse 512), preempted and readmitted 30 (reuse 256),
//      tokens 20, 50, completed 50.
//   C: arrives 15, rejected 15.
//   D: arrives 20, admitted 20 (reuse 100), output_length 0, completed 25 without tokens.
//   E: arrives 30, admitted 30, token 35, cancelled 60.
//   F: arrives 70, never finishes.
ReplayCollector scenario() {
  ReplayCollector c;
  const RequestHandle a = c.onArrival(info("a", 1000, 3), 0);
  const RequestHandle b = c.onArrival(info("b", 1024, 2), 10);
  const RequestHandle cc = c.onArrival(info("c", 50, 4), 15);
  const RequestHandle d = c.onArrival(info("d", 200, 0), 20);
  const RequestHandle e = c.onArrival(info("e", 300, 5), 30);
  c.onArrival(info("f", 10, 1), 70);
  c.onAdmission(a, 5, 0, false);
  c.onAdmission(b, 12, 512, false);
  c.onToken(a, 10);
  c.onTerminal(cc, 15, TerminalStatus::Rejected);
  c.onToken(a, 20);
  c.onToken(b, 20);
  c.onAdmission(d, 20, 100, false);
  c.onTerminal(d, 25, TerminalStatus::Completed);
  c.onAdmission(b, 30, 256, true);
  c.onAdmission(e, 30, 0, false);
  c.onToken(e, 35);
  c.onToken(a, 40);
  c.onTerminal(a, 40, TerminalStatus::Completed);
  c.onToken(b, 50);
  c.onTerminal(b, 50, TerminalStatus::Completed);
  c.onTerminal(b, 55, TerminalStatus::Failed);  // ignored: only the first terminal counts
  c.onTerminal(e, 60, TerminalStatus::Cancelled);
  c.onEngineSample({.time_ms = 10, .dp_rank = 0, .kv_usage = 0.25, .preemptions_total = 0});
  c.onEngineSample({.time_ms = 30, .dp_rank = 0, .kv_usage = 0.75, .preemptions_total = 1});
  c.onEngineSample({.time_ms = 30, .dp_rank = 1, .kv_usage = 0.5, .preemptions_total = 2});
  c.onEngineSample({.time_ms = 50, .dp_rank = 0, .kv_usage = 0.5, .preemptions_total = 1});
  return c;
}

TEST(ReplayCollectorTest, RecordsPerRequestTimeline) {
  const ReplayCollector c = scenario();
  ASSERT_EQ(c.requests().size(), 6u);
  const RequestRecord& b = c.requests()[1];
  EXPECT_EQ(*b.first_admit_ms, 12.0);
  EXPECT_EQ(b.admission_count, 2u);
  EXPECT_EQ(b.first_reused_input_tokens, 512u);
  EXPECT_EQ(b.last_reused_input_tokens, 256u);
  EXPECT_EQ(b.status, TerminalStatus::Completed);
  EXPECT_EQ(*b.terminal_ms, 50.0);
  const RequestLatencies l = latenciesOf(c.requests()[0]);
  EXPECT_EQ(*l.ttft_ms, 10.0);
  EXPECT_EQ(*l.ttst_ms, 10.0);
  EXPECT_EQ(*l.tpot_ms, 15.0);
  EXPECT_EQ(*l.e2e_ms, 40.0);
  EXPECT_FALSE(latenciesOf(c.requests()[3]).ttft_ms);
  EXPECT_EQ(c.requests()[5].status, TerminalStatus::Incomplete);
}

TEST(ReplayCollectorTest, ReportCountsTotalsAndThroughputs) {
  const Report r = scenario().buildReport({.wall_time_ms = 2.0});
  EXPECT_EQ(r.num_requests, 6u);
  EXPECT_EQ(r.completed_requests, 3u);
  EXPECT_EQ(r.rejected_requests, 1u);
  EXPECT_EQ(r.cancelled_requests, 1u);
  EXPECT_EQ(r.failed_requests, 0u);
  EXPECT_EQ(r.incomplete_requests, 1u);
  EXPECT_EQ(r.total_input_tokens, 1000u + 1024u + 200u);
  EXPECT_EQ(r.total_output_tokens, 5u);
  EXPECT_EQ(*r.duration_ms, 60.0);  // last terminal (E at 60) − first arrival (0)
  EXPECT_DOUBLE_EQ(*r.request_throughput_rps, 3 / 0.06);
  EXPECT_DOUBLE_EQ(*r.input_throughput_tok_s, 2224 / 0.06);
  EXPECT_DOUBLE_EQ(*r.output_throughput_tok_s, 5 / 0.06);
  EXPECT_DOUBLE_EQ(*r.total_throughput_tok_s, 2229 / 0.06);
  EXPECT_DOUBLE_EQ(*r.processed_tokens_per_s, 2229 / 0.002);
  EXPECT_DOUBLE_EQ(*r.prefix_cache_reused_ratio, (0.0 + 256 + 100) / 2224);
  EXPECT_DOUBLE_EQ(*r.first_admission_prefix_cache_reused_ratio, (0.0 + 512 + 100) / 2224);
  EXPECT_EQ(r.total_preemptions, 3u);  // rank 0: 1, rank 1: 2
  EXPECT_EQ(*r.peak_kv_usage, 0.75);
  EXPECT_FALSE(r.goodput);
}

TEST(ReplayCollectorTest, ReportLatencyDistributionsUseCompletedRequestsOnly) {
  const Report r = scenario().buildReport({});
  // TTFT: A 10, B 10 (D has no tokens, E was cancelled).
  EXPECT_EQ(r.ttft.count, 2u);
  EXPECT_EQ(r.ttft.mean, 10.0);
  EXPECT_EQ(r.e2e_latency.count, 2u);
  EXPECT_EQ(r.e2e_latency.min, 40.0);
  EXPECT_EQ(r.e2e_latency.max, 40.0);
  // TTST: A 10, B 30. TPOT: A 15, B 30.
  EXPECT_EQ(r.ttst.min, 10.0);
  EXPECT_EQ(r.ttst.max, 30.0);
  EXPECT_EQ(r.tpot.mean, 22.5);
  // Pooled gaps: A 10, 20; B 30.
  EXPECT_EQ(r.itl.count, 3u);
  EXPECT_EQ(r.itl.mean, 20.0);
  EXPECT_EQ(r.itl.max, 30.0);
  EXPECT_EQ(r.itl.p50, 20.0);
  EXPECT_EQ(r.output_token_throughput_per_user.count, 3u);
  EXPECT_DOUBLE_EQ(r.output_token_throughput_per_user.max, 100.0);
  EXPECT_DOUBLE_EQ(r.output_token_throughput_per_user.min, 1000.0 / 30);
  EXPECT_FALSE(r.wall_time_ms);
  EXPECT_FALSE(r.processed_tokens_per_s);
}

TEST(ReplayCollectorTest, GoodputAppliesEveryGivenBound) {
  const ReplayCollector c = scenario();
  // TTFT ≤ 10 holds for A and B; D has no TTFT ⇒ not good.
  Report r = c.buildReport({.slo = {.ttft_ms = 10.0}});
  ASSERT_TRUE(r.goodput);
  EXPECT_EQ(r.goodput->completed_requests, 2u);
  EXPECT_DOUBLE_EQ(*r.goodput->request_throughput_rps, 2 / 0.06);
  EXPECT_DOUBLE_EQ(*r.goodput->output_throughput_tok_s, 5 / 0.06);
  // TPOT ≤ 20 excludes B (30).
  r = c.buildReport({.slo = {.ttft_ms = 10.0, .tpot_ms = 20.0}});
  EXPECT_EQ(r.goodput->completed_requests, 1u);
  EXPECT_DOUBLE_EQ(*r.goodput->output_throughput_tok_s, 3 / 0.06);
  // E2E ≤ 39 excludes both A and B.
  r = c.buildReport({.slo = {.e2e_ms = 39.0}});
  EXPECT_EQ(r.goodput->completed_requests, 0u);
}

TEST(ReplayCollectorTest, SingleTokenRequestSkipsTpotBound) {
  ReplayCollector c;
  const RequestHandle h = c.onArrival(info("s", 10, 1), 0);
  c.onAdmission(h, 0, 0, false);
  c.onToken(h, 5);
  c.onTerminal(h, 5, TerminalStatus::Completed);
  const Report r = c.buildReport({.slo = {.tpot_ms = 0.001}});
  EXPECT_EQ(r.goodput->completed_requests, 1u);
  EXPECT_EQ(r.tpot.count, 0u);
  EXPECT_EQ(r.ttft.count, 1u);
  EXPECT_EQ(r.ttft.std, 0.0);
}

TEST(ReplayCollectorTest, PooledDistributionsMatchTheirDefinitionsExactly) {
  // Thousands of gaps (radix-sort path), with repeats, zero gaps (tokens of one pass) and
  // irregular ones; the report must equal the plain definitions bit for bit: every gap
  // pooled, and 1000/gap for every gap > 0.
  SplitMix64 rng(3);
  ReplayCollector c;
  std::vector<double> gaps;
  std::vector<double> per_user;
  for (int q = 0; q < 200; ++q) {
    const std::uint32_t n = 1 + static_cast<std::uint32_t>(rng.uniformIndex(60));
    const RequestHandle h = c.onArrival(info("s", 100, n), q * 10.0);
    c.onAdmission(h, q * 10.0, 0, false);
    double t = q * 10.0 + rng.uniform() * 50.0;
    for (std::uint32_t k = 0; k < n; ++k) {
      if (k > 0) {
        const double before = t;
        const std::uint64_t kind = rng.uniformIndex(4);
        t += kind == 0 ? 0.0 : kind == 1 ? 5.75 : rng.uniform() * 30.0;
        gaps.push_back(t - before);
        if (t - before > 0.0) per_user.push_back(1000.0 / (t - before));
      }
      c.onToken(h, t);
    }
    c.onTerminal(h, t, TerminalStatus::Completed);
  }
  ASSERT_GT(gaps.size(), 4096u);
  const Report r = c.buildReport({});
  expectBitIdentical(r.itl, naiveSummary(gaps), "itl");
  expectBitIdentical(r.output_token_throughput_per_user, naiveSummary(per_user), "per user");
}

TEST(ReplayCollectorTest, EngineCountersDoNotDependOnKeepingSamples) {
  // Ranks arrive out of order and sparse; preemption counts are cumulative per rank, so the
  // total is the sum of each rank's largest value, whatever the order of the samples.
  const std::vector<EngineSample> samples = {
      {.time_ms = 1, .dp_rank = 5, .kv_usage = 0.5, .preemptions_total = 2},
      {.time_ms = 2, .dp_rank = 0, .kv_usage = 0.25, .preemptions_total = 1},
      {.time_ms = 3, .dp_rank = 40, .kv_usage = 0.9, .preemptions_total = 7},
      {.time_ms = 4, .dp_rank = 5, .kv_usage = 0.1, .preemptions_total = 4},
      {.time_ms = 5, .dp_rank = 1, .kv_usage = 0.3, .preemptions_total = 0},
      {.time_ms = 6, .dp_rank = 0, .kv_usage = 0.2, .preemptions_total = 3},
      {.time_ms = 7, .dp_rank = 40, .kv_usage = 0.4, .preemptions_total = 7},
  };
  ReplayCollector kept;
  ReplayCollector dropped({.keep_engine_samples = false});
  for (const EngineSample& s : samples) {
    kept.onEngineSample(s);
    dropped.onEngineSample(s);
  }
  EXPECT_EQ(kept.engineSamples().size(), samples.size());
  EXPECT_TRUE(dropped.engineSamples().empty());
  for (const ReplayCollector* c : {&kept, &dropped}) {
    const Report r = c->buildReport({});
    EXPECT_EQ(r.total_preemptions, 3u + 4u + 7u + 0u);  // ranks 0, 5, 40, 1
    ASSERT_TRUE(r.peak_kv_usage);
    EXPECT_EQ(*r.peak_kv_usage, 0.9);
  }
}

TEST(ReplayCollectorTest, EmptyCollectorGivesNullDerivedValues) {
  const Report r = ReplayCollector().buildReport({});
  EXPECT_EQ(r.num_requests, 0u);
  EXPECT_FALSE(r.duration_ms);
  EXPECT_FALSE(r.request_throughput_rps);
  EXPECT_FALSE(r.prefix_cache_reused_ratio);
  EXPECT_FALSE(r.peak_kv_usage);
  EXPECT_EQ(r.ttft.count, 0u);
}

}  // namespace
}  // namespace mocker::replay
