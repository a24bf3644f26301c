#include "tools/cli.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "service/config.h"

namespace mocker::tools {
namespace {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

CliRun run(std::vector<std::string> args) {
  args.insert(args.begin(), "mocker");
  std::ostringstream out, err;
  const int code = runCli(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(CliTest, VersionPrintsProjectVersion) {
  const auto r = run({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, versionString() + "\n");
  EXPECT_EQ(versionString(), std::string("mocker ") + MOCKER_VERSION_FOR_TEST);
}

TEST(CliTest, HelpListsUsage) {
  const auto r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Usage: mocker"), std::string::npos);
}

TEST(CliTest, UnknownOptionIsAUsageError) {
  const auto r = run({"--no-such-flag"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos);
}

// --- mocker config -----------------------------------------------------------------------------

/// Writes `text` to a fresh file under the temp dir; removed at scope exit.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        std::filesystem::temp_directory_path() / ("mocker_cli_test_" + std::string(info->name()) +
                                                  "_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream(path_) << text;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

service::ServiceConfig parseDump(const std::string& text) {
  auto r = service::parseServiceConfig(text, "dump");
  EXPECT_TRUE(r.has_value()) << r.error().toString() << "\n" << text;
  return r.has_value() ? *r : service::ServiceConfig{};
}

TEST(CliConfigTest, DumpWithoutArgumentsPrintsTheDefaults) {
  const auto r = run({"config", "--dump"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  EXPECT_TRUE(parseDump(r.out) == service::ServiceConfig{});
}

TEST(CliConfigTest, WithoutDumpOnlyValidates) {
  const auto r = run({"config"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "configuration OK\n");
}

TEST(CliConfigTest, FlagsOverrideTheFile) {
  const TempFile file("c.toml", R"([engine]
num_gpu_blocks = 100
enable_prefix_caching = false
max_num_seqs = 4
[kv_events]
topic = "from-file"
layout = "p7"
[fpm]
enabled = false
)");
  const auto r = run({"config",
                      "--dump",
                      "--config",
                      file.path(),
                      "--num-gpu-blocks",
                      "7",
                      "--enable-prefix-caching",
                      "--max-num-seqs",
                      "none",
                      "--kv-events-layout",
                      "MAP",
                      "--fpm",
                      "--fpm-endpoint",
                      "tcp://collector:20380",
                      "--fpm-connect",
                      "--log-level",
                      "debug",
                      "--dp-size",
                      "2",
                      "--kv-replay-endpoint",
                      "tcp://127.0.0.1:6000"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto c = parseDump(r.out);
  EXPECT_EQ(c.engine.num_gpu_blocks, 7u);           // flag over file
  EXPECT_TRUE(c.engine.enable_prefix_caching);      // flag over file
  EXPECT_FALSE(c.engine.max_num_seqs.has_value());  // "none" from a flag
  EXPECT_EQ(c.kv_events.topic, "from-file");        // file over default
  EXPECT_EQ(c.kv_events.layout, protocol::KvLayout::Map);
  EXPECT_TRUE(c.fpm.enabled);
  EXPECT_EQ(c.endpoints.fpm, (service::EndpointConfig{"tcp://collector:20380", true}));
  EXPECT_EQ(c.log_level, spdlog::level::debug);
  EXPECT_EQ(c.engine.dp_size, 2u);
}

TEST(CliConfigTest, HttpAndLoggingFlagsSetTheirKeys) {
  auto r = run({"config", "--dump", "--http-endpoint", "0.0.0.0:9100", "--log-format", "JSON",
                "--log-stats-interval", "2.5", "--served-model-name", "llama", "--worker-label",
                "pod-3"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto c = parseDump(r.out);
  EXPECT_EQ(c.endpoints.http, (service::HttpEndpointConfig{"0.0.0.0:9100", true}));
  EXPECT_EQ(c.log_format, service::LogFormat::Json);
  EXPECT_EQ(c.log_stats_interval_s, 2.5);
  EXPECT_EQ(c.service.served_model_name, "llama");
  EXPECT_EQ(c.service.worker_label, "pod-3");
  r = run({"config", "--dump", "--no-http"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(parseDump(r.out).endpoints.http.enabled);
  r = run({"config", "--http-endpoint", "http://127.0.0.1:8000"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--http-endpoint: endpoints.http.endpoint"), std::string::npos) << r.err;
  r = run({"config", "--log-stats-interval", "-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("logging.stats_interval_s"), std::string::npos) << r.err;
}

TEST(CliConfigTest, NegatedFlagsTurnOptionsOff) {
  const auto r =
      run({"config", "--dump", "--no-enable-prefix-caching", "--no-enable-chunked-prefill",
           "--no-kv-events", "--no-fpm", "--allow-empty-output"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto c = parseDump(r.out);
  EXPECT_FALSE(c.engine.enable_prefix_caching);
  EXPECT_FALSE(c.engine.enable_chunked_prefill);
  EXPECT_FALSE(c.kv_events.enabled);
  EXPECT_FALSE(c.fpm.enabled);
  EXPECT_TRUE(c.engine.allow_empty_output);
}

TEST(CliConfigTest, FileErrorIsOneLineWithFileLineColumnAndExitCode2) {
  const TempFile file("bad.toml", "[engine]\nnum_gpu_blocks = 0\n");
  const auto r = run({"config", "--dump", "--config", file.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(r.err, "mocker: configuration error: " + file.path() +
                       ":2:18: engine.num_gpu_blocks must be >= 1 (got 0)\n");
}

TEST(CliConfigTest, AFlagCanFixABadFileValue) {
  const TempFile file("bad.toml", "[engine]\nnum_gpu_blocks = 0\n");
  const auto r = run({"config", "--config", file.path(), "--num-gpu-blocks", "3"});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(CliConfigTest, FlagErrorsNameTheFlag) {
  for (const auto& [args, fragment] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--num-gpu-blocks", "0"}, "--num-gpu-blocks: engine.num_gpu_blocks must be >= 1"},
           {{"--num-gpu-blocks", "lots"},
            "--num-gpu-blocks: engine.num_gpu_blocks: expected an integer"},
           {{"--engine-type", "tgi"},
            "--engine-type: engine.engine_type: engine_type: unknown value 'tgi'"},
           {{"--kv-events-layout", "p10"}, "--kv-events-layout: kv_events.layout"},
           {{"--speedup-ratio", "-2"},
            "--speedup-ratio: engine.speedup_ratio must be finite and >= 0"},
           {{"--kv-events-topic", "kv@a@b@c"}, "--kv-events-topic: kv_events.topic"},
           {{"--timing-model", "interpolated"},
            "--timing-model: engine.timing_profile_path is required"},
           {{"--timing-profile", "/nonexistent/p.json"},
            "--timing-profile: engine.timing_profile_path"},
           {{"--dp-size", "2"}, "--dp-size: endpoints.kv_replay.endpoint"},
           {{"--kv-events-max-queue-size", "5"},
            "--kv-events-max-queue-size: kv_events.max_queue_size: not supported"},
       }) {
    std::vector<std::string> argv{"config"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run(argv);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_NE(r.err.find("mocker: configuration error: " + fragment), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(CliConfigTest, OfflineReplayChecksEngineRulesButNotEndpointRules) {
  const TempFile trace("t.jsonl", "{\"timestamp\": 0, \"output_length\": 2, \"hash_ids\": [1]}\n");
  // dp_size 2 with the default ports: a service's endpoints collide, an offline replay opens none.
  EXPECT_EQ(run({"config", "--dp-size", "2"}).code, 2);
  const auto ok = run({"replay", trace.path(), "--dp-size", "2"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  // The engine's rules still apply, with the same message as for a service.
  const auto bad = run({"replay", trace.path(), "--dp-size", "0"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "mocker replay: configuration error: --dp-size: engine.dp_size must be >= 1 (got 0)\n");
}

TEST(CliConfigTest, OfflineReplayRefusesFlagsThatOnlyConfigureTheService) {
  // These used to be accepted and ignored: an offline replay opens no socket, publishes nothing,
  // does not log, does not wait for a start-up delay and always accepts 0-token outputs.
  const TempFile trace("t.jsonl", "{\"timestamp\": 0, \"output_length\": 2, \"hash_ids\": [1]}\n");
  for (const auto& [flag, key] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--submit-endpoint", "udp://x"}, "endpoints.submit.endpoint"},
           {{"--kv-events-hwm", "5"}, "kv_events.hwm"},
           {{"--fpm"}, "fpm.enabled"},
           {{"--log-level", "debug"}, "logging.level"},
           {{"--startup-time", "5"}, "engine.startup_time_s"},
           {{"--allow-empty-output"}, "service.allow_empty_output"},
           {{"--linger-ms", "0"}, "service.linger_ms"},
       }) {
    std::vector<std::string> argv{"replay", trace.path()};
    argv.insert(argv.end(), flag.begin(), flag.end());
    const auto r = run(argv);
    EXPECT_EQ(r.code, 2) << flag[0];
    EXPECT_NE(r.err.find("configuration error: " + flag[0] + ": " + key + " has no effect here"),
              std::string::npos)
        << r.err;
  }
  // Engine keys apply, and a service's file may be reused (only its [engine] table is read).
  const TempFile file("serve.toml", "[engine]\nnum_gpu_blocks = 64\n[kv_events]\nhwm = 5\n");
  const auto ok = run({"replay", trace.path(), "--config", file.path(), "--speedup-ratio", "0"});
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(CliConfigTest, MissingConfigFileIsAnError) {
  const auto r = run({"config", "--config", "/nonexistent/mocker.toml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/mocker.toml"), std::string::npos) << r.err;
}

TEST(CliConfigTest, HelpCoversEveryConfigurationKey) {
  const auto r = run({"config", "--help"});
  ASSERT_EQ(r.code, 0);
  for (const std::string& key : service::configKeys()) {
    if (key == "engine.worker_type" || key == "engine.trtllm.capacity_scheduler_policy") {
      continue;  // single-valued keys: nothing to choose on the command line
    }
    if (key == "security.server_secret_key") {
      continue;  // a secret on a command line is visible to every user: only the file has a flag
    }
    EXPECT_NE(r.out.find("[" + key + "]"), std::string::npos) << "no flag for " << key;
  }
  EXPECT_NE(r.out.find("--config"), std::string::npos);
  EXPECT_NE(r.out.find("--dump"), std::string::npos);
  // A refused key is not advertised (it used to be listed as if it worked).
  EXPECT_EQ(r.out.find("max-queue-size"), std::string::npos);
  EXPECT_EQ(run({"serve", "--help"}).out.find("max-queue-size"), std::string::npos);
}

}  // namespace
}  // namespace mocker::tools
