#include "tools/replay/mooncake_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/tools/replay_test_util.h"

namespace mocker::replay {
namespace {

using ::testing::HasSubstr;

Workload parseOk(const std::string& text, const TraceOptions& options = {}) {
  auto r = parseMooncakeTrace(text, options);
  EXPECT_TRUE(r) << (r ? "" : r.error().toString());
  return r ? *std::move(r) : Workload{};
}

std::string parseError(const std::string& text, const TraceOptions& options = {}) {
  auto r = parseMooncakeTrace(text, options);
  EXPECT_FALSE(r) << "expected an error for: " << text;
  return r ? std::string() : r.error().message;
}

TEST(MooncakeTraceTest, ParsesBasicRow) {
  const Workload w =
      parseOk(R"({"timestamp": 5, "input_length": 700, "output_length": 3, "hash_ids": [7, 9]})");
  ASSERT_EQ(w.sessions.size(), 1u);
  const Session& s = w.sessions[0];
  EXPECT_EQ(s.session_id, "request_1");
  EXPECT_DOUBLE_EQ(*s.first_arrival_ms, 0.0);
  ASSERT_EQ(s.turns.size(), 1u);
  EXPECT_EQ(s.turns[0].input_length, 700u);
  EXPECT_EQ(s.turns[0].output_length, 3u);
  EXPECT_EQ(s.turns[0].hash_ids, (std::vector<std::uint64_t>{7, 9}));
  EXPECT_EQ(s.turns[0].line, 1u);
  EXPECT_FALSE(s.turns[0].request_id);
  EXPECT_EQ(w.trace_block_size, 512u);
}

TEST(MooncakeTraceTest, AcceptsAliases) {
  const Workload w = parseOk(
      R"({"created_time": 1, "input_tokens": 10, "output_tokens": 2, "hash_ids": [1], "session_id": "s"})"
      "\n"
      R"({"input_tokens": 20, "output_tokens": 4, "hash_ids": [1, 2], "session_id": "s", "delay_ms": 7})");
  ASSERT_EQ(w.sessions.size(), 1u);
  ASSERT_EQ(w.sessions[0].turns.size(), 2u);
  EXPECT_EQ(w.sessions[0].turns[0].input_length, 10u);
  EXPECT_EQ(w.sessions[0].turns[0].output_length, 2u);
  EXPECT_EQ(w.sessions[0].turns[1].input_length, 20u);
  EXPECT_DOUBLE_EQ(w.sessions[0].turns[1].delay_after_previous_ms, 7.0);
}

TEST(MooncakeTraceTest, RejectsKeyTogetherWithAlias) {
  for (
      const char* row : {
          R"({"timestamp": 1, "created_time": 1, "output_length": 1, "hash_ids": [1]})",
          R"({"timestamp": 1, "input_length": 1, "input_tokens": 1, "output_length": 1, "hash_ids": [1]})",
          R"({"timestamp": 1, "output_length": 1, "output_tokens": 1, "hash_ids": [1]})",
          R"({"timestamp": 1, "output_length": 1, "hash_ids": [1], "delay": 0, "delay_ms": 0})",
      }) {
    const std::string text = std::string("\n") + row;  // error on line 2
    const std::string e = parseError(text);
    EXPECT_THAT(e, HasSubstr("line 2:")) << row;
    EXPECT_THAT(e, HasSubstr("alias")) << row;
  }
}

TEST(MooncakeTraceTest, IgnoresUnknownKeys) {
  const Workload w = parseOk(
      R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "chat_id": 5, "parent_chat_id": -1, "type": "text", "turn": 1})");
  EXPECT_EQ(w.sessions.size(), 1u);
}

TEST(MooncakeTraceTest, NestedUnknownValuesAreSkippedAndRepeatedKeysReplace) {
  const Workload w = parseOk(
      R"({"meta": {"hash_ids": [99], "timestamp": -5, "x": [[1], {"y": null}]}, "timestamp": 3, )"
      R"("output_length": 2, "hash_ids": [5, 6], "hash_ids": [7], "session_id": null})");
  ASSERT_EQ(w.sessions.size(), 1u);
  EXPECT_EQ(w.sessions[0].turns[0].hash_ids, (std::vector<std::uint64_t>{7}));
  EXPECT_EQ(w.sessions[0].turns[0].output_length, 2u);
  EXPECT_EQ(w.sessions[0].session_id, "request_1");  // null session_id = absent
}

TEST(MooncakeTraceTest, AcceptsHashIdsAbove32Bits) {
  const Workload w = parseOk(
      R"({"timestamp": 0, "output_length": 1, "hash_ids": [4294967301, 18446744073709551615]})");
  EXPECT_EQ(w.sessions[0].turns[0].hash_ids,
            (std::vector<std::uint64_t>{4'294'967'301u, 18'446'744'073'709'551'615u}));
  PromptSynthesizer synth(w.trace_block_size);
  const std::vector<std::uint32_t> tokens = synth.synthesize(w.sessions[0].turns[0]);
  EXPECT_EQ(tokens.front(), 5u);
  EXPECT_EQ(tokens.back(), 0xFFFF'FFFFu);
  EXPECT_EQ(synth.warnings().size(), 1u);
}

TEST(MooncakeTraceTest, MissingInputLengthMeansCapacity) {
  const Workload w = parseOk(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1, 2, 3]})",
                             {.trace_block_size = 16});
  EXPECT_EQ(w.sessions[0].turns[0].input_length, 48u);
}

TEST(MooncakeTraceTest, InputLengthAboveCapacityIsClamped) {
  const Workload w =
      parseOk(R"({"timestamp": 0, "input_length": 5000, "output_length": 1, "hash_ids": [1, 2]})");
  EXPECT_EQ(w.sessions[0].turns[0].input_length, 1024u);
}

TEST(MooncakeTraceTest, FirstTurnDelayMustBeZero) {
  EXPECT_THAT(parseError(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "delay": 5})"),
              HasSubstr("line 1: first turn"));
  const Workload w =
      parseOk(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "delay": 0})");
  EXPECT_EQ(w.sessions.size(), 1u);
}

