#include "publishers/kv_event_publisher.h"

#include <gtest/gtest.h>

#include "protocol/framing.h"
#include "tests/testing/recording_frame_sink.h"

namespace mocker::publishers {
namespace {

using testing::frameText;
using testing::RecordingFrameSink;
using Bytes = std::vector<std::byte>;

Bytes seqBytes(std::uint64_t seq) {
  const auto a = protocol::encodeSeqNo(seq);
  return Bytes(a.begin(), a.end());
}
Bytes text(std::string_view s) {
  const auto b = std::as_bytes(std::span<const char>(s.data(), s.size()));
  return Bytes(b.begin(), b.end());
}
std::uint64_t seqOf(const Bytes& frame) { return *protocol::decodeSeqNo(frame); }

std::vector<engine::KvEvent> storedEvents(std::uint64_t hash) {
  return {engine::BlockStored{.block_hashes = {hash},
                              .parent_block_hash = std::nullopt,
                              .token_ids = {1, 2, 3, 4},
                              .block_size = 4}};
}

class KvEventPublisherTest : public ::testing::Test {
 protected:
  std::unique_ptr<KvEventPublisher> make(KvEventPublisherConfig config) {
    auto p = KvEventPublisher::create(std::move(config), sink_);
    EXPECT_TRUE(p.has_value());
    return std::move(p).value();
  }
  // A replay request exactly as a DEALER's ["", seq] arrives at the ROUTER.
  std::vector<Message> replay(KvEventPublisher& p, std::uint64_t start,
                              std::string_view identity = "client-1") {
    const Bytes id = text(identity);
    const Bytes seq = seqBytes(start);
    const std::vector<Frame> frames{Frame(id), Frame(), Frame(seq)};
    return p.handleReplayRequest(frames);
  }
  RecordingFrameSink sink_;
};

TEST_F(KvEventPublisherTest, SequenceNumbersStartAtZeroAndCountBatchesNotEvents) {
  auto p = make({});
  std::vector<engine::KvEvent> three = storedEvents(1);
  three.emplace_back(std::in_place_type<engine::BlockRemoved>, 5u);
  three.emplace_back(std::in_place_type<engine::AllBlocksCleared>);
  EXPECT_EQ(p->publishPass(three, 1.0), 0u);
  EXPECT_EQ(p->publishPass({}, 2.0), std::nullopt);  // a pass without events: no batch
  EXPECT_EQ(p->publishPass(storedEvents(2), 3.0), 1u);
  ASSERT_EQ(sink_.messages().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const Message& m = sink_.messages()[i];
    ASSERT_EQ(m.size(), 3u);
    EXPECT_TRUE(m[0].empty());  // default topic ""
    EXPECT_EQ(m[1], seqBytes(i));
  }
  const auto batch = protocol::decodeKvEventBatch(sink_.messages()[0][2]);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->ts, 1.0);
  ASSERT_EQ(batch->events.size(), 3u);  // one batch holds every event of the pass, in order
  EXPECT_TRUE(std::holds_alternative<protocol::BlockStoredEvent>(batch->events[0]));
  EXPECT_TRUE(std::holds_alternative<protocol::BlockRemovedEvent>(batch->events[1]));
  EXPECT_TRUE(std::holds_alternative<protocol::AllBlocksClearedEvent>(batch->events[2]));
  EXPECT_EQ(p->nextSeq(), 2u);
  EXPECT_EQ(p->numBatchesSent(), 2u);
}

TEST_F(KvEventPublisherTest, PayloadIsTheSpecWorkedExampleWithTheLlmdTopic) {
  auto p = make({.topic = "kv@10.0.0.1:8000@Qwen/Qwen3-0.6B"});
  const std::vector<engine::KvEvent> events{
      engine::BlockStored{.block_hashes = {0xcb38e4d7fb2dca5cull, 0x44a2b2379d6d3c3dull},
                          .parent_block_hash = std::nullopt,
                          .token_ids = {1, 2, 3, 4, 5, 6, 7, 8},
                          .block_size = 4}};
  p->publishPass(events, 1700000000.5);
  const Message& m = sink_.messages().at(0);
  EXPECT_EQ(frameText(m[0]), "kv@10.0.0.1:8000@Qwen/Qwen3-0.6B");
  EXPECT_EQ(m[1], seqBytes(0));
  EXPECT_EQ(m[2], protocol::encodeKvEventBatch(
                      {.ts = 1700000000.5,
                       .events = {protocol::BlockStoredEvent{
                           .block_hashes = {0xcb38e4d7fb2dca5cull, 0x44a2b2379d6d3c3dull},
                           .token_ids = {1, 2, 3, 4, 5, 6, 7, 8},
                           .block_size = 4}}}));
  EXPECT_EQ(m[2].size(), 61u);
}

TEST_F(KvEventPublisherTest, RankAndLayoutOptionsReachThePayload) {
  auto p = make(
      {.dp_rank = 3,
       .encoding = {.layout = protocol::KvLayout::Map, .parent_root = protocol::ParentRoot::Zero}});
  p->publishPass(storedEvents(9), 5.0);
  const auto batch = protocol::decodeKvEventBatch(sink_.messages().at(0)[2]);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->dp_rank, 3u);
  EXPECT_EQ(std::get<protocol::BlockStoredEvent>(batch->events[0]).parent_block_hash, 0u);
  EXPECT_EQ(std::to_integer<unsigned>(sink_.messages()[0][2][11]), 0x88u);  // map(8) event
}

