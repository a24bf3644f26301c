// FaultPlan (service/fault_plan.h): spec parsing, triggers, scope, seeded rate draws and the
// fault-log line, without sockets or clocks.
#include "service/fault_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "service/config.h"

namespace mocker::service {
namespace {

FaultSpec parsed(std::string_view text) {
  auto spec = parseFaultSpec(text);
  EXPECT_TRUE(spec.has_value()) << text << ": " << spec.error().message;
  return spec ? *spec : FaultSpec{};
}

TEST(FaultPlanTest, SpecsParseAndRoundTrip) {
  const FaultSpec slow = parsed("slow:factor=3:after_passes=10:for_passes=5:worker=1:rank=0");
  EXPECT_EQ(slow.kind, FaultKind::Slow);
  EXPECT_EQ(slow.factor, 3.0);
  EXPECT_EQ(slow.after_passes, 10u);
  EXPECT_EQ(slow.for_passes, 5u);
  EXPECT_EQ(slow.worker, 1u);
  EXPECT_EQ(slow.rank, 0u);
  for (const char* text : {"crash",
                           "crash:after_passes=100",
                           "hang:at_ms=2500.5:health_after_ms=none",
                           "hang:health_after_ms=200",
                           "slow:factor=1.5",
                           "error:rate=0.25:code=internal",
                           "error:match=req-*",
                           "abort:tokens=5:rate=0.5:match=r1",
                           "ERROR:code=not_found",
                           "drop",
                           "drop_unhealable:after_passes=3:rank=0",
                           "suppress:at_ms=10:count=2",
                           "duplicate:rate=1",
                           "reorder:rate=0.5:count=4:worker=1",
                           "delay:ms=250",
                           "truncate_ring:after_passes=9",
                           "fpm_stop",
                           "fpm_stop:after_passes=4:rank=1",
                           "metrics_freeze:at_ms=20:worker=1",
                           "fetch_not_found:match=r1",
                           "fetch_late:ms=250:rate=0.5",
                           "fetch_never:worker=1",
                           "restart",
                           "restart:after_passes=20:cleared=false",
                           "restart:at_ms=500:down_ms=250.5:worker=1",
                           "restart:cleared=true:down_ms=0"}) {
    const FaultSpec spec = parsed(text);
    EXPECT_EQ(parsed(faultSpecText(spec)), spec) << text << " -> " << faultSpecText(spec);
  }
  EXPECT_EQ(faultSpecText(parsed("error")), "error:code=resource_exhausted");
  EXPECT_EQ(faultSpecText(parsed("hang")), "hang:health_after_ms=10000");
  EXPECT_EQ(faultSpecText(parsed("restart")), "restart:cleared=true:down_ms=0");
  const FaultSpec restart = parsed("restart:cleared=false:down_ms=1500");
  EXPECT_EQ(restart.kind, FaultKind::Restart);
  EXPECT_FALSE(restart.cleared);
  EXPECT_EQ(restart.down_ms, 1500.0);
  EXPECT_TRUE(parsed("restart").cleared);
  EXPECT_EQ(parsed("restart").down_ms, 0.0);
}

TEST(FaultPlanTest, BadSpecsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "unknown kind ''"},
      {"explode",
       "unknown kind 'explode' (expected one of crash, hang, slow, error, abort, drop, "
       "drop_unhealable, suppress, duplicate, reorder, delay, truncate_ring, fpm_stop, "
       "metrics_freeze, fetch_not_found, fetch_late, fetch_never, restart, silent)"},
      {"restart:cleared=maybe", "cleared must be true or false (got 'maybe')"},
      {"restart:cleared=", "cleared must be true or false (got '')"},
      {"restart:cleared=1", "cleared must be true or false (got '1')"},
      {"restart:down_ms=-5", "down_ms must be a finite number >= 0 (got '-5')"},
      {"restart:down_ms=inf", "down_ms must be a finite number >= 0 (got 'inf')"},
      {"restart:down_ms=3600001", "down_ms must be <= 3600000"},
      {"restart:rank=0", "'rank' is not a key of restart faults"},
      {"restart:rate=0.5", "'rate' is not a key of restart faults"},
      {"restart:ms=5", "'ms' is not a key of restart faults"},
      {"restart:down=5", "'down' is not a key of restart faults"},
      {"restart:cleared=true:cleared=false", "cleared given twice"},
      {"crash:cleared=true", "'cleared' is not a key of crash faults"},
      {"hang:down_ms=5", "'down_ms' is not a key of hang faults"},
      {"fetch_late", "ms is required (> 0)"},
      {"fetch_never:after_passes=3", "'after_passes' is not a key of fetch_never faults"},
      {"fetch_not_found:ms=5", "'ms' is not a key of fetch_not_found faults"},
      {"metrics_freeze:rank=0", "'rank' is not a key of metrics_freeze faults"},
      {"fpm_stop:rate=0.5", "'rate' is not a key of fpm_stop faults"},
      {"fpm_stop:match=r1", "'match' is not a key of fpm_stop faults"},
      {"delay", "ms is required (> 0)"},
      {"delay:ms=0", "ms must be > 0"},
      {"drop:match=r1", "'match' is not a key of drop faults"},
      {"drop:count=0", "count must be >= 1"},
      {"crash:count=2", "'count' is not a key of crash faults"},
      {"drop:ms=5", "'ms' is not a key of drop faults"},
      {"slow", "factor is required (> 1)"},
      {"slow:factor=1", "factor must be > 1"},
      {"slow:factor=nan", "factor must be a finite number >= 0 (got 'nan')"},
      {"abort", "tokens is required (>= 1)"},
      {"crash:rate=0.5", "'rate' is not a key of crash faults"},
      {"error:after_passes=3", "'after_passes' is not a key of error faults"},
      {"crash:after_passes=-1", "after_passes must be an unsigned integer (got '-1')"},
      {"crash:after_passes=3:at_ms=5", "give after_passes or at_ms, not both"},
      {"crash:worker=1:worker=2", "worker given twice"},
      {"crash:worker", "expected KEY=VALUE, got 'worker'"},
      {"crash:", "expected KEY=VALUE, got ''"},
      {"error:rate=1.5", "rate must be in [0, 1]"},
      {"error:code=teapot", "code: unknown error code 'teapot'"},
      {"error:match=a*b", "match must be a request id, or a prefix ending in '*'"},
      {"slow:factor=2:for_passes=0", "for_passes must be >= 1"},
      {"crash:rank=4294967296", "rank must be at most 4294967295"},
  };
  for (const auto& [text, want] : cases) {
    const auto spec = parseFaultSpec(text);
    ASSERT_FALSE(spec.has_value()) << text;
    EXPECT_NE(spec.error().message.find(want), std::string::npos)
        << text << ": " << spec.error().message;
    EXPECT_TRUE(spec.error().message.starts_with("fault '" + text + "': ")) << spec.error().message;
  }
  // Scope against the deployment.
  const auto worker = parseFaultSpecs({"crash", "crash:worker=2"}, 2, 1);
  ASSERT_FALSE(worker.has_value());
  EXPECT_EQ(worker.error().message,
            "[1] fault 'crash:worker=2': worker 2 does not exist (fleet.num_workers = 2)");
  const auto rank = parseFaultSpecs({"hang:rank=1"}, 1, 1);
  ASSERT_FALSE(rank.has_value());
  EXPECT_EQ(rank.error().message,
            "fault 'hang:rank=1': rank 1 does not exist (engine.dp_size = 1)");
  EXPECT_TRUE(parseFaultSpecs({"hang:rank=1", "crash:worker=1"}, 2, 2).has_value());
}

