// MetricsRecorder (per-request timelines → vLLM's counters and histograms), the text exposition
// and the stats line. No sockets.
#include "service/metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mocker::service {
namespace {

engine::OutputSignal token(std::uint64_t id, std::uint32_t index, double time_ms,
                           engine::Terminal terminal = engine::Terminal::None) {
  return {.id = engine::RequestId(id),
          .token = 7,
          .index = index,
          .time_ms = time_ms,
          .terminal = terminal};
}

engine::PassResult admitting(std::uint64_t id, double start_ms) {
  engine::PassResult pass;
  pass.start_ms = start_ms;
  pass.admissions.push_back({.id = engine::RequestId(id)});
  return pass;
}

/// The value of the sample line starting with `prefix` (name and labels), or -1.
double sample(const std::string& text, const std::string& prefix) {
  std::size_t at = 0;
  while ((at = text.find(prefix, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const std::size_t space = text.find(' ', at + prefix.size());
      return std::stod(text.substr(space + 1, text.find('\n', space) - space - 1));
    }
    at += prefix.size();
  }
  return -1;
}

TEST(HistogramTest, BucketsAreLessOrEqualTheirUpperBound) {
  static constexpr double kBounds[] = {0.1, 1.0};
  Histogram h(kBounds);
  for (const double v : {0.05, 0.1, 0.5, 1.0, 2.0}) h.observe(v);
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{2, 2, 1}));
  EXPECT_EQ(h.count, 5u);
  EXPECT_DOUBLE_EQ(h.sum, 3.65);
}

// Repeated values (a pass's tokens share their inter-token latency) take the bucket of the
// last value; a change of value, in either direction, searches again.
TEST(HistogramTest, RepeatedValuesCountInTheirOwnBucket) {
  static constexpr double kBounds[] = {0.1, 1.0};
  Histogram h(kBounds);
  for (const double v : {0.5, 0.5, 2.0, 2.0, 2.0, 0.05, 0.05, 1.0, 0.5, 0.0, -0.0}) h.observe(v);
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{4, 4, 3}));
  EXPECT_EQ(h.count, 11u);
  EXPECT_DOUBLE_EQ(h.sum, 8.6);
}

// Token timeline of request 1 (engine ms): arrival 0, admitted at 100 (pass start), tokens at
// 300, 350, 420 (pass ends), the last one completing it.
TEST(MetricsRecorderTest, TimelineGivesVllmPhaseHistograms) {
  MetricsRecorder rec("m", 1);
  rec.onSubmit(engine::RequestId(1), 0, 0.0, 12);
  rec.onAdmissions(admitting(1, 100.0));
  rec.onOutput(0, token(1, 0, 300.0), true);
  rec.onOutput(0, token(1, 1, 350.0), true);
  rec.onOutput(0, token(1, 2, 420.0, engine::Terminal::Completed), true);
  EXPECT_EQ(rec.numTracked(), 0u);
  const MetricsSnapshot& s = rec.snapshot({}, {});
  const RankMetrics& m = s.ranks[0];
  EXPECT_EQ(m.generation_tokens, 3u);
  EXPECT_EQ(m.prompt_tokens, 12u);
  EXPECT_EQ(m.request_success[static_cast<std::size_t>(FinishedReason::Length)], 1u);
  EXPECT_DOUBLE_EQ(m.time_to_first_token.sum, 0.3);
  EXPECT_EQ(m.inter_token_latency.count, 2u);
  EXPECT_NEAR(m.inter_token_latency.sum, 0.12, 1e-12);
  EXPECT_DOUBLE_EQ(m.e2e_request_latency.sum, 0.42);
  EXPECT_DOUBLE_EQ(m.request_queue_time.sum, 0.1);
  EXPECT_DOUBLE_EQ(m.request_prefill_time.sum, 0.2);
  EXPECT_NEAR(m.request_decode_time.sum, 0.12, 1e-12);
}