TEST_F(KvEventPublisherTest, TopicValidation) {
  EXPECT_TRUE(validateKvTopic("").has_value());
  EXPECT_TRUE(validateKvTopic("kv-events").has_value());
  EXPECT_TRUE(validateKvTopic("kv@10.0.0.1:8000@Qwen/Qwen3-0.6B").has_value());
  EXPECT_TRUE(validateKvTopic("kv@10.0.0.1@m").has_value());
  for (const char* bad : {"kv@pod", "kv@@model", "kv@pod@", "kv@pod@a@b", "kv@"}) {
    const auto s = validateKvTopic(bad);
    ASSERT_FALSE(s.has_value()) << bad;
    EXPECT_NE(s.error().message.find("kv@<pod>@<model>"), std::string::npos);
  }
  RecordingFrameSink sink;
  EXPECT_FALSE(KvEventPublisher::create({.topic = "kv@pod@org@model"}, sink).has_value());
}

TEST_F(KvEventPublisherTest, ReplayLayoutR1RepliesThenEndMarker) {
  auto p = make({.topic = "t"});
  for (std::uint64_t i = 0; i < 3; ++i)
    p->publishPass(storedEvents(100 + i), 1.0 + static_cast<double>(i));
  const auto replies = replay(*p, 1);
  ASSERT_EQ(replies.size(), 3u);  // seq 1, seq 2, end marker
  for (std::size_t i = 0; i < 2; ++i) {
    const Message& m = replies[i];
    ASSERT_EQ(m.size(), 4u);  // [identity, "", seq, payload]
    EXPECT_EQ(frameText(m[0]), "client-1");
    EXPECT_TRUE(m[1].empty());
    EXPECT_EQ(m[2], seqBytes(1 + i));
    EXPECT_EQ(m[3], sink_.messages()[1 + i][2]);  // the very payload that went live
  }
  const Message& end = replies[2];
  ASSERT_EQ(end.size(), 4u);  // [identity, "", ff×8, ""]
  EXPECT_EQ(end[2], Bytes(8, std::byte{0xff}));
  EXPECT_TRUE(end[3].empty());
  EXPECT_EQ(p->numReplayRequests(), 1u);
}

TEST_F(KvEventPublisherTest, ReplayLayoutR2CarriesTheTopic) {
  auto p = make({.topic = "kv-events", .replay_layout = ReplayLayout::R2});
  p->publishPass(storedEvents(1), 1.0);
  const auto replies = replay(*p, 0);
  ASSERT_EQ(replies.size(), 2u);
  ASSERT_EQ(replies[0].size(), 5u);  // [identity, "", topic, seq, payload]
  EXPECT_EQ(frameText(replies[0][2]), "kv-events");
  EXPECT_EQ(replies[0][3], seqBytes(0));
  EXPECT_EQ(replies[0][4], sink_.messages()[0][2]);
  const Message& end = replies[1];  // [identity, "", "", ff×8, ""]
  ASSERT_EQ(end.size(), 5u);
  EXPECT_TRUE(end[2].empty());
  EXPECT_EQ(end[3], Bytes(8, std::byte{0xff}));
  EXPECT_TRUE(end[4].empty());
}

