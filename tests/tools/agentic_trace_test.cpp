// The mooncake-delta and agentic trace dialects (tools/replay/mooncake_trace.h) and the synthetic
// agentic generator: parsing, every line error, dependency semantics in the offline loop with
// hand-computed times, cumulative prompts, and determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/replay_test_util.h"
#include "tools/replay/collector.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/report_output.h"
#include "tools/replay/synthetic.h"

namespace mocker::replay {
namespace {

using ::testing::HasSubstr;

Result<Workload> parseAs(TraceFormat format, const std::string& text, TraceOptions options = {}) {
  options.trace_block_size = 16;
  return parseMooncakeTrace(text, options, format);
}

Workload agentic(const std::string& text, TraceOptions options = {}) {
  auto w = parseAs(TraceFormat::Agentic, text, options);
  EXPECT_TRUE(w) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

std::string agenticError(const std::string& text, TraceOptions options = {}) {
  auto w = parseAs(TraceFormat::Agentic, text, options);
  EXPECT_FALSE(w) << "expected an error for:\n" << text;
  return w ? std::string() : w.error().message;
}

using testing::smallEngine;

ReplayCollector replay(const Workload& w, std::optional<std::uint32_t> concurrency = {}) {
  ReplayCollector c;
  auto stats = runOfflineReplay(w, {.engine = smallEngine(), .concurrency = concurrency}, c);
  EXPECT_TRUE(stats) << (stats ? "" : stats.error().toString());
  return c;
}

const RequestRecord& byRequestId(const ReplayCollector& c, const std::string& id) {
  for (const RequestRecord& r : c.requests()) {
    if (r.info.request_id == id) return r;
  }
  ADD_FAILURE() << "no request " << id;
  static const RequestRecord kNone{};
  return kNone;
}

const char* kRoot = R"({"request_id": "a", "timestamp": 0, "output_length": 1, "hash_ids": [1]})";

TEST(MooncakeLoraColumnTest, TheAdapterColumnIsReadAndHostileNamesAreLineErrors) {
  auto w = parseAs(TraceFormat::Mooncake,
                   R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "lora": "sql"})"
                   "\n"
                   R"({"timestamp": 1, "output_length": 1, "hash_ids": [1], "lora": 7})"
                   "\n"
                   R"({"timestamp": 2, "output_length": 1, "hash_ids": [1], "lora": null})"
                   "\n");
  ASSERT_TRUE(w) << w.error().toString();
  EXPECT_EQ(w->sessions[0].turns[0].lora, "sql");
  EXPECT_EQ(w->sessions[1].turns[0].lora, "7");
  EXPECT_EQ(w->sessions[2].turns[0].lora, std::nullopt);
  const auto error = [](const std::string& row) {
    auto r = parseAs(TraceFormat::Mooncake, row + "\n");
    return r ? std::string("parsed") : r.error().message;
  };
  EXPECT_THAT(error(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "lora": ""})"),
              HasSubstr("line 1"));
  EXPECT_THAT(error(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "lora": "a\nb"})"),
              HasSubstr("'lora': control character 0x0a at byte 1"));
  EXPECT_THAT(error(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "lora": ")" +
                    std::string(257, 'x') + R"("})"),
              HasSubstr("'lora': an adapter name is at most 256 bytes (got 257)"));
}