TEST(MetricsRecorderTest, UndeliveredTokensAreNotGenerationTokensAndAbortsAreCounted) {
  MetricsRecorder rec("m", 2);
  rec.onSubmit(engine::RequestId(1), 1, 0.0, 4);
  rec.onAdmissions(admitting(1, 0.0));
  rec.onOutput(1, token(1, 0, 10.0), true);
  rec.onOutput(1, token(1, 1, 20.0), false);  // its stream was already abandoned
  rec.onAbort(engine::RequestId(1), 25.0);
  rec.onAbort(engine::RequestId(1), 30.0);  // once only
  const RankMetrics& m = rec.snapshot({}, {}).ranks[1];
  EXPECT_EQ(m.generation_tokens, 1u);
  EXPECT_EQ(m.request_success[static_cast<std::size_t>(FinishedReason::Abort)], 1u);
  EXPECT_EQ(m.e2e_request_latency.count, 1u);
  EXPECT_DOUBLE_EQ(m.e2e_request_latency.sum, 0.025);
  EXPECT_EQ(rec.snapshot({}, {}).ranks[0].generation_tokens, 0u);
}

// Prefill worker: arrival 0, admitted at 10, its prefill pass ends at 40 and its handoff is sent;
// the release of its KV later (an abort of the engine request) counts nothing more.
TEST(MetricsRecorderTest, HandoffFinishesLengthAtThePrefillEndAndItsReleaseCountsNothing) {
  MetricsRecorder rec("m", 1);
  rec.onSubmit(engine::RequestId(5), 0, 0.0, 20);
  rec.onAdmissions(admitting(5, 10.0));
  rec.onHandoff(engine::RequestId(5), 40.0);
  EXPECT_EQ(rec.numTracked(), 0u);
  rec.onAbort(engine::RequestId(5), 90.0);
  const RankMetrics& m = rec.snapshot({}, {}).ranks[0];
  EXPECT_EQ(m.request_success[static_cast<std::size_t>(FinishedReason::Length)], 1u);
  EXPECT_EQ(m.request_success[static_cast<std::size_t>(FinishedReason::Abort)], 0u);
  EXPECT_EQ(m.prompt_tokens, 20u);
  EXPECT_EQ(m.generation_tokens, 0u);
  EXPECT_EQ(m.time_to_first_token.count, 1u);
  EXPECT_DOUBLE_EQ(m.time_to_first_token.sum, 0.04);
  EXPECT_EQ(m.e2e_request_latency.count, 1u);
  EXPECT_DOUBLE_EQ(m.e2e_request_latency.sum, 0.04);
  EXPECT_DOUBLE_EQ(m.request_queue_time.sum, 0.01);
  EXPECT_DOUBLE_EQ(m.request_prefill_time.sum, 0.03);
  EXPECT_DOUBLE_EQ(m.request_decode_time.sum, 0.0);
  EXPECT_EQ(m.inter_token_latency.count, 0u);
}

TEST(MetricsRecorderTest, RejectedRequestIsAnErrorWithZeroPhases) {
  MetricsRecorder rec("m", 1);
  rec.onSubmit(engine::RequestId(3), 0, 5.0, 100);
  engine::OutputSignal s{
      .id = engine::RequestId(3), .time_ms = 5.0, .terminal = engine::Terminal::Rejected};
  rec.onOutput(0, s, true);
  const RankMetrics& m = rec.snapshot({}, {}).ranks[0];
  EXPECT_EQ(m.request_success[static_cast<std::size_t>(FinishedReason::Error)], 1u);
  EXPECT_EQ(m.prompt_tokens, 0u);  // never prefilled
  EXPECT_EQ(m.time_to_first_token.count, 0u);
  EXPECT_DOUBLE_EQ(m.request_prefill_time.sum, 0.0);
}

TEST(MetricsRecorderTest, GaugesComeFromTheEngineLoad) {
  MetricsRecorder rec("m", 1);
  const engine::LoadMetrics load{.kv_usage = 0.25,
                                 .running_requests = 3,
                                 .waiting_requests = 2,
                                 .preemptions_total = 4,
                                 .prefix_cache_queries_tokens = 100,
                                 .prefix_cache_hits_tokens = 40};
  const MetricsSnapshot& s = rec.snapshot({&load, 1}, {.kv_event_batches_published = 9});
  EXPECT_EQ(s.ranks[0].num_requests_running, 3u);
  EXPECT_EQ(s.ranks[0].num_requests_waiting, 2u);
  EXPECT_DOUBLE_EQ(s.ranks[0].kv_cache_usage, 0.25);
  EXPECT_EQ(s.ranks[0].num_preemptions, 4u);
  EXPECT_EQ(s.ranks[0].prefix_cache_queries, 100u);
  EXPECT_EQ(s.ranks[0].prefix_cache_hits, 40u);
  EXPECT_EQ(s.service.kv_event_batches_published, 9u);
}