TEST(FaultPlanTest, CrashAfterPassesFiresOnceAtTheRightPass) {
  FaultPlan plan({parsed("crash:after_passes=3")}, 0);
  std::vector<Injection> out;
  for (std::uint64_t passes = 0; passes < 3; ++passes) {
    EXPECT_FALSE(plan.beforePass(0, passes, passes, static_cast<double>(passes), out).crash);
  }
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(plan.beforePass(0, 3, 3, 3.0, out).crash);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(faultLogLine(out[0]),
            R"({"time_ms":3.000,"kind":"crash","fault":0,"worker":0,"detail":"after 3 passes"})");
  EXPECT_FALSE(plan.beforePass(0, 4, 4, 4.0, out).crash);  // once
  EXPECT_EQ(out.size(), 1u);
}

TEST(FaultPlanTest, RestartFiresOnceWithItsKeys) {
  const std::vector<FaultSpec> specs = {
      parsed("restart:after_passes=2:cleared=false:down_ms=40:worker=0"),
      parsed("restart:at_ms=10:worker=1")};
  FaultPlan plan(specs, 0, /*worker=*/0);  // the second is worker 1's
  std::vector<Injection> out;
  std::vector<bool> fired;
  for (std::uint64_t p = 0; p < 5; ++p) {
    const FaultPlan::PassFaults f = plan.beforePass(0, p, p, 100.0, out);
    fired.push_back(f.restart);
    if (f.restart) {
      EXPECT_FALSE(f.restart_cleared);
      EXPECT_EQ(f.restart_down_ms, 40.0);
    }
    EXPECT_FALSE(f.crash || f.hang);
  }
  EXPECT_EQ(fired, (std::vector<bool>{false, false, true, false, false}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(faultLogLine(out[0]),
            R"({"time_ms":100.000,"kind":"restart","fault":0,"worker":0,)"
            R"("detail":"after 2 passes, no AllBlocksCleared, down 40.000 ms"})");
  // Worker 1: at 10 ms, AllBlocksCleared first (the default), not down.
  FaultPlan other(specs, 0, /*worker=*/1);
  out.clear();
  EXPECT_FALSE(other.beforePass(0, 0, 0, 9.5, out).restart);
  const FaultPlan::PassFaults f = other.beforePass(0, 1, 1, 10.0, out);
  EXPECT_TRUE(f.restart);
  EXPECT_TRUE(f.restart_cleared);
  EXPECT_EQ(f.restart_down_ms, 0.0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].fault, 1u);
  EXPECT_EQ(out[0].detail, "at 10.000 ms, AllBlocksCleared first, down 0.000 ms");
  EXPECT_FALSE(other.beforePass(0, 2, 2, 11.0, out).restart);  // once
  // A restart is no request or KV-event fault.
  EXPECT_FALSE(other.onSubmit(0, "r1", 12.0).injection.has_value());
  EXPECT_FALSE(other.hasKvFaults());
}

TEST(FaultPlanTest, SlowWindowAndRankScope) {
  // Rank 1's passes 2..4 are slowed (rank passes count); rank 0 never.
  FaultPlan plan({parsed("slow:factor=4:after_passes=2:for_passes=3:rank=1")}, 0);
  std::vector<Injection> out;
  std::vector<double> factors;
  for (std::uint64_t p = 0; p < 7; ++p) {
    EXPECT_EQ(plan.beforePass(0, 2 * p, p, 0.0, out).slow_factor, 1.0);
    factors.push_back(plan.beforePass(1, 2 * p + 1, p, 0.0, out).slow_factor);
  }
  EXPECT_EQ(factors, (std::vector<double>{1, 1, 4, 4, 4, 1, 1}));
  ASSERT_EQ(out.size(), 1u);  // the onset only
  EXPECT_EQ(out[0].rank, 1u);
  EXPECT_EQ(out[0].detail, "after 2 passes, factor 4.000 for 3 passes");
}

TEST(FaultPlanTest, HangAtTimeAndWorkerScope) {
  const std::vector<FaultSpec> specs = {parsed("hang:at_ms=100:health_after_ms=50:worker=1")};
  FaultPlan other(specs, 0, /*worker=*/0);
  FaultPlan mine(specs, 0, /*worker=*/1);
  EXPECT_TRUE(other.empty());
  std::vector<Injection> out;
  EXPECT_FALSE(mine.beforePass(0, 5, 5, 99.9, out).hang);
  const FaultPlan::PassFaults f = mine.beforePass(0, 6, 6, 100.0, out);
  EXPECT_TRUE(f.hang);
  EXPECT_EQ(f.health_after_ms, 50.0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].worker, 1u);
  EXPECT_EQ(out[0].detail, "at 100.000 ms");
}

