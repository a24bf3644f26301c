// `mocker index`'s core: feeds each stream's Sequencer and carries out its actions, applies
// batches to the KvIndex, keeps the kv_snapshot requests per worker, answers queries and runs
// verify (contract in index_core.h). Every send goes through the IndexOutbox.
#include "tools/index/index_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "protocol/framing.h"
#include "tools/index/query_answer.h"

namespace mocker::index {
namespace {

constexpr int kMaxReplayRetries = 8;

Error invalid(std::string message) { return Error{ErrorCode::InvalidArgument, std::move(message)}; }

std::string lossText(const SeqAction& a) {
  switch (a.reason) {
    case LossReason::JoinedWithoutReplay:
      return "joined at seq " + std::to_string(a.seq_end) + " without a replay endpoint";
    case LossReason::NoReplayEndpoint:
      return "no replay endpoint";
    case LossReason::RingOverrun:
      return "replay ring overrun: the replay started at seq " + std::to_string(a.replay_start);
    case LossReason::ReplayTimedOut:
      return "replay timed out";
    case LossReason::ReplayIncomplete:
      return "the replay never returned the batches";
  }
  return std::string(lossReasonName(a.reason));
}

}  // namespace

std::string SendReport::describe() const {
  return std::string(outcome) + (error.empty() ? "" : ": ") + error;
}

IndexCore::IndexCore(const IndexServiceConfig& config, IndexOutbox& outbox)
    : config_(config), outbox_(outbox) {}

Result<std::unique_ptr<IndexCore>> IndexCore::create(const IndexServiceConfig& config,
                                                     IndexOutbox& outbox) {
  std::unique_ptr<IndexCore> core(new IndexCore(config, outbox));
  MOCKER_TRY_VOID(core->layOut());
  return core;
}

Status IndexCore::layOut() {
  if (config_.workers.empty()) return invalid("no --worker given");
  if (config_.block_size == 0) return invalid("block size must be >= 1");
  // Two endpoints for the same (worker, rank) would interleave two sequences.
  std::set<std::pair<std::uint64_t, std::string>> seen;
  for (const WorkerEndpoint& w : config_.workers) {
    if (!seen.insert({w.worker_id, w.events}).second) {
      return invalid("worker " + std::to_string(w.worker_id) + ": endpoint " + w.events +
                     " given twice");
    }
  }
  std::map<std::uint64_t, std::size_t> channel_of;
  streams_.reserve(config_.workers.size());
  for (const WorkerEndpoint& w : config_.workers) {
    Stream& c = streams_.emplace_back(w, SequencerConfig{.has_replay = !w.replay.empty(),
                                                         .replay_timeout = config_.replay_timeout,
                                                         .probe_interval = config_.probe_interval,
                                                         .max_replay_retries = kMaxReplayRetries});
    if (c.rank) index_.registerSource(source(c));
    if (!w.snapshot.empty()) {
      auto it = channel_of.find(w.worker_id);
      if (it == channel_of.end()) {
        channels_.push_back(
            Channel{.worker_id = w.worker_id, .endpoint = w.snapshot, .waiting = {}});
        it = channel_of.emplace(w.worker_id, channels_.size() - 1).first;
      } else if (channels_[it->second].endpoint != w.snapshot) {
        return invalid("worker " + std::to_string(w.worker_id) +
                       ": two different snapshot endpoints");
      }
      c.channel = it->second;
    }
    c.sequencer.setCanResync(c.channel != kNoChannel && c.rank.has_value());
  }
  return {};
}

std::string IndexCore::rankName(const Stream& c) const {
  return "worker " + std::to_string(c.spec.worker_id) + " rank " +
         (c.rank ? std::to_string(*c.rank) : std::string("?"));
}

void IndexCore::start(Clock::time_point now) {
  next_stats_ = now + config_.stats_interval;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    streams_[i].sequencer.start(now, config_.replay_at_start, actions_);
    perform(i, now);
  }
  if (config_.verify_at_start) startVerify(VerifyJob{});
}

// ---------------------------------------------------------------------------------------------
// Sequence handling: the Sequencer decides, perform() does it.

void IndexCore::onLiveMessage(std::size_t i, const std::optional<StreamMessage>& message) {
  ++s_.live_messages;
  if (!message) {
    ++s_.malformed_messages;
    return;
  }
  onBatch(i, message->seq, message->payload, false);
}

void IndexCore::onReplayMessage(std::size_t i, const std::optional<StreamMessage>& message) {
  if (!message) {
    ++s_.malformed_messages;
    return;
  }
  if (message->isEndMarker()) {
    const auto now = Clock::now();
    streams_[i].sequencer.onReplayEnd(now, actions_);
    perform(i, now);
    return;
  }
  onBatch(i, message->seq, message->payload, true);
}

