#include "tools/replay/report_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/replay/report_html.h"
#include "tools/replay/svg_plot.h"

namespace mocker::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A: arrival 0, admit 1 (reuse 16), tokens 10 20 30 40, completed.
// B: arrival 5, admit 6, tokens 15, completed (single token).
// C: arrival 8, rejected at 8.
std::string fixed3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

ReplayCollector smallRun() {
  ReplayCollector c;
  const RequestHandle a = c.onArrival({.session_id = "s1",
                                       .turn_index = 0,
                                       .request_id = "req-a",
                                       .input_length = 64,
                                       .requested_output_length = 4},
                                      0);
  const RequestHandle b = c.onArrival(
      {.session_id = "s2", .turn_index = 1, .input_length = 32, .requested_output_length = 3}, 5);
  const RequestHandle x = c.onArrival(
      {.session_id = "s3", .turn_index = 0, .input_length = 8, .requested_output_length = 2}, 8);
  c.onAdmission(a, 1, 16, false);
  c.onAdmission(b, 6, 0, false);
  c.onTerminal(x, 8, TerminalStatus::Rejected, StopReason::KvCapacity);
  for (const double t : {10.0, 20.0, 30.0, 40.0}) c.onToken(a, t);
  c.onToken(b, 15);
  c.onTerminal(b, 15, TerminalStatus::Completed, StopReason::MaxModelLen);  // 1 of 3 tokens
  c.onTerminal(a, 40, TerminalStatus::Completed);
  for (int i = 0; i < 5; ++i) {
    c.onEngineSample({.time_ms = 10.0 * i,
                      .kv_usage = 0.1 * i,
                      .num_running = static_cast<std::uint64_t>(i % 3),
                      .num_waiting = 1});
  }
  return c;
}

std::vector<std::string> expectedKeys(bool goodput, bool identity = false) {
  std::vector<std::string> keys = {"num_requests",
                                   "completed_requests",
                                   "rejected_requests",
                                   "cancelled_requests",
                                   "total_input_tokens",
                                   "total_output_tokens",
                                   "duration_ms",
                                   "wall_time_ms",
                                   "request_throughput_rps",
                                   "input_throughput_tok_s",
                                   "output_throughput_tok_s",
                                   "total_throughput_tok_s",
                                   "processed_tokens_per_s",
                                   "prefix_cache_reused_ratio",
                                   "first_admission_prefix_cache_reused_ratio"};
  for (const std::string m : {"ttft", "ttst", "tpot", "itl", "e2e_latency"}) {
    for (const std::string s :
         {"mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std"}) {
      keys.push_back(s + "_" + m + "_ms");
    }
  }
  for (const std::string s : {"mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std"}) {
    keys.push_back(s + "_output_token_throughput_per_user");
  }
  for (const char* k : {"failed_requests", "incomplete_requests", "migrated_requests",
                        "total_preemptions", "peak_kv_usage"}) {
    keys.push_back(k);
  }
  for (const std::string prefix : {"cut_short_by_", "rejected_by_"}) {
    for (const char* limit : {"max_model_len", "kv_capacity", "max_num_batched_tokens"}) {
      keys.push_back(prefix + limit + "_requests");
    }
  }
  if (goodput) {
    for (const char* k : {"goodput_completed_requests", "goodput_request_throughput_rps",
                          "goodput_output_throughput_tok_s"}) {
      keys.push_back(k);
    }
  }
  // vllm bench serve's names.
  for (const char* k : {"duration", "completed", "failed", "request_throughput",
                        "output_throughput", "total_token_throughput"}) {
    keys.push_back(k);
  }
  for (const std::string s : {"mean", "median", "p75", "p90", "p95", "p99", "std"}) {
    keys.push_back(s + "_e2el_ms");
  }
  if (identity) {
    keys.push_back("identity");
    keys.push_back("run");
  }
  keys.push_back("report_version");
  keys.push_back("quantiles");
  return keys;
}