TEST(FaultPlanTest, MetricsFaultsFireOnceAndHoldFromTheTrigger) {
  // fpm_stop on rank 1 from its pass 3; metrics_freeze worker-wide from 5 ms of engine time.
  FaultPlan plan({parsed("fpm_stop:after_passes=2:rank=1"), parsed("metrics_freeze:at_ms=5")}, 0);
  std::vector<Injection> out;
  std::vector<bool> stopped;
  std::vector<bool> frozen;
  for (std::uint64_t p = 0; p < 5; ++p) {
    EXPECT_FALSE(plan.beforePass(0, 2 * p, p, static_cast<double>(p), out).fpm_stop);  // rank 0
    const FaultPlan::PassFaults f =
        plan.beforePass(1, 2 * p + 1, p, 2.0 * static_cast<double>(p), out);
    stopped.push_back(f.fpm_stop);
    frozen.push_back(f.metrics_freeze);
    EXPECT_FALSE(f.crash || f.hang);
    EXPECT_EQ(f.slow_factor, 1.0);
  }
  EXPECT_EQ(stopped, (std::vector<bool>{false, false, true, true, true}));
  EXPECT_EQ(frozen, (std::vector<bool>{false, false, false, true, true}));
  ASSERT_EQ(out.size(), 2u);  // each logged once, at its onset
  EXPECT_EQ(faultLogLine(out[0]),
            R"({"time_ms":4.000,"kind":"fpm_stop","fault":0,"worker":0,"rank":1,)"
            R"("detail":"after 2 passes"})");
  EXPECT_EQ(out[1].kind, FaultKind::MetricsFreeze);
  EXPECT_EQ(out[1].detail, "at 6.000 ms");
  EXPECT_FALSE(isKvFault(FaultKind::FpmStop) || isKvFault(FaultKind::MetricsFreeze));
  EXPECT_TRUE(isKvFault(FaultKind::TruncateRing));
}

