// The JSONL dialect from a trace's first lines, and `mocker replay` choosing it (and saying so)
// when --format is not given.
#include "tools/replay/trace_dialect.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"
#include "tests/tools/replay_test_util.h"
#include "tools/cli.h"

namespace mocker::replay {
namespace {

std::string guessOf(const std::string& text) {
  const Result<DialectGuess> g = detectJsonlDialect(text);
  EXPECT_TRUE(g.has_value()) << g.error().message;
  return g ? g->format : std::string();
}

TEST(TraceDialectTest, AgenticKeysDecide) {
  for (const char* key : {"wait_for", "branches", "prefix_reset", "tool_wait_ms"}) {
    const std::string text = R"({"timestamp": 0, "hash_ids": [1]})"
                             "\n"
                             R"({"request_id": "b", ")" +
                             std::string(key) + R"(": null, "hash_ids": [1]})" + "\n";
    const Result<DialectGuess> g = detectJsonlDialect(text);
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->format, "agentic");
    EXPECT_EQ(g->reason, std::string("line 2 has '") + key + "'");
  }
}

TEST(TraceDialectTest, LaterTurnsThatRepeatThePromptAreMooncakeOthersDelta) {
  // s: [1,2,3] then [1,2,7,8]: all but the last block repeated (the last one was partial).
  EXPECT_EQ(guessOf(R"({"session_id": "s", "hash_ids": [1, 2, 3]})"
                    "\n"
                    R"({"session_id": "s", "hash_ids": [1, 2, 7, 8]})"
                    "\n"),
            "mooncake");
  EXPECT_EQ(guessOf(R"({"session_id": "s", "hash_ids": [1, 2, 3]})"
                    "\n"
                    R"({"session_id": "s", "hash_ids": [5]})"
                    "\n"),
            "mooncake-delta");
  // No session with two turns (a real Mooncake trace has no session_id), one-block prompts, a cut
  // last line and lines that do not parse: mooncake, the two read the same.
  EXPECT_EQ(guessOf(R"({"timestamp": 0, "hash_ids": [1, 2]})"
                    "\n"
                    R"({"session_id": "s", "hash_ids": [1]})"
                    "\n"
                    R"({"session_id": "s", "hash_ids": [4]})"
                    "\n"
                    "not json\n"
                    R"({"session_id": "s", "hash_ids": [9, 9)"),
            "mooncake");
}

TEST(TraceDialectTest, BothKindsOfTurnsAreRefusedNamingTheFlag) {
  const Result<DialectGuess> g = detectJsonlDialect(R"({"session_id": "a", "hash_ids": [1, 2]})"
                                                    "\n"
                                                    R"({"session_id": "a", "hash_ids": [1, 2, 3]})"
                                                    "\n"
                                                    R"({"session_id": "b", "hash_ids": [4, 5]})"
                                                    "\n"
                                                    R"({"session_id": "b", "hash_ids": [6]})"
                                                    "\n");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message,
            "cannot tell the trace's dialect: 1 later turns repeat their session's previous prompt "
            "(mooncake; first on line 2) and 1 carry only a new part (mooncake-delta; first on "
            "line 4): give --format mooncake or --format mooncake-delta");
}

using tools::cli_test::CliRun;
using tools::cli_test::runMocker;

nlohmann::json reportOf(const std::vector<std::string>& args, const std::string& json_path) {
  std::vector<std::string> full = args;
  full.insert(full.end(), {"--report-json", json_path});
  const CliRun r = runMocker(full);
  EXPECT_EQ(r.code, 0) << r.err;
  std::ifstream in(json_path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The shipped samples replay in their own dialect without --format (the delta sample used to be
// read as plain Mooncake: 7,196 input tokens instead of 16,146), and the choice is said.
TEST(TraceDialectCliTest, ShippedSamplesAreReadInTheirDialect) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("mocker_dialect_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string delta = testing::sourceDir() + "/data/traces/mooncake_delta_sample.jsonl";
  const CliRun said = runMocker({"replay", delta});
  EXPECT_EQ(said.code, 0) << said.err;
  EXPECT_NE(said.err.find("reading it as --format mooncake-delta ("), std::string::npos)
      << said.err;
  const nlohmann::json guessed = reportOf({"replay", delta}, dir + "/g.json");
  const nlohmann::json given =
      reportOf({"replay", delta, "--format", "mooncake-delta"}, dir + "/d.json");
  EXPECT_EQ(guessed["total_input_tokens"], given["total_input_tokens"]);
  EXPECT_EQ(guessed["identity"]["format"], "mooncake-delta");
  const nlohmann::json plain = reportOf({"replay", delta, "--format", "mooncake"}, dir + "/p.json");
  EXPECT_LT(plain["total_input_tokens"], given["total_input_tokens"]);

  const std::string agentic = testing::sourceDir() + "/data/traces/agentic_sample.jsonl";
  const CliRun a = runMocker({"replay", agentic});
  EXPECT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.err.find("reading it as --format agentic (line 1 has 'prefix_reset')"),
            std::string::npos)
      << a.err;
  // Forced into the wrong dialect, the parser's error says which one the lines look like.
  const CliRun forced = runMocker({"replay", agentic, "--format", "mooncake"});
  EXPECT_EQ(forced.code, 1);
  EXPECT_NE(forced.err.find("(its first lines look like --format agentic: "), std::string::npos)
      << forced.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mocker::replay