RunIdentity sampleIdentity() {
  return {
      .mocker_version = "0.1.0",
      .git_revision = "abc1234-dirty",
      .mode = "offline",
      .format = "mooncake",
      .trace_path = "traces/t.jsonl",
      .trace_sha256 = std::string(64, 'a'),
      .num_workers = 2,
      .router = "kv",
      .engine_config =
          {{.key = "engine_type", .text = "vllm"},
           {.key = "num_gpu_blocks", .text = "none", .kind = ConfigSetting::Kind::Null},
           {.key = "block_size", .text = "16", .kind = ConfigSetting::Kind::Number},
           {.key = "gpu_memory_utilization", .text = "0.9", .kind = ConfigSetting::Kind::Number},
           {.key = "enable_prefix_caching", .text = "true", .kind = ConfigSetting::Kind::Bool}},
      .date_utc = "2026-11-30T18:21:20Z",
      .command_line = "mocker replay traces/t.jsonl --router kv 'a b'"};
}

std::vector<std::string> keysOf(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  return keys;
}

TEST(ReportJsonTest, HasExactlyTheFlatKeysInOrder) {
  const ReplayCollector c = smallRun();
  const auto j = nlohmann::ordered_json::parse(formatReportJson(c.buildReport({})));
  EXPECT_EQ(keysOf(j), expectedKeys(false));
  const auto g =
      nlohmann::ordered_json::parse(formatReportJson(c.buildReport({.slo = {.e2e_ms = 20.0}})));
  EXPECT_EQ(keysOf(g), expectedKeys(true));
  EXPECT_EQ(g["goodput_completed_requests"], 1);  // E2E: A 40 (too slow), B 10
}

TEST(ReportJsonTest, VllmBenchNamesCarryTheSameQuantities) {
  const auto j = nlohmann::json::parse(formatReportJson(smallRun().buildReport({})));
  EXPECT_EQ(j["duration"], 0.04);  // seconds
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["failed"], 1);  // every request that did not complete (here: the rejected one)
  EXPECT_EQ(j["request_throughput"], j["request_throughput_rps"]);
  EXPECT_EQ(j["output_throughput"], j["output_throughput_tok_s"]);
  EXPECT_EQ(j["total_token_throughput"], j["total_throughput_tok_s"]);
  for (const char* s : {"mean", "median", "p75", "p90", "p95", "p99", "std"}) {
    EXPECT_EQ(j[std::string(s) + "_e2el_ms"], j[std::string(s) + "_e2e_latency_ms"]) << s;
  }
  EXPECT_EQ(j["median_e2el_ms"], 25.0);  // A 40, B 10
}

TEST(ReportJsonTest, IdentityAndRunObjectsComeLast) {
  Report r = smallRun().buildReport({});
  EXPECT_FALSE(nlohmann::json::parse(formatReportJson(r)).contains("identity"));
  r.identity = sampleIdentity();
  const auto j = nlohmann::ordered_json::parse(formatReportJson(r));
  EXPECT_EQ(keysOf(j), expectedKeys(false, /*identity=*/true));
  const auto& id = j["identity"];
  EXPECT_EQ(keysOf(id), (std::vector<std::string>{
                            "mocker_version", "git_revision", "mode", "format", "trace_path",
                            "trace_sha256", "num_workers", "router", "servers", "engine_config"}));
  EXPECT_EQ(id["git_revision"], "abc1234-dirty");
  EXPECT_EQ(id["trace_sha256"], std::string(64, 'a'));
  EXPECT_EQ(id["num_workers"], 2);
  EXPECT_EQ(id["router"], "kv");
  // Typed values: text, null, integer, float, bool.
  EXPECT_EQ(id["engine_config"]["engine_type"], "vllm");
  EXPECT_TRUE(id["engine_config"]["num_gpu_blocks"].is_null());
  EXPECT_TRUE(id["engine_config"]["block_size"].is_number_unsigned());
  EXPECT_EQ(id["engine_config"]["block_size"], 16);
  EXPECT_EQ(id["engine_config"]["gpu_memory_utilization"], 0.9);
  EXPECT_EQ(id["engine_config"]["enable_prefix_caching"], true);
  EXPECT_EQ(j["run"], (nlohmann::ordered_json{{"date_utc", "2026-11-30T18:21:20Z"},
                                              {"command_line", sampleIdentity().command_line}}));
  // The JSONL sidecar holds the same two objects.
  const auto side = nlohmann::ordered_json::parse(formatRunIdentityJson(*r.identity));
  EXPECT_EQ(side["identity"], j["identity"]);
  EXPECT_EQ(side["run"], j["run"]);
  EXPECT_EQ(formatReportTable(r).find("GPU KV cache size"), std::string::npos);
  // A KV capacity computed from the roofline deployment is part of the identity.
  r.identity->gpu_kv_cache_tokens = 40400;
  const auto kv = nlohmann::ordered_json::parse(formatReportJson(r));
  EXPECT_EQ(kv["identity"]["gpu_kv_cache_tokens"], 40400);
  EXPECT_NE(formatReportTable(r).find("GPU KV cache size                     40400 tokens per "
                                      "rank (from the deployment)"),
            std::string::npos)
      << formatReportTable(r);
}