TEST(PrometheusTextTest, EverySeriesHasHelpTypeAndLabels) {
  MetricsRecorder rec("llama \"3\"", 2);
  rec.onSubmit(engine::RequestId(1), 1, 0.0, 8);
  rec.onAdmissions(admitting(1, 0.0));
  rec.onOutput(1, token(1, 0, 50.0, engine::Terminal::Completed), true);
  const std::string text = renderPrometheus(
      rec.snapshot({}, {.backpressure_cancels = 5, .unroutable_sends = 7, .clients_gone = 2}));
  const std::string r1 = R"({model_name="llama \"3\"",engine="1")";
  EXPECT_EQ(sample(text, "vllm:generation_tokens_total" + r1 + "}"), 1);
  EXPECT_EQ(
      sample(text, "vllm:generation_tokens_total{model_name=\"llama \\\"3\\\"\",engine=\"0\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_success_total" + r1 + ",finished_reason=\"length\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_success_total" + r1 + ",finished_reason=\"abort\"}"), 0);
  // 50 ms: above 0.04, within 0.06; buckets are cumulative, +Inf = count.
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_bucket" + r1 + ",le=\"0.04\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_bucket" + r1 + ",le=\"0.06\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_bucket" + r1 + ",le=\"+Inf\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_count" + r1 + "}"), 1);
  EXPECT_DOUBLE_EQ(sample(text, "vllm:time_to_first_token_seconds_sum" + r1 + "}"), 0.05);
  EXPECT_EQ(sample(text, "mocker:backpressure_cancels_total{model_name=\"llama \\\"3\\\"\"}"), 5);
  EXPECT_EQ(sample(text, "mocker:unroutable_sends_total{model_name=\"llama \\\"3\\\"\"}"), 7);
  EXPECT_EQ(sample(text, "mocker:clients_gone_total{model_name=\"llama \\\"3\\\"\"}"), 2);
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:request_success_total", "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find(std::string("# HELP ") + name + " "), std::string::npos) << name;
  }
  EXPECT_EQ(text.back(), '\n');
}

// KV offload tiers: the series appear only for ranks with a host tier; vLLM's labelled and flat
// offload counters carry the same bytes and seconds.
TEST(PrometheusTextTest, OffloadSeriesOnlyForRanksWithTiers) {
  MetricsRecorder rec("m", 2);
  EXPECT_EQ(renderPrometheus(rec.snapshot({}, {})).find("offload"), std::string::npos);
  std::vector<engine::LoadMetrics> load(2);
  load[0].tiers = {.g2_blocks = 5,
                   .g2_capacity = 64,
                   .g3_blocks = 2,
                   .g3_capacity = 128,
                   .g2_hit_blocks = 7,
                   .g3_hit_blocks = 1,
                   .offloaded_blocks = 9,
                   .bytes_gpu_to_host = 9000,
                   .bytes_host_to_gpu = 8000,
                   .bytes_host_to_disk = 3000,
                   .bytes_disk_to_host = 1000,
                   .onboardings = 2,
                   .onboard_ms_total = 1500.0,
                   .onboard_ms_max = 1000.0,
                   .store_ms_total = 250.0,
                   .load_ms_total = 500.0};
  load[0].onboarding_requests = 1;
  const std::string text = renderPrometheus(rec.snapshot(load, {}));
  const std::string r0 = R"({model_name="m",engine="0")";
  EXPECT_NE(text.find("# TYPE vllm:kv_offload_total_bytes_total counter\n"), std::string::npos);
  EXPECT_EQ(
      sample(text, "vllm:kv_offload_total_bytes_total" + r0 + R"(,transfer_type="GPU_to_CPU"})"),
      9000);
  EXPECT_EQ(
      sample(text, "vllm:kv_offload_total_bytes_total" + r0 + R"(,transfer_type="CPU_to_GPU"})"),
      8000);
  EXPECT_EQ(
      sample(text, "vllm:kv_offload_total_time_total" + r0 + R"(,transfer_type="GPU_to_CPU"})"),
      0.25);
  EXPECT_EQ(sample(text, "vllm:kv_offload_load_time_total" + r0 + "}"), 0.5);
  EXPECT_EQ(sample(text, "vllm:kv_offload_store_bytes_total" + r0 + "}"), 9000);
  EXPECT_EQ(sample(text, "mocker:kv_tier_blocks" + r0 + R"(,tier="DISK"})"), 2);
  EXPECT_EQ(sample(text, "mocker:kv_tier_capacity_blocks" + r0 + R"(,tier="CPU"})"), 64);
  EXPECT_EQ(sample(text, "mocker:kv_tier_hit_blocks_total" + r0 + R"(,tier="CPU"})"), 7);
  EXPECT_EQ(sample(text, "mocker:kv_tier_bytes_total" + r0 + R"(,direction="disk_to_host"})"),
            1000);
  EXPECT_EQ(sample(text, "mocker:kv_onboarding_seconds_total" + r0 + "}"), 1.5);
  EXPECT_EQ(sample(text, "mocker:kv_onboarding_max_seconds" + r0 + "}"), 1.0);
  EXPECT_EQ(sample(text, "mocker:kv_onboarding_requests" + r0 + "}"), 1);
  // Rank 1 has no tiers: none of its series.
  EXPECT_EQ(text.find(R"(mocker:kv_tier_blocks{model_name="m",engine="1")"), std::string::npos);
}

