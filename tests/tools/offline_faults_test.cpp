// Failure drills in the offline replay (tools/replay/offline_faults.h): the fault plan applied
// to the simulated workers on the virtual clock — crash, hang, slow, error, abort — and the kinds
// refused because they need a live run.
#include "tools/replay/offline_faults.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "service/config.h"
#include "service/fault_plan.h"
#include "tests/tools/replay_test_util.h"
#include "tools/replay/collector.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"

namespace mocker::replay {
namespace {

using service::FaultKind;
using testing::smallEngine;

/// `n` single-turn requests, one every `gap_ms` from 0, each with its own 2-block prompt and
/// `output` tokens to generate.
Workload spacedRequests(int n, double gap_ms, int output) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text += R"({"timestamp": )" + std::to_string(static_cast<int>(i * gap_ms)) +
            R"(, "output_length": )" + std::to_string(output) + R"(, "hash_ids": [)" +
            std::to_string(2 * i + 1) + ", " + std::to_string(2 * i + 2) + "]}\n";
  }
  auto w = parseMooncakeTrace(text, {.trace_block_size = 16});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

std::vector<service::FaultSpec> specs(const std::vector<std::string>& texts) {
  auto parsed = service::parseFaultSpecs(texts, service::kMaxFleetWorkers, UINT32_MAX);
  EXPECT_TRUE(parsed.has_value()) << (parsed ? "" : parsed.error().toString());
  return parsed ? *parsed : std::vector<service::FaultSpec>{};
}

struct Replayed {
  ReplayCollector collector;
  OfflineReplayStats stats;
};

Replayed replay(const Workload& w, OfflineReplayOptions options) {
  Replayed run;
  auto stats = runOfflineReplay(w, options, run.collector);
  EXPECT_TRUE(stats.has_value()) << (stats ? "" : stats.error().toString());
  if (stats) run.stats = std::move(*stats);
  return run;
}

std::set<std::size_t> withStatus(const ReplayCollector& c, TerminalStatus status) {
  std::set<std::size_t> out;
  for (std::size_t i = 0; i < c.requests().size(); ++i) {
    if (c.requests()[i].status == status) out.insert(i);
  }
  return out;
}

// Worker 1 crashes before its pass 6: the requests it holds then end failed at that pass's
// start, and every request that arrives later is routed to worker 0 and completes.
TEST(OfflineFaultsTest, CrashFailsTheHeldRequestsThenAndLaterOnesRunOnTheSurvivor) {
  const Workload w = spacedRequests(16, 7.0, 12);
  const Replayed run = replay(w, {.engine = smallEngine(),
                                  .num_workers = 2,
                                  .faults = {.specs = specs({"crash:after_passes=5:worker=1"})}});
  ASSERT_TRUE(run.stats.faults.has_value());
  const OfflineFaultStats& f = *run.stats.faults;
  ASSERT_EQ(f.injections.size(), 1u);
  const service::Injection& crash = f.injections[0];
  EXPECT_EQ(crash.kind, FaultKind::Crash);
  EXPECT_EQ(crash.worker, 1u);
  EXPECT_EQ(crash.detail, "after 5 passes");
  const double t = crash.time_ms;
  const auto& requests = run.collector.requests();
  std::uint64_t routed_to_1 = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RequestRecord& r = requests[i];
    if (r.arrival_ms <= t) {
      routed_to_1 += i % 2;  // round robin before the crash
      if (i % 2 == 1 && r.status == TerminalStatus::Failed) {
        EXPECT_EQ(r.terminal_ms, t) << "request " << i;
      }
    } else {
      EXPECT_EQ(r.status, TerminalStatus::Completed) << "request " << i << " after the crash";
    }
  }
  const std::set<std::size_t> failed = withStatus(run.collector, TerminalStatus::Failed);
  EXPECT_GE(failed.size(), 1u);
  EXPECT_EQ(f.failed_by_crash, failed.size());
  for (const std::size_t i : failed) EXPECT_EQ(i % 2, 1u) << "only worker 1's requests fail";
  EXPECT_EQ(run.stats.per_worker[1], routed_to_1);
  EXPECT_EQ(run.stats.per_worker[0], requests.size() - routed_to_1);
  EXPECT_GT(run.stats.per_worker[0], requests.size() / 2) << "the later ones all on worker 0";
}

