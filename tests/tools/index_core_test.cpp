// `mocker index`'s socket-free parts: the stream frame layouts (stream_frames.h), the overlap
// answer (query_answer.h), verify's per-stream position (verify.h, VerifyPosition) and the core
// (index_core.h) driven message by message with a recording outbox: a gap healed by a replay, a
// ring overrun resynced from kv_snapshot, a kv_snapshot request that cannot be sent, a verify
// query answered, a publisher restart dropping the rank from every tier, events of an unknown
// medium counted, a malformed query.
#include "tools/index/index_core.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "engine/block_hash.h"
#include "engine/lora.h"
#include "protocol/framing.h"
#include "tools/index/query_answer.h"
#include "tools/index/stream_frames.h"

namespace mocker::index {
namespace {

using Bytes = std::vector<std::byte>;

Bytes seqFrame(std::uint64_t seq) {
  const auto a = protocol::encodeSeqNo(seq);
  return {a.begin(), a.end()};
}

Bytes batchBytes(std::uint64_t seq, std::vector<std::uint64_t> stored) {
  protocol::KvEventBatch b{.ts = 1000.0 + static_cast<double>(seq), .events = {}, .dp_rank = 0};
  if (!stored.empty()) {
    const std::vector<std::uint32_t> tokens(stored.size(), 1);  // block size 1
    b.events.push_back(
        protocol::BlockStoredEvent{.block_hashes = stored, .token_ids = tokens, .block_size = 1});
  }
  return protocol::encodeKvEventBatch(b);
}

std::vector<std::span<const std::byte>> spans(const std::vector<Bytes>& frames) {
  return {frames.begin(), frames.end()};
}

TEST(IndexStreamFrames, LiveAndBothReplayLayouts) {
  const Bytes topic{std::byte{'t'}}, payload{std::byte{1}, std::byte{2}}, empty;
  const std::vector<Bytes> live{topic, seqFrame(5), payload};
  const auto m = parseLiveMessage(spans(live));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->seq, 5u);
  EXPECT_EQ(m->payload.size(), 2u);
  EXPECT_FALSE(parseLiveMessage(spans({topic, payload})).has_value());
  EXPECT_FALSE(parseLiveMessage(spans({topic, Bytes(7), payload})).has_value());

  const auto r1 = parseReplayMessage(spans({empty, seqFrame(6), payload}));
  const auto r2 = parseReplayMessage(spans({empty, topic, seqFrame(7), payload}));
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(r1->seq, 6u);
  EXPECT_EQ(r2->seq, 7u);
  EXPECT_EQ(r2->payload.size(), 2u);
  const auto end = parseReplayMessage(spans({empty, seqFrame(protocol::kReplayEndMarker), empty}));
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(end->isEndMarker());
  EXPECT_FALSE(parseReplayMessage(spans({topic, seqFrame(6), payload})).has_value());  // no ""
  EXPECT_FALSE(parseReplayMessage(spans({empty, seqFrame(6)})).has_value());
}

TEST(IndexQueryAnswer, ConfiguredWorkersAppearAndRanksAreOrdered) {
  TieredKvIndex tiers;
  KvIndex& index = tiers.gpu();
  const std::vector<std::uint64_t> both{10, 11}, first{10};
  index.applyStored({3, 1}, both, std::nullopt);
  index.applyStored({3, 0}, first, std::nullopt);
  const std::vector<WorkerEndpoint> workers{{.worker_id = 9}, {.worker_id = 3}};
  OverlapQuery q{.id = "q", .block_hashes = std::vector<std::uint64_t>{10, 11, 12}};
  q.with_cached = true;
  const OverlapReply r = answerOverlap(tiers, q, {}, workers);
  EXPECT_EQ(r.id, "q");
  EXPECT_EQ(r.num_blocks, 3u);
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].worker_id, 3u);
  EXPECT_EQ(r.workers[0].blocks, 2u);
  ASSERT_EQ(r.workers[0].ranks.size(), 2u);
  EXPECT_EQ(r.workers[0].ranks[0], (RankOverlap{0, 1, 1}));
  EXPECT_EQ(r.workers[0].ranks[1], (RankOverlap{1, 2, 2}));
  EXPECT_EQ(r.workers[1], (WorkerOverlap{9, 0, {}}));
}

