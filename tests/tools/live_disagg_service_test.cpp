// Live disaggregated replay against the real service: in-process `mocker serve --worker-type
// prefill` and `--worker-type decode` servers (service::Server on threads, ephemeral loopback
// endpoints, every hop — submit, handoff, decode submit, kv_fetch — a real ZeroMQ message).
// Every request completes through both hops (P, D = 1..2), the report counts match, rejections
// at either hop are recorded and free the prefill worker's KV, and one small trace is compared
// against the offline disaggregated replay (printed, bounded generously). The driver's exact
// rules are pinned against scripted workers in live_disagg_replay_test.cpp. Nothing sleeps.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "replay_test_util.h"
#include "tests/service/live_service.h"
#include "tests/tools/live_replay_test_util.h"
#include "tools/cli.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"

namespace mocker::replay {
namespace {

using service::testing::LiveService;

/// Both roles: fixed pass times (prefill 10 ms, decode 2 ms model time) and a 0.01 ms-per-token
/// KV transfer, paced 20x faster than the model; 0-token outputs allowed.
engine::EngineConfig roleEngine(engine::WorkerType type, std::uint32_t block_size = 16) {
  engine::EngineConfig e;
  e.worker_type = type;
  e.block_size = block_size;
  e.num_gpu_blocks = 512;
  e.timing_model = engine::TimingModelKind::Fixed;
  e.fixed_prefill_ms = 10.0;
  e.fixed_decode_ms = 2.0;
  e.kv_bytes_per_token = 10000;
  e.kv_transfer_bandwidth_gbps = 1.0;
  e.speedup_ratio = 20.0;
  e.allow_empty_output = true;
  return e;
}

service::ServiceConfig roleConfig(engine::EngineConfig engine) {
  service::ServiceConfig c = service::testing::testConfig();
  c.engine = std::move(engine);
  c.endpoints.handoff.endpoint = "tcp://127.0.0.1:*";
  return c;
}

LiveTarget targetOf(const LiveService& s) {
  return {.submit_endpoint = s.endpoints().submit, .cancel_endpoint = s.endpoints().cancel};
}

Workload parse(const std::string& text) {
  auto w = parseMooncakeTrace(text, {.trace_block_size = 16, .require_timestamps = true});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

/// `n` single-turn requests 5 ms apart (trace time), 2..4 blocks of prompt, 1..4 output tokens.
Workload smallTrace(int n, double arrival_speedup_ratio = 1.0) {
  std::ostringstream t;
  for (int i = 0; i < n; ++i) {
    t << R"({"timestamp": )" << i * 5 << R"(, "output_length": )" << 1 + i % 4
      << R"(, "hash_ids": [)";
    for (int b = 0; b < 2 + i % 3; ++b) t << (b ? ", " : "") << 100 * i + b;
    t << "]}\n";
  }
  auto w = parseMooncakeTrace(t.str(), {.trace_block_size = 16,
                                        .arrival_speedup_ratio = arrival_speedup_ratio,
                                        .require_timestamps = true});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

/// P prefill and D decode servers.
struct Fleets {
  std::vector<std::unique_ptr<LiveService>> prefill;
  std::vector<std::unique_ptr<LiveService>> decode;
  Fleets(std::uint32_t p, std::uint32_t d, std::uint32_t decode_block_size = 16) {
    for (std::uint32_t i = 0; i < p; ++i) {
      prefill.push_back(
          std::make_unique<LiveService>(roleConfig(roleEngine(engine::WorkerType::Prefill))));
    }
    for (std::uint32_t i = 0; i < d; ++i) {
      decode.push_back(std::make_unique<LiveService>(
          roleConfig(roleEngine(engine::WorkerType::Decode, decode_block_size))));
    }
  }
  LiveReplayOptions options() const {
    LiveReplayOptions o;
    for (const auto& s : prefill) o.targets.push_back(targetOf(*s));
    for (const auto& s : decode) o.decode_targets.push_back(targetOf(*s));
    o.request_timeout_ms = 30'000.0 * service::testing::kSlowdown;
    return o;
  }
};

using testing::LiveRun;
using testing::runLive;

std::uint64_t sum(const std::vector<std::uint64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
}

// One prefill and one decode server: every request goes through both hops and completes with
// its planned number of tokens; TTFT (dispatch → first decode token) covers the handoff; the
// handoff figures count every request; token 0 carries the ticket's cached_tokens.
TEST(LiveDisaggServiceTest, EveryRequestCompletesThroughBothHops) {
  Fleets f(1, 1);
  const Workload w = smallTrace(8);
  const LiveRun run = runLive(w, f.options());
  const Report report = run.collector.buildReport({.wall_time_ms = run.stats.wall_ms});
  EXPECT_EQ(report.num_requests, 8u);
  EXPECT_EQ(report.completed_requests, 8u);
  EXPECT_EQ(report.total_output_tokens, 2u * (1 + 2 + 3 + 4));
  ASSERT_TRUE(run.stats.handoff.has_value());
  const LiveHandoffStats& h = *run.stats.handoff;
  EXPECT_EQ(h.handoffs, 8u);
  EXPECT_EQ(h.decode_acks, 8u);
  EXPECT_EQ(h.activations, 8u);
  EXPECT_EQ(h.decode_rejects, 0u);
  EXPECT_EQ(h.ended_on_prefill, 0u);
  EXPECT_EQ(h.prefill_tokens, 0u);
  EXPECT_EQ(h.per_decode_target, std::vector<std::uint64_t>{8});
  EXPECT_EQ(run.stats.per_target, std::vector<std::uint64_t>{8});
  ASSERT_EQ(h.transfer_ms.size(), 8u);
  for (const double t : h.transfer_ms) EXPECT_GT(t, 0.0);
  for (const RequestRecord& r : run.collector.requests()) {
    EXPECT_EQ(r.status, TerminalStatus::Completed);
    ASSERT_FALSE(r.token_times_ms.empty());
    // The first decode token cannot come before the prefill pass (10 ms / 20) has run.
    EXPECT_GE(r.token_times_ms.front() - r.arrival_ms, 0.5 - 1e-9);
  }
  // Both servers' pass timing is reported (prefill first, then decode).
  EXPECT_EQ(run.stats.timing_end.size(), 2u);
  const HandoffReport hr = summarizeLiveHandoffs(h);
  EXPECT_EQ(hr.handoffs, 8u);
  EXPECT_EQ(hr.wait_ms.count, 8u);
  EXPECT_EQ(hr.queue_ms.count, 0u);
  const std::string text = formatLiveHandoffs(h);
  EXPECT_NE(text.find("8 handoffs, 8 decode acks, 8 decode streams started"), std::string::npos)
      << text;
}

// P = 2, D = 2: round robin on both hops reaches every server evenly; the random routers with
// the same seed route the same way twice (same per-server counts); the kv decode router (fewest
// in flight) completes everything.
TEST(LiveDisaggServiceTest, BothHopsRouteAndAreDeterministic) {
  Fleets f(2, 2);
  const Workload w = smallTrace(12);
  {
    const LiveRun run = runLive(w, f.options());
    EXPECT_EQ(run.collector.buildReport({}).completed_requests, 12u);
    EXPECT_EQ(run.stats.per_target, (std::vector<std::uint64_t>{6, 6}));
    EXPECT_EQ(run.stats.handoff->per_decode_target, (std::vector<std::uint64_t>{6, 6}));
  }
  LiveReplayOptions random = f.options();
  random.router = RouterKind::Random;
  random.decode_router = RouterKind::Random;
  random.router_seed = 7;
  const LiveRun a = runLive(w, random);
  const LiveRun b = runLive(w, random);
  EXPECT_EQ(a.collector.buildReport({}).completed_requests, 12u);
  EXPECT_EQ(a.stats.per_target, b.stats.per_target);
  EXPECT_EQ(a.stats.handoff->per_decode_target, b.stats.handoff->per_decode_target);
  EXPECT_EQ(sum(a.stats.handoff->per_decode_target), 12u);

  LiveReplayOptions kv = f.options();
  kv.decode_router = RouterKind::Kv;
  kv.concurrency = 4;
  const LiveRun k = runLive(w, kv);
  EXPECT_EQ(k.collector.buildReport({}).completed_requests, 12u);
  // Which decode server is least loaded depends on when streams end (the exact rule is pinned
  // against scripted workers in live_disagg_replay_test.cpp): every handoff went somewhere.
  EXPECT_EQ(sum(k.stats.handoff->per_decode_target), 12u);
}

// A prompt larger than the prefill server's pool is rejected there (no handoff); a decode
// server with another block size refuses every handoff (submit_reject naming both sizes), and
// the driver releases the prefill server's held KV with a cancel. Both are recorded rejected.
TEST(LiveDisaggServiceTest, RejectionsAtEitherHopAreRecorded) {
  {
    engine::EngineConfig small = roleEngine(engine::WorkerType::Prefill);
    small.num_gpu_blocks = 8;  // 128 tokens
    LiveService prefill(roleConfig(small));
    LiveService decode(roleConfig(roleEngine(engine::WorkerType::Decode)));
    const Workload w = parse(
        R"({"timestamp": 0, "output_length": 2, "hash_ids": [1, 2]})"
        "\n"
        R"({"timestamp": 1, "output_length": 2, "hash_ids": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]})"
        "\n"
        R"({"timestamp": 2, "output_length": 1, "hash_ids": [30]})"
        "\n");
    LiveReplayOptions o;
    o.targets = {targetOf(prefill)};
    o.decode_targets = {targetOf(decode)};
    const LiveRun run = runLive(w, o);
    const Report report = run.collector.buildReport({});
    EXPECT_EQ(report.num_requests, 3u);
    EXPECT_EQ(report.completed_requests, 2u);
    EXPECT_EQ(report.rejected_requests, 1u);
    EXPECT_EQ(run.collector.requests()[1].status, TerminalStatus::Rejected);
    EXPECT_EQ(run.stats.handoff->handoffs, 2u);
    EXPECT_EQ(run.stats.submit_rejects + run.stats.finish_rejected, 1u);
  }
  {
    Fleets f(1, 1, /*decode_block_size=*/32);
    const Workload w = smallTrace(2);
    const LiveRun run = runLive(w, f.options());
    const Report report = run.collector.buildReport({});
    EXPECT_EQ(report.rejected_requests, 2u);
    EXPECT_EQ(run.stats.handoff->handoffs, 2u);
    EXPECT_EQ(run.stats.handoff->decode_rejects, 2u);
    EXPECT_EQ(run.stats.handoff->prefill_cancels, 2u);
    EXPECT_EQ(run.stats.handoff->activations, 0u);
    bool named = false;
    for (const std::string& warning : run.stats.warnings) {
      named = named || (warning.find("rejected a handoff") != std::string::npos &&
                        warning.find("32") != std::string::npos);
    }
    EXPECT_TRUE(named) << "no warning naming the decode reject and its block size";
    // The prefill server's KV is released by the cancel, not held until the hold timeout.
    auto client = f.prefill[0]->client();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10 * service::testing::kSlowdown);
    std::uint64_t active = 1;
    while (active != 0 && std::chrono::steady_clock::now() < deadline) {
      ASSERT_TRUE(client->send(protocol::StatsRequest{}));
      auto reply = client->receive(std::chrono::milliseconds(1000));
      if (!reply || !*reply) continue;
      if (const auto* stats = std::get_if<protocol::StatsReply>(&**reply)) {
        active = stats->ranks.at(0).active_blocks;
      }
    }
    EXPECT_EQ(active, 0u) << "the prefill server still holds KV after the decode rejects";
  }
}

// The live run against the offline disaggregated replay of the same small trace and engines at
// the same speedup: same completions and tokens; the timelines are printed and only bounded
// generously (the live one adds the relay hops and the machine's scheduling).
TEST(LiveDisaggServiceTest, ComparedWithTheOfflineDisaggregatedReplay) {
  const Workload w = smallTrace(6, /*arrival_speedup_ratio=*/20.0);  // the servers' pacing
  OfflineReplayOptions off_options;
  off_options.disagg = DisaggOptions{.num_prefill_workers = 1,
                                     .num_decode_workers = 1,
                                     .prefill_engine = roleEngine(engine::WorkerType::Prefill),
                                     .decode_engine = roleEngine(engine::WorkerType::Decode)};
  ReplayCollector offline;
  auto off_stats = runOfflineReplay(w, off_options, offline);
  ASSERT_TRUE(off_stats.has_value()) << off_stats.error().toString();
  Fleets f(1, 1);
  const LiveRun live = runLive(w, f.options());
  const Report off = offline.buildReport({});
  const Report on = live.collector.buildReport({});
  EXPECT_EQ(on.completed_requests, off.completed_requests);
  EXPECT_EQ(on.total_output_tokens, off.total_output_tokens);
  std::printf("live vs offline disaggregated (1 prefill + 1 decode, speedup 20):\n");
  std::printf("  TTFT p50 %.3f vs %.3f ms, E2E p50 %.3f vs %.3f ms, ITL p50 %.3f vs %.3f ms\n",
              on.ttft.p50, off.ttft.p50, on.e2e_latency.p50, off.e2e_latency.p50, on.itl.p50,
              off.itl.p50);
  const HandoffReport off_h = summarizeHandoffs(*off_stats->handoff);
  const HandoffReport on_h = summarizeLiveHandoffs(*live.stats.handoff);
  std::printf("  KV transfer p50 %.3f vs %.3f ms, prefill end to decode start p50 %.3f vs %.3f\n",
              on_h.transfer_ms.p50, off_h.transfer_ms.p50, on_h.wait_ms.p50, off_h.wait_ms.p50);
  std::printf("%s", formatLiveHandoffs(*live.stats.handoff).c_str());
  // Generous: live TTFT within the offline one + 250 ms (x slowdown) per request.
  EXPECT_LE(on.ttft.p50, off.ttft.p50 + 250.0 * service::testing::kSlowdown);
  EXPECT_GE(on.ttft.p50, 0.5 * off.ttft.p50);
}

}  // namespace
}  // namespace mocker::replay