TEST(FaultPlanTest, FetchFaultsHitFetchesByRequestIdOnly) {
  FaultPlan plan({parsed("fetch_late:ms=250:match=slow-*"), parsed("fetch_not_found:rate=0.5"),
                  parsed("fetch_never:match=lost")},
                 7);
  EXPECT_TRUE(plan.hasFetchFaults());
  EXPECT_FALSE(plan.hasKvFaults());
  // Never a submit's fault.
  EXPECT_FALSE(plan.onSubmit(0, "lost", 1.0).injection.has_value());
  const FaultPlan::FetchFaults late = plan.onFetch(0, "slow-1", 2.0);
  EXPECT_EQ(late.kind, FaultKind::FetchLate);
  EXPECT_EQ(late.late_ms, 250.0);
  ASSERT_TRUE(late.injection.has_value());
  EXPECT_EQ(faultLogLine(*late.injection),
            R"({"time_ms":2.000,"kind":"fetch_late","fault":0,"worker":0,"rank":0,)"
            R"("request":"slow-1","detail":"kv_fetch answered 250.000 ms late"})");
  // The rate draw is per request id: the same id, the same answer; about half of them hit.
  int hits = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "r" + std::to_string(i);
    const auto f = plan.onFetch(0, id, 0.0);
    EXPECT_EQ(f.kind, plan.onFetch(0, id, 5.0).kind);
    if (f.kind) {
      EXPECT_EQ(f.kind, FaultKind::FetchNotFound);
      ++hits;
    }
  }
  EXPECT_GT(hits, 400);
  EXPECT_LT(hits, 600);
  // The first fault that fires wins: "lost" may be drawn by fetch_not_found first.
  const auto lost = plan.onFetch(0, "lost", 0.0);
  ASSERT_TRUE(lost.kind.has_value());
  EXPECT_TRUE(*lost.kind == FaultKind::FetchNotFound || *lost.kind == FaultKind::FetchNever);
}