TEST_F(KvEventPublisherTest, RingKeepsTheLastNBatches) {
  auto p = make({.buffer_steps = 3});
  for (std::uint64_t i = 0; i < 5; ++i) p->publishPass(storedEvents(i + 1), 0.0);
  EXPECT_EQ(p->ringSize(), 3u);
  // Older than the ring: the remaining batches, no "history lost" signal.
  auto replies = replay(*p, 0);
  ASSERT_EQ(replies.size(), 4u);
  EXPECT_EQ(seqOf(replies[0][2]), 2u);
  EXPECT_EQ(seqOf(replies[1][2]), 3u);
  EXPECT_EQ(seqOf(replies[2][2]), 4u);
  EXPECT_EQ(seqOf(replies[3][2]), protocol::kReplayEndMarker);
  // Inside the ring.
  replies = replay(*p, 4);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(seqOf(replies[0][2]), 4u);
  // Newer than the last batch: only the end marker.
  replies = replay(*p, 5);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(seqOf(replies[0][2]), protocol::kReplayEndMarker);
  replies = replay(*p, ~0ull - 1);
  ASSERT_EQ(replies.size(), 1u);
}

TEST_F(KvEventPublisherTest, RingDisabledRepliesOnlyTheEndMarker) {
  auto p = make({.buffer_steps = 0});
  p->publishPass(storedEvents(1), 0.0);
  EXPECT_EQ(sink_.messages().size(), 1u);
  EXPECT_EQ(replay(*p, 0).size(), 1u);
}

TEST_F(KvEventPublisherTest, DroppedBatchIsCountedAndStillReplayable) {
  auto p = make({});
  sink_.dropNext(1);
  p->publishPass(storedEvents(1), 0.0);
  p->publishPass(storedEvents(2), 0.0);
  EXPECT_EQ(p->numBatchesDropped(), 1u);
  EXPECT_EQ(p->numBatchesSent(), 1u);
  ASSERT_EQ(sink_.messages().size(), 1u);
  EXPECT_EQ(sink_.messages()[0][1], seqBytes(1));  // the live stream shows a gap at 0
  const auto replies = replay(*p, 0);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(seqOf(replies[0][2]), 0u);
  const auto batch = protocol::decodeKvEventBatch(replies[0][3]);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(std::get<protocol::BlockStoredEvent>(batch->events[0]).block_hashes[0], 1u);
}

// --- Failure drills: KV-event faults (KvBatchFault) -----------------------------------------

std::vector<std::uint64_t> liveSeqs(const RecordingFrameSink& sink) {
  std::vector<std::uint64_t> out;
  for (const Message& m : sink.messages()) out.push_back(seqOf(m[1]));
  return out;
}

std::vector<std::uint64_t> replayedSeqs(const std::vector<Message>& replies) {
  std::vector<std::uint64_t> out;
  for (const Message& m : replies) out.push_back(seqOf(m[2]));
  return out;
}

constexpr std::uint64_t kEnd = protocol::kReplayEndMarker;

TEST_F(KvEventPublisherTest, DropFaultLeavesAGapTheRingHeals) {
  auto p = make({});
  p->publishPass(storedEvents(1), 0.0);
  EXPECT_EQ(p->publishPass(storedEvents(2), 0.0, {.drop = true}), 1u);
  p->publishPass(storedEvents(3), 0.0);
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{0, 2}));
  EXPECT_EQ(replayedSeqs(replay(*p, 0)), (std::vector<std::uint64_t>{0, 1, 2, kEnd}));
}

TEST_F(KvEventPublisherTest, UnhealableDropIsAHoleInTheRing) {
  auto p = make({});
  for (std::uint64_t i = 0; i < 4; ++i) {
    p->publishPass(storedEvents(i + 1), 0.0, {.drop = i == 1, .unhealable = i == 1});
  }
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{0, 2, 3}));
  EXPECT_EQ(p->ringSize(), 3u);
  EXPECT_EQ(replayedSeqs(replay(*p, 0)), (std::vector<std::uint64_t>{0, 2, 3, kEnd}));
  EXPECT_EQ(replayedSeqs(replay(*p, 1)), (std::vector<std::uint64_t>{2, 3, kEnd}));
  EXPECT_EQ(replayedSeqs(replay(*p, 3)), (std::vector<std::uint64_t>{3, kEnd}));
}