TEST(AgenticTraceTest, ParsesRowsDependenciesAndNormalisesRootArrivals) {
  const Workload w = agentic(
      R"({"request_id": "a", "session_id": "s", "timestamp": 100, "output_length": 3, "hash_ids": [1, 2], "prefix_reset": true, "branches": ["c"]})"
      "\n"
      R"({"request_id": "b", "timestamp": 300, "input_tokens": 20, "output_tokens": 2, "hash_ids": [1, 2]})"
      "\n\n"
      R"({"request_id": "c", "session_id": "s", "timestamp": 5, "output_length": 1, "hash_ids": [1, 2, 3], "wait_for": ["a", "b"], "delay_ms": 5, "tool_wait_ms": 20.5})"
      "\n"
      R"({"request_id": 7, "output_length": 1, "hash_ids": [4], "wait_for": ["c"], "prefix_reset": null, "branches": null})",
      {.arrival_speedup_ratio = 2.0});
  ASSERT_EQ(w.sessions.size(), 4u);  // file order: wait_for holds session indices
  EXPECT_FALSE(w.cumulative_prompts);
  const Session& a = w.sessions[0];
  EXPECT_EQ(a.session_id, "s");
  EXPECT_EQ(a.turns.at(0).request_id, "a");
  EXPECT_DOUBLE_EQ(a.first_arrival_ms.value(), 0.0);
  EXPECT_TRUE(a.wait_for.empty());
  EXPECT_DOUBLE_EQ(w.sessions[1].first_arrival_ms.value(), 100.0);  // (300 − 100) / 2
  EXPECT_EQ(w.sessions[1].session_id, "request_2");
  EXPECT_EQ(w.sessions[1].turns[0].input_length, 20u);
  const Session& c = w.sessions[2];
  EXPECT_FALSE(c.first_arrival_ms);  // a dependent row's timestamp is not its arrival
  EXPECT_EQ(c.wait_for, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_DOUBLE_EQ(c.dependency_delay_ms, 12.75);  // (5 + 20.5) / 2
  EXPECT_EQ(c.turns[0].line, 4u);
  EXPECT_EQ(c.turns[0].input_length, 48u);
  EXPECT_EQ(w.sessions[3].turns[0].request_id, "7");
  EXPECT_EQ(w.sessions[3].wait_for, (std::vector<std::uint32_t>{2}));
}

TEST(AgenticTraceTest, EveryBadRowIsALineErrorNamingTheField) {
  const std::string root = std::string(kRoot) + "\n";
  const struct {
    std::string row;
    const char* error;
  } cases[] = {
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})",
       "line 2: missing required key 'request_id'"},
      {R"({"request_id": " ", "timestamp": 0, "output_length": 1, "hash_ids": [1]})",
       "line 2: 'request_id' must not be empty"},
      {R"({"request_id": "a", "timestamp": 0, "output_length": 1, "hash_ids": [1]})",
       "line 2: duplicate request_id 'a' (first on line 1)"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["zz"]})",
       "line 2: 'wait_for' names unknown request_id 'zz'"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["b"]})",
       "line 2: 'wait_for' names the row's own request_id 'b'"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a", "a"]})",
       "line 2: 'wait_for' names 'a' twice"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": "a"})",
       "line 2: 'wait_for' must be an array of request ids"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": [1.5]})",
       "line 2: 'wait_for' must contain request ids (got 1.5)"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": [["a"]]})",
       "line 2: 'wait_for' must contain request ids (got an array)"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a"], "delay": -1})",
       "line 2: 'delay' must be >= 0 (got -1)"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a"], "tool_wait_ms": -0.5})",
       "line 2: 'tool_wait_ms' must be >= 0"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a"], "tool_wait_ms": "x"})",
       "line 2: 'tool_wait_ms' must be a number"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a"], "delay": 1e308, "tool_wait_ms": 1e308})",
       "line 2: 'delay' + 'tool_wait_ms' is not finite"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a"], "prefix_reset": 1})",
       "line 2: 'prefix_reset' must be true or false (got 1)"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "branches": ["nope"], "timestamp": 1})",
       "line 2: 'branches' names unknown request_id 'nope'"},
      {R"({"request_id": "b", "timestamp": 1, "output_length": 1, "hash_ids": [1], "delay": 3})",
       "line 2: a row without 'wait_for' has a non-zero 'delay'/'tool_wait_ms'"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1]})",
       "line 2: a row without 'wait_for' has no 'timestamp'"},
      {R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a"], "input_length": 17})",
       "line 2: 'input_length' 17 exceeds the 16 tokens its hash_ids can synthesize"},
      {R"({"request_id": "b", "output_length": 99999999999, "hash_ids": [1], "wait_for": ["a"]})",
       "line 2: 'output_length' is too large"},
      {R"({"request_id": "b", "output_length": 1, "wait_for": ["a"]})",
       "line 2: missing required key 'hash_ids'"},
      {R"(["request_id"])", "line 2: expected a JSON object"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(agenticError(root + c.row), HasSubstr(c.error)) << c.row;
  }
}

