// `mocker index --verify`'s socket-free parts (tools/index/verify.h): a snapshot carried forward
// through logged batches (stored, removed, cleared), a log that does not reach back to the
// snapshot, one source's comparison, and the reply's order and verdict.
#include "tools/index/verify.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace mocker::index {
namespace {

protocol::KvEventBatch batch(std::vector<protocol::KvEvent> events) {
  return {.ts = 0.0, .events = std::move(events), .dp_rank = 0};
}

std::vector<std::uint64_t> sorted(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(IndexVerify, SnapshotCarriedForwardThroughTheBatchesAfterIt) {
  const WorkerRank src{3, 1};
  const std::vector<LoggedBatch> log{
      {5, batch({protocol::BlockStoredEvent{.block_hashes = {99}}})},  // before the snapshot
      {7, batch({protocol::BlockStoredEvent{.block_hashes = {30, 31}, .parent_block_hash = 20}})},
      {8, batch({protocol::BlockRemovedEvent{.block_hashes = {10}}})},
  };
  const auto carried = carrySnapshotForward(src, {10, 20}, 6, log, 8);
  ASSERT_TRUE(carried.has_value()) << carried.error().message;
  EXPECT_EQ(sorted(*carried), (std::vector<std::uint64_t>{20, 30, 31}));

  const std::vector<LoggedBatch> cleared{
      {7, batch({protocol::AllBlocksClearedEvent{}})},
      {8, batch({protocol::BlockStoredEvent{.block_hashes = {1}}})}};
  const auto after_clear = carrySnapshotForward(src, {10, 20}, 6, cleared, 8);
  ASSERT_TRUE(after_clear.has_value());
  EXPECT_EQ(*after_clear, (std::vector<std::uint64_t>{1}));
}

TEST(IndexVerify, ALogThatDoesNotReachTheSnapshotIsAnError) {
  const std::vector<LoggedBatch> log{{9, batch({})}};
  const auto r = carrySnapshotForward({0, 0}, {1}, 6, log, 9);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("at seq 6"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("index at seq 9"), std::string::npos) << r.error().message;
  EXPECT_FALSE(carrySnapshotForward({0, 0}, {1}, 6, {}, 9).has_value());
}

TEST(IndexVerify, CompareSourceAndTheReplyVerdict) {
  KvIndex index;
  const std::vector<std::uint64_t> stored{10, 11};
  index.applyStored({1, 0}, stored, std::nullopt);
  const SourceDiff d = compareSource(index, {1, 0}, {10, 12});
  EXPECT_EQ(d.worker_id, 1u);
  EXPECT_EQ(d.index_blocks, 2u);
  EXPECT_EQ(d.worker_blocks, 2u);
  EXPECT_EQ(d.missing, (std::vector<std::uint64_t>{12}));
  EXPECT_EQ(d.extra, (std::vector<std::uint64_t>{11}));

  VerifyReply reply;
  reply.sources = {compareSource(index, {2, 0}, {}), compareSource(index, {1, 0}, {10, 11})};
  finishVerifyReply(reply);
  EXPECT_TRUE(reply.ok);
  EXPECT_EQ(reply.sources.front().worker_id, 1u);
  reply.sources.push_back(d);
  finishVerifyReply(reply);
  EXPECT_FALSE(reply.ok);
  VerifyReply failed;
  failed.errors.push_back("worker 1: no snapshot endpoint");
  finishVerifyReply(failed);
  EXPECT_FALSE(failed.ok);
}

}  // namespace
}  // namespace mocker::index