TEST_F(KvEventPublisherTest, SuppressedBatchKeepsItsSeqWithoutEvents) {
  auto p = make({});
  p->publishPass(storedEvents(1), 0.0, {.suppress = true});
  p->publishPass(storedEvents(2), 0.0);
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{0, 1}));
  const auto live = protocol::decodeKvEventBatch(sink_.messages()[0][2]);
  ASSERT_TRUE(live.has_value());
  EXPECT_TRUE(live->events.empty());
  const auto replies = replay(*p, 0);  // the ring holds the same (empty) batch
  const auto ringed = protocol::decodeKvEventBatch(replies[0][3]);
  ASSERT_TRUE(ringed.has_value());
  EXPECT_TRUE(ringed->events.empty());
}

TEST_F(KvEventPublisherTest, DuplicateReorderAndTruncate) {
  auto p = make({});
  p->publishPass(storedEvents(1), 0.0, {.duplicate = true});  // 0 0
  p->publishPass(storedEvents(2), 0.0, {.reorder = true});    // held
  EXPECT_EQ(p->numHeld(), 1u);
  p->publishPass(storedEvents(3), 0.0);  // 2 then 1
  EXPECT_EQ(p->numHeld(), 0u);
  p->publishPass(storedEvents(4), 0.0, {.truncate_ring = true});  // 3; ring = {3}
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{0, 0, 2, 1, 3}));
  EXPECT_EQ(p->numBatchesSent(), 5u);
  EXPECT_EQ(replayedSeqs(replay(*p, 0)), (std::vector<std::uint64_t>{3, kEnd}));
}

TEST_F(KvEventPublisherTest, DelayedBatchIsReleasedAtItsTime) {
  auto p = make({});
  p->publishPass(storedEvents(1), 10.0, {.delay_s = 0.25});
  p->publishPass(storedEvents(2), 10.1);
  EXPECT_EQ(p->nextRelease(), 10.25);
  EXPECT_EQ(p->releaseDue(10.2), 0u);
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(p->releaseDue(10.25), 1u);
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{1, 0}));
  EXPECT_EQ(p->nextRelease(), std::nullopt);
  EXPECT_EQ(replayedSeqs(replay(*p, 0)), (std::vector<std::uint64_t>{0, 1, kEnd}));
}

TEST_F(KvEventPublisherTest, MalformedReplayRequestsAreIgnoredAndCounted) {
  auto p = make({});
  p->publishPass(storedEvents(1), 0.0);
  const Bytes id = text("x");
  const Bytes seq = seqBytes(0);
  const Bytes seven(7);
  const Bytes junk = text("junk");
  const std::vector<std::vector<Frame>> bad{
      {},                                        // nothing
      {Frame(id)},                               // identity only
      {Frame(id), Frame(seq)},                   // DEALER forgot the empty delimiter
      {Frame(id), Frame(), Frame(seven)},        // 7-byte seq
      {Frame(id), Frame(junk), Frame(seq)},      // non-empty delimiter
      {Frame(id), Frame(), Frame(seq), Frame()}  // extra frame
  };
  for (const auto& frames : bad) EXPECT_TRUE(p->handleReplayRequest(frames).empty());
  EXPECT_EQ(p->numMalformedReplayRequests(), bad.size());
  EXPECT_EQ(p->numReplayRequests(), 0u);
}

TEST_F(KvEventPublisherTest, ClearOnStartBatchIsSequenceZero) {
  auto p = make({});
  EXPECT_EQ(p->publishEvents({protocol::AllBlocksClearedEvent{}}, 0.0), 0u);
  EXPECT_EQ(p->publishEvents({}, 0.0), std::nullopt);
  const auto batch = protocol::decodeKvEventBatch(sink_.messages().at(0)[2]);
  ASSERT_TRUE(batch.has_value());
  EXPECT_TRUE(std::holds_alternative<protocol::AllBlocksClearedEvent>(batch->events.at(0)));
}

