// Live replay against real in-process `mocker serve` servers (service::Server on a thread with
// ephemeral loopback endpoints): the tiny trace end to end, offline-vs-live agreement, closed
// loop, rejections, timeouts, several servers, and the command line. Nothing here sleeps; every
// wait is a poll with a deadline, and no assertion depends on a measured latency.
#include "tools/replay/live_replay.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "replay_test_util.h"
#include "tests/service/live_service.h"
#include "tests/tools/live_replay_test_util.h"
#include "tools/cli.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"

namespace mocker::replay {
namespace {

using service::testing::LiveService;

/// Engine of both the offline reference and the live servers: the default engine (big enough
/// for the tiny trace's 2,000-token prompts), fast passes, 0-token outputs allowed.
engine::EngineConfig engineConfig() {
  engine::EngineConfig e;
  e.speedup_ratio = 1000.0;
  e.allow_empty_output = true;
  return e;
}

service::ServiceConfig serverConfig(engine::EngineConfig engine = engineConfig()) {
  service::ServiceConfig c = service::testing::testConfig();
  c.engine = engine;
  return c;
}

LiveTarget targetOf(const LiveService& s) {
  return {.submit_endpoint = s.endpoints().submit, .cancel_endpoint = s.endpoints().cancel};
}

Workload tinyTrace(double arrival_speedup_ratio, bool require_timestamps = true) {
  auto w = loadMooncakeTrace(
      testing::sourceDir() + "/tests/data/tiny_trace.jsonl",
      {.arrival_speedup_ratio = arrival_speedup_ratio, .require_timestamps = require_timestamps});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

Workload parse(const std::string& text) {
  auto w = parseMooncakeTrace(text, {.trace_block_size = 16});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

using testing::LiveRun;
using testing::runLive;

ReplayCollector runOffline(const Workload& w, std::optional<std::uint32_t> concurrency = {}) {
  ReplayCollector c;
  auto stats = runOfflineReplay(w, {.engine = engineConfig(), .concurrency = concurrency}, c);
  EXPECT_TRUE(stats.has_value()) << (stats ? "" : stats.error().toString());
  return c;
}

/// Records keyed by (session, turn), so that runs with different dispatch orders compare.
std::map<std::pair<std::string, std::uint32_t>, RequestRecord> bySessionTurn(
    const ReplayCollector& c) {
  std::map<std::pair<std::string, std::uint32_t>, RequestRecord> m;
  for (const RequestRecord& r : c.requests()) m[{r.info.session_id, r.info.turn_index}] = r;
  return m;
}

/// The largest number of requests in flight at once according to the records (a request is in
/// flight from its arrival to its terminal; at equal times the terminal comes first, since the
/// driver only sends after it has seen the terminal that freed the slot).
std::size_t maxOverlap(const ReplayCollector& c) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : c.requests()) {
    events.emplace_back(r.arrival_ms, +1);
    events.emplace_back(r.terminal_ms.value_or(1e300), -1);
  }
  std::sort(events.begin(), events.end());  // (t, -1) before (t, +1)
  int cur = 0;
  int best = 0;
  for (const auto& [t, d] : events) best = std::max(best, cur += d);
  return static_cast<std::size_t>(best);
}

TEST(DefaultCancelEndpointTest, TcpPortPlusOneElseAnErrorNamingTheEndpoint) {
  EXPECT_EQ(defaultCancelEndpoint("tcp://127.0.0.1:5555").value(), "tcp://127.0.0.1:5556");
  EXPECT_EQ(defaultCancelEndpoint("tcp://[::1]:7000").value(), "tcp://[::1]:7001");
  EXPECT_EQ(defaultCancelEndpoint("tcp://host.example:1").value(), "tcp://host.example:2");
  for (const char* bad : {"ipc:///tmp/x", "inproc://x", "tcp://127.0.0.1", "tcp://127.0.0.1:*",
                          "tcp://127.0.0.1:65535", "tcp://127.0.0.1:0", "tcp://h:12x", "tcp://"}) {
    const auto r = defaultCancelEndpoint(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
  // An endpoint without its scheme says what is missing (`--connect localhost:5555`).
  const auto no_scheme = defaultCancelEndpoint("localhost:5555");
  ASSERT_FALSE(no_scheme.has_value());
  EXPECT_NE(no_scheme.error().message.find("missing tcp://"), std::string::npos)
      << no_scheme.error().message;
  // The layout's other endpoints: PORT + 2 (KV events), PORT + 3 (KV replay).
  EXPECT_EQ(defaultEndpointAfter("tcp://127.0.0.1:5555", 3, "the replay endpoint", "--x").value(),
            "tcp://127.0.0.1:5558");
  const auto past = defaultEndpointAfter("tcp://h:65533", 3, "the replay endpoint", "--x");
  ASSERT_FALSE(past.has_value());
  EXPECT_NE(past.error().message.find("1..65532"), std::string::npos) << past.error().message;
}

// The tiny trace through one live server: every request completes with its planned tokens,
// first turns are sent no earlier than their offsets and follow-ups no earlier than the previous
// turn's terminal + delay; the server saw exactly the prompts offline replay synthesises.
TEST(LiveReplayTest, TinyTraceCompletesWithTheTraceTimeline) {
  LiveService server(serverConfig());
  const Workload w = tinyTrace(10.0);  // 95 ms of trace in ~10 ms of wall time (+ delays)
  const LiveRun run = runLive(w, {.targets = {targetOf(server)}, .stats_interval_ms = 1.0});
  const Report report = run.collector.buildReport({.wall_time_ms = run.stats.wall_ms});
  EXPECT_EQ(report.num_requests, 8u);
  EXPECT_EQ(report.completed_requests, 8u);
  EXPECT_EQ(report.total_output_tokens, 4u + 3 + 5 + 1 + 2 + 0 + 3 + 2);
  EXPECT_EQ(report.total_input_tokens, 1000u + 1200 + 600 + 512 + 1500 + 800 + 2000 + 1100);
  ASSERT_TRUE(report.duration_ms.has_value());
  EXPECT_GT(*report.duration_ms, 0.0);
  EXPECT_EQ(report.wall_time_ms, run.stats.wall_ms);
  EXPECT_EQ(run.stats.per_target, std::vector<std::uint64_t>{8});
  EXPECT_EQ(run.stats.ranks_per_target, std::vector<std::uint32_t>{1});
  EXPECT_EQ(run.stats.timeouts + run.stats.submit_rejects + run.stats.index_gaps, 0u);

  std::map<std::string, double> first_arrival;
  for (const Session& s : w.sessions) first_arrival[s.session_id] = *s.first_arrival_ms;
  std::map<std::string, const RequestRecord*> previous;
  for (const RequestRecord& r : run.collector.requests()) {
    EXPECT_EQ(r.status, TerminalStatus::Completed);
    EXPECT_EQ(r.token_times_ms.size(), r.info.requested_output_length);
    ASSERT_TRUE(r.terminal_ms.has_value());
    if (r.info.turn_index == 0) {
      EXPECT_GE(r.arrival_ms, first_arrival[r.info.session_id]) << r.info.session_id;
    } else {
      const RequestRecord* prev = previous.at(r.info.session_id);
      EXPECT_GE(r.arrival_ms, *prev->terminal_ms + 50.0 / 10.0) << r.info.session_id;
    }
    previous[r.info.session_id] = &r;
    ASSERT_TRUE(r.first_admit_ms.has_value());
    EXPECT_GE(*r.first_admit_ms, r.arrival_ms);
    for (const double t : r.token_times_ms) EXPECT_GE(t, *r.first_admit_ms);
    if (!r.token_times_ms.empty()) {
      EXPECT_LE(r.token_times_ms.back(), *r.terminal_ms);
    }
  }
  // Stats polling produced engine samples of rank 0.
  EXPECT_FALSE(run.collector.engineSamples().empty());
}

// CURVE: with the servers' public key and an allow-listed key pair the run completes; with a key
// pair the server does not list, the handshake gets no answer and the run fails.
TEST(LiveReplayTest, CurveServerIsReachedWithAnAllowListedKeyPairOnly) {
  const auto keyPair = [] {
    std::array<char, 41> pub{};
    std::array<char, 41> sec{};
    EXPECT_EQ(zmq_curve_keypair(pub.data(), sec.data()), 0);
    return std::pair<std::string, std::string>{pub.data(), sec.data()};
  };
  const auto [server_pub, server_sec] = keyPair();
  const auto [client_pub, client_sec] = keyPair();
  const auto [other_pub, other_sec] = keyPair();
  service::ServiceConfig c = serverConfig();
  c.security.curve = true;
  c.security.server_secret_key = server_sec;
  c.security.client_public_keys = {client_pub};
  LiveService server(c);
  const Workload w = tinyTrace(10.0);
  const LiveRun run = runLive(w, {.targets = {targetOf(server)},
                                  .curve = net::CurveClientKeys{.server_public_key = server_pub,
                                                                .public_key = client_pub,
                                                                .secret_key = client_sec}});
  EXPECT_EQ(run.collector.buildReport({}).completed_requests, 8u);

  ReplayCollector refused;
  const auto stats = runLiveReplay(w,
                                   {.targets = {targetOf(server)},
                                    .connect_timeout_ms = 500.0,
                                    .curve = net::CurveClientKeys{.server_public_key = server_pub,
                                                                  .public_key = other_pub,
                                                                  .secret_key = other_sec}},
                                   refused);
  EXPECT_FALSE(stats.has_value());
  EXPECT_TRUE(refused.requests().empty());
}

// The driver records its dispatch lag, and the servers' pass timing at the handshake and after
// the run (a paced server: every pass is timed).
TEST(LiveReplayTest, ReportsDriverLagAndServicePassTiming) {
  LiveService server(serverConfig());
  const Workload w = tinyTrace(10.0);
  const LiveRun run = runLive(w, {.targets = {targetOf(server)}, .stats_interval_ms = 0});
  ASSERT_EQ(run.stats.timing_start.size(), 1u);
  ASSERT_EQ(run.stats.timing_end.size(), 1u);
  ASSERT_TRUE(run.stats.timing_start[0] && run.stats.timing_end[0]);
  EXPECT_EQ(run.stats.timing_start[0]->passes, 0u);
  // Every request of the tiny trace needs at least one pass.
  EXPECT_GE(run.stats.timing_end[0]->passes, 8u);
  EXPECT_GE(run.stats.p99_dispatch_lag_ms, 0.0);
  EXPECT_LE(run.stats.mean_dispatch_lag_ms, run.stats.max_dispatch_lag_ms);
  EXPECT_LE(run.stats.p99_dispatch_lag_ms, run.stats.max_dispatch_lag_ms);
  const LiveTimingSummary s = summarizeLiveTiming(run.stats, /*closed_loop=*/false);
  EXPECT_NE(s.text.find("Live timing: driver dispatch lag mean"), std::string::npos) << s.text;
  EXPECT_NE(s.text.find("Live timing: server 0 published"), std::string::npos) << s.text;
}

// What is printed and when it warns: lateness over the run from the start and end figures;
// warnings for a late driver, a late server or a resync, none when everything is on time.
TEST(LiveTimingSummaryTest, RunFiguresAndFidelityWarnings) {
  LiveReplayStats stats;
  stats.mean_dispatch_lag_ms = 0.05;
  stats.p99_dispatch_lag_ms = 0.2;
  stats.max_dispatch_lag_ms = 0.9;
  stats.timing_start = {protocol::PassTiming{.passes = 100, .lateness_mean_ms = 1.0}, std::nullopt};
  stats.timing_end = {protocol::PassTiming{.passes = 300,
                                           .lateness_mean_ms = 0.5,  // 150 ms over 300 passes
                                           .lateness_p50_ms = 0.01,
                                           .lateness_p99_ms = 0.4,
                                           .lateness_max_ms = 2.0},
                      std::nullopt};
  LiveTimingSummary s = summarizeLiveTiming(stats, false);
  EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
  // (150 - 100) ms over 200 passes.
  EXPECT_NE(s.text.find("server 0 published 200 passes, lateness mean 0.250 ms"), std::string::npos)
      << s.text;
  EXPECT_NE(s.text.find("server 1 reports no pass timing"), std::string::npos) << s.text;
  EXPECT_EQ(summarizeLiveTiming(stats, true).text.find("dispatch lag"), std::string::npos);

  stats.p99_dispatch_lag_ms = 3.0;
  stats.timing_end[0]->lateness_p99_ms = 1.5;
  s = summarizeLiveTiming(stats, false);
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("dispatch lag p99 3.000 ms"), std::string::npos) << s.warnings[0];
  EXPECT_NE(s.warnings[1].find("server 0 published passes late (lateness p99 1.500 ms"),
            std::string::npos)
      << s.warnings[1];

  stats.p99_dispatch_lag_ms = 0.2;
  stats.timing_end[0]->lateness_p99_ms = 0.4;
  stats.timing_end[0]->resyncs = 1;
  s = summarizeLiveTiming(stats, false);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("1 resyncs"), std::string::npos) << s.warnings[0];
}

// Offline vs live in trace mode. Arrivals are slowed 10× (the closest two are 50 ms apart) while
// the server runs 1000× faster than the model, so each request normally ends long before the
// next one arrives, exactly as offline; then the prefix cache sees the same history at every
// admission and the reuse is equal per request. That precondition (no request in flight when
// the next one is sent) is checked on the live records, not assumed: should a loaded machine
// break it, reuse can only be lower live (an overlapping predecessor has not finished its
// prefill, and this pool never evicts), so the bound asserted then is live ≤ offline.
TEST(LiveReplayTest, TraceModeAgreesWithOffline) {
  const Workload w = tinyTrace(0.1);
  const ReplayCollector offline = runOffline(w);
  LiveService server(serverConfig());
  const LiveRun live = runLive(w, {.targets = {targetOf(server)}});

  const Report off_report = offline.buildReport({});
  const Report live_report = live.collector.buildReport({});
  EXPECT_EQ(live_report.completed_requests, off_report.completed_requests);
  EXPECT_EQ(live_report.completed_requests, 8u);
  EXPECT_EQ(live_report.total_output_tokens, off_report.total_output_tokens);
  EXPECT_EQ(live_report.total_input_tokens, off_report.total_input_tokens);
  ASSERT_EQ(maxOverlap(offline), 1u);  // the reference itself is sequential

  const auto off = bySessionTurn(offline);
  const auto on = bySessionTurn(live.collector);
  ASSERT_EQ(off.size(), on.size());
  std::uint64_t off_reuse = 0;
  std::uint64_t on_reuse = 0;
  for (const auto& [key, r] : off) {
    off_reuse += r.first_reused_input_tokens;
    on_reuse += on.at(key).first_reused_input_tokens;
  }
  EXPECT_GT(off_reuse, 0u);  // the trace does share prefixes
  if (maxOverlap(live.collector) == 1) {
    for (const auto& [key, r] : off) {
      EXPECT_EQ(on.at(key).first_reused_input_tokens, r.first_reused_input_tokens)
          << key.first << "/" << key.second;
    }
    EXPECT_EQ(live_report.first_admission_prefix_cache_reused_ratio,
              off_report.first_admission_prefix_cache_reused_ratio);
  } else {
    std::cerr << "note: live requests overlapped on this run (a loaded machine); checking the "
                 "bound live reuse <= offline reuse instead of equality\n";
    EXPECT_LE(on_reuse, off_reuse);
  }
}

// Closed loop with concurrency 1 is sequential by construction in both modes and dispatches in
// the same order (all first turns are eligible at 0, before any follow-up), so agreement is
// exact whatever the timing: same tokens, same completions, same reuse per request.
TEST(LiveReplayTest, ClosedLoopOfOneAgreesExactlyWithOffline) {
  const Workload w = tinyTrace(1.0, /*require_timestamps=*/false);
  const ReplayCollector offline = runOffline(w, 1);
  LiveService server(serverConfig());
  const LiveRun live = runLive(w, {.targets = {targetOf(server)}, .concurrency = 1});
  EXPECT_EQ(live.stats.max_in_flight, 1u);
  ASSERT_EQ(live.collector.requests().size(), offline.requests().size());
  for (std::size_t i = 0; i < offline.requests().size(); ++i) {
    const RequestRecord& a = offline.requests()[i];
    const RequestRecord& b = live.collector.requests()[i];
    EXPECT_EQ(b.info.session_id, a.info.session_id) << i;
    EXPECT_EQ(b.info.turn_index, a.info.turn_index) << i;
    EXPECT_EQ(b.status, a.status) << i;
    EXPECT_EQ(b.token_times_ms.size(), a.token_times_ms.size()) << i;
    EXPECT_EQ(b.first_reused_input_tokens, a.first_reused_input_tokens) << i;
  }
  const Report off_report = offline.buildReport({});
  const Report live_report = live.collector.buildReport({});
  EXPECT_EQ(live_report.total_output_tokens, off_report.total_output_tokens);
  EXPECT_EQ(live_report.completed_requests, off_report.completed_requests);
  EXPECT_EQ(live_report.first_admission_prefix_cache_reused_ratio,
            off_report.first_admission_prefix_cache_reused_ratio);
  ASSERT_TRUE(off_report.first_admission_prefix_cache_reused_ratio.has_value());
  EXPECT_GT(*off_report.first_admission_prefix_cache_reused_ratio, 0.0);
}

// Closed loop, concurrency 2: never more than two in flight (the tool's accounting and an
// independent sweep over the recorded arrival/terminal times); the first two go out at once.
// Agentic wait_for live: a dependent request is sent only after the terminal of every request
// it waits for arrived, plus its delay + tool wait; the roots go out at once.
TEST(LiveReplayTest, DependentRequestIsSentOnlyAfterItsDependenciesEnded) {
  auto w = parseMooncakeTrace(
      R"({"request_id": "a", "timestamp": 0, "output_length": 40, "hash_ids": [1, 2]})"
      "\n"
      R"({"request_id": "s", "timestamp": 0, "output_length": 20, "hash_ids": [7]})"
      "\n"
      R"({"request_id": "b", "output_length": 2, "hash_ids": [1, 2, 3], "wait_for": ["a", "s"], "delay": 5, "tool_wait_ms": 25})",
      {.trace_block_size = 16}, TraceFormat::Agentic);
  ASSERT_TRUE(w) << w.error().toString();
  LiveService server(serverConfig());
  const LiveRun run = runLive(*w, {.targets = {targetOf(server)}, .stats_interval_ms = 0});
  ASSERT_EQ(run.collector.requests().size(), 3u);
  std::map<std::string, const RequestRecord*> by_id;
  for (const RequestRecord& r : run.collector.requests()) by_id[*r.info.request_id] = &r;
  const RequestRecord& a = *by_id.at("a");
  const RequestRecord& s = *by_id.at("s");
  const RequestRecord& b = *by_id.at("b");
  for (const RequestRecord* r : {&a, &s, &b}) {
    EXPECT_EQ(r->status, TerminalStatus::Completed) << *r->info.request_id;
  }
  // b is the last one sent, at least 30 ms after the later of a's and s's terminals.
  EXPECT_EQ(run.collector.requests().back().info.request_id, "b");
  EXPECT_GE(b.arrival_ms, std::max(a.terminal_ms.value(), s.terminal_ms.value()) + 30.0);
  // The roots do not wait: both went out in the first dispatch round, before any reply was read.
  EXPECT_LE(s.arrival_ms, a.terminal_ms.value());
  EXPECT_LE(a.arrival_ms, s.terminal_ms.value());
  EXPECT_EQ(b.token_times_ms.size(), 2u);
}

// mooncake-delta live: each later prompt is the previous prompt plus the tokens the server sent
// for it plus the delta, exactly as offline (closed loop of one, so the cache sees the same
// history), and the received output tokens are reused from the cache.
TEST(LiveReplayTest, DeltaTurnsCarryTheReceivedOutputsLikeOffline) {
  auto w = parseMooncakeTrace(
      R"({"session_id": "s", "input_length": 128, "output_length": 65, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8]})"
      "\n"
      R"({"session_id": "s", "input_length": 10, "output_length": 2, "hash_ids": [9]})"
      "\n"
      R"({"session_id": "s", "input_length": 16, "output_length": 4, "hash_ids": [10]})",
      {.trace_block_size = 16, .require_timestamps = false}, TraceFormat::MooncakeDelta);
  ASSERT_TRUE(w) << w.error().toString();
  const ReplayCollector offline = runOffline(*w, 1);
  LiveService server(serverConfig());
  const LiveRun live = runLive(*w, {.targets = {targetOf(server)}, .concurrency = 1});
  ASSERT_EQ(live.collector.requests().size(), 3u);
  ASSERT_EQ(offline.requests().size(), 3u);
  EXPECT_EQ(live.collector.requests()[1].info.input_length, 128u + 65u + 10u);
  EXPECT_EQ(live.collector.requests()[2].info.input_length, 203u + 2u + 16u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(live.collector.requests()[i].info.input_length,
              offline.requests()[i].info.input_length);
    EXPECT_EQ(live.collector.requests()[i].first_reused_input_tokens,
              offline.requests()[i].first_reused_input_tokens)
        << i;
  }
  // 128 prompt + 64 of the 65 outputs have KV: 3 blocks of 64 = 192 > the first prompt.
  EXPECT_EQ(live.collector.requests()[1].first_reused_input_tokens, 192u);
}

TEST(LiveReplayTest, ClosedLoopKeepsAtMostConcurrencyInFlight) {
  const Workload w = tinyTrace(1.0, /*require_timestamps=*/false);
  LiveService server(serverConfig());
  const LiveRun live = runLive(w, {.targets = {targetOf(server)}, .concurrency = 2});
  EXPECT_EQ(live.stats.max_in_flight, 2u);
  EXPECT_LE(maxOverlap(live.collector), 2u);
  const Report report = live.collector.buildReport({});
  EXPECT_EQ(report.completed_requests, 8u);
  EXPECT_EQ(report.total_output_tokens, 20u);
  // Arrival = dispatch time: the first two were sent before any response was read.
  ASSERT_GE(live.collector.requests().size(), 2u);
  const RequestRecord& first = live.collector.requests()[0];
  EXPECT_LE(live.collector.requests()[1].arrival_ms, first.terminal_ms.value());
}

// A prompt larger than the whole KV pool is counted rejected; the other requests complete.
TEST(LiveReplayTest, PromptLargerThanThePoolIsCountedRejected) {
  engine::EngineConfig small = engineConfig();
  small.num_gpu_blocks = 16;
  small.block_size = 16;  // 256 tokens in the pool
  LiveService server(serverConfig(small));
  const Workload w = parse(
      R"({"timestamp": 0, "input_length": 32, "output_length": 2, "hash_ids": [1, 2]})"
      "\n"
      R"({"timestamp": 1, "input_length": 400, "output_length": 2, "hash_ids": )"
      R"([3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]})"
      "\n"
      R"({"timestamp": 2, "input_length": 16, "output_length": 1, "hash_ids": [30]})"
      "\n");
  const LiveRun live = runLive(w, {.targets = {targetOf(server)}});
  const Report report = live.collector.buildReport({});
  EXPECT_EQ(report.num_requests, 3u);
  EXPECT_EQ(report.rejected_requests, 1u);
  EXPECT_EQ(report.completed_requests, 2u);
  EXPECT_EQ(live.stats.submit_rejects + live.stats.finish_rejected, 1u);
  EXPECT_EQ(live.collector.requests()[1].status, TerminalStatus::Rejected);
  EXPECT_FALSE(live.collector.requests()[1].first_admit_ms.has_value());
}

// A server that never finishes (its passes run 10^4× slower than the model): each request is
// cancelled at the timeout and counted cancelled, and the session still moves on to its next
// turn, which times out too.
TEST(LiveReplayTest, RequestTimeoutCancelsAndCountsCancelled) {
  engine::EngineConfig slow = engineConfig();
  slow.speedup_ratio = 1e-4;
  LiveService server(serverConfig(slow));
  const Workload w =
      parse(R"({"timestamp": 0, "output_length": 4, "hash_ids": [1, 2], "session_id": "s"})"
            "\n"
            R"({"output_length": 4, "hash_ids": [1, 2, 3], "session_id": "s", "delay": 0})"
            "\n");
  LiveRun live;
  auto stats = runLiveReplay(w, {.targets = {targetOf(server)}, .request_timeout_ms = 100.0},
                             live.collector);
  ASSERT_TRUE(stats.has_value()) << stats.error().toString();
  EXPECT_EQ(stats->timeouts, 2u);
  const Report report = live.collector.buildReport({});
  EXPECT_EQ(report.num_requests, 2u);
  EXPECT_EQ(report.cancelled_requests, 2u);
  EXPECT_EQ(report.completed_requests, 0u);
  for (const RequestRecord& r : live.collector.requests()) {
    EXPECT_EQ(r.status, TerminalStatus::Cancelled);
    EXPECT_GE(*r.terminal_ms - r.arrival_ms, 100.0);
  }
  // The server got the cancels: nothing of ours stays active there.
  auto probe = server.client();
  EXPECT_TRUE(service::testing::eventually(
      *probe, [](const protocol::StatsReply& s) { return s.routes == 0; }));
}

// Round robin over two servers: requests alternate, and each server's own counters show it ran
// exactly the prompts sent to it (prefix-cache lookups count every admitted prompt token).
TEST(LiveReplayTest, RoundRobinOverTwoServersReachesBoth) {
  LiveService a(serverConfig());
  LiveService b(serverConfig());
  const Workload w =
      parse(R"({"timestamp": 0, "input_length": 16, "output_length": 2, "hash_ids": [1]})"
            "\n"
            R"({"timestamp": 1, "input_length": 32, "output_length": 2, "hash_ids": [2, 3]})"
            "\n"
            R"({"timestamp": 2, "input_length": 48, "output_length": 2, "hash_ids": [4, 5, 6]})"
            "\n"
            R"({"timestamp": 3, "input_length": 64, "output_length": 2, "hash_ids": [7, 8, 9, 10]})"
            "\n");
  const LiveRun live = runLive(w, {.targets = {targetOf(a), targetOf(b)}});
  EXPECT_EQ(live.stats.per_target, (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(live.stats.rank_offset, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(live.collector.buildReport({}).completed_requests, 4u);
  auto ca = a.client();
  auto cb = b.client();
  const protocol::StatsReply sa = service::testing::stats(*ca);
  const protocol::StatsReply sb = service::testing::stats(*cb);
  ASSERT_EQ(sa.ranks.size(), 1u);
  ASSERT_EQ(sb.ranks.size(), 1u);
  EXPECT_EQ(sa.ranks[0].prefix_queries_tokens, 16u + 48u);
  EXPECT_EQ(sb.ranks[0].prefix_queries_tokens, 32u + 64u);
}

TEST(LiveReplayTest, RandomRouterIsSeededAndUsesEveryServerOverManyRequests) {
  LiveService a(serverConfig());
  LiveService b(serverConfig());
  std::string text;
  for (int i = 0; i < 16; ++i) {
    text +=
        R"({"timestamp": 0, "output_length": 1, "hash_ids": [)" + std::to_string(i + 1) + "]}\n";
  }
  const Workload w = parse(text);
  const LiveRun first = runLive(
      w, {.targets = {targetOf(a), targetOf(b)}, .router = RouterKind::Random, .router_seed = 7});
  const LiveRun second = runLive(
      w, {.targets = {targetOf(a), targetOf(b)}, .router = RouterKind::Random, .router_seed = 7});
  EXPECT_EQ(first.stats.per_target, second.stats.per_target);
  EXPECT_EQ(first.stats.per_target[0] + first.stats.per_target[1], 16u);
  EXPECT_GT(first.stats.per_target[0], 0u);
  EXPECT_GT(first.stats.per_target[1], 0u);
}

/// A server that publishes KV events with a replay ring (block size 4, testConfig()).
service::ServiceConfig kvServerConfig() {
  service::ServiceConfig c = serverConfig();
  c.engine.block_size = 4;
  c.kv_events.enabled = true;
  c.kv_events.replay_enabled = true;
  return c;
}

LiveTarget kvTargetOf(const LiveService& s) {
  LiveTarget t = targetOf(s);
  t.kv_events = s.endpoints().kv_events;
  t.kv_replay = s.endpoints().kv_replay;
  return t;
}

LiveReplayOptions kvOptions(const std::vector<LiveTarget>& targets, std::uint64_t seed) {
  return {.targets = targets,
          .router = RouterKind::Kv,
          .router_seed = seed,
          .kv_block_size = 0,  // the servers' (4), from their start-up stats
          .connect_timeout_ms = 10'000.0 * service::testing::kSlowdown};
}

// A prompt served by server k is routed back to k for a follow-up sharing its prefix. The second
// run starts a new index, which catches up (replay from seq 0 of every server's ring) before the
// first dispatch: the served prompt's blocks are in the index by then, evidence rather than time.
TEST(LiveReplayTest, KvRouterSendsAFollowUpBackToTheServerThatHoldsItsPrefix) {
  LiveService a(kvServerConfig());
  LiveService b(kvServerConfig());
  LiveService c(kvServerConfig());
  const std::vector<LiveTarget> targets{kvTargetOf(a), kvTargetOf(b), kvTargetOf(c)};
  std::set<std::size_t> servers_used;
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    const std::string first =
        R"({"timestamp": 0, "output_length": 2, "hash_ids": [)" + std::to_string(100 * seed + 1) +
        ", " + std::to_string(100 * seed + 2) + ", " + std::to_string(100 * seed + 3) + "]}\n";
    const LiveRun served = runLive(parse(first), kvOptions(targets, seed));
    const auto& n = served.stats.per_target;
    ASSERT_EQ(std::accumulate(n.begin(), n.end(), std::uint64_t{0}), 1u);
    const auto k = static_cast<std::size_t>(std::find(n.begin(), n.end(), 1u) - n.begin());
    servers_used.insert(k);
    const std::string follow_up =
        R"({"timestamp": 0, "output_length": 2, "hash_ids": [)" + std::to_string(100 * seed + 1) +
        ", " + std::to_string(100 * seed + 2) + ", " + std::to_string(100 * seed + 3) + ", 99]}\n";
    const LiveRun again = runLive(parse(follow_up), kvOptions(targets, seed + 10));
    std::vector<std::uint64_t> expected(3, 0);
    expected[k] = 1;
    EXPECT_EQ(again.stats.per_target, expected) << "seed " << seed;
    EXPECT_EQ(again.stats.kv_routed_hits, 1u);
    EXPECT_EQ(again.stats.kv_block_size, 4u);
    EXPECT_GT(again.stats.kv_batches_applied, 0u);
    const Report report = again.collector.buildReport({});
    ASSERT_EQ(report.completed_requests, 1u);
    // The server reused the 48 prompt tokens it had cached.
    EXPECT_EQ(again.collector.requests()[0].last_reused_input_tokens, 48u);
  }
  // Without overlap or load the first pick is a seeded random tie-break, not always server 0.
  EXPECT_GT(servers_used.size(), 1u);
}

// The trace's adapter goes on the wire, and the kv router hashes the prompt under it as the
// servers' engines do: a follow-up with adapter A goes back to the server holding A's blocks
// and reuses them; the same tokens under adapter B score no hit and reuse nothing.
TEST(LiveReplayTest, KvRouterScoresAPrefixOnlyForItsOwnAdapter) {
  service::ServiceConfig config = kvServerConfig();
  config.engine.max_loras = 2;
  LiveService a(config);
  LiveService b(config);
  LiveService c(config);
  const std::vector<LiveTarget> targets{kvTargetOf(a), kvTargetOf(b), kvTargetOf(c)};
  const auto row = [](std::string_view hash_ids, std::string_view lora) {
    return R"({"timestamp": 0, "output_length": 2, "hash_ids": [)" + std::string(hash_ids) +
           R"(], "lora": ")" + std::string(lora) + "\"}\n";
  };
  const LiveRun served = runLive(parse(row("7, 8, 9", "A")), kvOptions(targets, 1));
  const auto& n = served.stats.per_target;
  ASSERT_EQ(std::accumulate(n.begin(), n.end(), std::uint64_t{0}), 1u);
  const auto k = static_cast<std::size_t>(std::find(n.begin(), n.end(), 1u) - n.begin());
  ASSERT_EQ(served.collector.buildReport({}).completed_requests, 1u);

  const LiveRun other = runLive(parse(row("7, 8, 9, 99", "B")), kvOptions(targets, 2));
  EXPECT_EQ(other.stats.kv_routed_hits, 0u);
  ASSERT_EQ(other.collector.buildReport({}).completed_requests, 1u);
  EXPECT_EQ(other.collector.requests()[0].last_reused_input_tokens, 0u);

  const LiveRun same = runLive(parse(row("7, 8, 9, 99", "A")), kvOptions(targets, 3));
  std::vector<std::uint64_t> expected(3, 0);
  expected[k] = 1;
  EXPECT_EQ(same.stats.per_target, expected);
  EXPECT_EQ(same.stats.kv_routed_hits, 1u);
  ASSERT_EQ(same.collector.buildReport({}).completed_requests, 1u);
  EXPECT_EQ(same.collector.requests()[0].last_reused_input_tokens, 48u);
}

// Prompts that share nothing, all due at once: each dispatch sees the load of the ones before it
// (their active blocks and queued prefill), so the servers take turns.
TEST(LiveReplayTest, KvRouterSpreadsUnrelatedPromptsByLoad) {
  LiveService a(kvServerConfig());
  LiveService b(kvServerConfig());
  LiveService c(kvServerConfig());
  std::string text;
  for (int i = 0; i < 30; ++i) {
    text += R"({"timestamp": 0, "output_length": 2, "hash_ids": [)" + std::to_string(1000 + i) +
            ", " + std::to_string(2000 + i) + "]}\n";
  }
  const LiveRun run =
      runLive(parse(text), kvOptions({kvTargetOf(a), kvTargetOf(b), kvTargetOf(c)}, 4));
  EXPECT_EQ(run.stats.per_target, (std::vector<std::uint64_t>{10, 10, 10}));
  EXPECT_EQ(run.stats.kv_routed_hits, 0u);
  EXPECT_EQ(run.stats.kv_query_failures, 0u);
  EXPECT_EQ(run.collector.buildReport({}).completed_requests, 30u);
}

// --router-block-size that differs from the block size a server reports is refused before any
// request is sent (it used to hash in 64-token blocks against 16-token servers and route nothing
// to a cached prefix, silently).
TEST(LiveReplayTest, KvRouterRefusesABlockSizeTheServersDoNotUse) {
  LiveService a(kvServerConfig());
  ReplayCollector c;
  LiveReplayOptions options = kvOptions({kvTargetOf(a)}, 0);
  options.kv_block_size = 64;
  const auto r = runLiveReplay(parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})"
                                     "\n"),
                               options, c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("--router-block-size 64 but server " + a.endpoints().submit +
                                   " hashes its KV events in blocks of 4 tokens"),
            std::string::npos)
      << r.error().message;
  EXPECT_TRUE(c.requests().empty());
}

TEST(LiveReplayTest, KvBlockSizeComesFromEveryServerOrTheFlag) {
  const std::vector<std::string> servers{"tcp://a:1", "tcp://b:1"};
  const auto info = [](std::uint32_t bs) {
    return protocol::EngineInfo{
        .engine_type = "vllm", .worker_type = "aggregated", .block_size = bs, .speedup_ratio = 1.0};
  };
  EXPECT_EQ(resolveKvBlockSize(0, {info(16), info(16)}, servers).value(), 16u);
  EXPECT_EQ(resolveKvBlockSize(16, {info(16), std::nullopt}, servers).value(), 16u);
  EXPECT_EQ(resolveKvBlockSize(8, {std::nullopt, std::nullopt}, servers).value(), 8u);
  const auto differ = resolveKvBlockSize(0, {info(16), info(32)}, servers);
  ASSERT_FALSE(differ.has_value());
  EXPECT_NE(differ.error().message.find("tcp://a:1: 16, tcp://b:1: 32"), std::string::npos)
      << differ.error().message;
  const auto silent = resolveKvBlockSize(0, {info(16), std::nullopt}, servers);
  ASSERT_FALSE(silent.has_value());
  EXPECT_NE(silent.error().message.find("server tcp://b:1 does not report"), std::string::npos)
      << silent.error().message;
  EXPECT_FALSE(resolveKvBlockSize(0, {std::nullopt, std::nullopt}, servers).has_value());
}

TEST(LiveReplayTest, KvRouterNeedsTheKvEndpoints) {
  LiveService a(kvServerConfig());
  ReplayCollector c;
  const auto r = runLiveReplay(parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})"
                                     "\n"),
                               kvOptions({targetOf(a)}, 0), c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("KV-event endpoint"), std::string::npos) << r.error().message;
}