// Both workers crash: a request that arrives afterwards fails at once (no worker up).
TEST(OfflineFaultsTest, EveryWorkerDownFailsLaterRequestsAtOnce) {
  const Workload w = spacedRequests(6, 100.0, 4);
  const Replayed run = replay(
      w,
      {.engine = smallEngine(), .num_workers = 2, .faults = {.specs = specs({"crash:at_ms=150"})}});
  ASSERT_TRUE(run.stats.faults.has_value());
  // Requests 0 (worker 0) and 1 (worker 1) complete before; request 2 at 200 wakes worker 0,
  // which crashes at that pass (holding it), request 3 at 300 wakes worker 1 (crash); 4 and 5
  // find no worker up.
  const auto& r = run.collector.requests();
  EXPECT_EQ(r[0].status, TerminalStatus::Completed);
  EXPECT_EQ(r[1].status, TerminalStatus::Completed);
  EXPECT_EQ(r[2].status, TerminalStatus::Failed);
  EXPECT_EQ(r[2].terminal_ms, 200.0);
  EXPECT_EQ(r[3].status, TerminalStatus::Failed);
  EXPECT_EQ(r[4].status, TerminalStatus::Failed);
  EXPECT_EQ(r[4].terminal_ms, 400.0);
  EXPECT_EQ(run.stats.faults->failed_by_crash, 2u);
  EXPECT_EQ(run.stats.faults->no_worker, 2u);
}

// slow ×2 on worker 1: its passes take twice the modelled time (the first pass, prefill and the
// first decode step, 12 → 24 ms; a decode pass 2 → 4 ms), worker 0's are untouched.
TEST(OfflineFaultsTest, SlowTimesTwoDoublesThatWorkersPassTimes) {
  const Workload w = spacedRequests(2, 0.0, 5);
  const Replayed run = replay(w, {.engine = smallEngine(),
                                  .num_workers = 2,
                                  .faults = {.specs = specs({"slow:factor=2:worker=1"})}});
  const auto& r = run.collector.requests();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].token_times_ms, (std::vector<double>{12, 14, 16, 18, 20}));
  EXPECT_EQ(r[1].token_times_ms, (std::vector<double>{24, 28, 32, 36, 40}));
  EXPECT_EQ(r[1].terminal_ms, 40.0);
  ASSERT_TRUE(run.stats.faults.has_value());
  EXPECT_EQ(run.stats.faults->slowed_passes, 5u);
  ASSERT_EQ(run.stats.faults->injections.size(), 1u);
  EXPECT_EQ(run.stats.faults->injections[0].kind, FaultKind::Slow);
}

// An error rate with a seed fails the same requests (by id, "r<dispatch index>") in two runs;
// another seed fails others.
TEST(OfflineFaultsTest, ErrorRateWithASeedFailsTheSameIdsTwice) {
  const Workload w = spacedRequests(60, 3.0, 3);
  const auto failedIds = [&w](std::uint64_t seed) {
    const Replayed run = replay(w, {.engine = smallEngine(),
                                    .num_workers = 2,
                                    .faults = {.specs = specs({"error:rate=0.3"}), .seed = seed}});
    const std::set<std::size_t> failed = withStatus(run.collector, TerminalStatus::Failed);
    std::set<std::string> from_log;
    for (const service::Injection& in : run.stats.faults->injections) {
      EXPECT_EQ(in.kind, FaultKind::Error);
      from_log.insert(in.request);
    }
    std::set<std::string> ids;
    for (const std::size_t i : failed) ids.insert("r" + std::to_string(i));
    EXPECT_EQ(ids, from_log);
    EXPECT_EQ(run.stats.faults->error_replies, failed.size());
    for (const std::size_t i : failed) {
      EXPECT_EQ(run.collector.requests()[i].terminal_ms, run.collector.requests()[i].arrival_ms);
    }
    return ids;
  };
  const std::set<std::string> first = failedIds(7);
  EXPECT_GT(first.size(), 5u);
  EXPECT_LT(first.size(), 40u);
  EXPECT_EQ(failedIds(7), first);
  EXPECT_NE(failedIds(8), first);
}

// abort after 3 tokens for request r1 only: its stream ends failed at its third token.
TEST(OfflineFaultsTest, AbortEndsTheMatchingStreamAfterItsTokens) {
  const Workload w = spacedRequests(3, 0.0, 8);
  const Replayed run =
      replay(w, {.engine = smallEngine(), .faults = {.specs = specs({"abort:tokens=3:match=r1"})}});
  const auto& r = run.collector.requests();
  EXPECT_EQ(r[0].status, TerminalStatus::Completed);
  EXPECT_EQ(r[2].status, TerminalStatus::Completed);
  EXPECT_EQ(r[2].token_times_ms.size(), 8u);
  EXPECT_EQ(r[1].status, TerminalStatus::Failed);
  ASSERT_EQ(r[1].token_times_ms.size(), 3u);
  EXPECT_EQ(r[1].terminal_ms, r[1].token_times_ms.back());
  ASSERT_EQ(run.stats.faults->injections.size(), 1u);
  EXPECT_EQ(run.stats.faults->injections[0].request, "r1");
  EXPECT_EQ(run.stats.faults->injections[0].time_ms, r[1].token_times_ms.back());
  EXPECT_EQ(run.stats.faults->aborted, 1u);
}