// A live identity records each server's speedup; the table says the latencies are wall-clock and
// the time-scale line gives them in model time.
TEST(ReportJsonTest, LiveIdentityCarriesTheServersSpeedups) {
  Report r = smallRun().buildReport({});
  RunIdentity id = sampleIdentity();
  id.mode = "live";
  id.servers = {"tcp://127.0.0.1:6000", "tcp://127.0.0.1:6010"};
  id.engine_config.clear();
  id.server_speedup_ratios = {10.0, std::nullopt};
  r.identity = id;
  const auto j = nlohmann::json::parse(formatReportJson(r));
  EXPECT_EQ(j["identity"]["server_speedup_ratios"], (nlohmann::json{10.0, nullptr}));
  EXPECT_NE(formatReportTable(r).find("wall clock; the servers run at different or unknown "
                                      "speedups (10 ?)"),
            std::string::npos)
      << formatReportTable(r);
  EXPECT_EQ(formatLiveTimeScale(r, id.server_speedup_ratios).find("model time:"),
            std::string::npos);
  id.server_speedup_ratios = {10.0, 10.0};
  r.identity = id;
  EXPECT_NE(formatReportTable(r).find("wall clock against servers at speedup 10: model time = "
                                      "wall time x 10"),
            std::string::npos);
  const std::string line = formatLiveTimeScale(r, id.server_speedup_ratios);
  EXPECT_NE(line.find("in model time: TTFT p50 " + fixed3(r.ttft.p50 * 10)), std::string::npos)
      << line;
  EXPECT_EQ(formatLiveTimeScale(r, {1.0}).find("model time:"), std::string::npos);
  // Offline identities have no such key.
  r.identity = sampleIdentity();
  EXPECT_FALSE(
      nlohmann::json::parse(formatReportJson(r))["identity"].contains("server_speedup_ratios"));
}

// Live times are wall-clock nanoseconds: the JSONL prints them to that resolution, not with the
// noise of a double subtraction (25.028411000000002).
TEST(RequestsJsonlTest, LiveTimesAreRoundedToTheClocksResolution) {
  ReplayCollector c;
  const RequestHandle h =
      c.onArrival({.session_id = "s", .input_length = 10, .requested_output_length = 1}, 0.7);
  c.onAdmission(h, 0.7, 0, false);
  c.onToken(h, 33.000127);
  c.onTerminal(h, 33.000127, TerminalStatus::Completed);
  EXPECT_NE(formatRequestsJsonl(c).find("\"ttft_ms\":32.300126999999996,"), std::string::npos)
      << formatRequestsJsonl(c);
  EXPECT_NE(formatRequestsJsonl(c, 1e6).find("\"ttft_ms\":32.300127,"), std::string::npos)
      << formatRequestsJsonl(c, 1e6);
  EXPECT_NE(formatRequestsJsonl(c, 1e6).find("\"arrival_time_ms\":0.7,"), std::string::npos);
}