TEST(MooncakeTraceTest, MalformedLineCatalogueNamesLineNumbers) {
  struct Case {
    const char* row;
    const char* message;
  };
  const Case cases[] = {
      {R"({"timestamp": 0, "hash_ids": [1]})", "missing required key 'output_length'"},
      {R"({"timestamp": 0, "output_length": 1})", "missing required key 'hash_ids'"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": []})", "must not be empty"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": 3})", "must be an array"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1, -2]})", "unsigned integers"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1.5]})", "unsigned integers"},
      {R"({"timestamp": 0, "output_length": -1, "hash_ids": [1]})", "'output_length' must be >= 0"},
      {R"({"timestamp": 0, "output_length": 1.5, "hash_ids": [1]})", "non-negative integer"},
      {R"({"timestamp": 0, "output_length": "3", "hash_ids": [1]})", "must be an integer"},
      {R"({"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]})",
       "'input_length' is 0"},
      {R"({"timestamp": -1, "output_length": 1, "hash_ids": [1]})", "'timestamp' must be >= 0"},
      {R"({"timestamp": "x", "output_length": 1, "hash_ids": [1]})", "must be a number"},
      {R"({"output_length": 1, "hash_ids": [1]})", "has no 'timestamp'"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1], "session_id": [1]})",
       "must be a string"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1)", "not valid JSON"},
      {R"([1, 2, 3])", "expected a JSON object"},
      {R"(garbage)", "not valid JSON"},
      {R"(42)", "expected a JSON object"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]} extra)", "not valid JSON"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1, [2]]})", "unsigned integers"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1, "2"]})", "unsigned integers"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": null})", "missing required key"},
      {R"({"timestamp": [0], "output_length": 1, "hash_ids": [1]})", "must be a number"},
      {R"({"timestamp": 0, "output_length": {"n": 1}, "hash_ids": [1]})", "must be an integer"},
  };
  const std::string good = R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})";
  for (const Case& c : cases) {
    const std::string e = parseError(good + "\n\n" + c.row + "\n" + good);
    EXPECT_THAT(e, HasSubstr("line 3: ")) << c.row;
    EXPECT_THAT(e, HasSubstr(c.message)) << c.row;
  }
}

TEST(MooncakeTraceTest, NegativeDelayIsRejected) {
  EXPECT_THAT(parseError("{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1], "
                         "\"session_id\": \"s\"}\n"
                         "{\"output_length\": 1, \"hash_ids\": [1], \"session_id\": \"s\", "
                         "\"delay\": -3}"),
              HasSubstr("line 2: 'delay' must be >= 0"));
}

