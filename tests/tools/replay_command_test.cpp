// End-to-end tests of `mocker replay` through the in-process CLI: the golden report of the tiny
// checked-in trace, determinism, and the error paths.
//
// Golden files: tests/data/tiny_trace.report.json (JSON report; wall-time fields stored as null)
// and tests/data/tiny_trace.requests.jsonl. Regenerate them only deliberately:
//   MOCKER_UPDATE_GOLDEN=1 build/tests/tools/replay_tests --gtest_filter='ReplayGolden*'
// then review the diff before committing.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "replay_test_util.h"
#include "tests/tools/cli_run.h"
#include "tools/cli.h"

namespace mocker::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using replay::testing::sampleTrace;
using replay::testing::sourceDir;

using cli_test::CliRun;
using cli_test::runMocker;

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A per-test scratch directory, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // The process id keeps concurrent runs of the same test (several build trees, or ctest -j
    // with repeats) out of each other's files.
    path_ =
        fs::temp_directory_path() / ("mocker_replay_cli_" + std::string(info->test_suite_name()) +
                                     "_" + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return file(name);
  }

 private:
  fs::path path_;
};

/// The JSON report with the fields that differ between two runs of the same command nulled:
/// the wall-time dependent ones and the "run" object (date, command line).
ordered_json withoutWallTime(const std::string& text) {
  ordered_json j = ordered_json::parse(text);
  j["wall_time_ms"] = nullptr;
  j["processed_tokens_per_s"] = nullptr;
  j["run"] = nullptr;
  return j;
}

/// Also the identity fields that depend on the build and the checkout's location, for the
/// golden file (the engine configuration and the trace's SHA-256 stay pinned).
ordered_json withoutMachineFields(const std::string& text) {
  ordered_json j = withoutWallTime(text);
  for (const char* k : {"mocker_version", "git_revision", "trace_path"}) {
    j["identity"][k] = nullptr;
  }
  return j;
}