TEST(ReportJsonTest, QuantilesAreEveryWholePercentile) {
  const auto j = nlohmann::ordered_json::parse(formatReportJson(smallRun().buildReport({})));
  EXPECT_EQ(j["report_version"], kReportVersion);
  const auto& q = j["quantiles"];
  EXPECT_EQ(keysOf(q), (std::vector<std::string>{"ttft_ms", "ttst_ms", "tpot_ms", "itl_ms",
                                                 "e2e_latency_ms"}));
  // TTFT samples: A 10, B 10 → every quantile 10. E2E: B 10, A 40 → p_k = 10 + 30·k/100.
  ASSERT_EQ(q["ttft_ms"].size(), kQuantilePoints);
  for (const auto& v : q["ttft_ms"]) EXPECT_EQ(v, 10.0);
  ASSERT_EQ(q["e2e_latency_ms"].size(), kQuantilePoints);
  EXPECT_EQ(q["e2e_latency_ms"][0], 10.0);
  EXPECT_EQ(q["e2e_latency_ms"][50], j["median_e2e_latency_ms"]);
  EXPECT_EQ(q["e2e_latency_ms"][90], j["p90_e2e_latency_ms"]);
  EXPECT_EQ(q["e2e_latency_ms"][99], j["p99_e2e_latency_ms"]);
  EXPECT_EQ(q["e2e_latency_ms"][100], 40.0);
  // TTST / TPOT: only A has two tokens (gaps 10): one sample. ITL pooled: 10, 10, 10.
  EXPECT_EQ(q["tpot_ms"][0], 10.0);
  EXPECT_EQ(q["itl_ms"][100], 10.0);
  // An empty distribution is null.
  const auto empty = nlohmann::json::parse(formatReportJson(ReplayCollector().buildReport({})));
  EXPECT_TRUE(empty["quantiles"]["ttft_ms"].is_null());
}

TEST(RunIdentityTest, ShellQuotingAndDate) {
  EXPECT_EQ(shellQuotedCommandLine({"mocker", "replay", "a b.jsonl", "it's", "", "--x=1"}),
            "mocker replay 'a b.jsonl' 'it'\\''s' '' --x=1");
  const std::string d = currentUtcIso8601();
  ASSERT_EQ(d.size(), 20U) << d;
  EXPECT_EQ(d[4], '-');
  EXPECT_EQ(d[10], 'T');
  EXPECT_EQ(d[19], 'Z');
}

TEST(ReportTableTest, ShowsTheRunIdentity) {
  Report r = smallRun().buildReport({});
  r.identity = sampleIdentity();
  const std::string t = formatReportTable(r);
  EXPECT_THAT(t, HasSubstr("0.1.0 (git abc1234-dirty)"));
  EXPECT_THAT(t, HasSubstr("2026-11-30T18:21:20Z"));
  EXPECT_THAT(t, HasSubstr("mocker replay traces/t.jsonl --router kv 'a b'"));
  EXPECT_THAT(t, HasSubstr("mooncake traces/t.jsonl"));
  EXPECT_THAT(t, HasSubstr(std::string(64, 'a')));
  EXPECT_THAT(t, HasSubstr("offline, 2 worker(s), router kv"));
  EXPECT_THAT(t, HasSubstr("engine_type=vllm num_gpu_blocks=none block_size=16"));
  // The HTML page carries it through its summary.
  EXPECT_THAT(renderHtmlReport(r, smallRun()), HasSubstr("abc1234-dirty"));
}

// A value wider than its column keeps a space before it instead of running into its neighbour.
TEST(ReportTableTest, WideValuesStaySeparated) {
  ReplayCollector c;
  const RequestHandle h = c.onArrival({.session_id = "s", .input_length = 1}, 0);
  c.onToken(h, 123456789012.0);
  c.onToken(h, 2 * 123456789012.0);
  c.onTerminal(h, 2 * 123456789012.0, TerminalStatus::Completed);
  const std::string t = formatReportTable(c.buildReport({}));
  std::istringstream lines(t);
  std::string line;
  bool seen = false;
  while (std::getline(lines, line)) {
    if (!line.starts_with("Request latency (ms)")) continue;
    seen = true;
    // Every value parses on its own: 8 numbers separated by whitespace.
    std::istringstream cells(line.substr(38));
    std::vector<std::string> values;
    for (std::string v; cells >> v;) values.push_back(v);
    ASSERT_EQ(values.size(), 8U) << line;
    EXPECT_EQ(values[0], "246913578024.00") << line;
  }
  EXPECT_TRUE(seen) << t;
}