TEST(MooncakeTraceTest, SkipInvalidCollectsErrorsAndContinues) {
  const std::string text =
      "{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "not json\n"
      "\n"
      "{\"timestamp\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 2, \"output_length\": 1, \"hash_ids\": [2]}\n";
  const Workload w = parseOk(text, {.skip_invalid = true});
  ASSERT_EQ(w.sessions.size(), 2u);
  EXPECT_EQ(w.sessions[1].session_id, "request_5");
  ASSERT_EQ(w.skipped_lines.size(), 2u);
  EXPECT_EQ(w.skipped_lines[0].line, 2u);
  EXPECT_EQ(w.skipped_lines[1].line, 4u);
  EXPECT_THAT(w.skipped_lines[1].message, HasSubstr("output_length"));
  // Without the option the first bad line stops the parse.
  EXPECT_THAT(parseError(text), HasSubstr("line 2:"));
}

TEST(MooncakeTraceTest, EmptyTraceIsAnError) {
  EXPECT_THAT(parseError(""), HasSubstr("empty trace"));
  EXPECT_THAT(parseError("\n  \n\r\n"), HasSubstr("empty trace"));
  EXPECT_THAT(parseError("bad\n", {.skip_invalid = true}), HasSubstr("every line was invalid"));
}

TEST(MooncakeTraceTest, ZeroTraceBlockSizeIsAnError) {
  EXPECT_THAT(parseError(R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})",
                         {.trace_block_size = 0}),
              HasSubstr("trace_block_size"));
}

TEST(MooncakeTraceTest, SessionsGroupTurnsAndDeriveDelays) {
  const std::string text =
      "{\"timestamp\": 1000, \"output_length\": 1, \"hash_ids\": [1], \"session_id\": \"a\"}\n"
      "{\"timestamp\": 1010, \"output_length\": 1, \"hash_ids\": [2]}\n"
      "{\"timestamp\": 1100, \"output_length\": 1, \"hash_ids\": [1, 3], \"session_id\": \"a\"}\n"
      "{\"timestamp\": 1200, \"output_length\": 1, \"hash_ids\": [1, 3], \"session_id\": \"a\", "
      "\"delay\": 5}\n"
      "{\"output_length\": 1, \"hash_ids\": [1, 3, 4], \"session_id\": \"a\"}\n"
      "{\"timestamp\": 1300, \"output_length\": 1, \"hash_ids\": [9], \"session_id\": \"a\"}\n";
  const Workload w = parseOk(text, {.arrival_speedup_ratio = 2.0});
  ASSERT_EQ(w.sessions.size(), 2u);
  const Session& a = w.sessions[0];
  EXPECT_EQ(a.session_id, "a");
  EXPECT_DOUBLE_EQ(*a.first_arrival_ms, 0.0);
  ASSERT_EQ(a.turns.size(), 5u);
  EXPECT_DOUBLE_EQ(a.turns[0].delay_after_previous_ms, 0.0);
  EXPECT_DOUBLE_EQ(a.turns[1].delay_after_previous_ms, 50.0);  // (1100 − 1000) / 2
  EXPECT_DOUBLE_EQ(a.turns[2].delay_after_previous_ms, 2.5);   // explicit delay 5 / 2
  EXPECT_DOUBLE_EQ(a.turns[3].delay_after_previous_ms, 0.0);   // no timestamp ⇒ 0
  EXPECT_DOUBLE_EQ(a.turns[4].delay_after_previous_ms, 50.0);  // (1300 − 1200) / 2
  EXPECT_EQ(a.turns[4].line, 6u);
  EXPECT_EQ(w.sessions[1].session_id, "request_2");
  EXPECT_DOUBLE_EQ(*w.sessions[1].first_arrival_ms, 5.0);
}

TEST(MooncakeTraceTest, TimestampGoingBackwardsInSessionWithoutDelayIsAnError) {
  EXPECT_THAT(
      parseError("{\"timestamp\": 10, \"output_length\": 1, \"hash_ids\": [1], \"session_id\": 1}\n"
                 "{\"timestamp\": 5, \"output_length\": 1, \"hash_ids\": [1], \"session_id\": 1}"),
      HasSubstr("line 2: timestamp goes backwards"));
}