TEST(AgenticTraceTest, CyclesAreLineErrorsEvenWhenLong) {
  EXPECT_EQ(
      agenticError(
          std::string(kRoot) + "\n" +
          R"({"request_id": "b", "output_length": 1, "hash_ids": [1], "wait_for": ["a", "c"]})"
          "\n"
          R"({"request_id": "c", "output_length": 1, "hash_ids": [1], "wait_for": ["b"]})"),
      "line 2: 'wait_for' forms a cycle: 'b' waits for 'c' waits for 'b'");
  // 50,000 rows in one ring: found without recursion, the message stays short.
  std::string ring = std::string(kRoot) + "\n";
  constexpr int kRing = 50'000;
  for (int i = 0; i < kRing; ++i) {
    ring += R"({"request_id": "r)" + std::to_string(i) +
            R"(", "output_length": 1, "hash_ids": [1], "wait_for": ["r)" +
            std::to_string((i + 1) % kRing) + "\"]}\n";
  }
  const std::string error = agenticError(ring);
  EXPECT_THAT(error, HasSubstr("line 2: 'wait_for' forms a cycle: 'r0' waits for 'r1'"));
  EXPECT_THAT(error, HasSubstr("(50000 rows)"));
  EXPECT_LT(error.size(), 400u);
}

TEST(AgenticTraceTest, SkipInvalidAlsoSkipsRowsWaitingForSkippedOnes) {
  const Workload w =
      agentic(std::string(kRoot) +
                  "\n"
                  R"({"request_id": "b", "output_length": -1, "hash_ids": [1], "wait_for": ["a"]})"
                  "\n"
                  R"({"request_id": "c", "output_length": 1, "hash_ids": [1], "wait_for": ["b"]})"
                  "\n"
                  R"({"request_id": "d", "output_length": 1, "hash_ids": [1], "wait_for": ["c"]})"
                  "\n"
                  R"({"request_id": "e", "output_length": 1, "hash_ids": [1], "wait_for": ["f"]})"
                  "\n"
                  R"({"request_id": "f", "output_length": 1, "hash_ids": [1], "wait_for": ["e"]})"
                  "\n"
                  R"({"request_id": "g", "output_length": 1, "hash_ids": [1], "wait_for": ["a"]})",
              {.skip_invalid = true});
  ASSERT_EQ(w.sessions.size(), 2u);
  EXPECT_EQ(w.sessions[1].turns[0].request_id, "g");
  EXPECT_EQ(w.sessions[1].wait_for, (std::vector<std::uint32_t>{0}));
  std::vector<std::size_t> lines;
  for (const LineError& e : w.skipped_lines) lines.push_back(e.line);
  EXPECT_EQ(lines, (std::vector<std::size_t>{2, 3, 4, 5, 6}));
  EXPECT_THAT(w.skipped_lines[1].message, HasSubstr("'wait_for' names unknown request_id 'b'"));
  EXPECT_THAT(w.skipped_lines[2].message, HasSubstr("request_id 'c', which was skipped"));
  EXPECT_THAT(w.skipped_lines[3].message, HasSubstr("dependency cycle"));
}

TEST(AgenticTraceTest, SkippedLinesStayInFileOrderWhenACascadeReachesBackwards) {
  const Workload w =
      agentic(std::string(kRoot) +
                  "\n"
                  R"({"request_id": "c", "output_length": 1, "hash_ids": [1], "wait_for": ["d"]})"
                  "\n"
                  R"({"request_id": "b", "output_length": 1})"
                  "\n"
                  R"({"request_id": "d", "output_length": 1, "hash_ids": [1], "wait_for": ["b"]})",
              {.skip_invalid = true});
  ASSERT_EQ(w.sessions.size(), 1u);
  std::vector<std::size_t> lines;
  for (const LineError& e : w.skipped_lines) lines.push_back(e.line);
  EXPECT_EQ(lines, (std::vector<std::size_t>{2, 3, 4}));
}

