#include "tools/replay/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace mocker::replay {
namespace {

Turn makeTurn(std::vector<std::uint64_t> ids, std::uint32_t input_length) {
  Turn t;
  t.hash_ids = std::move(ids);
  t.input_length = input_length;
  return t;
}

TEST(SynthesizePromptTest, ExpandsBlocksAndTruncatesToInputLength) {
  const SynthesizedPrompt p = synthesizePrompt(makeTurn({7, 9}, 700), 512);
  ASSERT_EQ(p.tokens.size(), 700u);
  for (std::size_t i = 0; i < 512; ++i) ASSERT_EQ(p.tokens[i], 7u) << "index " << i;
  for (std::size_t i = 512; i < 700; ++i) ASSERT_EQ(p.tokens[i], 9u) << "index " << i;
  EXPECT_FALSE(p.aliased_hash_id);
}

TEST(SynthesizePromptTest, ClampsInputLengthToCapacity) {
  const SynthesizedPrompt p = synthesizePrompt(makeTurn({3, 4}, 100), 16);
  ASSERT_EQ(p.tokens.size(), 32u);
  EXPECT_EQ(p.tokens[15], 3u);
  EXPECT_EQ(p.tokens[16], 4u);
}

TEST(SynthesizePromptTest, IdsAbove32BitsAreReducedModulo2To32) {
  const std::uint64_t big = (std::uint64_t{1} << 32) + 5;
  const SynthesizedPrompt p = synthesizePrompt(makeTurn({big}, 4), 4);
  EXPECT_EQ(p.tokens, (std::vector<std::uint32_t>{5, 5, 5, 5}));
  EXPECT_TRUE(p.aliased_hash_id);
}

TEST(PromptSynthesizerTest, WarnsOnceAboutAliasedIds) {
  PromptSynthesizer synth(4);
  Turn ok = makeTurn({1}, 4);
  EXPECT_EQ(synth.synthesize(ok).size(), 4u);
  EXPECT_TRUE(synth.warnings().empty());
  Turn big = makeTurn({(std::uint64_t{1} << 32) + 5}, 4);
  big.line = 17;
  EXPECT_EQ(synth.synthesize(big), (std::vector<std::uint32_t>{5, 5, 5, 5}));
  EXPECT_EQ(synth.synthesize(big).size(), 4u);
  ASSERT_EQ(synth.warnings().size(), 1u);
  EXPECT_THAT(synth.warnings()[0], ::testing::HasSubstr("line 17"));
}

// defer(): the same tokens as synthesize(), produced when asked, and the same warning, given
// when deferred (an aliased id past the prompt's end is never used and warns in neither).
TEST(PromptSynthesizerTest, DeferredPromptIsTheSynthesizedOne) {
  const std::uint64_t big = (std::uint64_t{1} << 32) + 5;
  std::vector<Turn> turns = {makeTurn({7, 9}, 7), makeTurn({3, 4}, 100), makeTurn({1, 2, big}, 8),
                             makeTurn({1, big}, 5)};
  turns[3].line = 9;
  PromptSynthesizer now(4);
  PromptSynthesizer later(4);
  for (std::size_t i = 0; i < turns.size(); ++i) {
    SCOPED_TRACE("turn " + std::to_string(i));
    const std::vector<std::uint32_t> tokens = now.synthesize(turns[i]);
    const std::shared_ptr<const engine::PromptSource> source = later.defer(turns[i]);
    EXPECT_EQ(later.warnings(), now.warnings());
    ASSERT_EQ(source->size(), tokens.size());
    std::vector<std::uint32_t> out = {42};
    source->appendTo(out);
    out.erase(out.begin());
    EXPECT_EQ(out, tokens);
    EXPECT_EQ(later.warnings().empty(), i < 3);
  }
  ASSERT_EQ(later.warnings().size(), 1u);
  EXPECT_THAT(later.warnings()[0], ::testing::HasSubstr("line 9"));
}

TEST(NormalizeArrivalsTest, SortsStablyShiftsAndDividesDelays) {
  Turn second = makeTurn({1}, 1);
  second.delay_after_previous_ms = 50;
  std::vector<Session> sessions;
  sessions.push_back({.session_id = std::string("a"),
                      .first_arrival_ms = 200.0,
                      .turns = {makeTurn({1}, 1), second}});
  sessions.push_back(
      {.session_id = std::string("b"), .first_arrival_ms = 100.0, .turns = {makeTurn({1}, 1)}});
  sessions.push_back(
      {.session_id = std::string("c"), .first_arrival_ms = 200.0, .turns = {makeTurn({1}, 1)}});
  normalizeArrivals(sessions, 10.0);
  ASSERT_EQ(sessions.size(), 3u);
  EXPECT_EQ(sessions[0].session_id, "b");
  EXPECT_EQ(sessions[1].session_id, "a");  // tie with "c" broken by file order
  EXPECT_EQ(sessions[2].session_id, "c");
  EXPECT_DOUBLE_EQ(*sessions[0].first_arrival_ms, 0.0);
  EXPECT_DOUBLE_EQ(*sessions[1].first_arrival_ms, 10.0);
  EXPECT_DOUBLE_EQ(sessions[1].turns[1].delay_after_previous_ms, 5.0);
}

TEST(TraceOptionsTest, RejectsZeroBlockSizeAndBadSpeedup) {
  EXPECT_FALSE(validateTraceOptions({.trace_block_size = 0}));
  EXPECT_FALSE(validateTraceOptions({.arrival_speedup_ratio = 0.0}));
  EXPECT_FALSE(validateTraceOptions({.arrival_speedup_ratio = -1.0}));
  EXPECT_FALSE(
      validateTraceOptions({.arrival_speedup_ratio = std::numeric_limits<double>::infinity()}));
  EXPECT_TRUE(validateTraceOptions({}));
}

TEST(ReadTextFileTest, MissingFileIsNotFound) {
  auto r = readTextFile("/nonexistent/definitely/missing.jsonl");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_THAT(r.error().message, ::testing::HasSubstr("missing.jsonl"));
}

}  // namespace
}  // namespace mocker::replay