// Nothing listens: the handshake times out with an error naming the endpoint.
TEST(LiveReplayTest, SilentEndpointFailsTheHandshakeNamingIt) {
  std::string endpoint;
  {
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::router);
    s.set(zmq::sockopt::linger, 0);
    s.bind("tcp://127.0.0.1:*");
    endpoint = s.get(zmq::sockopt::last_endpoint);
  }  // closed again: nothing listens on that port now
  const Workload w = parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})"
                           "\n");
  ReplayCollector c;
  const auto r =
      runLiveReplay(w,
                    {.targets = {{.submit_endpoint = endpoint,
                                  .cancel_endpoint = defaultCancelEndpoint(endpoint).value()}},
                     .connect_timeout_ms = 100.0},
                    c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find(endpoint), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("no answer"), std::string::npos) << r.error().message;
  EXPECT_TRUE(c.requests().empty());
}

TEST(LiveReplayTest, OptionErrors) {
  const Workload w = parse(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})"
                           "\n");
  ReplayCollector c;
  EXPECT_FALSE(runLiveReplay(w, {}, c).has_value());  // no target
  const LiveTarget t{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"};
  EXPECT_FALSE(runLiveReplay(w, {.targets = {t}, .concurrency = 0}, c).has_value());
  EXPECT_FALSE(runLiveReplay(w, {.targets = {t}, .request_timeout_ms = 0}, c).has_value());
  EXPECT_FALSE(runLiveReplay(w, {.targets = {t}, .connect_timeout_ms = -1}, c).has_value());
  const auto kv_prefix = runLiveReplay(w, {.targets = {t}, .router = RouterKind::KvPrefix}, c);
  ASSERT_FALSE(kv_prefix.has_value());
  EXPECT_NE(kv_prefix.error().message.find("kv_prefix router is offline only"), std::string::npos)
      << kv_prefix.error().message;
  EXPECT_TRUE(c.requests().empty());
}