// Hand-computed with fixed timing: a pass that computes prompt tokens costs 10 ms, plus 2 ms when
// any request decodes (the first pass does both), so a lone request's tokens come at 12, 14, …
//   a: root at 0, 3 tokens → 12, 14, 16; ends 16.
//   b: waits for a, delay 5 + tool wait 20 → arrives 16 + 25 = 41; 1 token → ends 53.
//   x: root at 100, 1 token → ends 112.
//   j: waits for b and x, tool wait 3 → arrives max(53, 112) + 3 = 115; ends 127.
TEST(AgenticOfflineTest, DependentArrivesAtLatestDependencyEndPlusDelayAndToolWait) {
  const Workload w = agentic(
      R"({"request_id": "a", "timestamp": 1000, "output_length": 3, "hash_ids": [1]})"
      "\n"
      R"({"request_id": "j", "output_length": 1, "hash_ids": [5], "wait_for": ["b", "x"], "tool_wait_ms": 3})"
      "\n"
      R"({"request_id": "b", "timestamp": 0, "output_length": 1, "hash_ids": [2], "wait_for": ["a"], "delay": 5, "tool_wait_ms": 20})"
      "\n"
      R"({"request_id": "x", "timestamp": 1100, "output_length": 1, "hash_ids": [3]})");
  const ReplayCollector c = replay(w);
  ASSERT_EQ(c.requests().size(), 4u);
  EXPECT_DOUBLE_EQ(byRequestId(c, "a").terminal_ms.value(), 16.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "b").arrival_ms, 41.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "b").terminal_ms.value(), 53.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "x").arrival_ms, 100.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "x").terminal_ms.value(), 112.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "j").arrival_ms, 115.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "j").terminal_ms.value(), 127.0);
  // Arrival speed-up divides the waits too: b at 16 + 25/5 = 21.
  const Workload fast = *parseAs(
      TraceFormat::Agentic,
      R"({"request_id": "a", "timestamp": 0, "output_length": 3, "hash_ids": [1]})"
      "\n"
      R"({"request_id": "b", "output_length": 1, "hash_ids": [2], "wait_for": ["a"], "delay": 5, "tool_wait_ms": 20})",
      {.arrival_speedup_ratio = 5.0});
  EXPECT_DOUBLE_EQ(byRequestId(replay(fast), "b").arrival_ms, 21.0);
}

TEST(AgenticOfflineTest, ARejectedDependencyStillReleasesItsDependents) {
  engine::EngineConfig e = smallEngine();
  e.max_model_len = 20;  // a's 32-token prompt is rejected at submit
  const Workload w = agentic(
      R"({"request_id": "a", "timestamp": 0, "output_length": 1, "hash_ids": [1, 2]})"
      "\n"
      R"({"request_id": "b", "output_length": 1, "hash_ids": [3], "wait_for": ["a"], "delay": 7})");
  ReplayCollector c;
  ASSERT_TRUE(runOfflineReplay(w, {.engine = e}, c));
  ASSERT_EQ(c.requests().size(), 2u);
  EXPECT_EQ(byRequestId(c, "a").status, TerminalStatus::Rejected);
  EXPECT_DOUBLE_EQ(byRequestId(c, "b").arrival_ms, byRequestId(c, "a").terminal_ms.value() + 7.0);
  EXPECT_EQ(byRequestId(c, "b").status, TerminalStatus::Completed);
}

TEST(AgenticOfflineTest, ClosedLoopHonoursDependenciesAndTheSlotLimit) {
  const Workload w = agentic(
      R"({"request_id": "a", "output_length": 3, "hash_ids": [1]})"
      "\n"
      R"({"request_id": "z", "output_length": 1, "hash_ids": [9]})"
      "\n"
      R"({"request_id": "b", "output_length": 1, "hash_ids": [2], "wait_for": ["a"], "delay": 4})",
      {.require_timestamps = false});
  const ReplayCollector c = replay(w, 1);
  // a 0..16, z 16..28 (the slot), b eligible at 16 + 4 = 20 but waits for the slot: 28.
  EXPECT_DOUBLE_EQ(byRequestId(c, "z").arrival_ms, 16.0);
  EXPECT_DOUBLE_EQ(byRequestId(c, "b").arrival_ms, 28.0);
}

