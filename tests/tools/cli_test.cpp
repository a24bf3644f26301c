#include "tools/cli.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "service/config.h"
#include "tests/service/serve_process.h"
#include "tests/tools/cli_run.h"
#include "tools/index_command.h"
#include "tools/serve_flags.h"
#include "tools/stats_command.h"

namespace mocker::tools {
namespace {

using cli_test::CliRun;
using cli_test::runMocker;

TEST(CliTest, VersionPrintsProjectVersion) {
  const auto r = runMocker({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, versionString() + "\n");
  EXPECT_EQ(versionString(), std::string("mocker ") + MOCKER_VERSION_FOR_TEST);
}

TEST(CliTest, HelpListsUsage) {
  const auto r = runMocker({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Usage: mocker"), std::string::npos);
}

TEST(CliTest, UnknownOptionIsAUsageError) {
  const auto r = runMocker({"--no-such-flag"});
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
  const auto r = runMocker({"config", "--dump"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  // The defaults, with block_size 0 ("the engine's default") written as what it means.
  service::ServiceConfig expected;
  expected.engine.block_size = 64;
  EXPECT_TRUE(parseDump(r.out) == expected);
}

TEST(CliConfigTest, DumpShowsTheEffectiveBlockSizeOfEachEngine) {
  for (const auto& [args, block_size] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{}, "64"},
           {{"--engine-type", "trtllm"}, "32"},
           {{"--engine-type", "sglang", "--page-size", "16", "--chunked-prefill-size", "8192"},
            "16"},
           {{"--engine-type", "trtllm", "--block-size", "8"}, "8"},
       }) {
    std::vector<std::string> argv{"config", "--dump"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = runMocker(argv);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("\nblock_size = " + block_size + "\n"), std::string::npos)
        << block_size << "\n"
        << r.out;
    // The dump is a configuration file that passes validation as it is.
    const TempFile file("dump.toml", r.out);
    EXPECT_EQ(runMocker({"config", "--config", file.path()}).code, 0) << r.out;
  }
}

TEST(CliConfigTest, WithoutDumpOnlyValidates) {
  const auto r = runMocker({"config"});
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
  const auto r = runMocker({"config",
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
  auto r = runMocker({"config", "--dump", "--http-endpoint", "0.0.0.0:9100", "--log-format", "JSON",
                      "--log-stats-interval", "2.5", "--served-model-name", "llama",
                      "--worker-label", "pod-3"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto c = parseDump(r.out);
  EXPECT_EQ(c.endpoints.http, (service::HttpEndpointConfig{"0.0.0.0:9100", true}));
  EXPECT_EQ(c.log_format, service::LogFormat::Json);
  EXPECT_EQ(c.log_stats_interval_s, 2.5);
  EXPECT_EQ(c.service.served_model_name, "llama");
  EXPECT_EQ(c.service.worker_label, "pod-3");
  r = runMocker({"config", "--dump", "--no-http"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(parseDump(r.out).endpoints.http.enabled);
  r = runMocker({"config", "--http-endpoint", "http://127.0.0.1:8000"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--http-endpoint: endpoints.http.endpoint"), std::string::npos) << r.err;
  r = runMocker({"config", "--log-stats-interval", "-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("logging.stats_interval_s"), std::string::npos) << r.err;
}

TEST(CliConfigTest, NegatedFlagsTurnOptionsOff) {
  const auto r =
      runMocker({"config", "--dump", "--no-enable-prefix-caching", "--no-enable-chunked-prefill",
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
  const auto r = runMocker({"config", "--dump", "--config", file.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(r.err, "mocker: configuration error: " + file.path() +
                       ":2:18: engine.num_gpu_blocks must be >= 1 (got 0)\n");
}

TEST(CliConfigTest, AFlagCanFixABadFileValue) {
  const TempFile file("bad.toml", "[engine]\nnum_gpu_blocks = 0\n");
  const auto r = runMocker({"config", "--config", file.path(), "--num-gpu-blocks", "3"});
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
           {{"--dp-size", "2", "--kv-events-endpoint", "tcp://127.0.0.1:5557"},
            "--kv-events-endpoint: endpoints.kv_replay.endpoint"},
           {{"--kv-events-max-queue-size", "5"},
            "--kv-events-max-queue-size: kv_events.max_queue_size: not supported"},
       }) {
    std::vector<std::string> argv{"config"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = runMocker(argv);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_NE(r.err.find("mocker: configuration error: " + fragment), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(CliConfigTest, OfflineReplayChecksEngineRulesButNotEndpointRules) {
  const TempFile trace("t.jsonl", "{\"timestamp\": 0, \"output_length\": 2, \"hash_ids\": [1]}\n");
  // dp_size 2 with given ports that collide: a service's endpoints collide, an offline replay
  // opens none. (With no endpoint given the default port plan spaces them: PortPlanTest.)
  EXPECT_EQ(
      runMocker({"config", "--dp-size", "2", "--kv-events-endpoint", "tcp://127.0.0.1:5557"}).code,
      2);
  EXPECT_EQ(runMocker({"config", "--dp-size", "2"}).code, 0);
  const auto ok = runMocker({"replay", trace.path(), "--dp-size", "2"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  // The engine's rules still apply, with the same message as for a service.
  const auto bad = runMocker({"replay", trace.path(), "--dp-size", "0"});
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
    const auto r = runMocker(argv);
    EXPECT_EQ(r.code, 2) << flag[0];
    EXPECT_NE(r.err.find("configuration error: " + flag[0] + ": " + key + " has no effect here"),
              std::string::npos)
        << r.err;
  }
  // Engine keys apply, and a service's file may be reused (only its [engine] table is read).
  const TempFile file("serve.toml", "[engine]\nnum_gpu_blocks = 64\n[kv_events]\nhwm = 5\n");
  const auto ok =
      runMocker({"replay", trace.path(), "--config", file.path(), "--speedup-ratio", "0"});
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(CliConfigTest, MissingConfigFileIsAnError) {
  const auto r = runMocker({"config", "--config", "/nonexistent/mocker.toml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/mocker.toml"), std::string::npos) << r.err;
}

TEST(CliConfigTest, HelpCoversEveryConfigurationKey) {
  const auto r = runMocker({"config", "--help"});
  ASSERT_EQ(r.code, 0);
  for (const std::string& key : service::configKeys()) {
    if (key == "engine.trtllm.capacity_scheduler_policy") {
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
  EXPECT_EQ(runMocker({"serve", "--help"}).out.find("max-queue-size"), std::string::npos);
}

// --- --help: types, defaults, what applies ------------------------------------------------------

/// The help line of `flag` (the line that starts with it, and the next one when the names fill
/// the first).
std::string helpEntry(const std::string& help, const std::string& flag) {
  const std::size_t at = help.find("\n  " + flag);
  if (at == std::string::npos) return "";
  std::size_t end = help.find('\n', at + 1);
  if (end != std::string::npos && help.compare(end + 1, 4, "    ") == 0) {
    end = help.find('\n', end + 1);
  }
  return help.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

TEST(CliHelpTest, ServeOptionsShowTheirTypeAndDefault) {
  const auto r = runMocker({"serve", "--help"});
  ASSERT_EQ(r.code, 0);
  for (const auto& [flag, fragments] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"--num-gpu-blocks", {"UINT|none", "(default: none)", "1 Mi tokens"}},
           {"--max-num-seqs", {"UINT|none", "(default: 256)"}},
           {"--max-model-len", {"UINT|none", "(default: none)"}},
           {"--speedup-ratio", {"FLOAT", "(default: 1.0)"}},
           {"--engine-type", {"NAME", "(default: vllm)"}},
           {"--submit-endpoint", {"EP", "(default: tcp://127.0.0.1:5555)"}},
           {"--page-size", {"0 = unset: the block size if that is set, else 1"}},
           {"--spec-num-draft-tokens", {"(in 1..5)"}},
           {"--client-public-keys", {"LIST"}},
       }) {
    const std::string entry = helpEntry(r.out, flag);
    ASSERT_FALSE(entry.empty()) << flag;
    for (const std::string& f : fragments) {
      EXPECT_NE(entry.find(f), std::string::npos) << flag << ": " << entry;
    }
  }
  EXPECT_EQ(r.out.find(" TEXT          scheduler"), std::string::npos);  // no more TEXT for all
}

// One metavar per kind of value, ranges spelled one way, and what an option excludes in its
// description rather than on its name line.
TEST(CliHelpTest, ReplayHelpSpeaksOneStyle) {
  const auto r = runMocker({"replay", "--help"});
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out.find("Excludes:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("TEXT:{"), std::string::npos) << r.out;
  for (const auto& [flag, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"--num-requests", "(not with --num-prompts)"},
           {"--mode", "--mode NAME:{offline,live}"},
           {"--report-json", "--report-json FILE"},
           {"--connect-kv-events", "EP"},
           {"--subagent-fanout", "(in 1..64)"},
       }) {
    const std::string entry = helpEntry(r.out, flag);
    EXPECT_NE(entry.find(fragment), std::string::npos) << flag << ": " << entry;
  }
  EXPECT_NE(r.out.find("it does not make the replay itself faster"), std::string::npos);
}

// `mocker index --block-size` is the default of token queries: it must be mocker serve's own
// default (vllm, 64 tokens per block), or an index next to a default worker hashes every query
// into the wrong blocks. tests/tools/index_restart_test.py checks the same through a real query.
TEST(CliHelpTest, IndexBlockSizeDefaultIsServesDefault) {
  const auto r = runMocker({"index", "--help"});
  ASSERT_EQ(r.code, 0);
  const std::string entry = helpEntry(r.out, "--block-size");
  EXPECT_NE(entry.find("(default: 64)"), std::string::npos) << entry;
  const auto serve = runMocker({"config", "--dump"});  // a default worker's effective config
  ASSERT_EQ(serve.code, 0) << serve.err;
  EXPECT_NE(serve.out.find("\nblock_size = 64\n"), std::string::npos);
}

TEST(CliHelpTest, BooleanPairsShowTheirRealDefault) {
  const auto r = runMocker({"serve", "--help"});
  ASSERT_EQ(r.code, 0);
  // CLI11 printed "--x,--no-x{false}", which reads as "default false".
  EXPECT_EQ(r.out.find("{false}"), std::string::npos) << r.out;
  EXPECT_NE(helpEntry(r.out, "--enable-prefix-caching").find("(default: on)"), std::string::npos)
      << helpEntry(r.out, "--enable-prefix-caching");
  EXPECT_NE(helpEntry(r.out, "--allow-empty-output").find("(default: off)"), std::string::npos)
      << helpEntry(r.out, "--allow-empty-output");
  EXPECT_NE(helpEntry(r.out, "--kv-events,--no-kv-events").find("(default: on)"),
            std::string::npos);
}

TEST(CliHelpTest, ReplayHelpShowsOnlyTheFlagsThatApply) {
  const auto replay = runMocker({"replay", "--help"});
  const auto serve = runMocker({"serve", "--help"});
  ASSERT_EQ(replay.code, 0);
  for (const std::string& key : service::configKeys()) {
    const bool shown = replay.out.find("[" + key + "]") != std::string::npos;
    if (isEngineOnlyKey(key)) {
      if (serve.out.find("[" + key + "]") != std::string::npos) {
        EXPECT_TRUE(shown) << key << " configures the offline engines or their fault plan";
      }
    } else {
      EXPECT_FALSE(shown) << key << " has no effect in a replay";
    }
  }
  for (const char* group : {"Live service", "Endpoints", "Security", "Logging"}) {
    EXPECT_EQ(replay.out.find(group), std::string::npos) << group;
  }
  // Typed, with defaults, and range-checked options say so.
  EXPECT_NE(helpEntry(replay.out, "--num-workers").find("UINT:>= 1"), std::string::npos)
      << helpEntry(replay.out, "--num-workers");
  EXPECT_NE(helpEntry(replay.out, "--num-workers").find("(default: 1)"), std::string::npos);
  EXPECT_NE(helpEntry(replay.out, "--progress,--no-progress").find("(default: on)"),
            std::string::npos);
}

// --- usage errors: wording, "did you mean", exit code 2 ------------------------------------------

TEST(CliErrorTest, UnknownOptionsAndCommandsGetTheNearestName) {
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"serve", "--num-gpu-block", "5"},
            "mocker serve: unknown option '--num-gpu-block' (did you mean '--num-gpu-blocks'?)"},
           {{"serve", "--enable-prefix-cashing"},
            "unknown option '--enable-prefix-cashing' (did you mean '--enable-prefix-caching'?)"},
           {{"replay", "x.jsonl", "--num-request", "3"},
            "mocker replay: unknown option '--num-request' (did you mean '--num-requests'?)"},
           {{"config", "--dmup"},
            "mocker config: unknown option '--dmup' (did you mean '--dump'?)"},
           {{"submit", "--prompt-length=3"},
            "unknown option '--prompt-length' (did you mean '--prompt-len'?)"},
           {{"serv"}, "mocker: unknown command 'serv' (did you mean 'serve'?)"},
       }) {
    std::vector<std::string> argv = args;
    const auto r = runMocker(argv);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  }
  // Nothing near: no suggestion.
  const auto far = runMocker({"serve", "--frobnicate"});
  EXPECT_EQ(far.code, 2);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  // A flag replay hides (no effect there) is not suggested.
  const auto hidden = runMocker({"replay", "x.jsonl", "--submit-endpoin", "x"});
  EXPECT_EQ(hidden.err.find("--submit-endpoint'"), std::string::npos) << hidden.err;
}

TEST(CliErrorTest, RangesAreWordedForPeople) {
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"replay", "x.jsonl", "--num-workers", "0"}, "--num-workers: must be >= 1 (got 0)"},
           {{"replay", "x.jsonl", "--arrival-speedup-ratio", "0"},
            "--arrival-speedup-ratio: must be > 0 (got 0)"},
           {{"replay", "--format", "synthetic", "--request-rate", "0"},
            "--request-rate: must be > 0 (got 0)"},
           {{"replay", "--format", "synthetic", "--shared-prefix-ratio", "1.5"},
            "--shared-prefix-ratio: must be in 0..1 (got 1.5)"},
           {{"replay", "x.jsonl", "--arrival-speedup-ratio", "inf"},
            "--arrival-speedup-ratio: expected a finite number, got 'inf'"},
           {{"submit", "--prompt-len", "0"}, "--prompt-len: must be in 1..1048576 (got 0)"},
           {{"submit", "--prompt-len", "4", "--timeout-s", "0"},
            "--timeout-s: must be > 0 (got 0)"},
       }) {
    const auto r = runMocker(args);
    EXPECT_EQ(r.code, 2) << args[1];
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("not in range"), std::string::npos) << r.err;
  }
}

TEST(CliErrorTest, ConfigKeyTyposGetTheNearestKey) {
  const TempFile file("typo.toml", "[engine]\nnum_gpu_block = 5\n");
  const auto r = runMocker({"config", "--config", file.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("engine.num_gpu_block: unknown key (did you mean 'engine.num_gpu_blocks'?)"),
            std::string::npos)
      << r.err;
  const TempFile table("table.toml", "[kv_event]\nhwm = 5\n");
  const auto t = runMocker({"config", "--config", table.path()});
  EXPECT_NE(t.err.find("unknown table (did you mean 'kv_events'?)"), std::string::npos) << t.err;
}

TEST(CliErrorTest, SyntheticWorkloadNeedsAnOutputLength) {
  // Without it every output used to be one token long (lengths are raised to at least 1).
  const auto r = runMocker(
      {"replay", "--format", "synthetic", "--num-requests", "3", "--input-tokens-mean", "64"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "mocker replay: --output-tokens-mean: required (> 0)\n");
  const auto zero = runMocker({"replay", "--format", "synthetic", "--num-requests", "3",
                               "--input-tokens-mean", "64", "--output-tokens-mean", "0"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("--output-tokens-mean: must be > 0 (got 0)"), std::string::npos)
      << zero.err;
}

TEST(CliErrorTest, LoraAdaptersNeedMaxLoras) {
  // Without --max-loras every request naming an adapter used to be refused, counted as "other".
  const std::vector<std::string> base = {"replay",    "--format",
                                         "synthetic", "--num-requests",
                                         "4",         "--input-tokens-mean",
                                         "16",        "--output-tokens-mean",
                                         "2",         "--loras",
                                         "2"};
  const auto r = runMocker(base);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("4 requests name a LoRA adapter but --max-loras is 0"), std::string::npos)
      << r.err;
  auto with = base;
  with.insert(with.end(), {"--max-loras", "1"});
  const auto ok = runMocker(with);
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// --- aliases: names users already type -----------------------------------------------------------

TEST(CliAliasTest, VllmAndSglangEngineFlagNames) {
  const auto r = runMocker({"config", "--dump", "--num-gpu-blocks-override", "77", "--engine-type",
                            "sglang", "--schedule-policy", "lpm"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto c = parseDump(r.out);
  EXPECT_EQ(c.engine.num_gpu_blocks, 77u);
  EXPECT_NE(r.out.find("schedule_policy = \"lpm\""), std::string::npos) << r.out;
  // A policy SGLang has but mocker does not model is refused, naming the accepted ones.
  const auto bad =
      runMocker({"config", "--engine-type", "sglang", "--schedule-policy", "dfs-weight"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--sglang-schedule-policy: engine.sglang.schedule_policy"),
            std::string::npos)
      << bad.err;
}

// The rest of a vLLM / SGLang launch line (service/README.md, "vLLM and SGLang launch lines").
TEST(CliAliasTest, LaunchLineFlagsMapOntoTheirKeys) {
  const auto r = runMocker({"config", "--dump", "--host", "0.0.0.0", "--port", "9000", "--model",
                            "meta-llama/Llama-3.1-8B", "--disable-log-stats",
                            "--max-running-requests", "8", "--disable-radix-cache"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto c = parseDump(r.out);
  EXPECT_EQ(c.endpoints.http.endpoint, "0.0.0.0:9000");
  EXPECT_EQ(c.service.served_model_name, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(c.log_stats_interval_s, 0.0);
  EXPECT_EQ(c.engine.max_num_seqs, 8u);
  EXPECT_FALSE(c.engine.enable_prefix_caching);
  // Each part keeps its default; --served-model-name wins over --model, as in vLLM.
  const auto port_only = runMocker(
      {"config", "--dump", "--port", "9001", "--model", "m", "--served-model-name", "name"});
  ASSERT_EQ(port_only.code, 0) << port_only.err;
  EXPECT_EQ(parseDump(port_only.out).endpoints.http.endpoint, "127.0.0.1:9001");
  EXPECT_EQ(parseDump(port_only.out).service.served_model_name, "name");
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"config", "--port", "9000", "--http-endpoint", "127.0.0.1:1"},
            "give --http-endpoint or --host / --port, not both"},
           {{"config", "--disable-log-stats", "--log-stats-interval", "5"},
            "give --log-stats-interval or --disable-log-stats, not both"},
           {{"replay", "--format", "synthetic", "--num-requests", "1", "--input-tokens-mean", "8",
             "--output-tokens-mean", "2", "--model", "m"},
            "--model has no effect here"},
       }) {
    const auto bad = runMocker(args);
    EXPECT_EQ(bad.code, 2) << message;
    EXPECT_NE(bad.err.find(message), std::string::npos) << bad.err;
  }
  // vLLM's --tensor-parallel-size is another setting, not a typo of --data-parallel-size.
  const auto tp = runMocker({"config", "--tensor-parallel-size", "2"});
  EXPECT_EQ(tp.err.find("--data-parallel-size"), std::string::npos) << tp.err;
}

TEST(CliAliasTest, VllmKvEventsConfigJsonSetsTheMatchingKeys) {
  const auto r = runMocker({"config", "--dump", "--kv-events-config",
                            R"({"enable_kv_cache_events": true, "publisher": "zmq",
                          "endpoint": "tcp://*:6557", "replay_endpoint": "tcp://*:6558",
                          "buffer_steps": 500, "hwm": 1000, "topic": "kv@pod@model"})"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto c = parseDump(r.out);
  EXPECT_TRUE(c.kv_events.enabled);
  // vLLM binds a wildcard endpoint.
  EXPECT_EQ(c.endpoints.kv_events, (service::EndpointConfig{"tcp://*:6557", false}));
  EXPECT_EQ(c.endpoints.kv_replay.endpoint, "tcp://*:6558");
  EXPECT_TRUE(c.kv_events.replay_enabled);
  EXPECT_EQ(c.kv_events.buffer_steps, 500u);
  EXPECT_EQ(c.kv_events.hwm, 1000u);
  EXPECT_EQ(c.kv_events.topic, "kv@pod@model");

  // A host name is connected to, as vLLM does; a null replay endpoint means no replay; a later
  // flag overrides the JSON.
  const auto connect = runMocker({"config", "--dump", "--kv-events-config",
                                  R"({"endpoint": "tcp://indexer:5557", "replay_endpoint": null,
                                "hwm": 5})",
                                  "--kv-events-hwm", "9"});
  ASSERT_EQ(connect.code, 0) << connect.err;
  const auto cc = parseDump(connect.out);
  EXPECT_EQ(cc.endpoints.kv_events, (service::EndpointConfig{"tcp://indexer:5557", true}));
  EXPECT_FALSE(cc.kv_events.replay_enabled);
  EXPECT_EQ(cc.kv_events.hwm, 9u);
  const auto off =
      runMocker({"config", "--dump", "--kv-events-config", R"({"publisher": "null"})"});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_FALSE(parseDump(off.out).kv_events.enabled);
}

TEST(CliAliasTest, VllmKvEventsConfigRefusesWhatItCannotMap) {
  for (const auto& [json, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"max_queue_size": 10})", "kv_events.max_queue_size): not supported"},
           {R"({"hwmm": 10})",
            "unknown or unsupported field 'hwmm' (did you mean 'hwm'?); mocker takes"},
           {R"({"publisher": "nats"})", "publisher: expected \"zmq\" or \"null\", got 'nats'"},
           {R"({"hwm": "lots"})", "--kv-events-config: hwm (kv_events.hwm): expected"},
           {R"({"hwm": [1]})", "expected a boolean, integer or string, got array"},
           {R"([1, 2])", "--kv-events-config: expected a JSON object"},
           {R"({"hwm": )", "--kv-events-config: not JSON"},
       }) {
    const auto r = runMocker({"config", "--kv-events-config", json});
    EXPECT_EQ(r.code, 2) << json;
    EXPECT_NE(r.err.find(expected), std::string::npos) << json << "\n" << r.err;
  }
  // An offline replay opens no socket: the flag has no effect there.
  const auto replay = runMocker({"replay", "x.jsonl", "--kv-events-config", "{}"});
  EXPECT_EQ(replay.code, 2);
  EXPECT_NE(replay.err.find("--kv-events-config has no effect here"), std::string::npos)
      << replay.err;
}

/// The report of a synthetic replay with `extra` flags, as JSON text (wall-clock fields removed).
std::string syntheticReport(const std::vector<std::string>& extra, int* code = nullptr) {
  const TempFile report("report.json", "");
  std::vector<std::string> argv{"replay",     "--format",
                                "synthetic",  "--input-tokens-mean",
                                "200",        "--output-tokens-mean",
                                "20",         "--request-rate",
                                "50",         "--seed",
                                "7",          "--report-json",
                                report.path()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto r = runMocker(argv);
  if (code != nullptr) *code = r.code;
  EXPECT_EQ(r.code, 0) << r.err;
  std::ifstream in(report.path());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Wall-clock figures (and processed tokens per wall second) and the "run" object (date,
  // command line) differ between runs; everything simulated is deterministic.
  std::string kept;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("wall") == std::string::npos && line.find("speedup") == std::string::npos &&
        line.find("processed_tokens_per_s") == std::string::npos &&
        line.find("\"date_utc\"") == std::string::npos &&
        line.find("\"command_line\"") == std::string::npos) {
      kept += line + "\n";
    }
  }
  return kept;
}

TEST(CliAliasTest, VllmBenchWorkloadFlagsMeanTheNativeOnes) {
  const std::string native =
      syntheticReport({"--num-requests", "30", "--arrival", "gamma", "--gamma-smoothness", "0.5",
                       "--slo-ttft-ms", "40", "--slo-tpot-ms", "15", "--slo-e2e-ms", "400"});
  ASSERT_FALSE(native.empty());
  EXPECT_NE(native.find("goodput_completed_requests"), std::string::npos) << native;
  const std::string vllm = syntheticReport({"--num-prompts", "30", "--burstiness", "0.5",
                                            "--goodput", "ttft:40", "tpot:15", "e2el:400"});
  EXPECT_EQ(vllm, native);
  // Not the same as a different SLO (the comparison can fail).
  EXPECT_NE(syntheticReport({"--num-prompts", "30", "--burstiness", "0.5", "--goodput", "ttft:1"}),
            native);
}

TEST(CliAliasTest, VllmBenchWorkloadFlagsRefuseWhatTheyCannotMean) {
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--num-prompts", "3", "--turns-per-session", "2"},
            "--num-prompts counts single-turn requests"},
           {{"--num-prompts", "3", "--burstiness", "2", "--arrival", "poisson"},
            "--burstiness sets gamma arrivals; it does not combine with --arrival poisson"},
           {{"--num-prompts", "3", "--goodput", "itl:5"}, "--goodput: expected KEY:MS"},
           {{"--num-prompts", "3", "--goodput", "ttft:-1"}, "--goodput: ttft: must be >= 0"},
           {{"--num-prompts", "3", "--goodput", "ttft:5", "ttft:6"}, "--goodput: ttft given twice"},
           {{"--num-prompts", "3", "--goodput", "ttft:5", "--slo-ttft-ms", "5"}, "excludes"},
       }) {
    std::vector<std::string> argv{
        "replay", "--format", "synthetic", "--input-tokens-mean", "10", "--output-tokens-mean",
        "2"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = runMocker(argv);
    EXPECT_EQ(r.code, 2) << args[2];
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  }
}

// --- the real binary: exit codes
// ------------------------------------------------------------------

/// A fresh directory under the temp dir (mkdtemp), removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "mocker_cli_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct ProcessRun {
  int code = -1;
  std::string out;
  std::string err;
  double seconds = 0.0;
};

std::string readAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Runs build/tools/mocker with `args` to completion (stdout and stderr through files).
ProcessRun runBinary(const std::vector<std::string>& args) {
  const TempDir dir;
  std::vector<std::string> all{MOCKER_BINARY_FOR_TEST};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = (dir.path() / "out").string();
  const std::string err_path = (dir.path() / "err").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ProcessRun r;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0];
    return r;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = readAll(out_path);
  r.err = readAll(err_path);
  return r;
}

TEST(CliExitCodeTest, UsageErrorsExit2AndInputErrorsExit1) {
  const TempDir dir;
  const std::string bad_trace = (dir.path() / "bad.jsonl").string();
  std::ofstream(bad_trace) << "{\"timestamp\": \n";
  const std::string other = (dir.path() / "trace.txt").string();
  std::ofstream(other) << "x\n";
  for (const auto& [args, code] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{"replay"}, 2},                                             // no trace
           {{"replay", other}, 2},                                      // unknown extension
           {{"replay", bad_trace, "--arrival-speedup-ratio", "0"}, 2},  // before reading it
           {{"replay", "--format", "synthetic", "--num-requests", "2", "--input-tokens-mean", "4",
             "--output-tokens-mean", "2", "--request-rate", "0"},
            2},
           {{"replay", "--format", "mooncake"}, 2},  // format without a file
           {{"serve", "--no-such-flag"}, 2},
           {{"config", "--num-gpu-blocks", "0"}, 2},
           {{"submit"}, 2},             // no prompt
           {{"replay", bad_trace}, 1},  // malformed input: not a usage error
           {{"replay", (dir.path() / "missing.jsonl").string()}, 1},
           {{"replay", "--help"}, 0},
       }) {
    const ProcessRun r = runBinary(args);
    EXPECT_EQ(r.code, code) << (args.size() > 1 ? args[1] : args[0]) << ": " << r.err;
    if (code == 2) {
      EXPECT_FALSE(r.err.empty());
    }
  }
}

// --- mocker submit against nothing, a silent peer and a real service
// ------------------------------

/// A loopback TCP port that nothing listens on: bound, read back, closed.
int unusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(CliSubmitTest, NothingListeningIsReportedWithinAboutASecond) {
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(unusedPort());
  const ProcessRun r = runBinary({"submit", "--prompt-len", "4", "--submit-endpoint", endpoint,
                                  "--cancel-endpoint", endpoint, "--timeout-s", "30"});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.seconds, 5.0);  // generous: the wait is one second, --timeout-s is 30
  EXPECT_NE(r.err.find("nothing answers at " + endpoint), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mocker serve --submit-endpoint " + endpoint), std::string::npos) << r.err;
}

TEST(CliSubmitTest, APeerThatNeverAnswersIsNamedBeforeTheTimeout) {
  zmq::context_t context;
  zmq::socket_t silent(context, zmq::socket_type::router);
  silent.bind("tcp://127.0.0.1:*");
  zmq::socket_t silent_cancel(context, zmq::socket_type::router);
  silent_cancel.bind("tcp://127.0.0.1:*");
  const std::string endpoint = silent.get(zmq::sockopt::last_endpoint);
  const std::string cancel = silent_cancel.get(zmq::sockopt::last_endpoint);
  const ProcessRun r = runBinary({"submit", "--prompt-len", "4", "--submit-endpoint", endpoint,
                                  "--cancel-endpoint", cancel, "--timeout-s", "2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("connected to " + endpoint + " but no answer yet"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;

  // One address for both sockets is refused before anything is sent: the ROUTER would refuse
  // the second connection with the client's routing id.
  const ProcessRun same = runBinary({"submit", "--prompt-len", "4", "--submit-endpoint", endpoint,
                                     "--cancel-endpoint", endpoint, "--timeout-s", "2"});
  EXPECT_EQ(same.code, 1);
  EXPECT_NE(same.err.find("is the submit endpoint"), std::string::npos) << same.err;
}

TEST(CliSubmitTest, ShowsTtftAndPrefixCacheHits) {
  service::testing::ServeProcess serve({"--no-kv-events", "--no-fpm", "--no-kv-replay"});
  ASSERT_TRUE(serve.awaitReady());
  const std::vector<std::string> base{"submit",
                                      "--prompt-len",
                                      "200",
                                      "--max-tokens",
                                      "3",
                                      "--submit-endpoint",
                                      serve.endpoints["submit"],
                                      "--cancel-endpoint",
                                      serve.endpoints["cancel"]};
  const ProcessRun first = runBinary(base);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("finish length"), std::string::npos) << first.out;
  EXPECT_NE(first.err.find("3 tokens in "), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("; TTFT "), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("prefix-cache hits 0 of 200 prompt tokens"), std::string::npos)
      << first.err;
  // The same prompt again: its full blocks (3 of 64 tokens) come from the prefix cache.
  const ProcessRun second = runBinary(base);
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.err.find("prefix-cache hits 192 of 200 prompt tokens"), std::string::npos)
      << second.err;
  EXPECT_EQ(serve.stop(), 0);
}

// A prefill worker answers a submit with a handoff instead of tokens: submit prints the ticket and
// exits 0 (it used to wait for --timeout-s), or runs the decode hop with --decode-endpoint.
TEST(CliSubmitTest, APrefillWorkerHandsOffAndDecodeEndpointRunsTheSecondHop) {
  const std::vector<std::string> quiet{"--no-kv-events", "--no-fpm", "--no-kv-replay"};
  std::vector<std::string> prefill_args = quiet;
  prefill_args.insert(prefill_args.end(),
                      {"--worker-type", "prefill", "--handoff-endpoint", "tcp://127.0.0.1:*"});
  std::vector<std::string> decode_args = quiet;
  decode_args.insert(decode_args.end(), {"--worker-type", "decode"});
  service::testing::ServeProcess prefill(prefill_args);
  service::testing::ServeProcess decode(decode_args);
  ASSERT_TRUE(prefill.awaitReady());
  ASSERT_TRUE(decode.awaitReady());
  const std::vector<std::string> base{"submit",
                                      "--prompt-len",
                                      "100",
                                      "--max-tokens",
                                      "3",
                                      "--timeout-s",
                                      "60",
                                      "--submit-endpoint",
                                      prefill.endpoints["submit"],
                                      "--cancel-endpoint",
                                      prefill.endpoints["cancel"]};
  const ProcessRun handed = runBinary(base);
  ASSERT_EQ(handed.code, 0) << handed.err;
  EXPECT_NE(handed.out.find("handoff source tcp://127.0.0.1:"), std::string::npos) << handed.out;
  EXPECT_NE(handed.out.find(" prompt_len 100 "), std::string::npos) << handed.out;
  EXPECT_NE(handed.err.find("handed off to decode; ticket from tcp://127.0.0.1:"),
            std::string::npos)
      << handed.err;
  EXPECT_NE(handed.err.find("give --decode-endpoint"), std::string::npos) << handed.err;

  std::vector<std::string> both = base;
  both.insert(both.end(), {"--decode-endpoint", decode.endpoints["submit"],
                           "--decode-cancel-endpoint", decode.endpoints["cancel"]});
  const ProcessRun decoded = runBinary(both);
  ASSERT_EQ(decoded.code, 0) << decoded.err;
  EXPECT_NE(decoded.out.find("handoff source "), std::string::npos) << decoded.out;
  EXPECT_NE(decoded.out.find("finish length"), std::string::npos) << decoded.out;
  EXPECT_NE(decoded.err.find("submitting it to the decode worker"), std::string::npos)
      << decoded.err;
  EXPECT_NE(decoded.err.find("3 tokens in "), std::string::npos) << decoded.err;
  EXPECT_EQ(decode.stop(), 0);
  EXPECT_EQ(prefill.stop(), 0);
}

// mocker index: an endpoint without its transport is a usage error giving the form; a query port
// in use names --query-endpoint; a worker that could not be compared is an error, not a
// difference of 0 sources.
TEST(CliIndexTest, ErrorsNameTheFlagAndTheForm) {
  const auto bare = runMocker({"index", "--worker", "0=localhost:5557"});
  EXPECT_EQ(bare.code, 2);
  EXPECT_NE(bare.err.find("endpoint 'localhost:5557' has no transport; expected "
                          "ID[/RANK]=tcp://HOST:PORT"),
            std::string::npos)
      << bare.err;
  zmq::context_t context;
  zmq::socket_t holder(context, zmq::socket_type::router);
  holder.bind("tcp://127.0.0.1:*");
  const std::string taken = holder.get(zmq::sockopt::last_endpoint);
  const std::string worker = "tcp://127.0.0.1:" + std::to_string(unusedPort());
  const auto busy = runMocker({"index", "--worker", "0=" + worker, "--query-endpoint", taken});
  EXPECT_EQ(busy.code, 1);
  EXPECT_NE(busy.err.find("give --query-endpoint another address"), std::string::npos) << busy.err;

  index::VerifyReply unreachable{.ok = false,
                                 .errors = {"worker 0: no kv_snapshot reply within 2000 ms"}};
  const std::string text = formatVerifyReply(unreachable);
  EXPECT_EQ(
      text.rfind("verify: ERROR (0 source(s), 0 worker block(s); 1 could not be compared)", 0), 0u)
      << text;
  EXPECT_EQ(formatVerifyReply({.ok = false, .sources = {{.worker_id = 1, .missing = {7}}}})
                .rfind("verify: DIFFERENCE", 0),
            0u);
}

// `mocker stats ENDPOINT`: one stats round trip, for a human and as JSON.
TEST(CliStatsTest, AsksARunningServiceOnceHumanAndJson) {
  service::testing::ServeProcess serve({"--no-kv-events", "--no-fpm", "--no-kv-replay",
                                        "--block-size", "16", "--speedup-ratio", "10"});
  ASSERT_TRUE(serve.awaitReady());
  const ProcessRun human = runBinary({"stats", serve.endpoints["submit"]});
  ASSERT_EQ(human.code, 0) << human.err;
  EXPECT_NE(human.out.find("engine vllm, worker type aggregated, block size 16 tokens, speedup 10"),
            std::string::npos)
      << human.out;
  EXPECT_NE(human.out.find("rank 0: running 0, waiting 0, KV 0 of "), std::string::npos)
      << human.out;
  const ProcessRun json = runBinary({"stats", serve.endpoints["submit"], "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["engine"]["block_size"], 16);
  EXPECT_EQ(j["engine"]["speedup_ratio"], 10.0);
  EXPECT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["routes"], 0);
  EXPECT_TRUE(j["timing"].is_object());
  EXPECT_EQ(serve.stop(), 0);

  const std::string nothing = "tcp://127.0.0.1:" + std::to_string(unusedPort());
  const ProcessRun none = runBinary({"stats", nothing});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("nothing answers at " + nothing), std::string::npos) << none.err;
}

TEST(CliStatsTest, FormatsWhatAReplyCarries) {
  protocol::StatsReply r{.ranks = {{.dp_rank = 0,
                                    .active_blocks = 3,
                                    .total_blocks = 64,
                                    .kv_usage = 0.046875,
                                    .prefix_queries_tokens = 40,
                                    .prefix_hit_tokens = 16,
                                    .held = 1,
                                    .pending_handoffs = 0,
                                    .handoff_expired = 2}},
                         .routes = 1};
  EXPECT_EQ(formatStatsText(r),
            "engine: not reported (a mocker older than this one)\n"
            "rank 0: running 0, waiting 0, KV 3 of 64 blocks (4.7 %), preemptions 0, prefix "
            "cache 16 of 40 prompt tokens, held 1, pending handoffs 0, expired holds 2\n"
            "routes 1 (live requests, every client)\n");
  const auto j = nlohmann::json::parse(formatStatsJson(r));
  EXPECT_TRUE(j["engine"].is_null());
  EXPECT_TRUE(j["timing"].is_null());
  EXPECT_EQ(j["ranks"][0]["handoff_expired"], 2);
}

// --- mocker serve: address already in use
// ---------------------------------------------------------

TEST(CliServeTest, AddressInUseNamesTheFlagToChange) {
  zmq::context_t context;
  zmq::socket_t holder(context, zmq::socket_type::pub);
  holder.bind("tcp://127.0.0.1:*");
  const std::string taken = holder.get(zmq::sockopt::last_endpoint);
  std::vector<std::string> args{"serve"};
  for (const char* flag :
       {"--submit-endpoint", "--cancel-endpoint", "--kv-events-endpoint", "--kv-replay-endpoint"}) {
    args.emplace_back(flag);
    args.emplace_back("tcp://127.0.0.1:*");
  }
  args.insert(args.end(), {"--fpm-endpoint", taken});
  const ProcessRun r = runBinary(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("Address already in use"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("give --fpm-endpoint another address"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mocker::tools