TEST(PrometheusTextTest, LoraRequestsInfoHasVllmsLabelsOnlyWithLoraOn) {
  MetricsRecorder rec("m", 2);
  EXPECT_EQ(renderPrometheus(rec.snapshot({}, {})).find("lora"), std::string::npos);
  ServiceMetrics service;
  service.lora = {{.running = "sql,chat", .waiting = "", .max_lora = 2, .time_s = 1700000000.5},
                  {.running = "", .waiting = "a\"b", .max_lora = 2, .time_s = 1700000000.5}};
  const std::string text = renderPrometheus(rec.snapshot({}, service));
  EXPECT_NE(text.find("# TYPE vllm:lora_requests_info gauge\n"), std::string::npos);
  EXPECT_DOUBLE_EQ(sample(text, R"(vllm:lora_requests_info{model_name="m",engine="0",max_lora="2",)"
                                R"(running_lora_adapters="sql,chat",waiting_lora_adapters=""})"),
                   1700000000.5);
  EXPECT_DOUBLE_EQ(sample(text, R"(vllm:lora_requests_info{model_name="m",engine="1",max_lora="2",)"
                                R"(running_lora_adapters="",waiting_lora_adapters="a\"b"})"),
                   1700000000.5);
}

TEST(PrometheusTextTest, WorkerLabelIsOnEverySeriesWhenSet) {
  MetricsRecorder rec("m", 1, "w-7");
  const std::string text = renderPrometheus(rec.snapshot({}, {}));
  EXPECT_EQ(sample(text, R"(vllm:generation_tokens_total{model_name="m",worker="w-7",engine="0"})"),
            0);
  EXPECT_EQ(sample(text, R"(mocker:passes_total{model_name="m",worker="w-7"})"), 0);
  std::size_t series = 0;
  std::size_t with_worker = 0;
  std::size_t at = 0;
  while ((at = text.find('\n', at)) != std::string::npos) {
    ++at;
    if (at < text.size() && text[at] != '#') {
      ++series;
      with_worker += text.compare(text.find('{', at), 26, R"({model_name="m",worker="w-)") == 0;
    }
  }
  EXPECT_GT(series, 100u);
  EXPECT_EQ(with_worker, series);
  // Without it, vLLM's label set exactly.
  MetricsRecorder plain("m", 1);
  EXPECT_EQ(renderPrometheus(plain.snapshot({}, {})).find("worker="), std::string::npos);
}

TEST(StatsLineTest, ReadsLikeVllms) {
  EXPECT_EQ(formatStatsLine({.engine = 1,
                             .seconds = 2.0,
                             .prompt_tokens = 100,
                             .generation_tokens = 7,
                             .running = 3,
                             .waiting = 1,
                             .kv_cache_usage = 0.125,
                             .prefix_cache_queries = 200,
                             .prefix_cache_hits = 50}),
            "Engine 001: Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 3.5 "
            "tokens/s, Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 12.5%, Prefix cache hit "
            "rate: 25.0%");
}

}  // namespace
}  // namespace mocker::service