TEST(FaultPlanTest, KvFaultOnceAfterPassesOnTheNextBatch) {
  // The batch of pass 4 (after 3 passes), once; other kinds of fault do not see batches.
  FaultPlan plan({parsed("crash:after_passes=100"), parsed("drop:after_passes=3")}, 0);
  EXPECT_TRUE(plan.hasKvFaults());
  std::vector<Injection> out;
  std::vector<std::uint64_t> dropped;
  for (std::uint64_t pass = 1; pass <= 8; ++pass) {
    const auto f = plan.onBatch(0, pass - 1, pass, pass, static_cast<double>(pass), out);
    if (f.drop) dropped.push_back(pass - 1);
    EXPECT_FALSE(f.unhealable || f.suppress || f.duplicate || f.reorder || f.truncate_ring);
  }
  EXPECT_EQ(dropped, (std::vector<std::uint64_t>{3}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(faultLogLine(out[0]),
            R"({"time_ms":4.000,"kind":"drop","fault":1,"worker":0,"rank":0,"seq":3,)"
            R"("detail":"not sent; kept in the replay ring"})");
  EXPECT_FALSE(FaultPlan({parsed("crash")}, 0).hasKvFaults());
}

TEST(FaultPlanTest, KvFaultAtRateIsSeededPerBatchSeq) {
  // Which seqs of 200 batches a seeded rate hits: fixed by (seed, fault, worker, rank, seq),
  // about rate × batches, capped by count, other seeds other seqs.
  const auto hits = [](std::uint64_t seed, const char* spec, std::uint32_t worker) {
    FaultPlan plan({parsed(spec)}, seed, worker);
    std::vector<Injection> out;
    std::vector<std::uint64_t> seqs;
    for (std::uint64_t s = 0; s < 200; ++s) {
      if (plan.onBatch(0, s, s + 1, s + 1, 0.0, out).any()) seqs.push_back(s);
    }
    EXPECT_EQ(out.size(), seqs.size());
    return seqs;
  };
  const auto a = hits(7, "duplicate:rate=0.1", 0);
  EXPECT_EQ(a, hits(7, "duplicate:rate=0.1", 0));
  EXPECT_GE(a.size(), 8u);
  EXPECT_LE(a.size(), 35u);
  EXPECT_NE(a, hits(8, "duplicate:rate=0.1", 0));
  EXPECT_NE(a, hits(7, "duplicate:rate=0.1", 1));
  const auto capped = hits(7, "duplicate:rate=0.1:count=3", 0);
  EXPECT_EQ(capped, std::vector<std::uint64_t>(a.begin(), a.begin() + 3));
  EXPECT_EQ(hits(7, "suppress:rate=1:count=2:after_passes=10", 0),
            (std::vector<std::uint64_t>{10, 11}));
}

TEST(FaultPlanTest, KvFaultsCombineAndTakeTheirScope) {
  FaultPlan plan({parsed("drop_unhealable:rank=1"), parsed("delay:ms=40:at_ms=5"),
                  parsed("delay:ms=90:at_ms=5"), parsed("truncate_ring:at_ms=5")},
                 0);
  std::vector<Injection> out;
  const auto r0 = plan.onBatch(0, 0, 1, 1, 1.0, out);  // before 5 ms; rank 0
  EXPECT_FALSE(r0.any());
  const auto r1 = plan.onBatch(1, 0, 2, 1, 2.0, out);
  EXPECT_TRUE(r1.drop && r1.unhealable);
  const auto late = plan.onBatch(0, 1, 3, 2, 6.0, out);
  EXPECT_EQ(late.delay_ms, 90.0);
  EXPECT_TRUE(late.truncate_ring);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].detail, "not sent; left out of the replay ring");
  EXPECT_EQ(out[1].detail, "held 40.000 ms");
  EXPECT_EQ(out[3].detail, "replay ring emptied before this batch");
  EXPECT_FALSE(plan.onBatch(0, 2, 4, 3, 7.0, out).any());  // each once
}