TEST_F(KvEventPublisherTest, RestartStartsOverAtZeroWithAnEmptyRing) {
  auto p = make({});
  p->publishPass(storedEvents(1), 1.0);                     // 0
  p->publishPass(storedEvents(2), 2.0);                     // 1
  p->publishPass(storedEvents(3), 3.0, {.delay_s = 5.0});   // 2, held
  p->publishPass(storedEvents(4), 4.0, {.reorder = true});  // 3, held
  ASSERT_EQ(p->numHeld(), 2u);
  p->restart();
  // The old process's held batches never go out; its ring is gone.
  EXPECT_EQ(p->numHeld(), 0u);
  EXPECT_EQ(p->nextRelease(), std::nullopt);
  EXPECT_EQ(p->releaseDue(100.0), 0u);
  EXPECT_EQ(p->ringSize(), 0u);
  EXPECT_EQ(replayedSeqs(replay(*p, 0)), (std::vector<std::uint64_t>{kEnd}));
  EXPECT_EQ(p->nextSeq(), 0u);
  EXPECT_EQ(p->publishEvents({protocol::AllBlocksClearedEvent{}}, 10.0), 0u);
  EXPECT_EQ(p->publishPass(storedEvents(5), 11.0), 1u);
  EXPECT_EQ(liveSeqs(sink_), (std::vector<std::uint64_t>{0, 1, 0, 1}));
  EXPECT_EQ(replayedSeqs(replay(*p, 0)), (std::vector<std::uint64_t>{0, 1, kEnd}));
  EXPECT_EQ(p->numBatchesSent(), 4u);  // the counters go on
  const auto batch = protocol::decodeKvEventBatch(sink_.messages().at(2)[2]);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->ts, 10.0);
  EXPECT_TRUE(std::holds_alternative<protocol::AllBlocksClearedEvent>(batch->events.at(0)));
}

TEST(ReplayLayoutTest, Names) {
  EXPECT_EQ(*parseReplayLayout("r2"), ReplayLayout::R2);
  EXPECT_EQ(toString(ReplayLayout::R1), "r1");
  EXPECT_FALSE(parseReplayLayout("r3").has_value());
}

TEST(ToWireEventTest, TheTierBecomesVllmsMedium) {
  // KV offload tiers (docs/engine.md): GPU / CPU / DISK, vLLM's strings.
  const auto stored = std::get<protocol::BlockStoredEvent>(toWireEvent(
      engine::BlockStored{.block_hashes = {7}, .block_size = 4, .medium = engine::Medium::Cpu}));
  EXPECT_EQ(stored.medium, "CPU");
  EXPECT_EQ(stored.parent_block_hash, std::nullopt);
  EXPECT_TRUE(stored.token_ids.empty());
  const auto removed = std::get<protocol::BlockRemovedEvent>(
      toWireEvent(engine::BlockRemoved{.block_hash = 7, .medium = engine::Medium::Disk}));
  EXPECT_EQ(removed.medium, "DISK");
  const auto gpu =
      std::get<protocol::BlockRemovedEvent>(toWireEvent(engine::BlockRemoved{.block_hash = 7}));
  EXPECT_EQ(gpu.medium, "GPU");
}

TEST(ToWireEventTest, StoredEventsCarryTheLoraAdapterAsVllmDoes) {
  const auto with = std::get<protocol::BlockStoredEvent>(toWireEvent(engine::BlockStored{
      .block_hashes = {7}, .block_size = 4, .lora_id = 2, .lora_name = "sql-adapter"}));
  EXPECT_EQ(with.lora_id, 2);
  EXPECT_EQ(with.lora_name, "sql-adapter");
  const auto without = std::get<protocol::BlockStoredEvent>(
      toWireEvent(engine::BlockStored{.block_hashes = {7}, .block_size = 4}));
  EXPECT_EQ(without.lora_id, std::nullopt);
  EXPECT_EQ(without.lora_name, std::nullopt);
  // p8 (the default layout) sends both.
  const auto decoded = protocol::decodeKvEventBatch(
      protocol::encodeKvEventBatch(protocol::KvEventBatch{.ts = 1.0, .events = {with}}));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  EXPECT_EQ(std::get<protocol::BlockStoredEvent>(decoded->events[0]), with);
}

}  // namespace
}  // namespace mocker::publishers