void IndexCore::apply(const Stream& c, const protocol::KvEventBatch& batch) {
  const WorkerRank src = source(c);
  for (const protocol::KvEvent& ev : batch.events) {
    // Each tier (medium GPU / CPU / DISK) has its own view; index_ is the GPU one.
    // An event of an unknown medium is skipped: counted (unknown_medium_events), not applied.
    if (const auto* st = std::get_if<protocol::BlockStoredEvent>(&ev)) {
      if (tiers_.applyStored(src, st->medium, st->block_hashes, st->parent_block_hash)) {
        s_.blocks_applied += st->block_hashes.size();
      }
    } else if (const auto* rm = std::get_if<protocol::BlockRemovedEvent>(&ev)) {
      if (tiers_.applyRemoved(src, rm->medium, rm->block_hashes)) {
        s_.blocks_applied += rm->block_hashes.size();
      }
    } else {
      index_.applyCleared(src);
    }
  }
  ++s_.batches_applied;
}

protocol::KvEventBatch IndexCore::decodeBatch(Stream& c, std::uint64_t seq,
                                              std::span<const std::byte> payload) {
  auto decoded = protocol::decodeKvEventBatch(payload);
  if (!decoded) {
    // The seq is consumed (as an empty batch) so that ordering goes on; verify shows the cost.
    ++s_.decode_errors;
    spdlog::warn("index: {} seq {}: undecodable batch skipped: {}", rankName(c), seq,
                 decoded.error().message);
    return {};
  }
  ++s_.batches_received;
  if (!c.rank) {
    c.rank = decoded->dp_rank;
    c.sequencer.setCanResync(c.channel != kNoChannel);
  } else if (*c.rank != decoded->dp_rank) {
    ++s_.rank_mismatches;
    if (!c.warned_mismatch) {
      c.warned_mismatch = true;
      spdlog::warn(
          "index: worker {}: endpoint {} is configured as rank {} but sends batches "
          "of rank {}; applying them to rank {}",
          c.spec.worker_id, c.spec.events, *c.rank, decoded->dp_rank, *c.rank);
    }
  }
  return std::move(*decoded);
}

void IndexCore::onBatch(std::size_t i, std::uint64_t seq, std::span<const std::byte> payload,
                        bool replayed) {
  Stream& c = streams_[i];
  const auto now = Clock::now();
  protocol::KvEventBatch batch;
  // A duplicate is dropped by the sequencer anyway: do not pay for decoding it.
  if (!c.sequencer.isDuplicate(seq, /*live=*/!replayed)) batch = decodeBatch(c, seq, payload);
  if (replayed) {
    c.sequencer.onReplayBatch(seq, std::move(batch), now, actions_);
  } else {
    c.sequencer.onLiveBatch(seq, std::move(batch), now, actions_);
  }
  perform(i, now);
}

void IndexCore::perform(std::size_t i, Clock::time_point now) {
  Stream& c = streams_[i];
  // By index, and each action moved out first: a resync request that cannot be sent appends
  // the sequencer's follow-up actions to actions_ while this loop runs.
  for (std::size_t k = 0; k < actions_.size(); ++k) {
    SeqAction a = std::move(actions_[k]);
    switch (a.kind) {
      case SeqActionKind::Apply: {
        apply(c, a.batch);
        auto hashes = c.position.applied(a.seq, std::move(a.batch));
        if (hashes) resolvePending(c, hashes, std::nullopt);
        break;
      }
      case SeqActionKind::Duplicate:
        ++s_.duplicate_batches;
        break;
      case SeqActionKind::GapDetected:
        ++s_.gaps_detected;
        spdlog::debug("index: {}: gap, expected seq {} got {}", rankName(c), a.seq, a.seq_end);
        break;
      case SeqActionKind::GapHealed:
        ++s_.gaps_healed;
        break;
      case SeqActionKind::RequestReplay:
        sendReplayRequest(c, i, a.seq, now);
        break;
      case SeqActionKind::ReplayTimedOut:
        ++s_.replay_timeouts;
        spdlog::warn("index: {}: no replay end marker from {} within {} ms", rankName(c),
                     c.spec.replay, config_.replay_timeout.count());
        break;
      case SeqActionKind::Resync:
      case SeqActionKind::Restarted:
      case SeqActionKind::SkipLost:
        performLoss(i, a, now);
        break;
    }
  }
  actions_.clear();
}