TEST(ReportJsonTest, ValuesAndNulls) {
  const auto j = nlohmann::json::parse(formatReportJson(smallRun().buildReport({})));
  EXPECT_EQ(j["num_requests"], 3);
  EXPECT_EQ(j["completed_requests"], 2);
  EXPECT_EQ(j["rejected_requests"], 1);
  EXPECT_EQ(j["total_input_tokens"], 96);
  EXPECT_EQ(j["total_output_tokens"], 5);
  EXPECT_EQ(j["duration_ms"], 40.0);
  EXPECT_TRUE(j["wall_time_ms"].is_null());
  EXPECT_TRUE(j["processed_tokens_per_s"].is_null());
  EXPECT_EQ(j["median_ttft_ms"], 10.0);
  EXPECT_EQ(j["mean_itl_ms"], 10.0);
  EXPECT_EQ(j["max_itl_ms"], 10.0);
  EXPECT_EQ(j["mean_output_token_throughput_per_user"], 100.0);
  EXPECT_EQ(j["median_ttst_ms"], 10.0);  // only A has two tokens
  EXPECT_FALSE(j.contains("count_ttst_ms"));
  EXPECT_DOUBLE_EQ(j["prefix_cache_reused_ratio"].get<double>(), 16.0 / 96);
  EXPECT_DOUBLE_EQ(j["peak_kv_usage"].get<double>(), 0.4);
  EXPECT_EQ(j["cut_short_by_max_model_len_requests"], 1);
  EXPECT_EQ(j["cut_short_by_kv_capacity_requests"], 0);
  EXPECT_EQ(j["rejected_by_kv_capacity_requests"], 1);
  EXPECT_EQ(j["rejected_by_max_model_len_requests"], 0);

  // n = 0 ⇒ every statistic null.
  const auto empty = nlohmann::json::parse(formatReportJson(ReplayCollector().buildReport({})));
  for (const char* k : {"mean_ttft_ms", "median_e2e_latency_ms", "std_itl_ms", "p99_tpot_ms",
                        "max_output_token_throughput_per_user", "duration_ms"}) {
    EXPECT_TRUE(empty[k].is_null()) << k;
  }
}

TEST(ReportJsonTest, SameInputGivesByteIdenticalOutput) {
  const std::string a = formatReportJson(smallRun().buildReport({.wall_time_ms = 3.25}));
  const std::string b = formatReportJson(smallRun().buildReport({.wall_time_ms = 3.25}));
  EXPECT_EQ(a, b);
  EXPECT_EQ(formatRequestsJsonl(smallRun()), formatRequestsJsonl(smallRun()));
  // Doubles round-trip exactly (shortest representation).
  ReplayCollector c;
  const RequestHandle h = c.onArrival({.session_id = "x", .input_length = 1}, 0.1);
  c.onToken(h, 0.3);
  c.onTerminal(h, 0.3, TerminalStatus::Completed);
  const auto j = nlohmann::json::parse(formatReportJson(c.buildReport({})));
  EXPECT_EQ(j["mean_ttft_ms"].get<double>(), 0.3 - 0.1);
}