// `mocker replay --mode live --connect …` end to end through the CLI: table and JSON report.
// `--router kv` through the command line, with the KV endpoints given explicitly. (Whether the
// second turn finds the first's blocks depends on when the index's SUB reads them; the library
// tests above pin the routing on evidence. Here: the flags reach the router and the run ends.)
TEST(LiveReplayCliTest, KvRouterThroughTheCommandLine) {
  LiveService a(kvServerConfig());
  LiveService b(kvServerConfig());
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mocker_live_replay_kv_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string trace = (dir / "t.jsonl").string();
  std::ofstream(trace) << R"({"session_id": "s", "timestamp": 0, "output_length": 2, )"
                       << R"("hash_ids": [1, 2, 3]})"
                       << "\n"
                       << R"({"session_id": "s", "delay": 2000, "output_length": 2, )"
                       << R"("hash_ids": [1, 2, 3, 4]})"
                       << "\n";
  // No --router-block-size: the driver takes the servers' (4).
  std::vector<std::string> args{"mocker", "replay",
                                trace,    "--router",
                                "kv",     "--trace-block-size",
                                "16",     "--arrival-speedup-ratio",
                                "10",     "--no-progress"};
  for (const LiveService* s : {&a, &b}) {
    args.insert(args.end(),
                {"--connect", s->endpoints().submit, "--connect-cancel", s->endpoints().cancel,
                 "--connect-kv-events", s->endpoints().kv_events[0], "--connect-kv-replay",
                 s->endpoints().kv_replay[0]});
  }
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli(args, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("requests per server (kv):"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Live kv router: 4-token blocks; "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("; 0 overlap queries unanswered"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("(completed 2,"), std::string::npos) << out.str();
  std::filesystem::remove_all(dir);
}

TEST(LiveReplayCliTest, ReplaysTheTinyTraceAgainstAServer) {
  LiveService server(serverConfig());
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mocker_live_replay_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "r.json").string();
  const std::string jsonl = (dir / "r.jsonl").string();
  std::ostringstream out, err;
  const int code =
      tools::runCli({"mocker", "replay", testing::sourceDir() + "/tests/data/tiny_trace.jsonl",
                     "--connect", server.endpoints().submit, "--connect-cancel",
                     server.endpoints().cancel, "--arrival-speedup-ratio", "10", "--report-json",
                     json, "--requests-jsonl", jsonl, "--no-progress"},
                    out, err);
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_NE(out.str().find("Replay report"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Live: 1 server(s)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Live timing: server 0 published"), std::string::npos) << out.str();
  std::ifstream in(json);
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["num_requests"], 8);
  EXPECT_EQ(report["completed_requests"], 8);
  EXPECT_EQ(report["total_output_tokens"], 20);
  EXPECT_TRUE(report["wall_time_ms"].is_number());
  // Live identity: the servers, no engine configuration (each server has its own).
  EXPECT_EQ(report["identity"]["mode"], "live");
  EXPECT_EQ(report["identity"]["servers"], nlohmann::json::array({server.endpoints().submit}));
  EXPECT_EQ(report["identity"]["num_workers"], 1);
  EXPECT_TRUE(report["identity"]["engine_config"].is_null());
  EXPECT_EQ(report["identity"]["trace_sha256"].get<std::string>().size(), 64U);
  EXPECT_NE(out.str().find("each server's own"), std::string::npos) << out.str();
  std::ifstream lines(jsonl);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) ++n;
  EXPECT_EQ(n, 8);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mocker::replay
