// `mocker replay` failure drills offline through the in-process CLI: --fault / [faults] / the
// fault log and report, byte-identical across runs; the clear errors for what offline cannot do.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/temp_dir.h"
#include "tests/tools/cli_run.h"

namespace mocker::tools {
namespace {

namespace fs = std::filesystem;
using cli_test::CliRun;
using cli_test::runMocker;
using nlohmann::ordered_json;

using mocker::testing::readAll;
using mocker::testing::TempDir;

/// A synthetic workload of 200 requests on 3 workers (kv router).
std::vector<std::string> drill(std::vector<std::string> extra) {
  std::vector<std::string> args{"replay",    "--format",
                                "synthetic", "--num-requests",
                                "200",       "--input-tokens-mean",
                                "600",       "--output-tokens-mean",
                                "40",        "--request-rate",
                                "40",        "--seed",
                                "3",         "--num-workers",
                                "3",         "--router",
                                "kv",        "--no-progress"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

/// Report lines that do not depend on the wall clock.
std::string withoutWallLines(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Wall time") || line.starts_with("Speedup vs real time") ||
        line.starts_with("Simulator speed") || line.starts_with("Date (UTC)")) {
      continue;
    }
    out += line + "\n";
  }
  return out;
}

// The same configuration and seed twice: the same fault log, report and per-request timelines,
// byte for byte (the wall-time fields of the report aside).
TEST(ReplayFaultsCliTest, SameConfigAndSeedGiveTheSameFaultLogAndReportByteForByte) {
  TempDir dir;
  const std::string config = dir.write("drill.toml", R"([faults]
inject = ["crash:at_ms=1500:worker=1", "slow:factor=2:after_passes=40:worker=0"]
seed = 5
)");
  std::vector<std::string> logs, reports, requests, tables;
  for (int run = 0; run < 2; ++run) {
    // The same command line both times (its outputs are read before the second run).
    const CliRun r = runMocker(
        drill({"--config", config, "--fault", "error:rate=0.1", "--fault",
               "abort:tokens=5:rate=0.05", "--fault-log", dir.file("faults.jsonl"), "--report-json",
               dir.file("report.json"), "--requests-jsonl", dir.file("req.jsonl")}));
    ASSERT_EQ(r.code, 0) << r.err;
    tables.push_back(withoutWallLines(r.out));
    logs.push_back(readAll(dir.file("faults.jsonl")));
    ordered_json j = ordered_json::parse(readAll(dir.file("report.json")));
    j["wall_time_ms"] = nullptr;
    j["processed_tokens_per_s"] = nullptr;
    j["run"] = nullptr;
    reports.push_back(j.dump(2));
    requests.push_back(readAll(dir.file("req.jsonl")));
  }
  EXPECT_EQ(logs[0], logs[1]);
  EXPECT_EQ(reports[0], reports[1]);
  EXPECT_EQ(requests[0], requests[1]);
  EXPECT_EQ(tables[0], tables[1]);

  // The log has every kind, in serve's line format; the report counts them.
  const std::string& log = logs[0];
  EXPECT_NE(log.find(R"("kind":"crash","fault":0,"worker":1,"detail":"at )"), std::string::npos)
      << log;
  EXPECT_NE(log.find(R"("kind":"slow","fault":1,"worker":0,"detail":"after 40 passes, factor )"),
            std::string::npos);
  EXPECT_NE(log.find(R"("kind":"error","fault":2,)"), std::string::npos);
  EXPECT_NE(log.find(R"("kind":"abort","fault":3,)"), std::string::npos);
  const ordered_json j = ordered_json::parse(readAll(dir.file("report.json")));
  const ordered_json& f = j.at("faults");
  EXPECT_EQ(f.at("injected").at("crash"), 1);
  EXPECT_EQ(f.at("injected").at("slow"), 1);
  EXPECT_GT(f.at("injected").at("error").get<int>(), 5);
  EXPECT_EQ(f.at("error_replies"), f.at("injected").at("error"));
  EXPECT_EQ(f.at("aborted"), f.at("injected").at("abort"));
  EXPECT_EQ(f.at("retried"), 0);
  EXPECT_EQ(f.at("survivors"), j.at("completed_requests"));
  EXPECT_EQ(j.at("failed_requests").get<int>(),
            f.at("error_replies").get<int>() + f.at("aborted").get<int>() +
                f.at("failed_by_crash").get<int>() + f.at("no_worker").get<int>());
  EXPECT_NE(tables[0].find("Faults injected"), std::string::npos) << tables[0];
  EXPECT_NE(tables[0].find("Survivors (completed)"), std::string::npos);
  // A line of the log per injection.
  std::size_t lines = 0;
  for (const char c : log) lines += c == '\n';
  std::size_t injected = 0;
  for (const auto& [kind, n] : f.at("injected").items()) injected += n.get<std::size_t>();
  EXPECT_EQ(lines, injected);

  // Another fault seed: other requests fail.
  const CliRun other =
      runMocker(drill({"--config", config, "--fault", "error:rate=0.1", "--fault-seed", "6",
                       "--fault-log", dir.file("faults_other.jsonl")}));
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(readAll(dir.file("faults_other.jsonl")), log);
}

// What offline cannot honour is a usage error naming the kind, before anything runs.
TEST(ReplayFaultsCliTest, WhatOfflineCannotHonourIsAClearError) {
  TempDir dir;
  const auto expectError = [](const std::vector<std::string>& extra, const std::string& what) {
    const CliRun r = runMocker(drill(extra));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  };
  expectError({"--fault", "drop:after_passes=3"},
              "fault 'drop:after_passes=3': kv-event faults need a live run");
  expectError({"--fault", "suppress:rate=0.1"}, "kv-event faults need a live run");
  expectError({"--fault", "fpm_stop"}, "fault 'fpm_stop': metric faults need a live run");
  expectError({"--fault", "metrics_freeze"}, "metric faults need a live run");
  expectError({"--fault", "fetch_late:ms=5"}, "kv_fetch faults need a live run");
  expectError({"--fault", "crash:worker=3"}, "worker 3 does not exist (the offline replay runs 3");
  expectError({"--fault", "slow:factor=0.5"}, "fault 'slow:factor=0.5': factor must be > 1");
  expectError({"--fault", "bogus"}, "unknown kind 'bogus'");
  expectError({"--request-timeout-s", "5"}, "--request-timeout-s: offline it ends only");
  expectError({"--faults-admin"}, "has no effect here");
  // From a --config file too, with the file's line.
  const std::string config = dir.write("kv.toml", "[faults]\ninject = [\"duplicate\"]\n");
  expectError({"--config", config}, "kv-event faults need a live run");
  // Live mode: the servers run their own faults.
  const CliRun live =
      runMocker({"replay", "--mode", "live", "--connect", "tcp://127.0.0.1:1", "--format",
                 "synthetic", "--num-requests", "1", "--input-tokens-mean", "10",
                 "--output-tokens-mean", "2", "--fault", "crash"});
  EXPECT_EQ(live.code, 2);
  EXPECT_NE(live.err.find("--fault has no effect in live mode"), std::string::npos) << live.err;
}

}  // namespace
}  // namespace mocker::tools