// A hung worker: its requests end cancelled at arrival + the request timeout (model time);
// later requests go to the other worker.
TEST(OfflineFaultsTest, HangEndsTheHeldRequestsAtTheirTimeout) {
  const Workload w = spacedRequests(10, 5.0, 20);
  const Replayed run = replay(w, {.engine = smallEngine(),
                                  .num_workers = 2,
                                  .faults = {.specs = specs({"hang:after_passes=3:worker=1"}),
                                             .request_timeout_ms = 1000.0}});
  const OfflineFaultStats& f = *run.stats.faults;
  ASSERT_EQ(f.injections.size(), 1u);
  const double t = f.injections[0].time_ms;
  const std::set<std::size_t> cancelled = withStatus(run.collector, TerminalStatus::Cancelled);
  EXPECT_GE(cancelled.size(), 1u);
  EXPECT_EQ(f.timed_out, cancelled.size());
  for (const std::size_t i : cancelled) {
    const RequestRecord& r = run.collector.requests()[i];
    EXPECT_EQ(i % 2, 1u);
    EXPECT_LE(r.arrival_ms, t);
    EXPECT_EQ(r.terminal_ms, r.arrival_ms + 1000.0);
  }
  for (const RequestRecord& r : run.collector.requests()) {
    if (r.arrival_ms > t) {
      EXPECT_EQ(r.status, TerminalStatus::Completed);
    }
  }
}

// The same plan twice: the same injections, in the same order, at the same model times.
TEST(OfflineFaultsTest, SamePlanAndSeedGiveTheSameInjections) {
  const Workload w = spacedRequests(40, 4.0, 10);
  const OfflineReplayOptions options{
      .engine = smallEngine(),
      .num_workers = 3,
      .router = RouterKind::Kv,
      .faults = {
          .specs = specs({"error:rate=0.2", "abort:tokens=4:rate=0.2",
                          "slow:factor=3:after_passes=10:worker=0", "crash:at_ms=60:worker=2"}),
          .seed = 11}};
  const Replayed a = replay(w, options);
  const Replayed b = replay(w, options);
  ASSERT_TRUE(a.stats.faults && b.stats.faults);
  EXPECT_EQ(a.stats.faults->injections, b.stats.faults->injections);
  EXPECT_GT(a.stats.faults->injections.size(), 4u);
  EXPECT_EQ(a.stats.faults->injected[static_cast<std::size_t>(FaultKind::Crash)], 1u);
}

TEST(OfflineFaultsTest, KindsThatNeedALiveRunAreRefusedByName) {
  const Workload w = spacedRequests(2, 0.0, 2);
  const auto error = [&w](const std::string& spec, bool disagg = false) {
    OfflineReplayOptions options{
        .engine = smallEngine(), .num_workers = 2, .faults = {.specs = specs({spec})}};
    if (disagg) {
      options.disagg =
          DisaggOptions{.prefill_engine = smallEngine(), .decode_engine = smallEngine()};
    }
    ReplayCollector c;
    auto r = runOfflineReplay(w, options, c);
    EXPECT_FALSE(r.has_value()) << spec;
    EXPECT_TRUE(c.requests().empty()) << "nothing ran";
    return r ? std::string() : r.error().message;
  };
  for (const char* kv : {"drop", "drop_unhealable", "suppress", "duplicate", "reorder",
                         "delay:ms=5", "truncate_ring"}) {
    const std::string e = error(kv);
    EXPECT_NE(e.find("kv-event faults need a live run"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("fault '") + std::string(kv).substr(0, 4)), std::string::npos)
        << e;
  }
  EXPECT_NE(error("fpm_stop").find("metric faults need a live run"), std::string::npos);
  EXPECT_NE(error("metrics_freeze").find("metric faults need a live run"), std::string::npos);
  EXPECT_NE(error("fetch_never").find("kv_fetch faults need a live run"), std::string::npos);
  EXPECT_NE(error("crash:worker=1", true).find("disaggregated"), std::string::npos);
  EXPECT_NE(error("crash:worker=2").find("worker 2 does not exist"), std::string::npos);
  EXPECT_NE(error("slow:factor=2:rank=1").find("rank 1 does not exist"), std::string::npos);
}

}  // namespace
}  // namespace mocker::replay