TEST(FaultPlanTest, RequestRateIsSeededAndOrderFree) {
  const std::vector<FaultSpec> specs = {parsed("error:rate=0.3:code=internal"),
                                        parsed("abort:tokens=4:rate=0.5:match=req-*")};
  std::vector<std::string> ids;
  for (int i = 0; i < 400; ++i) ids.push_back("req-" + std::to_string(i));
  const auto run = [&](std::uint64_t seed, bool reversed) {
    const FaultPlan plan(specs, seed);
    std::size_t injections = 0;
    std::vector<std::string> lines(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::size_t i = reversed ? ids.size() - 1 - k : k;
      const auto f = plan.onSubmit(0, ids[i], 0.0);
      injections += f.injection.has_value();
      if (f.injection) {
        EXPECT_EQ(f.injection->kind, f.error ? FaultKind::Error : FaultKind::Abort);
      }
      lines[i] = f.error
                     ? std::string("E") + errorCodeName(*f.error)
                     : (f.abort_after_tokens ? "A" + std::to_string(*f.abort_after_tokens) : "-");
    }
    return std::pair{lines, injections};
  };
  const auto [a, na] = run(7, false);
  EXPECT_EQ(run(7, true).first, a);   // arrival order does not matter
  EXPECT_NE(run(8, false).first, a);  // the seed does
  std::size_t errors = 0, aborts = 0;
  for (const std::string& l : a) {
    errors += l == "Einternal";
    aborts += l == "A4";
  }
  EXPECT_EQ(na, errors + aborts);  // one injection per failed request (an error wins)
  // ~30 % errors, ~35 % aborts (50 % of the 70 % without an error): loose bounds, fixed seed.
  EXPECT_GT(errors, 80u);
  EXPECT_LT(errors, 160u);
  EXPECT_GT(aborts, 100u);
  EXPECT_LT(aborts, 180u);
  // A non-matching id is never aborted; rate 0 never fires, rate 1 always.
  const FaultPlan plan({parsed("abort:tokens=1:match=req-*"), parsed("error:rate=0")}, 1);
  EXPECT_FALSE(plan.onSubmit(0, "other", 0.0).injection);
  const auto f = plan.onSubmit(0, "req-x", 2.5);
  EXPECT_EQ(f.abort_after_tokens, 1u);
  ASSERT_TRUE(f.injection);
  EXPECT_EQ(
      faultLogLine(*f.injection),
      R"({"time_ms":2.500,"kind":"abort","fault":0,"worker":0,"rank":0,"request":"req-x","detail":"stream ended after 1 tokens"})");
}

// `silent` is a request fault like `error` (rate, match, scope; the first of the two that fires
// wins over an abort), with no code or tokens key and no trigger.
TEST(FaultPlanTest, SilentTakesMatchingRequestsAndWinsOverAnAbort) {
  EXPECT_EQ(faultSpecText(parsed("silent:match=quiet-*:rate=0.5")),
            "silent:rate=0.5:match=quiet-*");
  for (const char* bad : {"silent:code=internal", "silent:tokens=2", "silent:after_passes=3"}) {
    EXPECT_FALSE(parseFaultSpec(bad).has_value()) << bad;
  }
  const FaultPlan plan({parsed("abort:tokens=1"), parsed("silent:match=quiet-*")}, 1);
  const auto loud = plan.onSubmit(0, "loud", 0.0);
  EXPECT_FALSE(loud.silent);
  EXPECT_EQ(loud.abort_after_tokens, 1u);
  const auto quiet = plan.onSubmit(0, "quiet-1", 4.0);
  EXPECT_TRUE(quiet.silent);
  EXPECT_FALSE(quiet.abort_after_tokens);
  EXPECT_FALSE(quiet.error);
  ASSERT_TRUE(quiet.injection);
  EXPECT_EQ(
      faultLogLine(*quiet.injection),
      R"({"time_ms":4.000,"kind":"silent","fault":1,"worker":0,"rank":0,"request":"quiet-1","detail":"acknowledged, then silent"})");
}

TEST(FaultPlanTest, FaultsConfigKeysLoadAndValidate) {
  auto config = parseServiceConfig(
      "[faults]\ninject = [\"slow:factor=2\", \"error:rate=0.1\"]\nseed = 9\nlog = \"f.jsonl\"\n",
      "t.toml");
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->faults.inject.size(), 2u);
  EXPECT_EQ(config->faults.seed, 9u);
  EXPECT_EQ(config->faults.log, "f.jsonl");
  auto back = parseServiceConfig(dumpServiceConfig(*config), "dump.toml");
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->faults, config->faults);
  const auto bad = parseServiceConfig("[faults]\ninject = [\"slow\"]\n", "t.toml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("faults.inject fault 'slow': factor is required (> 1)"),
            std::string::npos)
      << bad.error().message;
  EXPECT_TRUE(bad.error().message.starts_with("t.toml:2:")) << bad.error().message;
}

