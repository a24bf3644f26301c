// Unit tests for the pass code both schedulers share (engine/detail/pass.h): Stored runs, the
// signals of a request, and closing a pass.
#include "engine/detail/pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine_harness.h"

namespace mocker::engine {
namespace {

using testing::concat;
using testing::range;

detail::RequestRecord recordWithBlocks(std::uint32_t num_blocks) {
  detail::RequestRecord r(
      detail::AcceptedRequest{RequestId{7}, range(1, 4 * num_blocks), 2, std::nullopt});
  for (std::uint32_t i = 0; i < num_blocks; ++i) r.hashes.push_back(BlockHash{100 + i});
  return r;
}

// Newly visible blocks 0, 1 and 3 (2 was already cached): two Stored events, the second one
// parented on block 2's hash; token ids cover exactly the run's blocks.
TEST(StoredRunsTest, OneStoredPerMaximalRunWithThePreviousBlockAsParent) {
  const detail::RequestRecord r = recordWithBlocks(5);
  std::vector<KvEvent> events;
  detail::StoredRuns runs(r, 4, events, true);
  runs.visit(0, true);
  runs.visit(1, true);
  runs.visit(2, false);
  runs.visit(3, true);
  runs.close(4);
  ASSERT_EQ(events.size(), 2u);
  const auto& first = std::get<BlockStored>(events[0]);
  EXPECT_EQ(first.block_hashes, (std::vector<std::uint64_t>{100, 101}));
  EXPECT_FALSE(first.parent_block_hash.has_value());
  EXPECT_EQ(first.token_ids, range(1, 8));
  EXPECT_EQ(first.block_size, 4u);
  const auto& second = std::get<BlockStored>(events[1]);
  EXPECT_EQ(second.block_hashes, (std::vector<std::uint64_t>{103}));
  EXPECT_EQ(second.parent_block_hash, 102u);
  EXPECT_EQ(second.token_ids, range(13, 16));
}

// Without token ids (Engine::setKvEventTokens(false)): the same runs, hashes and parents.
TEST(StoredRunsTest, WithoutTokensTheSameRunsCarryNoTokenIds) {
  const detail::RequestRecord r = recordWithBlocks(5);
  std::vector<KvEvent> with, without;
  for (auto* events : {&with, &without}) {
    detail::StoredRuns runs(r, 4, *events, events == &with);
    runs.visit(0, true);
    runs.visit(1, true);
    runs.visit(2, false);
    runs.visit(3, true);
    runs.close(4);
  }
  ASSERT_EQ(without.size(), 2u);
  for (std::size_t i = 0; i < without.size(); ++i) {
    BlockStored expected = std::get<BlockStored>(with[i]);
    EXPECT_FALSE(expected.token_ids.empty());
    expected.token_ids.clear();
    EXPECT_EQ(std::get<BlockStored>(without[i]), expected);
  }
}

TEST(StoredRunsTest, NothingNewlyVisibleStoresNothing) {
  const detail::RequestRecord r = recordWithBlocks(3);
  std::vector<KvEvent> events;
  detail::StoredRuns runs(r, 4, events, true);
  for (std::uint32_t i = 0; i < 3; ++i) runs.visit(i, false);
  runs.close(3);
  EXPECT_TRUE(events.empty());
}

TEST(PassSignalsTest, FirstTokenCarriesCachedTokensAndIsAppended) {
  detail::RequestRecord r(
      detail::AcceptedRequest{RequestId{1}, range(1, 8), 2, std::vector<std::uint32_t>{42, 43}});
  r.first_cached_tokens = 4;
  std::vector<OutputSignal> outputs;
  const OutputSignal first = detail::emitToken(r, 0, outputs);
  EXPECT_EQ(first.id, RequestId{1});
  EXPECT_EQ(first.token, 42u);
  EXPECT_EQ(first.index, 0u);
  EXPECT_EQ(first.time_ms, 0.0);
  EXPECT_EQ(first.cached_tokens, 4u);
  EXPECT_EQ(first.terminal, Terminal::None);
  EXPECT_EQ(first.limit, LengthLimit::None);
  const OutputSignal second = detail::emitToken(r, 0, outputs);
  EXPECT_EQ(second.token, 43u);
  EXPECT_EQ(second.index, 1u);
  EXPECT_FALSE(second.cached_tokens.has_value());
  EXPECT_EQ(r.tokens, concat(range(1, 8), {42, 43}));
  EXPECT_EQ(outputs, (std::vector<OutputSignal>{first, second}));  // appended, in order
}

TEST(PassSignalsTest, TerminalWithoutTokenCarriesCachedTokensOnlyWithoutOutput) {
  detail::RequestRecord r(detail::AcceptedRequest{RequestId{3}, range(1, 8), 0, std::nullopt});
  r.first_cached_tokens = 8;
  const OutputSignal done = detail::completedWithoutToken(r, LengthLimit::None);
  EXPECT_FALSE(done.token.has_value());
  EXPECT_EQ(done.terminal, Terminal::Completed);
  EXPECT_EQ(done.cached_tokens, 8u);
  r.tokens.push_back(5);  // one output token already emitted
  EXPECT_FALSE(detail::completedWithoutToken(r, LengthLimit::None).cached_tokens.has_value());
  EXPECT_EQ(detail::completedWithoutToken(r, LengthLimit::KvCapacity).limit,
            LengthLimit::KvCapacity);
  const OutputSignal failed = detail::failedSignal(r);
  EXPECT_EQ(failed.terminal, Terminal::Failed);
  EXPECT_EQ(failed.index, 1u);
  EXPECT_FALSE(failed.token.has_value());
}

// Closing a pass: rejections go last, every signal gets the end time, a failed pass keeps a
// finite prefill time and drops the decode time, the queue statistics and load are filled in.
TEST(FinishPassTest, RejectionsLastEndTimeEverywhereAndFailedTimesReset) {
  PassResult out = detail::beginPass(1, 100.0);
  out.prefill_ms = 10.0;
  out.decode_ms = std::numeric_limits<double>::infinity();
  out.outputs.push_back({RequestId{1}, std::nullopt, 0, 0.0, Terminal::Failed, {}});
  detail::RunningMoments prefill, decode;
  prefill.add(4);
  prefill.add(8);
  decode.add(10);
  const std::vector<detail::Rejection> rejected = {{RequestId{9}, LengthLimit::MaxModelLen}};
  LoadMetrics load;
  load.running_requests = 3;
  detail::finishPass(out, 100.0, rejected, prefill, decode, load);
  ASSERT_EQ(out.outputs.size(), 2u);
  EXPECT_EQ(out.outputs[1].id, RequestId{9});
  EXPECT_EQ(out.outputs[1].terminal, Terminal::Rejected);
  EXPECT_EQ(out.outputs[1].limit, LengthLimit::MaxModelLen);
  EXPECT_EQ(out.prefill_ms, 10.0);
  EXPECT_EQ(out.decode_ms, 0.0);
  EXPECT_EQ(out.end_ms, 110.0);
  for (const OutputSignal& s : out.outputs) EXPECT_EQ(s.time_ms, 110.0);
  EXPECT_DOUBLE_EQ(out.fpm.wall_time, 0.01);
  EXPECT_EQ(out.fpm.dp_rank, 1u);
  EXPECT_EQ(out.fpm.queued.num_prefill_requests, 2u);
  EXPECT_EQ(out.fpm.queued.sum_prefill_tokens, 12u);
  EXPECT_DOUBLE_EQ(out.fpm.queued.var_prefill_length, 4.0);
  EXPECT_EQ(out.fpm.queued.num_decode_requests, 1u);
  EXPECT_EQ(out.fpm.queued.sum_decode_kv_tokens, 10u);
  EXPECT_EQ(out.load.running_requests, 3u);
}

}  // namespace
}  // namespace mocker::engine