TEST(MooncakeDeltaTraceTest, PromptsAccumulateEarlierPromptsAndEmittedOutputs) {
  auto w = parseAs(
      TraceFormat::MooncakeDelta,
      R"({"session_id": "s", "timestamp": 0, "input_length": 32, "output_length": 17, "hash_ids": [1, 2]})"
      "\n"
      R"({"session_id": "s", "delay": 5, "input_length": 10, "output_length": 2, "hash_ids": [3]})"
      "\n"
      R"({"session_id": "s", "delay": 5, "input_length": 16, "output_length": 1, "hash_ids": [4]})");
  ASSERT_TRUE(w) << w.error().toString();
  EXPECT_TRUE(w->cumulative_prompts);
  const ReplayCollector c = replay(*w);
  ASSERT_EQ(c.requests().size(), 3u);
  EXPECT_EQ(c.requests()[0].info.input_length, 32u);
  EXPECT_EQ(c.requests()[1].info.input_length, 32u + 17u + 10u);
  EXPECT_EQ(c.requests()[2].info.input_length, 59u + 2u + 16u);
  // The emitted tokens are part of the next prompt: the cache holds the prompt and 16 of the
  // output's 17 tokens (the last one was never fed back), so 48 tokens = 3 blocks are reused —
  // more than the 32-token first prompt alone.
  EXPECT_EQ(c.requests()[1].first_reused_input_tokens, 48u);
  // Plain Mooncake sends each turn as written: no reuse beyond shared hash ids.
  auto plain = parseAs(
      TraceFormat::Mooncake,
      R"({"session_id": "s", "timestamp": 0, "input_length": 32, "output_length": 17, "hash_ids": [1, 2]})"
      "\n"
      R"({"session_id": "s", "delay": 5, "input_length": 10, "output_length": 2, "hash_ids": [3]})");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->cumulative_prompts);
  EXPECT_EQ(replay(*plain).requests()[1].info.input_length, 10u);
}

TEST(MooncakeDeltaTraceTest, LineErrors) {
  const auto error = [](const std::string& text) {
    auto w = parseAs(TraceFormat::MooncakeDelta, text);
    EXPECT_FALSE(w) << text;
    return w ? std::string() : w.error().message;
  };
  EXPECT_EQ(
      error(R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]})"),
      "line 1: 'hash_ids' has 2 ids but a delta of 10 tokens fills 1 blocks of "
      "trace_block_size 16");
  EXPECT_THAT(
      error(R"({"session_id": "s", "timestamp": 0, "output_length": 4294967295, "hash_ids": [1]})"
            "\n"
            R"({"session_id": "s", "output_length": 1, "hash_ids": [2]})"),
      HasSubstr("line 2: the cumulative prompt of session 's' would reach 4294967327 tokens"));
  EXPECT_THAT(error(R"({"session_id": "s", "output_length": 1, "hash_ids": [2], "delay": -2})"),
              HasSubstr("line 1: 'delay' must be >= 0"));
}

TEST(SyntheticAgenticTest, ChainsCallsWithToolWaitsSubAgentsAndASharedSystemPrompt) {
  const SyntheticAgenticSpec spec{.sessions = 3,
                                  .calls_per_session = 4,
                                  .system_prompt_tokens = 40,
                                  .user_prompt_tokens = {30, 5},
                                  .output_tokens = {8, 2},
                                  .tool_output_tokens = {20, 4},
                                  .tool_wait = {DelayKind::Exponential, 50.0},
                                  .subagent_probability = 0.5,
                                  .subagent_fanout = 2,
                                  .arrival = {.kind = ArrivalKind::Poisson, .rate_per_s = 10},
                                  .block_size = 16,
                                  .seed = 7};
  const Result<Workload> w = generateSyntheticAgenticWorkload(spec);
  ASSERT_TRUE(w) << w.error().toString();
  std::size_t calls = 0;
  std::size_t subagents = 0;
  for (std::uint32_t i = 0; i < w->sessions.size(); ++i) {
    const Session& s = w->sessions[i];
    ASSERT_EQ(s.turns.size(), 1u);
    const Turn& t = s.turns[0];
    // Every prompt starts with the shared system prompt's 3 blocks.
    ASSERT_GE(t.hash_ids.size(), 3u);
    EXPECT_EQ(t.hash_ids[0], kSharedIdBase);
    EXPECT_EQ(t.hash_ids[2], kSharedIdBase + 2);
    EXPECT_EQ(t.hash_ids.size(), (t.input_length + 15) / 16);
    for (std::uint32_t d : s.wait_for) EXPECT_LT(d, i);  // dependencies point backwards
    if (t.request_id->find(".sub") != std::string::npos) {
      ++subagents;
      ASSERT_EQ(s.wait_for.size(), 1u);
      EXPECT_DOUBLE_EQ(s.dependency_delay_ms, 0.0);
      continue;
    }
    ++calls;
    if (t.request_id->ends_with(".0")) {
      EXPECT_TRUE(s.first_arrival_ms.has_value());
      EXPECT_TRUE(s.wait_for.empty());
      continue;
    }
    // A later call extends the previous call's prompt (prefix of its hash ids) and waits for it
    // and for the sub-agents it spawned.
    ASSERT_FALSE(s.wait_for.empty());
    const Turn& previous = w->sessions[s.wait_for[0]].turns[0];
    EXPECT_GT(t.input_length, previous.input_length + previous.output_length);
    EXPECT_TRUE(std::equal(previous.hash_ids.begin(), previous.hash_ids.end(), t.hash_ids.begin()));
    for (std::size_t k = 1; k < s.wait_for.size(); ++k) {
      EXPECT_THAT(*w->sessions[s.wait_for[k]].turns[0].request_id, HasSubstr(".sub"));
    }
  }
  EXPECT_EQ(calls, 12u);
  EXPECT_GT(subagents, 0u);  // seed 7 spawns some
  EXPECT_EQ(subagents % 2, 0u);
  // It replays, and the system prompt and growing contexts are reused.
  const Report report = replay(*w).buildReport({});
  EXPECT_EQ(report.completed_requests, calls + subagents);
  ASSERT_TRUE(report.prefix_cache_reused_ratio.has_value());
  EXPECT_GT(*report.prefix_cache_reused_ratio, 0.3);
}