TEST(FaultPlanTest, RunTimeFaultsCountFromTheirArmingAndDisarm) {
  // A crash armed at pass 10 with after_passes=3 fires before pass 14 (passes = 13), and the
  // log says when it was armed; a rank-scoped one counts the rank's passes; at_ms is relative.
  FaultPlan plan({parsed("fpm_stop:after_passes=1000")}, 0);
  EXPECT_EQ(plan.arm(parsed("crash:after_passes=3"), 5, 10, 4, 50.0), 10u);
  EXPECT_EQ(plan.arm(parsed("slow:factor=2:after_passes=1:rank=1"), 6, 10, 4, 50.0), 4u);
  EXPECT_EQ(plan.arm(parsed("hang:at_ms=20"), 7, 10, 4, 50.0), 10u);
  std::vector<Injection> out;
  EXPECT_FALSE(plan.beforePass(0, 12, 12, 60.0, out).crash);
  EXPECT_EQ(plan.beforePass(1, 12, 4, 60.0, out).slow_factor, 1.0);  // rank 1's 5th pass
  EXPECT_EQ(plan.beforePass(1, 12, 5, 60.0, out).slow_factor, 2.0);  // its 6th
  EXPECT_FALSE(plan.beforePass(0, 12, 12, 69.9, out).hang);
  EXPECT_TRUE(plan.beforePass(0, 13, 13, 70.0, out).crash);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].detail, "after 5 passes, factor 2.000, armed at pass 4");
  EXPECT_EQ(faultLogLine(out[1]), R"({"time_ms":70.000,"kind":"crash","fault":5,"worker":0,)"
                                  R"("detail":"after 13 passes, armed at pass 10"})");
  EXPECT_EQ(out[2].kind, FaultKind::Hang);
  // Listed as given, in arming order after the start-up fault.
  const auto armed = plan.armed();
  ASSERT_EQ(armed.size(), 4u);
  EXPECT_EQ(armed[0].id, 0u);
  EXPECT_FALSE(armed[0].armed_at_pass.has_value());
  EXPECT_EQ(armed[1].id, 5u);
  EXPECT_EQ(armed[1].armed_at_pass, 10u);
  EXPECT_EQ(faultSpecText(armed[1].spec), "crash:after_passes=3");
  EXPECT_EQ(faultSpecText(armed[3].spec), "hang:at_ms=20:health_after_ms=10000");
  // Disarmed: the slow fault stops slowing; an unknown id is reported.
  EXPECT_TRUE(plan.disarm(6));
  EXPECT_FALSE(plan.disarm(6));
  EXPECT_EQ(plan.beforePass(1, 14, 6, 80.0, out).slow_factor, 1.0);
  EXPECT_EQ(plan.armed().size(), 3u);
  // Arming a KV-event fault turns the batch hook on; disarming it off again.
  EXPECT_FALSE(plan.hasKvFaults());
  plan.arm(parsed("drop"), 8, 14, 6, 80.0);
  EXPECT_TRUE(plan.hasKvFaults());
  EXPECT_TRUE(plan.onBatch(0, 3, 15, 7, 90.0, out).drop);
  EXPECT_EQ(out.back().detail, "not sent; kept in the replay ring, armed at pass 14");
  EXPECT_TRUE(plan.disarm(8));
  EXPECT_FALSE(plan.hasKvFaults());
}

TEST(FaultPlanTest, AdminKeysAndTheirChecks) {
  auto on = parseServiceConfig("[faults]\nadmin = true\n", "t.toml");
  ASSERT_TRUE(on.has_value()) << on.error().message;
  EXPECT_TRUE(on->faults.admin);
  const auto open = parseServiceConfig(
      "[endpoints.http]\nendpoint = \"0.0.0.0:8000\"\n[faults]\nadmin = true\n", "t.toml");
  ASSERT_FALSE(open.has_value());
  EXPECT_NE(open.error().message.find("faults.admin on a non-loopback HTTP endpoint (0.0.0.0:8000) "
                                      "needs a bearer key"),
            std::string::npos)
      << open.error().message;
  EXPECT_TRUE(parseServiceConfig("[endpoints.http]\nendpoint = \"0.0.0.0:8000\"\n[faults]\n"
                                 "admin = true\nadmin_key_file = \"k\"\n",
                                 "t.toml")
                  .has_value());
  const auto no_http =
      parseServiceConfig("[endpoints.http]\nenabled = false\n[faults]\nadmin = true\n", "t.toml");
  ASSERT_FALSE(no_http.has_value());
  EXPECT_NE(no_http.error().message.find("needs the HTTP endpoint"), std::string::npos);
  const auto key_alone = parseServiceConfig("[faults]\nadmin_key_file = \"k\"\n", "t.toml");
  ASSERT_FALSE(key_alone.has_value());
  EXPECT_NE(key_alone.error().message.find("needs faults.admin = true"), std::string::npos);
}

}  // namespace
}  // namespace mocker::service