void IndexCore::performLoss(std::size_t i, const SeqAction& a, Clock::time_point now) {
  Stream& c = streams_[i];
  if (a.kind == SeqActionKind::Restarted) {
    ++s_.restarts;
    streamJumped(c);
    spdlog::warn(
        "index: {}: the publisher restarted (its seq {} does not continue the stream this "
        "index applied up to seq {}); dropping this rank's blocks and starting over from "
        "seq 0",
        rankName(c), a.seq, a.seq_end == 0 ? 0 : a.seq_end - 1);
    if (c.rank) tiers_.clearSource(source(c));  // the new process's tiers are all empty
    return;
  }
  ++s_.gaps_unhealed;
  streamJumped(c);
  if (a.kind == SeqActionKind::SkipLost) {
    spdlog::warn(
        "index: {}: batches {}..{} were lost and cannot be replayed ({}); no snapshot "
        "endpoint, so the index for this rank may stay wrong (give snapshot=EP)",
        rankName(c), a.seq, a.seq_end - 1, lossText(a));
    return;
  }
  ++s_.resyncs;
  spdlog::warn(
      "index: {}: batches {}..{} were lost and cannot be replayed ({}); resyncing "
      "from the worker's kv_snapshot",
      rankName(c), a.seq, a.seq_end - 1, lossText(a));
  sendResyncRequest(i, now);
}

void IndexCore::sendReplayRequest(Stream& c, std::size_t i, std::uint64_t start,
                                  Clock::time_point now) {
  const SendReport report = outbox_.replayRequest(i, start);
  c.sequencer.onReplayRequestResult(report.sent, now);
  if (report.sent) {
    ++s_.replay_requests;
    return;
  }
  // Not outstanding: the sequencer asks again on a later tick or gap.
  ++s_.requests_unsent;
  if (report.failed) {
    spdlog::warn("index: replay request to {} failed: {}; will retry", c.spec.replay, report.error);
  } else {
    spdlog::debug("index: replay request to {} not sent ({}); will retry", c.spec.replay,
                  report.outcome);
  }
}

void IndexCore::sendResyncRequest(std::size_t i, Clock::time_point now) {
  Stream& c = streams_[i];
  MOCKER_CHECK(c.channel != kNoChannel && c.rank.has_value());
  Channel& ch = channels_[c.channel];
  const SendReport report = outbox_.snapshotRequest(c.channel, protocol::KvSnapshotRequest{c.rank});
  if (report.sent) {
    ch.waiting.push_back({SnapKind::Resync, i, now});
    return;
  }
  ++s_.requests_unsent;
  ++s_.resync_failures;
  c.sequencer.onResyncResult(false, now, actions_);
  spdlog::warn("index: {}: kv_snapshot request to {} not sent ({}); continuing from seq {}",
               rankName(c), ch.endpoint, report.describe(), c.sequencer.next());
}

// ---------------------------------------------------------------------------------------------
// kv_snapshot replies

void IndexCore::onChannelMessage(std::size_t chi, std::span<const std::byte> payload) {
  Channel& ch = channels_[chi];
  auto msg = protocol::decodeClientMessage(payload);
  if (msg && (std::holds_alternative<protocol::OutputBatch>(*msg) ||
              std::holds_alternative<protocol::SubmitAck>(*msg))) {
    return;  // not ours
  }
  if (ch.waiting.empty()) return;  // a late reply to a request that timed out
  const SnapRequest req = ch.waiting.front();
  ch.waiting.pop_front();
  onSnapshot(chi, req, msg);
}

void IndexCore::onSnapshot(std::size_t chi, const SnapRequest& req,
                           const Result<protocol::ClientMessage>& msg) {
  const protocol::KvSnapshotReply* snap =
      msg ? std::get_if<protocol::KvSnapshotReply>(&*msg) : nullptr;
  std::string failure;
  if (snap == nullptr) {
    if (!msg) {
      failure = msg.error().message;
    } else if (const auto* e = std::get_if<protocol::ErrorReply>(&*msg)) {
      failure = "worker replied error: " + e->message;
    } else {
      failure = "unexpected reply type " + std::string(protocol::messageType(*msg));
    }
  }
  if (req.kind == SnapKind::Resync) {
    onResyncSnapshot(req, snap, std::move(failure));
  } else {
    onVerifySnapshot(chi, snap, failure);
  }
}

void IndexCore::onResyncSnapshot(const SnapRequest& req, const protocol::KvSnapshotReply* snap,
                                 std::string failure) {
  Stream& c = streams_[req.stream];
  const WorkerRank src = source(c);
  const protocol::RankBlocks* blocks = nullptr;
  if (snap != nullptr) {
    for (const auto& r : snap->ranks) {
      if (r.dp_rank == src.dp_rank) blocks = &r;
    }
    if (blocks == nullptr)
      failure = "the kv_snapshot reply has no rank " + std::to_string(src.dp_rank);
  }
  if (blocks == nullptr) {
    ++s_.resync_failures;
    spdlog::warn("index: {}: resync failed ({}); continuing from seq {}", rankName(c), failure,
                 c.sequencer.next());
  } else {
    index_.applyCleared(src);
    index_.applyStored(src, blocks->block_hashes, std::nullopt);
    c.position.resetTo(blocks->last_seq);
    spdlog::warn("index: {}: resynced from kv_snapshot ({} blocks); continuing at seq {}",
                 rankName(c), blocks->block_hashes.size(), c.sequencer.next());
  }
  const auto now = Clock::now();
  c.sequencer.onResyncResult(blocks != nullptr, now, actions_);
  perform(req.stream, now);
}