// A token query names its adapter: the blocks adapter A's request stored (the engine's hashes)
// overlap a query for A only, not one for adapter B or the base model with the same tokens.
TEST(IndexQueryAnswer, TokenQueriesHashUnderTheirAdapter) {
  const std::vector<std::uint32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  const QueryDefaults defaults{.block_size = 4, .seeds = {}};
  TieredKvIndex index;
  index.gpu().applyStored(
      {3, 0}, engine::sequenceHashes(tokens, 4, engine::adapterSeeds({}, std::string("A"))),
      std::nullopt);
  const std::vector<WorkerEndpoint> workers{{.worker_id = 3}};
  const auto blocks = [&](std::optional<std::string> lora) {
    const OverlapReply r =
        answerOverlap(index, {.tokens = tokens, .lora = std::move(lora)}, defaults, workers);
    EXPECT_EQ(r.num_blocks, 2u);
    return r.workers.at(0).blocks;
  };
  EXPECT_EQ(blocks("A"), 2u);
  EXPECT_EQ(blocks("B"), 0u);
  EXPECT_EQ(blocks(std::nullopt), 0u);
}

protocol::RankBlocks rankAt(std::vector<std::uint64_t> hashes, std::uint64_t seq) {
  return {.dp_rank = 0, .block_hashes = std::move(hashes), .last_seq = seq};
}

