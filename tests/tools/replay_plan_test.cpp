// `mocker replay`'s flags → plan (tools/replay_flags.h, tools/replay_plan.h) without running
// anything: command lines parsed by the real CLI11 registration, the aliases, the offline and
// live plans, every usage error with its exit code; and the rank legend (tools/replay_run.h).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "tools/replay_aliases.h"
#include "tools/replay_flags.h"
#include "tools/replay_plan.h"
#include "tools/replay_run.h"

namespace mocker::tools {
namespace {

/// A command line parsed the way `mocker replay` parses it (the program and subcommand names
/// left out), its given flags and aliases applied.
struct Parsed {
  CLI::App app;
  ReplayFlags flags;
  GivenFlags given;
  Status aliases;
};

std::unique_ptr<Parsed> parse(const std::vector<std::string>& args) {
  auto p = std::make_unique<Parsed>();
  registerReplayFlags(p->app, p->flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  p->app.parse(reversed);
  p->given = givenFlags(p->app);
  p->aliases = applyReplayAliases(p->flags, p->given);
  return p;
}

Result<ReplayPlan> plan(const std::vector<std::string>& args) {
  const auto p = parse(args);
  if (!p->aliases) return p->aliases.error();
  return planReplay(p->flags, p->given);
}

TEST(ReplayFlags, GivenFlagsAreTheOnesOnTheCommandLineByEveryLongName) {
  const auto p = parse({"t.jsonl", "--router", "kv", "--no-progress", "--num-gpu-blocks", "64"});
  EXPECT_TRUE(p->given.contains("--router"));
  EXPECT_TRUE(p->given.contains("--num-gpu-blocks"));
  EXPECT_TRUE(p->given.contains("--no-progress"));
  EXPECT_TRUE(p->given.contains("--progress"));  // the same option
  EXPECT_FALSE(p->given.contains("--mode"));
  EXPECT_FALSE(p->given.contains("--router-seed"));
}

TEST(ReplayFlags, AliasesFoldIntoTheNativeFlags) {
  const auto p = parse({"--format", "synthetic", "--num-prompts", "7", "--burstiness", "0.5",
                        "--goodput", "ttft:100", "e2el:900"});
  ASSERT_TRUE(p->aliases.has_value()) << p->aliases.error().message;
  EXPECT_EQ(p->flags.num_requests, 7u);
  EXPECT_EQ(p->flags.arrival, "gamma");
  EXPECT_EQ(p->flags.gamma_smoothness, 0.5);
  EXPECT_EQ(p->flags.slo_ttft_ms, 100.0);
  EXPECT_EQ(p->flags.slo_e2e_ms, 900.0);
  EXPECT_EQ(p->flags.slo_tpot_ms, 0.0);
}

TEST(ReplayPlan, OfflineByDefaultWithTheEngineFlagsAndTheRouter) {
  const auto p = plan({"trace.jsonl", "--num-workers", "3", "--router", "kv", "--router-seed", "9",
                       "--router-temperature", "0.5", "--num-gpu-blocks", "77", "--concurrency",
                       "4", "--slo-ttft-ms", "50"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->mode, ReplayMode::Offline);
  EXPECT_TRUE(p->closed_loop);
  EXPECT_EQ(p->format, "mooncake");
  const auto& o = std::get<replay::OfflineReplayOptions>(p->options);
  EXPECT_EQ(o.num_workers, 3u);
  EXPECT_EQ(o.router, replay::RouterKind::Kv);
  EXPECT_EQ(o.router_seed, 9u);
  EXPECT_EQ(o.kv_router.temperature, 0.5);
  EXPECT_EQ(o.engine.num_gpu_blocks, 77u);
  EXPECT_EQ(o.concurrency, 4u);
  EXPECT_FALSE(o.disagg.has_value());
  EXPECT_FALSE(o.progress);
  EXPECT_EQ(p->num_workers, 3u);
  EXPECT_EQ(p->router, "kv");
  EXPECT_TRUE(p->servers.empty());
  bool blocks = false;
  for (const replay::ConfigSetting& s : p->engine_config) {
    if (s.key == "num_gpu_blocks") blocks = s.text == "77";
  }
  EXPECT_TRUE(blocks);
  EXPECT_EQ(p->slo.ttft_ms, 50.0);
  EXPECT_FALSE(p->slo.tpot_ms.has_value());
  EXPECT_FALSE(p->slo.e2e_ms.has_value());
}

TEST(ReplayPlan, OfflineDisaggregatedHasBothRolesAndBothRouters) {
  const auto p = plan({"t.csv", "--num-prefill-workers", "2", "--num-decode-workers", "3",
                       "--decode-router", "random"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->format, "azure");
  const auto& o = std::get<replay::OfflineReplayOptions>(p->options);
  ASSERT_TRUE(o.disagg.has_value());
  EXPECT_EQ(o.disagg->num_prefill_workers, 2u);
  EXPECT_EQ(o.disagg->num_decode_workers, 3u);
  EXPECT_EQ(o.disagg->decode_router, replay::RouterKind::Random);
  EXPECT_EQ(p->num_workers, 5u);
  EXPECT_EQ(p->router, "round_robin (prefill), random (decode)");
  ASSERT_FALSE(p->engine_config.empty());
  EXPECT_EQ(p->engine_config.front().key.rfind("prefill.", 0), 0u);
}

TEST(ReplayPlan, LiveServersWithTheDefaultEndpointLayout) {
  const auto p = plan({"t.jsonl", "--connect", "tcp://127.0.0.1:7000", "--connect",
                       "tcp://127.0.0.1:8000", "--router", "kv", "--request-timeout-s", "2"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->mode, ReplayMode::Live);
  EXPECT_FALSE(p->closed_loop);
  const auto& o = std::get<replay::LiveReplayOptions>(p->options);
  ASSERT_EQ(o.targets.size(), 2u);
  EXPECT_EQ(o.targets[1].submit_endpoint, "tcp://127.0.0.1:8000");
  EXPECT_EQ(o.targets[1].cancel_endpoint, "tcp://127.0.0.1:8001");
  EXPECT_EQ(o.targets[1].kv_events, std::vector<std::string>{"tcp://127.0.0.1:8002"});
  EXPECT_EQ(o.targets[1].kv_replay, std::vector<std::string>{"tcp://127.0.0.1:8003"});
  EXPECT_EQ(o.router, replay::RouterKind::Kv);
  EXPECT_EQ(o.request_timeout_ms, 2000.0);
  EXPECT_TRUE(o.decode_targets.empty());
  EXPECT_FALSE(o.curve.has_value());
  EXPECT_EQ(p->num_workers, 2u);
  EXPECT_EQ(p->servers, (std::vector<std::string>{"tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000"}));
  EXPECT_EQ(p->router, "kv");
  EXPECT_TRUE(p->engine_config.empty());
}

TEST(ReplayPlan, LiveDisaggregatedFromThePrefillAndDecodeFlags) {
  const auto p = plan({"t.jsonl", "--connect-prefill", "tcp://h:100", "--connect-decode",
                       "tcp://h:200", "--connect-decode", "tcp://h:300", "--decode-router", "kv"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const auto& o = std::get<replay::LiveReplayOptions>(p->options);
  ASSERT_EQ(o.targets.size(), 1u);
  EXPECT_EQ(o.targets[0].cancel_endpoint, "tcp://h:101");
  ASSERT_EQ(o.decode_targets.size(), 2u);
  EXPECT_EQ(o.decode_targets[1].cancel_endpoint, "tcp://h:301");
  EXPECT_EQ(o.decode_router, replay::RouterKind::Kv);
  EXPECT_EQ(p->num_workers, 3u);
  EXPECT_EQ(p->router, "round_robin (prefill), kv (decode)");
}

TEST(ReplayPlan, UsageErrorsNameTheFlagAndExitTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases{
      {{"t.jsonl", "--router-temperature", "1"}, "--router-temperature is for --router kv"},
      {{"t.jsonl", "--connect-cancel", "tcp://h:1"}, "--connect-cancel is for --mode live"},
      {{"t.jsonl", "--mode", "offline", "--connect", "tcp://h:1"}, "--connect is for --mode live"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--router", "kv_prefix"}, "kv_prefix is offline only"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--num-workers", "2"}, "--num-workers is offline"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--num-prefill-workers", "1", "--num-decode-workers",
        "1"},
       "are offline only"},
      {{"t.jsonl", "--decode-router", "kv"}, "--decode-router needs --num-prefill-workers"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--decode-router", "kv"},
       "--decode-router needs decode servers"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--num-gpu-blocks", "8"}, "has no effect in live"},
      {{"t.jsonl", "--connect", "nonsense"}, "--connect: endpoint 'nonsense'"},
      {{"t.jsonl", "--connect", "tcp://h:*"}, "port"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--connect-cancel", "a", "--connect-cancel", "b"},
       "--connect-cancel: give one per --connect"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--router", "kv", "--connect-kv-events", "a",
        "--connect-kv-events", "b"},
       "--connect-kv-events: give one per --connect"},
      {{"t.jsonl", "--connect", "tcp://h:1", "--router", "kv", "--curve-server-key-file", "x",
        "--curve-secret-key-file", "y"},
       "--router kv with CURVE servers is not supported"},
      {{"t.jsonl", "--num-prefill-workers", "1", "--num-decode-workers", "1", "--num-workers", "2"},
       "--num-workers is for aggregated workers"},
      {{"t.jsonl", "--config", "/nonexistent/mocker.toml"}, "configuration error: "},
      {{"t.jsonl", "--num-prefill-workers", "1", "--num-decode-workers", "1", "--prefill-config",
        "/nonexistent/p.toml"},
       "configuration error: --prefill-config: "},
      {{"--format", "synthetic"}, "--num-requests: required"},
      {{"--format", "synthetic", "t.jsonl"}, "takes no TRACE file"},
      {{"x.txt"}, "cannot tell the format of 'x.txt'"},
      {{}, "give a TRACE file"},
  };
  for (const Case& c : cases) {
    const auto p = plan(c.args);
    ASSERT_FALSE(p.has_value()) << c.message;
    EXPECT_NE(p.error().message.find(c.message), std::string::npos)
        << c.message << " | " << p.error().message;
    EXPECT_EQ(planExitCode(p.error()), 2) << p.error().message;
  }
}

TEST(ReplayPlan, AnUnreadableCurveKeyIsAnInputErrorExitOne) {
  const auto p = plan({"t.jsonl", "--connect", "tcp://h:1", "--curve-server-key-file",
                       "/nonexistent/s.pub", "--curve-secret-key-file", "/nonexistent/c.key"});
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("/nonexistent/s.pub"), std::string::npos) << p.error().message;
  EXPECT_EQ(planExitCode(p.error()), 1);
}

TEST(ReplayPlan, AliasErrorsAreUsageErrors) {
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"t.jsonl", "--goodput", "ttft100"}, "expected KEY:MS"},
           {{"t.jsonl", "--goodput", "ttft:1", "ttft:2"}, "ttft given twice"},
           {{"t.jsonl", "--connect-prefill", "tcp://h:1"}, "need the decode servers"},
           {{"t.jsonl", "--fleet", "/nonexistent/fleet.json"}, "--fleet: "},
           {{"t.jsonl", "--burstiness", "2", "--arrival", "poisson"}, "does not combine"}}) {
    const auto p = parse(args);
    ASSERT_FALSE(p->aliases.has_value()) << message;
    EXPECT_NE(p->aliases.error().message.find(message), std::string::npos)
        << p->aliases.error().message;
    EXPECT_EQ(planExitCode(p->aliases.error()), 2);
  }
}

TEST(ReplayRun, RankLabelsNameEveryGlobalRank) {
  EXPECT_EQ(rankLabels({{"worker 0", 1}, {"worker 1", 1}}, false),
            (std::vector<std::string>{"worker 0", "worker 1"}));
  EXPECT_EQ(rankLabels({{"prefill 0", 2}, {"decode 0", 1}}, false),
            (std::vector<std::string>{"prefill 0 rank 0", "prefill 0 rank 1", "decode 0"}));
  EXPECT_EQ(rankLabels({{"server 0", 1}, {"server 1", 2}}, true),
            (std::vector<std::string>{"server 0 rank 0", "server 1 rank 0", "server 1 rank 1"}));
  EXPECT_EQ(rankLabels({{"", 2}}, true), (std::vector<std::string>{"rank 0", "rank 1"}));
  EXPECT_TRUE(rankLabels({}, true).empty());
}

}  // namespace
}  // namespace mocker::tools