void IndexCore::expireSnapshots(Clock::time_point now) {
  for (std::size_t chi = 0; chi < channels_.size(); ++chi) {
    Channel& ch = channels_[chi];
    if (ch.waiting.empty() || now - ch.waiting.front().sent <= config_.snapshot_timeout) continue;
    // Reconnect so that late replies cannot be matched to later requests; fail every waiter.
    std::deque<SnapRequest> waiting = std::move(ch.waiting);
    ch.waiting.clear();
    outbox_.reconnectChannel(chi);
    for (const SnapRequest& req : waiting) {
      onSnapshot(
          chi, req,
          Error{ErrorCode::IoError, "no kv_snapshot reply from " + ch.endpoint + " within " +
                                        std::to_string(config_.snapshot_timeout.count()) + " ms"});
    }
  }
  for (Stream& c : streams_) {
    if (auto error = c.position.expire(now, config_.snapshot_timeout.count())) {
      resolvePending(c, std::nullopt, error);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Queries, timers, stats

void IndexCore::sendQueryReply(const std::string& identity, bool delimiter,
                               const QueryReply& reply) {
  const SendReport report = outbox_.queryReply(identity, delimiter, reply);
  if (report.sent) return;
  // The client is gone or not reading; it gets no reply (it would time out and ask again).
  ++s_.replies_unsent;
  spdlog::debug("index: query reply dropped ({})", report.describe());
}

void IndexCore::onQuery(Frames frames) {
  ++s_.queries;
  if (frames.size() < 2) return;
  const std::string identity(reinterpret_cast<const char*>(frames[0].data()), frames[0].size());
  const bool delimiter = frames.size() == 3 && frames[1].empty();
  if (frames.size() != 2 && !delimiter) {
    ++s_.query_errors;
    sendQueryReply(identity, false,
                   QueryError{std::nullopt, "expected one payload frame (got " +
                                                std::to_string(frames.size() - 1) + ")"});
    return;
  }
  const auto payload = frames.back();
  auto request = decodeQueryRequest(payload);
  if (!request) {
    ++s_.query_errors;
    sendQueryReply(identity, delimiter, QueryError{peekQueryId(payload), request.error().message});
    return;
  }
  // What stats() shows is never behind an answer: a caller that saw a batch in an overlap reads
  // it in batches_applied too (the loop otherwise publishes only at the end of its turn).
  publishStats();
  if (const auto* q = std::get_if<OverlapQuery>(&*request)) {
    sendQueryReply(identity, delimiter,
                   answerOverlap(tiers_, *q, {config_.block_size, config_.seeds}, config_.workers));
  } else if (const auto* st = std::get_if<StatsQuery>(&*request)) {
    sendQueryReply(identity, delimiter, StatsReply{st->id, statsCounters(s_)});
  } else {
    const auto& v = std::get<VerifyQuery>(*request);
    VerifyJob job;
    job.requester = identity;
    job.delimiter = delimiter;
    job.id = v.id;
    startVerify(std::move(job));
  }
}

void IndexCore::tick(Clock::time_point now) {
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    streams_[i].sequencer.onTick(now, actions_);  // replay timeout, unsent retry, idle probe
    perform(i, now);
  }
  expireSnapshots(now);
  if (verify_done_) {
    verify_done_ = false;
    finishVerify();
  }
  stepVerify();
  if (config_.stats_interval.count() > 0 && now >= next_stats_) {
    next_stats_ = now + config_.stats_interval;
    publishStats();
    if (config_.on_stats) config_.on_stats(s_);
  }
}

bool IndexCore::caughtUp() const {
  return std::all_of(streams_.begin(), streams_.end(),
                     [](const Stream& c) { return c.sequencer.caughtUp(); });
}

void IndexCore::publishStats() {
  s_.uptime_s = std::chrono::duration<double>(Clock::now() - start_).count();
  s_.events_applied = index_.counters().events_applied;
  s_.blocks_indexed = index_.numBlocksIndexed();
  s_.distinct_hashes = index_.numDistinctHashes();
  s_.sources = index_.sources().size();
  s_.unknown_medium_events = tiers_.unknownMediumEvents();
  s_.caught_up = caughtUp() ? 1 : 0;
  std::lock_guard lock(stats_mutex_);
  published_ = s_;
}

IndexStats IndexCore::stats() const {
  std::lock_guard lock(stats_mutex_);
  return published_;
}

}  // namespace mocker::index