TEST(MooncakeTraceTest, NormalisationSortsAndAppliesSpeedup) {
  const Workload w = parseOk(
      "{\"timestamp\": 200, \"output_length\": 1, \"hash_ids\": [1], \"request_id\": \"r2\"}\n"
      "{\"timestamp\": 100, \"output_length\": 1, \"hash_ids\": [1], \"request_id\": \"r1\"}\n",
      {.arrival_speedup_ratio = 10.0});
  ASSERT_EQ(w.sessions.size(), 2u);
  EXPECT_EQ(*w.sessions[0].turns[0].request_id, "r1");
  EXPECT_DOUBLE_EQ(*w.sessions[0].first_arrival_ms, 0.0);
  EXPECT_DOUBLE_EQ(*w.sessions[1].first_arrival_ms, 10.0);
}

TEST(MooncakeTraceTest, TimestampsOptionalWhenNotRequired) {
  const Workload w = parseOk(
      "{\"output_length\": 1, \"hash_ids\": [1]}\n{\"output_length\": 2, \"hash_ids\": [2]}",
      {.require_timestamps = false});
  ASSERT_EQ(w.sessions.size(), 2u);
  EXPECT_FALSE(w.sessions[0].first_arrival_ms);
  EXPECT_EQ(w.sessions[1].turns[0].output_length, 2u);
}

TEST(MooncakeTraceTest, CrLfLineEndingsAreAccepted) {
  const Workload w = parseOk(
      "{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\r\n"
      "{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": [1]}\r\n");
  EXPECT_EQ(w.sessions.size(), 2u);
}

TEST(MooncakeTraceTest, TinyTraceFixtureParses) {
  auto r = loadMooncakeTrace(testing::sourceDir() + "/tests/data/tiny_trace.jsonl", {});
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_EQ(r->sessions.size(), 6u);
  EXPECT_EQ(r->numTurns(), 8u);
  const auto chat = std::find_if(r->sessions.begin(), r->sessions.end(),
                                 [](const Session& s) { return s.session_id == "chat-a"; });
  ASSERT_NE(chat, r->sessions.end());
  ASSERT_EQ(chat->turns.size(), 3u);
  EXPECT_DOUBLE_EQ(chat->turns[1].delay_after_previous_ms, 50.0);
  EXPECT_DOUBLE_EQ(chat->turns[2].delay_after_previous_ms, 50.0);
  EXPECT_EQ(*chat->turns[2].request_id, "a-3");
}

TEST(MooncakeTraceTest, SyntheticTraceMatchesPublishedFigures) {
  const std::string path = testing::sampleTrace("mooncake_synthetic_trace.jsonl");
  MOCKER_SKIP_UNLESS_SAMPLE_TRACE(path);
  auto r = loadMooncakeTrace(path, {});
  ASSERT_TRUE(r) << r.error().toString();
  const Workload& w = *r;
  EXPECT_EQ(w.sessions.size(), 3993u);
  EXPECT_EQ(w.numTurns(), 3993u);
  EXPECT_TRUE(w.skipped_lines.empty());
  std::uint64_t input = 0, output = 0, blocks = 0;
  std::set<std::uint64_t> distinct;
  for (const Session& s : w.sessions) {
    for (const Turn& t : s.turns) {
      input += t.input_length;
      output += t.output_length;
      blocks += t.hash_ids.size();
      distinct.insert(t.hash_ids.begin(), t.hash_ids.end());
    }
  }
  EXPECT_EQ(input, 61'194'628u);  // 61.19 M
  EXPECT_EQ(output, 595'432u);    // 0.595 M
  EXPECT_EQ(blocks, 121'877u);
  EXPECT_EQ(distinct.size(), 43'924u);
  EXPECT_DOUBLE_EQ(*w.sessions.front().first_arrival_ms, 0.0);
  EXPECT_DOUBLE_EQ(*w.sessions.back().first_arrival_ms, 1'022'025.0);  // 1,022.0 s
}

TEST(MooncakeTraceTest, LoadNamesThePathOnError) {
  auto r = loadMooncakeTrace(testing::sourceDir() + "/tests/data/does_not_exist.jsonl", {});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("does_not_exist.jsonl"));
}

}  // namespace
}  // namespace mocker::replay