bool updateGolden() {
  const char* v = std::getenv("MOCKER_UPDATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

// --- golden -------------------------------------------------------------------------------------

TEST(ReplayGoldenTest, TinyTraceReportMatchesGoldenFieldByField) {
  TempDir dir;
  const std::string trace = sourceDir() + "/tests/data/tiny_trace.jsonl";
  const CliRun r = runMocker({"replay", trace, "--report-json", dir.file("report.json"),
                              "--requests-jsonl", dir.file("requests.jsonl")});
  ASSERT_EQ(r.code, 0) << r.err;
  const ordered_json actual = withoutMachineFields(readAll(dir.file("report.json")));
  const std::string requests = readAll(dir.file("requests.jsonl"));
  const fs::path golden_report = sourceDir() + "/tests/data/tiny_trace.report.json";
  const fs::path golden_requests = sourceDir() + "/tests/data/tiny_trace.requests.jsonl";
  if (updateGolden()) {
    std::ofstream(golden_report, std::ios::binary) << actual.dump(2) << "\n";
    std::ofstream(golden_requests, std::ios::binary) << requests;
    GTEST_SKIP() << "golden files rewritten: " << golden_report << ", " << golden_requests;
  }
  ASSERT_TRUE(fs::exists(golden_report)) << "run with MOCKER_UPDATE_GOLDEN=1 to create it";
  const ordered_json expected = ordered_json::parse(readAll(golden_report));
  // Every field, in order, with its name in the failure message.
  ASSERT_EQ(actual.size(), expected.size());
  auto a = actual.begin();
  for (auto e = expected.begin(); e != expected.end(); ++e, ++a) {
    EXPECT_EQ(a.key(), e.key());
    EXPECT_EQ(a.value(), e.value()) << "field " << e.key();
  }
  EXPECT_EQ(requests, readAll(golden_requests));
  // Sanity on what the golden pins: 8 requests, all completed, some prefix reuse.
  EXPECT_EQ(expected["num_requests"], 8);
  EXPECT_EQ(expected["completed_requests"], 8);
  EXPECT_GT(expected["prefix_cache_reused_ratio"].get<double>(), 0.0);
  // The table names the simulated duration, wall time and speedup.
  EXPECT_NE(r.out.find("Duration (ms)"), std::string::npos);
  EXPECT_NE(r.out.find("Wall time (ms)"), std::string::npos);
  EXPECT_NE(r.out.find("Speedup vs real time"), std::string::npos);
}

// --- determinism
// -----------------------------------------------------------------

void expectIdenticalRuns(const std::vector<std::string>& args) {
  TempDir dir;
  std::vector<std::string> outputs[2];
  for (int i = 0; i < 2; ++i) {
    const std::string n = std::to_string(i);
    std::vector<std::string> a = args;
    for (const char* flag : {"--report-json", "--requests-jsonl", "--report-html"}) {
      a.push_back(flag);
      a.push_back(dir.file(std::string(flag + 2) + n));
    }
    const CliRun r = runMocker(a);
    ASSERT_EQ(r.code, 0) << r.err;
    outputs[i] = {withoutWallTime(readAll(dir.file("report-json" + n))).dump(2),
                  readAll(dir.file("requests-jsonl" + n))};
    const std::string html = readAll(dir.file("report-html" + n));
    EXPECT_NE(html.find("<svg"), std::string::npos);
  }
  EXPECT_EQ(outputs[0][0], outputs[1][0]);
  EXPECT_TRUE(outputs[0][1] == outputs[1][1]) << "request timelines differ";
  EXPECT_FALSE(outputs[0][1].empty());
}

TEST(ReplayDeterminismTest, ShippedSyntheticTraceTwiceGivesIdenticalOutputs) {
  const std::string trace = sampleTrace("mooncake_synthetic_trace.jsonl");
  MOCKER_SKIP_UNLESS_SAMPLE_TRACE(trace);
  expectIdenticalRuns({"replay", trace});
}

TEST(ReplayDeterminismTest, FourWorkersEveryRouterTwiceGivesIdenticalOutputs) {
  for (const char* router : {"round_robin", "kv", "random"}) {
    SCOPED_TRACE(router);
    expectIdenticalRuns({"replay",
                         "--format",
                         "synthetic",
                         "--num-requests",
                         "300",
                         "--input-tokens-mean",
                         "3000",
                         "--input-tokens-stddev",
                         "800",
                         "--output-tokens-mean",
                         "50",
                         "--output-tokens-stddev",
                         "20",
                         "--request-rate",
                         "30",
                         "--shared-prefix-ratio",
                         "0.6",
                         "--num-prefix-groups",
                         "10",
                         "--turns-per-session",
                         "2",
                         "--inter-turn-delay",
                         "exponential",
                         "--inter-turn-delay-ms",
                         "200",
                         "--seed",
                         "9",
                         "--num-workers",
                         "4",
                         "--router",
                         router,
                         "--num-gpu-blocks",
                         "400",
                         "--dp-size",
                         "2"});
  }
}

// --- CLI behaviour ------------------------------------------------------------------------------

TEST(ReplayCliTest, MalformedLineIsReportedWithItsNumberAndNothingRuns) {
  TempDir dir;
  const std::string trace =
      dir.write("bad.jsonl",
                "{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n"
                "\n"
                "{\"timestamp\": 5, \"output_length\": 1, \"hash_ids\": []}\n"
                "{\"timestamp\": 9, \"output_length\": 2, \"hash_ids\": [2]}\n");
  const CliRun r = runMocker({"replay", trace, "--report-json", dir.file("r.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing may be simulated: " << r.out;
  EXPECT_FALSE(fs::exists(dir.file("r.json")));

  const CliRun skipped =
      runMocker({"replay", trace, "--skip-invalid", "--report-json", dir.file("r.json")});
  EXPECT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_NE(skipped.err.find("skipped line 3"), std::string::npos) << skipped.err;
  EXPECT_EQ(ordered_json::parse(readAll(dir.file("r.json")))["num_requests"], 2);
}

TEST(ReplayCliTest, UnknownRouterIsAUsageError) {
  const CliRun r =
      runMocker({"replay", sourceDir() + "/tests/data/tiny_trace.jsonl", "--router", "nearest"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--router"), std::string::npos) << r.err;
}

// Live-mode usage errors are found before the trace is read or any socket is opened.
TEST(ReplayCliTest, LiveModeUsageErrorsExitTwo) {
  const std::string trace = sourceDir() + "/tests/data/tiny_trace.jsonl";
  const struct {
    std::vector<std::string> extra;
    std::string message;
  } cases[] = {
      {{"--mode", "live"}, "needs --connect"},
      {{"--mode", "offline", "--connect", "tcp://127.0.0.1:5555"}, "--mode live"},
      {{"--connect", "ipc:///tmp/mocker-submit"}, "--connect-cancel"},
      {{"--connect", "tcp://127.0.0.1"}, "no port"},
      {{"--connect", "tcp://127.0.0.1:65535"}, "1..65534"},
      {{"--connect", "tcp://127.0.0.1:5555", "--router", "kv_prefix"}, "offline only"},
      {{"--connect", "tcp://127.0.0.1:5555", "--router", "kv", "--connect-kv-events",
        "tcp://127.0.0.1:1", "--connect-kv-events", "tcp://127.0.0.1:2"},
       "one per --connect"},
      {{"--connect", "tcp://127.0.0.1:5555", "--router-temperature", "1"}, "for --router kv"},
      {{"--router", "kv", "--router-block-size", "16"}, "--mode live"},
      {{"--connect", "tcp://127.0.0.1:5555", "--num-workers", "2"}, "offline only"},
      {{"--connect", "tcp://127.0.0.1:5555", "--connect", "tcp://127.0.0.1:5565",
        "--connect-cancel", "tcp://127.0.0.1:5556"},
       "one per --connect"},
      {{"--connect-cancel", "tcp://127.0.0.1:5556"}, "--mode live"},
      // Engine and service settings are the servers' own: refused instead of ignored.
      {{"--connect", "tcp://127.0.0.1:5555", "--num-gpu-blocks", "5"},
       "--num-gpu-blocks has no effect in live mode"},
      {{"--connect", "tcp://127.0.0.1:5555", "--config", "serve.toml"},
       "--config has no effect in live mode"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"replay", trace};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const CliRun r = runMocker(args);
    EXPECT_EQ(r.code, 2) << c.message << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST(ReplayCliTest, FormatErrorsNameTheProblem) {
  TempDir dir;
  const std::string odd = dir.write("trace.txt", "x\n");
  CliRun r = runMocker({"replay", odd});
  EXPECT_EQ(r.code, 2);  // usage: the command line does not say what the file is
  EXPECT_NE(r.err.find("--format"), std::string::npos) << r.err;
  r = runMocker({"replay", dir.file("missing.jsonl")});
  EXPECT_EQ(r.code, 1);  // input: the file named is not there
  EXPECT_NE(r.err.find("missing.jsonl"), std::string::npos) << r.err;
  r = runMocker({"replay", "--format", "synthetic", "--input-tokens-mean", "10"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--num-requests"), std::string::npos) << r.err;
  r = runMocker({"replay", sourceDir() + "/tests/data/tiny_trace.jsonl", "--num-gpu-blocks", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("num_gpu_blocks"), std::string::npos) << r.err;
}

TEST(ReplayCliTest, ClosedLoopAndSloOptionsReachTheReport) {
  TempDir dir;
  const CliRun r = runMocker({"replay", sourceDir() + "/tests/data/tiny_trace.jsonl",
                              "--concurrency", "1", "--slo-ttft-ms", "1000000", "--report-json",
                              dir.file("r.json"), "--requests-jsonl", dir.file("r.jsonl")});
  ASSERT_EQ(r.code, 0) << r.err;
  const ordered_json j = ordered_json::parse(readAll(dir.file("r.json")));
  EXPECT_EQ(j["completed_requests"], 8);
  // A generous TTFT bound: every request with a first token is good; the 0-token request has no
  // TTFT and so fails the bound (collector.h).
  EXPECT_EQ(j["goodput_completed_requests"], 7);
  // One request in flight at a time: each arrives no earlier than the previous one ended.
  std::istringstream lines(readAll(dir.file("r.jsonl")));
  std::string line;
  double previous_end = 0.0;
  int n = 0;
  while (std::getline(lines, line)) {
    const ordered_json req = ordered_json::parse(line);
    EXPECT_GE(req["arrival_time_ms"].get<double>(), previous_end) << "request " << n;
    previous_end = req["terminal_time_ms"].get<double>();
    ++n;
  }
  EXPECT_EQ(n, 8);
}

// Every report names the build, the workload, the configuration and the run.
TEST(ReplayCliTest, ReportsCarryTheRunIdentity) {
  TempDir dir;
  const std::string trace = sourceDir() + "/tests/data/tiny_trace.jsonl";
  const CliRun r =
      runMocker({"replay", trace, "--block-size", "32", "--num-workers", "2", "--router", "random",
                 "--report-json", dir.file("r.json"), "--requests-jsonl", dir.file("r.jsonl"),
                 "--report-html", dir.file("r.html")});
  ASSERT_EQ(r.code, 0) << r.err;
  const ordered_json j = ordered_json::parse(readAll(dir.file("r.json")));
  const ordered_json& id = j["identity"];
  EXPECT_EQ(id["mode"], "offline");
  EXPECT_EQ(id["format"], "mooncake");
  EXPECT_EQ(id["trace_path"], trace);
  // sha256sum tests/data/tiny_trace.jsonl
  EXPECT_EQ(id["trace_sha256"], "ddd16623f186e848be175b28ea47ad57e0deea7262d5bedbf3c364d7f99bdb77");
  EXPECT_EQ(id["num_workers"], 2);
  EXPECT_EQ(id["router"], "random");
  EXPECT_EQ(id["engine_config"]["block_size"], 32);
  EXPECT_EQ(id["engine_config"]["engine_type"], "vllm");
  EXPECT_FALSE(id["git_revision"].get<std::string>().empty());
  EXPECT_EQ(j["run"]["command_line"],
            "mocker replay " + trace +
                " --block-size 32 --num-workers 2 --router random --report-json " +
                dir.file("r.json") + " --requests-jsonl " + dir.file("r.jsonl") +
                " --report-html " + dir.file("r.html"));
  EXPECT_EQ(j["run"]["date_utc"].get<std::string>().size(), 20U);
  // The JSONL's sidecar, the table and the HTML page carry the same identity.
  const ordered_json side = ordered_json::parse(readAll(dir.file("r.jsonl.run.json")));
  EXPECT_EQ(side["identity"], id);
  EXPECT_EQ(side["run"], j["run"]);
  for (const std::string& text : {r.out, readAll(dir.file("r.html"))}) {
    EXPECT_NE(text.find(id["trace_sha256"].get<std::string>()), std::string::npos);
    EXPECT_NE(text.find("block_size=32"), std::string::npos);
    EXPECT_NE(text.find(j["run"]["date_utc"].get<std::string>()), std::string::npos);
  }
  // A synthetic workload has no trace file.
  const CliRun s =
      runMocker({"replay", "--format", "synthetic", "--num-requests", "3", "--input-tokens-mean",
                 "50", "--output-tokens-mean", "2", "--report-json", dir.file("s.json")});
  ASSERT_EQ(s.code, 0) << s.err;
  const ordered_json sj = ordered_json::parse(readAll(dir.file("s.json")));
  EXPECT_EQ(sj["identity"]["format"], "synthetic");
  EXPECT_TRUE(sj["identity"]["trace_path"].is_null());
  EXPECT_TRUE(sj["identity"]["trace_sha256"].is_null());
}

// An output that cannot be written is found before the replay, not after it.
TEST(ReplayCliTest, UnwritableOutputPathsFailBeforeTheRun) {
  TempDir dir;
  const std::string trace = sourceDir() + "/tests/data/tiny_trace.jsonl";
  // Each case also asks for a writable output (ok.*), which must not be written either.
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--report-json", dir.file("ok.json"), "--report-html", dir.file("missing/r.html")},
       "--report-html: cannot write"},
      {{"--requests-jsonl", dir.file("ok.jsonl"), "--report-json", dir.file("")}, "is a directory"},
      {{"--report-json", dir.file("ok.json"), "--requests-jsonl", dir.file("nodir/r.jsonl")},
       "does not exist"},
      {{"--requests-jsonl", dir.file("ok.jsonl"), "--report-json", dir.file("same"),
        "--report-html", dir.file("same")},
       "same file"},
      // procfs opens for writing (as root even /proc/self/status) but keeps nothing.
      {{"--report-json", dir.file("ok.json"), "--report-html", "/proc/self/status"},
       "--report-html: cannot write '/proc/self/status': it is on procfs"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"replay", trace};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliRun r = runMocker(args);
    EXPECT_EQ(r.code, 1) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "nothing may be simulated: " << r.out;
    EXPECT_FALSE(fs::exists(dir.file("ok.json")));
    EXPECT_FALSE(fs::exists(dir.file("ok.jsonl")));
  }
}

// A run that served nothing fails, naming why the requests were rejected.
TEST(ReplayCliTest, EveryRequestRejectedExitsOneWithTheReasons) {
  TempDir dir;
  const CliRun r =
      runMocker({"replay", sourceDir() + "/tests/data/tiny_trace.jsonl", "--max-model-len", "8",
                 "--report-json", dir.file("r.json"), "--requests-jsonl", dir.file("r.jsonl")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("every request was rejected (8): max_model_len 8, kv capacity 0"),
            std::string::npos)
      << r.err;
  // The reports are still written, with the reason per request.
  EXPECT_EQ(ordered_json::parse(readAll(dir.file("r.json")))["rejected_requests"], 8);
  std::istringstream lines(readAll(dir.file("r.jsonl")));
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const ordered_json req = ordered_json::parse(line);
    EXPECT_EQ(req["terminal_status"], "rejected");
    EXPECT_EQ(req["terminal_reason"], "max_model_len");
  }
  EXPECT_EQ(n, 8);
  // One request served is enough for success.
  EXPECT_EQ(runMocker({"replay", sourceDir() + "/tests/data/tiny_trace.jsonl"}).code, 0);
}

TEST(ReplayCliTest, SyntheticWorkloadRunsWithTheEngineFlags) {
  const CliRun r = runMocker({"replay", "--format", "synthetic", "--num-requests", "20",
                              "--input-tokens-mean", "300", "--output-tokens-mean", "10",
                              "--arrival", "burst", "--block-size", "16", "--num-workers", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Requests per worker (round_robin): 10 10"), std::string::npos) << r.out;
}

TEST(ReplayCliTest, AgenticAndDeltaFormatsAreNamedAndTheirLineErrorsStopTheRun) {
  TempDir dir;
  const CliRun ok = runMocker({"replay", sourceDir() + "/data/traces/agentic_sample.jsonl",
                               "--format", "agentic", "--report-json", dir.file("a.json")});
  if (fs::exists(sourceDir() + "/data/traces/agentic_sample.jsonl")) {
    ASSERT_EQ(ok.code, 0) << ok.err;
    EXPECT_EQ(ordered_json::parse(readAll(dir.file("a.json")))["completed_requests"], 10);
  }
  const std::string cycle =
      dir.write("cycle.jsonl",
                "{\"request_id\": \"a\", \"timestamp\": 0, \"output_length\": 1, \"hash_ids\": "
                "[1]}\n"
                "{\"request_id\": \"b\", \"output_length\": 1, \"hash_ids\": [1], \"wait_for\": "
                "[\"a\", \"c\"]}\n"
                "{\"request_id\": \"c\", \"output_length\": 1, \"hash_ids\": [1], \"wait_for\": "
                "[\"b\"]}\n");
  const CliRun bad = runMocker({"replay", cycle, "--format", "agentic_mooncake"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("line 2: 'wait_for' forms a cycle"), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  // The same file read as plain Mooncake ignores the agentic keys (closed loop: its rows 2 and 3
  // have no timestamp).
  const CliRun plain = runMocker({"replay", cycle, "--format", "mooncake", "--concurrency", "1"});
  EXPECT_EQ(plain.code, 0) << plain.err;
  const std::string delta = dir.write(
      "delta.jsonl",
      "{\"session_id\": \"s\", \"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, "
      "\"hash_ids\": [1, 2]}\n");
  const CliRun d =
      runMocker({"replay", delta, "--format", "mooncake-delta", "--trace-block-size", "16"});
  EXPECT_EQ(d.code, 1);
  EXPECT_NE(d.err.find("line 1: 'hash_ids' has 2 ids but a delta of 10 tokens fills 1 blocks"),
            std::string::npos)
      << d.err;
}

TEST(ReplayCliTest, SyntheticAgenticIsDeterministicAndNeedsAToolOutputLength) {
  TempDir dir;
  const std::vector<std::string> args = {"replay",
                                         "--format",
                                         "synthetic-agentic",
                                         "--num-requests",
                                         "6",
                                         "--turns-per-session",
                                         "4",
                                         "--system-prompt-tokens",
                                         "200",
                                         "--input-tokens-mean",
                                         "100",
                                         "--output-tokens-mean",
                                         "20",
                                         "--tool-output-tokens-mean",
                                         "60",
                                         "--tool-wait",
                                         "exponential",
                                         "--tool-wait-ms",
                                         "40",
                                         "--subagent-probability",
                                         "0.5",
                                         "--subagent-fanout",
                                         "2",
                                         "--seed",
                                         "5"};
  std::vector<std::string> first = args;
  first.insert(first.end(), {"--requests-jsonl", dir.file("1.jsonl")});
  std::vector<std::string> second = args;
  second.insert(second.end(), {"--requests-jsonl", dir.file("2.jsonl")});
  const CliRun a = runMocker(first);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(runMocker(second).code, 0);
  EXPECT_EQ(readAll(dir.file("1.jsonl")), readAll(dir.file("2.jsonl")));
  EXPECT_NE(readAll(dir.file("1.jsonl")).find("\"request_id\":\"agent_0.1\""), std::string::npos);

  const CliRun missing = runMocker({"replay", "--format", "synthetic-agentic", "--num-requests",
                                    "2", "--input-tokens-mean", "10", "--output-tokens-mean", "5"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--tool-output-tokens-mean"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace mocker::tools

namespace mocker::tools {
namespace {

// Disaggregated replay through the CLI: per-role settings from --prefill-config /
// --decode-config (layered over the flags), handoff statistics in the table and the JSON, the
// roles in the run identity, byte-identical reports for the same command, clear usage errors.
TEST(ReplayCliTest, DisaggregatedRunWithPerRoleConfigs) {
  TempDir dir;
  const std::string prefill =
      dir.write("prefill.toml", "[engine]\nmax_num_batched_tokens = 4096\nnum_gpu_blocks = 512\n");
  const std::string decode =
      dir.write("decode.toml", "[engine]\nnum_gpu_blocks = 300\nkv_hold_timeout_ms = \"none\"\n");
  const std::vector<std::string> args = {"replay",    "--format",
                                         "synthetic", "--num-requests",
                                         "30",        "--input-tokens-mean",
                                         "400",       "--output-tokens-mean",
                                         "20",        "--arrival",
                                         "constant",  "--request-rate",
                                         "20",        "--block-size",
                                         "16",        "--kv-transfer-bandwidth-gbps",
                                         "5",         "--num-prefill-workers",
                                         "1",         "--num-decode-workers",
                                         "2",         "--prefill-config",
                                         prefill,     "--decode-config",
                                         decode,      "--decode-router",
                                         "kv"};
  std::vector<std::string> first = args, second = args;
  first.insert(first.end(), {"--report-json", dir.file("a.json")});
  second.insert(second.end(), {"--report-json", dir.file("b.json")});
  const CliRun r = runMocker(first);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Handoffs (prefill to decode)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("30 (activated 30, refused by decode 0, expired holds 0)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Handoffs per decode worker (kv):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV transfer (ms)"), std::string::npos) << r.out;
  ASSERT_EQ(runMocker(second).code, 0);
  const std::string a = readAll(dir.file("a.json"));
  EXPECT_EQ(withoutWallTime(a), withoutWallTime(readAll(dir.file("b.json"))));
  const ordered_json j = ordered_json::parse(a);
  EXPECT_EQ(j["handoffs"], 30);
  EXPECT_EQ(j["completed_requests"], 30);
  // 400 tokens · 131072 B at 5 GB/s ≈ 10.5 ms per transfer (prompt lengths vary around 400).
  EXPECT_GT(j["mean_kv_transfer_ms"].get<double>(), 5.0);
  EXPECT_LT(j["mean_kv_transfer_ms"].get<double>(), 20.0);
  const auto& engine = j["identity"]["engine_config"];
  EXPECT_EQ(engine["prefill.worker_type"], "prefill");
  EXPECT_EQ(engine["decode.worker_type"], "decode");
  EXPECT_EQ(engine["prefill.num_gpu_blocks"], 512);
  EXPECT_EQ(engine["decode.num_gpu_blocks"], 300);
  EXPECT_EQ(engine["prefill.max_num_batched_tokens"], 4096);
  EXPECT_EQ(engine["decode.max_num_batched_tokens"], 8192);
  EXPECT_EQ(engine["decode.kv_hold_timeout_ms"], nullptr);
}

TEST(ReplayCliTest, DisaggregatedUsageErrors) {
  TempDir dir;
  const std::vector<std::string> base = {"replay",    "--format",
                                         "synthetic", "--num-requests",
                                         "2",         "--input-tokens-mean",
                                         "40",        "--output-tokens-mean",
                                         "2"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return runMocker(a);
  };
  const std::string bs32 = dir.write("bs32.toml", "[engine]\nblock_size = 32\n");
  CliRun r =
      with({"--num-prefill-workers", "1", "--num-decode-workers", "1", "--decode-config", bs32});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("same block size"), std::string::npos) << r.err;
  r = with({"--num-prefill-workers", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--num-decode-workers"), std::string::npos) << r.err;
  r = with({"--num-prefill-workers", "1", "--num-decode-workers", "1", "--num-workers", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--num-workers is for aggregated workers"), std::string::npos) << r.err;
  const std::string bad = dir.write("bad.toml", "[engine]\nkv_transfer_charge = \"most\"\n");
  r = with({"--num-prefill-workers", "1", "--num-decode-workers", "1", "--prefill-config", bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--prefill-config: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kv_transfer_charge"), std::string::npos) << r.err;
  // SGLang mode runs disaggregated too.
  r = with({"--num-prefill-workers", "1", "--num-decode-workers", "1", "--engine-type", "sglang"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = with({"--prefill-config", bad});
  EXPECT_EQ(r.code, 2) << "needs --num-prefill-workers";
  // A worker type without both roles would hand off to nobody (or refuse every request).
  for (const char* type : {"prefill", "decode"}) {
    r = with({"--worker-type", type});
    EXPECT_EQ(r.code, 2) << type;
    EXPECT_NE(r.err.find("worker_type: an aggregated replay runs aggregated workers (got '" +
                         std::string(type) + "')"),
              std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace mocker::tools