TEST(RequestsJsonlTest, OneObjectPerRequestWithTheSpecFields) {
  const std::string text = formatRequestsJsonl(smallRun());
  std::istringstream in(text);
  std::vector<nlohmann::ordered_json> rows;
  for (std::string line; std::getline(in, line);)
    rows.push_back(nlohmann::ordered_json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  const std::vector<std::string> fields = {"session_id",
                                           "turn_index",
                                           "request_id",
                                           "arrival_time_ms",
                                           "first_admit_ms",
                                           "first_token_ms",
                                           "last_token_ms",
                                           "terminal_time_ms",
                                           "terminal_status",
                                           "ttft_ms",
                                           "ttst_ms",
                                           "e2e_latency_ms",
                                           "itl_ms",
                                           "input_length",
                                           "requested_output_length",
                                           "output_length",
                                           "reused_input_tokens",
                                           "admission_count",
                                           "migrations",
                                           "terminal_reason"};
  for (const auto& row : rows) EXPECT_EQ(keysOf(row), fields);
  const auto& a = rows[0];
  EXPECT_EQ(a["session_id"], "s1");
  EXPECT_EQ(a["request_id"], "req-a");
  EXPECT_EQ(a["arrival_time_ms"], 0.0);
  EXPECT_EQ(a["first_admit_ms"], 1.0);
  EXPECT_EQ(a["first_token_ms"], 10.0);
  EXPECT_EQ(a["last_token_ms"], 40.0);
  EXPECT_EQ(a["terminal_time_ms"], 40.0);
  EXPECT_EQ(a["terminal_status"], "completed");
  EXPECT_EQ(a["ttft_ms"], 10.0);
  EXPECT_EQ(a["ttst_ms"], 10.0);
  EXPECT_EQ(a["e2e_latency_ms"], 40.0);
  EXPECT_EQ(a["itl_ms"], 10.0);
  EXPECT_EQ(a["input_length"], 64);
  EXPECT_EQ(a["requested_output_length"], 4);
  EXPECT_EQ(a["output_length"], 4);
  EXPECT_EQ(a["reused_input_tokens"], 16);
  EXPECT_EQ(a["admission_count"], 1);
  EXPECT_TRUE(a["terminal_reason"].is_null());  // complete: no limit named
  EXPECT_EQ(rows[1]["terminal_reason"], "max_model_len");
  EXPECT_EQ(rows[2]["terminal_reason"], "kv_capacity");
  EXPECT_EQ(rows[1]["turn_index"], 1);
  EXPECT_TRUE(rows[1]["request_id"].is_null());
  EXPECT_TRUE(rows[1]["ttst_ms"].is_null());
  EXPECT_EQ(rows[2]["terminal_status"], "rejected");
  EXPECT_TRUE(rows[2]["first_admit_ms"].is_null());
  EXPECT_TRUE(rows[2]["ttft_ms"].is_null());
  EXPECT_EQ(rows[2]["admission_count"], 0);
}

TEST(ReportTableTest, ShowsMetricsAndDashesForEmptyDistributions) {
  const std::string t = formatReportTable(smallRun().buildReport({}));
  EXPECT_THAT(t, HasSubstr("Time to first token (ms)"));
  EXPECT_THAT(t, HasSubstr("Request latency (ms)"));
  EXPECT_THAT(t, HasSubstr("avg"));
  EXPECT_THAT(t, HasSubstr("p99"));
  EXPECT_THAT(t, HasSubstr("completed 2, rejected 1"));
  EXPECT_THAT(t, HasSubstr("10.00"));
  const std::string empty = formatReportTable(ReplayCollector().buildReport({}));
  EXPECT_THAT(empty, HasSubstr("–"));
  EXPECT_THAT(empty, Not(HasSubstr("nan")));
}

std::size_t countOf(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

TEST(ReportHtmlTest, SelfContainedPageWithSvgPlots) {
  const ReplayCollector c = smallRun();
  const std::string html = renderHtmlReport(c.buildReport({}), c, {.title = "t <1>"});
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<title>t &lt;1&gt;</title>"));
  // TTFT, TPOT, E2E CDFs, TTFT vs arrival, throughput, prefix hit rate, preemptions, KV, batch;
  // one rank: no per-worker section.
  EXPECT_EQ(countOf(html, "<svg "), 9u);
  EXPECT_EQ(countOf(html, "</svg>"), 9u);
  EXPECT_EQ(countOf(html, "class=\"series\""), 10u);  // batch: running + waiting
  for (const char* id : {"ttft_cdf", "tpot_cdf", "e2e_cdf", "ttft_vs_arrival", "throughput",
                         "prefix_hit_rate", "preemptions", "kv_usage", "batch"}) {
    EXPECT_THAT(html, HasSubstr("data-chart=\"" + std::string(id) + "\"")) << id;
  }
  EXPECT_THAT(html, Not(HasSubstr("data-empty=\"1\"")));
  EXPECT_THAT(html, HasSubstr("KV cache usage"));
  EXPECT_THAT(html, HasSubstr("Time to first token (ms)"));
  EXPECT_THAT(html, Not(HasSubstr("Per worker")));
  // Plots scale with the window; legends sit below the frame.
  EXPECT_THAT(html, HasSubstr("width=\"100%\" viewBox="));
  // Nothing external: no stylesheets, images, links or script sources (the one inline script
  // only checks the drawing).
  EXPECT_EQ(countOf(html, "<script"), 2u);
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
  EXPECT_THAT(html, Not(HasSubstr("url(")));
  EXPECT_EQ(html, renderHtmlReport(c.buildReport({}), c, {.title = "t <1>"}));
}

/// The `points` attribute of the first series of chart `id`.
std::string seriesPoints(const std::string& html, const std::string& id) {
  const std::size_t chart = html.find("data-chart=\"" + id + "\"");
  const std::size_t series = html.find("class=\"series\"", chart);
  const std::size_t at = html.find("points=\"", series) + 8;
  return html.substr(at, html.find('"', at) - at);
}

// A CDF of a few requests is their step function from 0; a run without preemptions says so
// instead of drawing a line on the frame; the summary wraps instead of cutting the command off.
TEST(ReportHtmlTest, SmallCdfsStepFromZeroAndEmptyPanelsSaySo) {
  const ReplayCollector c = smallRun();  // 2 completed requests
  const std::string html = renderHtmlReport(c.buildReport({}), c, {.title = "t"});
  const std::string ttft = seriesPoints(html, "ttft_cdf");
  EXPECT_EQ(countOf(ttft, ","), 4u) << ttft;  // (x0, 0), (x0, 1/2), (x1, 1/2), (x1, 1)
  EXPECT_THAT(html, HasSubstr("Preemptions over time (cumulative, all ranks): none"));
  EXPECT_THAT(html, HasSubstr("white-space:pre-wrap"));
}

// Small multiples share their scales: a rank that only ran early still spans the whole run.
TEST(SvgPlotTest, XMaxStretchesALinearAxis) {
  const Plot p{
      .id = "p", .series = {{.name = "s", .points = {{0.0, 1.0}, {10.0, 2.0}}}}, .x_max = 100.0};
  EXPECT_THAT(renderSvgPlot(p), HasSubstr(">100</text>"));
  Plot q = p;
  q.x_max.reset();
  EXPECT_THAT(renderSvgPlot(q), Not(HasSubstr(">100</text>")));
}

TEST(ReportHtmlTest, SloBoundsAreDrawn) {
  const ReplayCollector c = smallRun();
  const std::string none = renderHtmlReport(c.buildReport({}), c);
  EXPECT_EQ(countOf(none, "class=\"marker\""), 0u);
  const std::string html =
      renderHtmlReport(c.buildReport({.slo = {.ttft_ms = 12, .e2e_ms = 30}}), c);
  // TTFT: its CDF and the arrival scatter; E2E: its CDF.
  EXPECT_EQ(countOf(html, "class=\"marker\""), 3u);
  EXPECT_THAT(html, HasSubstr("TTFT SLO"));
  EXPECT_THAT(html, HasSubstr("E2E SLO"));
}

TEST(ReportHtmlTest, UnitsFollowTheMagnitude) {
  ReplayCollector c;
  for (int i = 0; i < 3; ++i) {
    const RequestHandle h = c.onArrival(
        {.session_id = std::to_string(i), .input_length = 8, .requested_output_length = 1}, 0);
    c.onToken(h, 20000.0 * (i + 1));  // TTFTs of 20, 40, 60 s
    c.onTerminal(h, 20000.0 * (i + 1), TerminalStatus::Completed);
  }
  const std::string html = renderHtmlReport(c.buildReport({}), c);
  EXPECT_THAT(html, HasSubstr("time to first token (s)"));
  EXPECT_THAT(html, Not(HasSubstr("time to first token (ms)")));
  EXPECT_THAT(html, Not(HasSubstr("log scale")));
}

TEST(ReportHtmlTest, LongTailedCdfUsesLogX) {
  ReplayCollector c;
  for (int i = 0; i < 20; ++i) {
    const RequestHandle h = c.onArrival(
        {.session_id = std::to_string(i), .input_length = 8, .requested_output_length = 1}, 0);
    const double ttft = i == 19 ? 5000.0 : 10.0 + i;  // one request 300× the median
    c.onToken(h, ttft);
    c.onTerminal(h, ttft, TerminalStatus::Completed);
  }
  const std::string html = renderHtmlReport(c.buildReport({}), c);
  EXPECT_THAT(html, HasSubstr("time to first token (ms), log scale"));
  EXPECT_THAT(wantsLogX({1, 2, 3}), false);
  EXPECT_THAT(wantsLogX({0, 2, 300}), false);  // a zero cannot go on a log axis
  EXPECT_THAT(wantsLogX({1, 2, 100}), true);
}

TEST(ReportHtmlTest, RankLabelsNameTheSeries) {
  ReplayCollector c;
  c.onEngineSample({.time_ms = 1, .dp_rank = 0, .kv_usage = 0.5, .num_running = 1});
  c.onEngineSample({.time_ms = 2, .dp_rank = 1, .kv_usage = 0.25, .num_running = 2});
  c.onEngineSample({.time_ms = 3, .dp_rank = 2, .kv_usage = 0.25, .num_running = 2});
  const std::string html =
      renderHtmlReport(c.buildReport({}), c, {.rank_labels = {"worker 0", "worker 1"}});
  EXPECT_THAT(html, HasSubstr("KV usage % (worker 0)"));
  EXPECT_THAT(html, HasSubstr("waiting (worker 1)"));
  EXPECT_THAT(html, HasSubstr("running (batch size) (rank 2)"));  // no label given
}

TEST(ReportHtmlTest, ManyRanksShowTheBusiestRankAndOneSmallPlotEach) {
  // 50 ranks; only rank 37 is ever busy. The mean KV usage stays near 0, but the busiest-rank
  // series and rank 37's own plot show its peak.
  ReplayCollector c;
  for (std::uint32_t r = 0; r < 50; ++r) {
    const bool busy = r == 37;
    c.onEngineSample({.time_ms = 1.0 + r,
                      .dp_rank = r,
                      .kv_usage = busy ? 0.9 : 0.0,
                      .num_running = busy ? 12u : 0u,
                      .num_waiting = busy ? 3u : 0u});
  }
  std::vector<std::string> labels;
  for (int r = 0; r < 50; ++r) labels.push_back(std::string("worker ").append(std::to_string(r)));
  const std::string html = renderHtmlReport(
      c.buildReport({}), c,
      {.rank_labels = labels, .requests_per_worker = std::vector<std::uint64_t>(50, 2)});
  EXPECT_THAT(html, HasSubstr("KV usage %, busiest rank (50 ranks)"));
  EXPECT_THAT(html, HasSubstr("KV usage %, mean (50 ranks)"));
  EXPECT_THAT(html, HasSubstr("running (batch size), total (50 ranks)"));
  EXPECT_THAT(html, Not(HasSubstr("(worker 0)")));  // no per-rank lines in the overview
  EXPECT_THAT(html, HasSubstr("Per worker"));
  EXPECT_THAT(html, HasSubstr("data-chart=\"requests_per_worker\""));
  EXPECT_EQ(countOf(html, "data-chart=\"kv_rank_"), 50u);
  EXPECT_EQ(countOf(html, "data-chart=\"batch_rank_"), 50u);
  EXPECT_THAT(html, HasSubstr("worker 37: KV peak 90 %"));
  EXPECT_THAT(html, HasSubstr("worker 37: peak running 12, waiting 3"));
  EXPECT_THAT(html, HasSubstr("worker 36: KV peak 0 %"));
}

TEST(ReportHtmlTest, EmptyRunRendersNoDataPlots) {
  const ReplayCollector c;
  const std::string html = renderHtmlReport(c.buildReport({}), c);
  EXPECT_EQ(countOf(html, "<svg "), 9u);
  EXPECT_EQ(countOf(html, "data-empty=\"1\""), 9u);
  EXPECT_THAT(html, HasSubstr("no data"));
  EXPECT_THAT(html, Not(HasSubstr("nan")));
  EXPECT_THAT(html, Not(HasSubstr("inf")));
}

}  // namespace
}  // namespace mocker::replay