TEST(SyntheticAgenticTest, SameSeedSameReplayBytesOtherSeedOtherWorkload) {
  SyntheticAgenticSpec spec{.sessions = 20,
                            .calls_per_session = 5,
                            .system_prompt_tokens = 100,
                            .user_prompt_tokens = {60, 20},
                            .output_tokens = {10, 4},
                            .tool_output_tokens = {30, 10},
                            .tool_wait = {DelayKind::Exponential, 30.0},
                            .subagent_probability = 0.3,
                            .subagent_fanout = 3,
                            .block_size = 16,
                            .seed = 11};
  const auto jsonl = [&] {
    const Result<Workload> w = generateSyntheticAgenticWorkload(spec);
    EXPECT_TRUE(w);
    return formatRequestsJsonl(replay(*w));
  };
  const std::string first = jsonl();
  EXPECT_EQ(jsonl(), first);
  spec.seed = 12;
  EXPECT_NE(jsonl(), first);
}

TEST(SyntheticAgenticTest, SpecErrorsNameTheParameter) {
  const auto error = [](SyntheticAgenticSpec spec) {
    const Result<Workload> w = generateSyntheticAgenticWorkload(spec);
    EXPECT_FALSE(w);
    return w ? std::string() : w.error().message;
  };
  const SyntheticAgenticSpec ok{.sessions = 1, .output_tokens = {1, 0}};
  EXPECT_TRUE(generateSyntheticAgenticWorkload(ok));
  SyntheticAgenticSpec s = ok;
  s.sessions = 0;
  EXPECT_THAT(error(s), HasSubstr("sessions must be >= 1"));
  s = ok;
  s.subagent_probability = 1.5;
  EXPECT_THAT(error(s), HasSubstr("subagent_probability"));
  s = ok;
  s.subagent_fanout = 65;
  EXPECT_THAT(error(s), HasSubstr("subagent_fanout"));
  s = ok;
  s.tool_wait = {DelayKind::Constant, -1.0};
  EXPECT_THAT(error(s), HasSubstr("tool_wait"));
  s = ok;
  s.system_prompt_tokens = 4'000'000'000u;
  s.block_size = 1;
  EXPECT_THAT(error(s), HasSubstr("the system prompt needs 4000000000 blocks"));
}

TEST(AgenticSampleTraceTest, ShippedSamplesParseAndReplay) {
  for (const auto& [name, format] :
       {std::pair{"agentic_sample.jsonl", TraceFormat::Agentic},
        std::pair{"mooncake_delta_sample.jsonl", TraceFormat::MooncakeDelta}}) {
    const std::string path = testing::sampleTrace(name);
    MOCKER_SKIP_UNLESS_SAMPLE_TRACE(path);
    auto w = loadMooncakeTrace(path, {}, format);
    ASSERT_TRUE(w) << w.error().toString();
    ReplayCollector c;
    ASSERT_TRUE(runOfflineReplay(*w, {}, c));
    EXPECT_EQ(c.buildReport({}).completed_requests, w->numTurns()) << name;
  }
}

}  // namespace
}  // namespace mocker::replay