TEST(IndexVerifyPosition, NowLaterCarriedAndJumped) {
  using Kind = VerifyPosition::Decision::Kind;
  const auto deadline = VerifyPosition::Clock::now() + std::chrono::hours(1);
  VerifyPosition p;
  p.startLogging();
  (void)p.applied(4, {});
  EXPECT_EQ(p.decide({1, 0}, rankAt({1}, 4), deadline).kind, Kind::CompareNow);
  // Behind: waits for seq 6, resolved when it is applied.
  EXPECT_EQ(p.decide({1, 0}, rankAt({1, 2}, 6), deadline).kind, Kind::Later);
  EXPECT_TRUE(p.waiting());
  EXPECT_FALSE(p.applied(5, {}).has_value());
  EXPECT_EQ(p.applied(6, {}), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_FALSE(p.waiting());
  // Ahead: carried forward through the logged batch 7.
  p.startLogging();
  protocol::KvEventBatch b7;
  b7.events.push_back(protocol::BlockStoredEvent{.block_hashes = {3}});
  (void)p.applied(7, std::move(b7));
  const auto carried = p.decide({1, 0}, rankAt({1, 2}, 6), deadline);
  EXPECT_EQ(carried.kind, Kind::CompareNow);
  EXPECT_EQ(carried.hashes, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(p.decide({1, 0}, rankAt({1}, 2), deadline).kind, Kind::Error);  // not logged
  // A jump fails a waiting comparison; an expired one names where the index is.
  EXPECT_EQ(p.decide({1, 0}, rankAt({1}, 9), deadline).kind, Kind::Later);
  const auto jumped = p.jumped();
  ASSERT_TRUE(jumped.has_value());
  EXPECT_NE(jumped->find("seq 9"), std::string::npos) << *jumped;
  EXPECT_FALSE(p.lastApplied().has_value());
  p.resetTo(3);
  EXPECT_EQ(p.decide({1, 0}, rankAt({1}, 9), deadline - std::chrono::hours(2)).kind, Kind::Later);
  EXPECT_FALSE(p.expire(deadline - std::chrono::hours(3), 5).has_value());
  const auto expired = p.expire(deadline, 5);
  ASSERT_TRUE(expired.has_value());
  EXPECT_NE(expired->find("within 5 ms (it is at seq 3)"), std::string::npos) << *expired;
}

// Records every send; snapshot requests fail while `refuse_snapshots`.
struct RecordingOutbox final : IndexOutbox {
  std::vector<std::pair<std::size_t, std::uint64_t>> replays;
  std::vector<protocol::KvSnapshotRequest> snapshots;
  std::vector<QueryReply> replies;
  std::size_t reconnects = 0;
  bool refuse_snapshots = false;

  SendReport replayRequest(std::size_t stream, std::uint64_t start) override {
    replays.emplace_back(stream, start);
    return {.sent = true, .failed = false, .outcome = "sent", .error = {}};
  }
  SendReport snapshotRequest(std::size_t, const protocol::KvSnapshotRequest& r) override {
    if (refuse_snapshots)
      return {.sent = false, .failed = false, .outcome = "would block", .error = {}};
    snapshots.push_back(r);
    return {.sent = true, .failed = false, .outcome = "sent", .error = {}};
  }
  SendReport queryReply(const std::string&, bool, const QueryReply& reply) override {
    replies.push_back(reply);
    return {.sent = true, .failed = false, .outcome = "sent", .error = {}};
  }
  void reconnectChannel(std::size_t) override { ++reconnects; }
};

struct CoreFixture {
  explicit CoreFixture(bool with_snapshot) {
    config.workers = {{.worker_id = 7,
                       .dp_rank = 0,
                       .events = "tcp://127.0.0.1:1",
                       .replay = "tcp://127.0.0.1:2",
                       .snapshot = with_snapshot ? "tcp://127.0.0.1:3" : "",
                       .topic = ""}};
    config.replay_at_start = false;
    config.probe_interval = std::chrono::milliseconds(0);
    auto created = IndexCore::create(config, outbox);
    EXPECT_TRUE(created.has_value());
    core = std::move(*created);
    core->start(IndexCore::Clock::now());
  }
  void live(std::uint64_t seq, std::vector<std::uint64_t> stored = {}) {
    const Bytes payload = batchBytes(seq, std::move(stored));
    core->onLiveMessage(0, StreamMessage{.seq = seq, .payload = payload});
  }
  void replayed(std::uint64_t seq, std::vector<std::uint64_t> stored = {}) {
    const Bytes payload = batchBytes(seq, std::move(stored));
    core->onReplayMessage(0, StreamMessage{.seq = seq, .payload = payload});
  }
  void replayEnd() {
    core->onReplayMessage(0, StreamMessage{.seq = protocol::kReplayEndMarker, .payload = {}});
  }
  void query(const QueryRequest& request) {
    const Bytes identity{std::byte{'c'}}, payload = encodeQueryRequest(request);
    const std::array<std::span<const std::byte>, 2> frames{identity, payload};
    core->onQuery(frames);
  }
  const IndexStats& stats() {
    core->publishStats();
    return core->counters();
  }

  IndexServiceConfig config;
  RecordingOutbox outbox;
  std::unique_ptr<IndexCore> core;
};

TEST(IndexCore, AGapIsReplayedFromTheLastAppliedSeqAndHealed) {
  CoreFixture f(/*with_snapshot=*/false);
  f.live(0, {10});
  f.live(1, {11});
  f.live(3, {13});
  ASSERT_EQ(f.outbox.replays, (std::vector<std::pair<std::size_t, std::uint64_t>>{{0, 1}}));
  f.replayed(1, {11});
  f.replayed(2, {12});
  f.replayed(3, {13});
  f.replayEnd();
  const IndexStats& s = f.stats();
  EXPECT_EQ(s.batches_applied, 4u);
  EXPECT_EQ(s.duplicate_batches, 2u);
  EXPECT_EQ(s.gaps_detected, 1u);
  EXPECT_EQ(s.gaps_healed, 1u);
  EXPECT_EQ(s.replay_requests, 1u);
  EXPECT_EQ(s.blocks_indexed, 4u);

  f.core->onLiveMessage(0, std::nullopt);
  EXPECT_EQ(f.stats().malformed_messages, 1u);
  f.query(OverlapQuery{.id = "o", .block_hashes = std::vector<std::uint64_t>{10, 11}});
  ASSERT_EQ(f.outbox.replies.size(), 1u);
  const auto& overlap = std::get<OverlapReply>(f.outbox.replies[0]);
  ASSERT_EQ(overlap.workers.size(), 1u);
  EXPECT_EQ(overlap.workers[0].blocks, 2u);
}

TEST(IndexCore, ARingOverrunIsResyncedFromTheSnapshot) {
  CoreFixture f(/*with_snapshot=*/true);
  f.live(0, {10});
  f.live(5, {15});
  ASSERT_EQ(f.outbox.replays.size(), 1u);
  f.replayed(3, {13});  // the replay starts past the gap: the ring overran
  f.replayEnd();
  ASSERT_EQ(f.outbox.snapshots.size(), 1u);
  EXPECT_EQ(f.outbox.snapshots[0].dp_rank, std::optional<std::uint32_t>(0));
  const auto reply = protocol::encodeClientMessage(
      protocol::ClientMessage{protocol::KvSnapshotReply{{rankAt({13, 14, 15}, 5)}}});
  f.core->onChannelMessage(0, reply);
  const IndexStats& s = f.stats();
  EXPECT_EQ(s.gaps_unhealed, 1u);
  EXPECT_EQ(s.resyncs, 1u);
  EXPECT_EQ(s.resync_failures, 0u);
  EXPECT_EQ(s.blocks_indexed, 3u);  // block 10 dropped with the source, 13..15 from the snapshot
}

TEST(IndexCore, AnUnsentSnapshotRequestFailsTheResyncAndTheVerify) {
  CoreFixture f(/*with_snapshot=*/true);
  f.outbox.refuse_snapshots = true;
  f.live(0, {10});
  f.live(5);
  f.replayed(3);
  f.replayEnd();
  EXPECT_EQ(f.stats().resync_failures, 1u);
  f.live(6, {16});
  f.query(VerifyQuery{.id = "v"});
  f.replayed(6, {16});  // the verify's catch-up replay: the last applied batch, then the end
  f.replayEnd();
  f.core->tick(IndexCore::Clock::now());
  ASSERT_EQ(f.outbox.replies.size(), 1u);
  const auto& v = std::get<VerifyReply>(f.outbox.replies[0]);
  EXPECT_FALSE(v.ok);
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_NE(v.errors[0].find("kv_snapshot request not sent (would block)"), std::string::npos)
      << v.errors[0];
  EXPECT_EQ(f.stats().requests_unsent, 2u);
}

TEST(IndexCore, AVerifyAtTheIndexsSeqIsClean) {
  CoreFixture f(/*with_snapshot=*/true);
  f.live(0, {10});
  f.live(1, {11});
  f.query(VerifyQuery{.id = "v"});
  ASSERT_EQ(f.outbox.replays.size(), 1u);  // catch-up from the last applied seq
  f.replayed(1, {11});
  f.replayEnd();
  f.core->tick(IndexCore::Clock::now());
  ASSERT_EQ(f.outbox.snapshots.size(), 1u);
  EXPECT_FALSE(f.outbox.snapshots[0].dp_rank.has_value());
  f.core->onChannelMessage(0, protocol::encodeClientMessage(protocol::ClientMessage{
                                  protocol::KvSnapshotReply{{rankAt({10, 11}, 1)}}}));
  ASSERT_EQ(f.outbox.replies.size(), 1u);
  const auto& v = std::get<VerifyReply>(f.outbox.replies[0]);
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.id, "v");
  ASSERT_EQ(v.sources.size(), 1u);
  EXPECT_EQ(v.sources[0].index_blocks, 2u);
  EXPECT_EQ(f.stats().verify_runs, 1u);
}

TEST(IndexCore, APublisherRestartDropsTheRankFromEveryTier) {
  // The new process starts with empty GPU, host and disk tiers: none of the old process's
  // blocks may stay in any view.
  CoreFixture f(/*with_snapshot=*/false);
  protocol::KvEventBatch b0{.ts = 1000.0, .events = {}, .dp_rank = 0};
  for (const char* medium : {"GPU", "CPU", "DISK"}) {
    protocol::BlockStoredEvent e{.block_hashes = {10}, .token_ids = {1}, .block_size = 1};
    e.medium = medium;
    b0.events.push_back(e);
  }
  const Bytes first = protocol::encodeKvEventBatch(b0);
  f.core->onLiveMessage(0, StreamMessage{.seq = 0, .payload = first});
  f.live(1, {11});
  for (engine::Medium m : {engine::Medium::Gpu, engine::Medium::Cpu, engine::Medium::Disk}) {
    ASSERT_GT(f.core->tiers().tier(m).numBlocksIndexed(), 0u) << engine::mediumName(m);
  }
  // Seq 0 again with another timestamp: a new process.
  const Bytes restarted = protocol::encodeKvEventBatch({.ts = 5.0, .events = {}, .dp_rank = 0});
  f.core->onLiveMessage(0, StreamMessage{.seq = 0, .payload = restarted});
  EXPECT_EQ(f.stats().restarts, 1u);
  for (engine::Medium m : {engine::Medium::Gpu, engine::Medium::Cpu, engine::Medium::Disk}) {
    EXPECT_EQ(f.core->tiers().tier(m).numBlocksIndexed(), 0u) << engine::mediumName(m);
  }
}

TEST(IndexCore, EventsOfAnUnknownMediumAreCountedNotApplied) {
  CoreFixture f(/*with_snapshot=*/false);
  protocol::KvEventBatch b{.ts = 1000.0, .events = {}, .dp_rank = 0};
  protocol::BlockStoredEvent stored{.block_hashes = {10, 11}, .token_ids = {1, 1}, .block_size = 1};
  stored.medium = "NVME";
  protocol::BlockRemovedEvent removed{.block_hashes = {10}};
  removed.medium = "TAPE";
  b.events = {stored, removed};
  const Bytes payload = protocol::encodeKvEventBatch(b);
  f.core->onLiveMessage(0, StreamMessage{.seq = 0, .payload = payload});
  const IndexStats& s = f.stats();
  EXPECT_EQ(s.batches_applied, 1u);
  EXPECT_EQ(s.blocks_applied, 0u);  // nothing was applied to any view
  EXPECT_EQ(s.blocks_indexed, 0u);
  EXPECT_EQ(s.unknown_medium_events, 2u);
  const auto counters = statsCounters(s);
  EXPECT_NE(std::find(counters.begin(), counters.end(),
                      std::pair<std::string, std::uint64_t>{"unknown_medium_events", 2}),
            counters.end());
}

// Another thread's stats() is never behind an answer it was given: the loop publishes its
// counters at the end of each turn, and before it answers any query (LiveKvIndexLive saw an
// overlap of 5 blocks with batches_applied still 0 under ASan).
TEST(IndexCore, StatsAreNeverBehindAQueryAnswer) {
  CoreFixture f(/*with_snapshot=*/false);
  f.live(0, {10, 11});
  EXPECT_EQ(f.core->stats().batches_applied, 0u);  // not published yet: the turn is not over
  f.query(OverlapQuery{.id = "o", .block_hashes = std::vector<std::uint64_t>{10, 11}});
  ASSERT_EQ(f.outbox.replies.size(), 1u);
  EXPECT_EQ(std::get<OverlapReply>(f.outbox.replies[0]).workers.at(0).blocks, 2u);
  EXPECT_EQ(f.core->stats().batches_applied, 1u);
  EXPECT_EQ(f.core->stats().blocks_indexed, 2u);
}

TEST(IndexCore, AMalformedQueryGetsAnErrorNamingTheFrames) {
  CoreFixture f(/*with_snapshot=*/false);
  const Bytes identity{std::byte{'c'}}, a{std::byte{1}}, b{std::byte{2}};
  const std::array<std::span<const std::byte>, 3> frames{identity, a, b};
  f.core->onQuery(frames);
  ASSERT_EQ(f.outbox.replies.size(), 1u);
  EXPECT_EQ(std::get<QueryError>(f.outbox.replies[0]).message,
            "expected one payload frame (got 2)");
  EXPECT_EQ(f.stats().query_errors, 1u);
}

}  // namespace
}  // namespace mocker::index
