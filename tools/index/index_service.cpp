// `mocker index`: the loop that owns the SUB, replay and snapshot sockets of every worker rank
// and the query ROUTER; it feeds each stream's Sequencer and carries out its actions, applies
// batches to the KvIndex, answers queries and runs --verify (contract in index_service.h).
#include "tools/index/index_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "protocol/client.h"
#include "protocol/framing.h"
#include "protocol/kv_events.h"
#include "protocol/limits.h"
#include "service/security.h"
#include "service/stop_event.h"
#include "service/zap_handler.h"
#include "service/zmq_io.h"
#include "tools/index/sequencer.h"
#include "tools/index/tiered_kv_index.h"
#include "tools/index/verify.h"

namespace mocker::index {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSubBudget = 4096;   // messages read from one SUB per loop iteration
constexpr int kQueryBudget = 256;  // queries answered per loop iteration
constexpr int kMaxReplayRetries = 8;
constexpr std::size_t kNoChannel = ~std::size_t{0};

Error invalid(std::string message) { return Error{ErrorCode::InvalidArgument, std::move(message)}; }

std::span<const std::byte> bytes(const zmq::message_t& m) {
  return {static_cast<const std::byte*>(m.data()), m.size()};
}

std::string rankName(std::uint64_t worker, std::optional<std::uint32_t> rank) {
  return "worker " + std::to_string(worker) + " rank " +
         (rank ? std::to_string(*rank) : std::string("?"));
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> statsCounters(const IndexStats& s) {
  return {
      {"uptime_ms", static_cast<std::uint64_t>(s.uptime_s * 1000.0)},
      {"batches_received", s.batches_received},
      {"live_messages", s.live_messages},
      {"batches_applied", s.batches_applied},
      {"duplicate_batches", s.duplicate_batches},
      {"events_applied", s.events_applied},
      {"blocks_applied", s.blocks_applied},
      {"blocks_indexed", s.blocks_indexed},
      {"distinct_hashes", s.distinct_hashes},
      {"sources", s.sources},
      {"gaps_detected", s.gaps_detected},
      {"gaps_healed", s.gaps_healed},
      {"gaps_unhealed", s.gaps_unhealed},
      {"resyncs", s.resyncs},
      {"resync_failures", s.resync_failures},
      {"restarts", s.restarts},
      {"replay_requests", s.replay_requests},
      {"replay_timeouts", s.replay_timeouts},
      {"requests_unsent", s.requests_unsent},
      {"replies_unsent", s.replies_unsent},
      {"decode_errors", s.decode_errors},
      {"malformed_messages", s.malformed_messages},
      {"rank_mismatches", s.rank_mismatches},
      {"queries", s.queries},
      {"query_errors", s.query_errors},
      {"verify_runs", s.verify_runs},
      {"verify_differences", s.verify_differences},
      {"caught_up", s.caught_up},
  };
}

class IndexService::Impl {
 public:
  explicit Impl(IndexServiceConfig config) : config_(std::move(config)) {}

  Status init();
  Status run();
  void requestStop() { stop_event_.notify(); }
  IndexStats stats() const {
    std::lock_guard lock(stats_mutex_);
    return published_;
  }

  std::string query_endpoint;

 private:
  // One configured rank endpoint: SUB (+ replay DEALER) and its sequencer.
  struct Conn {
    Conn(WorkerEndpoint endpoint, const SequencerConfig& sequencer_config)
        : spec(std::move(endpoint)), rank(spec.dp_rank), sequencer(sequencer_config) {}
    WorkerEndpoint spec;
    zmq::socket_t sub;
    zmq::socket_t replay;
    bool has_replay = false;
    std::optional<std::uint32_t> rank;
    bool warned_mismatch = false;
    std::size_t channel = kNoChannel;
    Sequencer sequencer;
    std::optional<std::uint64_t> last_applied;  // seq of the last batch applied
    // Verify under load: a kv_snapshot is the worker's cache after batch `last_seq`, which this
    // index may have passed or not reached when the reply arrives. The batches applied since the
    // request was sent are logged, so that the snapshot can be carried forward to the index's
    // seq; a snapshot ahead of the index waits here until the index applies that seq.
    bool logging = false;
    bool log_broken = false;  // a restart or lost range while logging: compare as is
    std::vector<LoggedBatch> log;
    struct Deferred {
      std::vector<std::uint64_t> hashes;
      std::uint64_t seq = 0;
      Clock::time_point deadline{};
    };
    std::optional<Deferred> deferred;
  };
  enum class SnapKind { Resync, Verify };
  struct SnapRequest {
    SnapKind kind = SnapKind::Resync;
    std::size_t conn = 0;
    Clock::time_point sent{};
  };
  // One per worker with a snapshot endpoint: a DEALER to its submit ROUTER.
  struct Channel {
    std::uint64_t worker_id = 0;
    std::string endpoint;
    zmq::socket_t dealer;
    std::deque<SnapRequest> waiting;
  };
  struct VerifyJob {
    std::optional<std::string> requester;  // routing id; nullopt = --once
    bool delimiter = false;
    std::optional<std::string> id;
    bool catching_up = true;
    std::vector<std::uint64_t> targets;  // per conn: replay_ends to reach
    Clock::time_point deadline{};
    std::size_t awaiting = 0;
    VerifyReply reply;
  };

  /// `to_worker`: a connection to a worker, CURVE when worker keys are configured.
  Result<zmq::socket_t> makeSocket(zmq::socket_type type, const std::string& endpoint, bool bind,
                                   bool to_worker = false);
  Status connectChannel(Channel& ch);
  WorkerRank source(const Conn& c) const { return {c.spec.worker_id, c.rank.value_or(0)}; }

  void drainSub(std::size_t i);
  void drainReplay(std::size_t i);
  void drainChannel(std::size_t ch);
  void drainQueries();
  void onQuery(const std::vector<zmq::message_t>& parts);
  void onBatch(std::size_t i, std::uint64_t seq, std::span<const std::byte> payload, bool replayed);
  protocol::KvEventBatch decodeBatch(Conn& c, std::uint64_t seq,
                                     std::span<const std::byte> payload);
  void perform(std::size_t i, SeqTime now);
  void apply(Conn& c, const protocol::KvEventBatch& batch);
  void sendReplayRequest(Conn& c, std::uint64_t start, SeqTime now);
  void sendResyncRequest(std::size_t i, SeqTime now);
  void onSnapshot(std::size_t ch, const SnapRequest& req,
                  const Result<protocol::ClientMessage>& msg);
  void timers();
  void startVerify(VerifyJob job);
  void beginVerify();
  void stepVerify();
  void finishVerify();
  void compareAt(std::size_t ch, const protocol::RankBlocks& r);
  void compareNow(WorkerRank src, const std::vector<std::uint64_t>& worker_hashes);
  void resolveDeferred(Conn& c, std::optional<std::string> error);
  void stopLogging(Conn& c);
  /// A restart, resync or skipped range: the index's position in the stream is unknown until
  /// the next batch (or the resync's snapshot) sets it; a pending comparison fails.
  void streamJumped(Conn& c);
  void sendQueryReply(const std::string& identity, bool delimiter, const QueryReply& reply);
  OverlapReply overlap(const OverlapQuery& q);
  bool caughtUp() const;
  void publishStats();

  IndexServiceConfig config_;
  service::StopEvent stop_event_;
  bool stop_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point next_stats_{};
  TieredKvIndex tiers_;            // one view per KV tier (medium)
  KvIndex& index_ = tiers_.gpu();  // the GPU view: queries, snapshots, verify
  IndexStats s_;
  mutable std::mutex stats_mutex_;
  IndexStats published_;

  zmq::context_t context_{1};
  std::unique_ptr<service::ZapHandler> zap_;  // before the sockets: destroyed after them
  service::CurveClientKeys worker_curve_;     // enabled() iff CURVE towards the workers
  zmq::socket_t query_;
  std::vector<Conn> conns_;
  std::vector<Channel> channels_;
  std::deque<VerifyJob> verifies_;
  bool verify_done_ = false;  // the front verify's last deferred comparison was made
  std::vector<zmq::message_t> parts_;
  SeqActions actions_;  // what the sequencer last decided; performed and cleared by perform()
};

Result<zmq::socket_t> IndexService::Impl::makeSocket(zmq::socket_type type,
                                                     const std::string& endpoint, bool bind,
                                                     bool to_worker) {
  try {
    zmq::socket_t s(context_, type);
    s.set(zmq::sockopt::linger, config_.linger_ms);
    if (to_worker) service::makeCurveClient(s, worker_curve_);
    if (bind) {
      s.bind(endpoint);
    } else {
      s.connect(endpoint);
    }
    return s;
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, "endpoint '" + endpoint + "': " + e.what()};
  }
}

Status IndexService::Impl::connectChannel(Channel& ch) {
  try {
    zmq::socket_t s(context_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, config_.linger_ms);
    s.set(zmq::sockopt::rcvhwm, 0);
    s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(protocol::kMaxMessageBytes));
    service::makeCurveClient(s, worker_curve_);
    s.connect(ch.endpoint);
    ch.dealer = std::move(s);
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, "snapshot endpoint '" + ch.endpoint + "': " + e.what()};
  }
  return {};
}

Status IndexService::Impl::init() {
  if (!stop_event_.valid()) return Error{ErrorCode::IoError, "eventfd failed"};
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
  if (!config_.worker_curve_secret_key.empty() || !config_.worker_curve_server_key.empty()) {
    worker_curve_ = {.server_public_key = config_.worker_curve_server_key,
                     .public_key = service::curvePublicKey(config_.worker_curve_secret_key),
                     .secret_key = config_.worker_curve_secret_key};
    if (auto st = service::checkCurveClientKeys(worker_curve_); !st) {
      return invalid("worker CURVE keys: " + st.error().message);
    }
  }
  if (!config_.query_endpoint.empty() && !config_.query_curve_secret_key.empty()) {
    service::SecurityConfig sec{.curve = true,
                                .server_secret_key = config_.query_curve_secret_key,
                                .client_public_keys = config_.query_curve_clients};
    auto keys = service::loadCurveServerKeys(sec);
    if (!keys) return invalid("query CURVE keys: " + keys.error().message);
    MOCKER_TRY(zap_,
               service::ZapHandler::start(context_, service::kZapDomain, keys->allowed_clients));
    try {
      query_ = zmq::socket_t(context_, zmq::socket_type::router);
      query_.set(zmq::sockopt::linger, config_.linger_ms);
      service::makeCurveServer(query_, *keys);
      query_.bind(config_.query_endpoint);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, "endpoint '" + config_.query_endpoint + "': " + e.what()};
    }
  } else if (!config_.query_endpoint.empty()) {
    MOCKER_TRY(query_, makeSocket(zmq::socket_type::router, config_.query_endpoint, true));
  }
  if (!config_.query_endpoint.empty()) {
    query_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kMaxQueryBytes));
    // Replies to a peer that is gone or not reading fail visibly instead of vanishing.
    query_.set(zmq::sockopt::router_mandatory, true);
    query_endpoint = query_.get(zmq::sockopt::last_endpoint);
  }
  std::map<std::uint64_t, std::size_t> channel_of;
  conns_.reserve(config_.workers.size());
  for (const WorkerEndpoint& w : config_.workers) {
    conns_.emplace_back(w, SequencerConfig{.has_replay = !w.replay.empty(),
                                           .replay_timeout = config_.replay_timeout,
                                           .probe_interval = config_.probe_interval,
                                           .max_replay_retries = kMaxReplayRetries});
  }
  for (Conn& c : conns_) {
    if (c.rank) index_.registerSource(source(c));
    MOCKER_TRY(c.sub, makeSocket(zmq::socket_type::sub, c.spec.events, false,
                                 config_.worker_curve_publishers));
    try {
      c.sub.set(zmq::sockopt::rcvhwm, config_.sub_rcvhwm);
      if (config_.sub_rcvbuf >= 0) c.sub.set(zmq::sockopt::rcvbuf, config_.sub_rcvbuf);
      c.sub.set(zmq::sockopt::subscribe, c.spec.topic);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, "endpoint '" + c.spec.events + "': " + e.what()};
    }
    if (!c.spec.replay.empty()) {
      MOCKER_TRY(c.replay, makeSocket(zmq::socket_type::dealer, c.spec.replay, false, true));
      c.replay.set(zmq::sockopt::rcvhwm, 0);  // a replay is bounded by the worker's ring
      c.has_replay = true;
    }
    if (!c.spec.snapshot.empty()) {
      auto it = channel_of.find(c.spec.worker_id);
      if (it == channel_of.end()) {
        Channel ch;
        ch.worker_id = c.spec.worker_id;
        ch.endpoint = c.spec.snapshot;
        MOCKER_TRY_VOID(connectChannel(ch));
        channels_.push_back(std::move(ch));
        it = channel_of.emplace(c.spec.worker_id, channels_.size() - 1).first;
      } else if (channels_[it->second].endpoint != c.spec.snapshot) {
        return invalid("worker " + std::to_string(c.spec.worker_id) +
                       ": two different snapshot endpoints");
      }
      c.channel = it->second;
    }
    c.sequencer.setCanResync(c.channel != kNoChannel && c.rank.has_value());
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sequence handling: the Sequencer decides, perform() does it.

namespace {

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

void IndexService::Impl::apply(Conn& c, const protocol::KvEventBatch& batch) {
  const WorkerRank src = source(c);
  for (const protocol::KvEvent& ev : batch.events) {
    // Each tier (medium GPU / CPU / DISK) has its own view; index_ is the GPU one.
    if (const auto* st = std::get_if<protocol::BlockStoredEvent>(&ev)) {
      tiers_.applyStored(src, st->medium, st->block_hashes, st->parent_block_hash);
      s_.blocks_applied += st->block_hashes.size();
    } else if (const auto* rm = std::get_if<protocol::BlockRemovedEvent>(&ev)) {
      tiers_.applyRemoved(src, rm->medium, rm->block_hashes);
      s_.blocks_applied += rm->block_hashes.size();
    } else {
      index_.applyCleared(src);
    }
  }
  ++s_.batches_applied;
}

protocol::KvEventBatch IndexService::Impl::decodeBatch(Conn& c, std::uint64_t seq,
                                                       std::span<const std::byte> payload) {
  auto decoded = protocol::decodeKvEventBatch(payload);
  if (!decoded) {
    // The seq is consumed (as an empty batch) so that ordering goes on; verify shows the cost.
    ++s_.decode_errors;
    spdlog::warn("index: {} seq {}: undecodable batch skipped: {}",
                 rankName(c.spec.worker_id, c.rank), seq, decoded.error().message);
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

void IndexService::Impl::onBatch(std::size_t i, std::uint64_t seq,
                                 std::span<const std::byte> payload, bool replayed) {
  Conn& c = conns_[i];
  const SeqTime now = Clock::now();
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

void IndexService::Impl::perform(std::size_t i, SeqTime now) {
  Conn& c = conns_[i];
  // By index, and each action moved out first: a resync request that cannot be sent appends
  // the sequencer's follow-up actions to actions_ while this loop runs.
  for (std::size_t k = 0; k < actions_.size(); ++k) {
    SeqAction a = std::move(actions_[k]);
    switch (a.kind) {
      case SeqActionKind::Apply:
        apply(c, a.batch);
        // After a resync the index is at the snapshot's seq; a buffered batch at or before it
        // is applied again without changing anything (set semantics), so the position stays.
        c.last_applied = std::max(c.last_applied.value_or(a.seq), a.seq);
        if (c.logging) c.log.emplace_back(a.seq, std::move(a.batch));
        if (c.deferred && a.seq == c.deferred->seq) resolveDeferred(c, std::nullopt);
        break;
      case SeqActionKind::Duplicate:
        ++s_.duplicate_batches;
        break;
      case SeqActionKind::GapDetected:
        ++s_.gaps_detected;
        spdlog::debug("index: {}: gap, expected seq {} got {}", rankName(c.spec.worker_id, c.rank),
                      a.seq, a.seq_end);
        break;
      case SeqActionKind::GapHealed:
        ++s_.gaps_healed;
        break;
      case SeqActionKind::RequestReplay:
        sendReplayRequest(c, a.seq, now);
        break;
      case SeqActionKind::ReplayTimedOut:
        ++s_.replay_timeouts;
        spdlog::warn("index: {}: no replay end marker from {} within {} ms",
                     rankName(c.spec.worker_id, c.rank), c.spec.replay,
                     config_.replay_timeout.count());
        break;
      case SeqActionKind::Resync:
        ++s_.gaps_unhealed;
        streamJumped(c);
        ++s_.resyncs;
        spdlog::warn(
            "index: {}: batches {}..{} were lost and cannot be replayed ({}); resyncing "
            "from the worker's kv_snapshot",
            rankName(c.spec.worker_id, c.rank), a.seq, a.seq_end - 1, lossText(a));
        sendResyncRequest(i, now);
        break;
      case SeqActionKind::Restarted:
        ++s_.restarts;
        streamJumped(c);
        spdlog::warn(
            "index: {}: the publisher restarted (its seq {} does not continue the stream this "
            "index applied up to seq {}); dropping this rank's blocks and starting over from "
            "seq 0",
            rankName(c.spec.worker_id, c.rank), a.seq, a.seq_end == 0 ? 0 : a.seq_end - 1);
        if (c.rank) index_.applyCleared(source(c));
        break;
      case SeqActionKind::SkipLost:
        ++s_.gaps_unhealed;
        streamJumped(c);
        spdlog::warn(
            "index: {}: batches {}..{} were lost and cannot be replayed ({}); no snapshot "
            "endpoint, so the index for this rank may stay wrong (give snapshot=EP)",
            rankName(c.spec.worker_id, c.rank), a.seq, a.seq_end - 1, lossText(a));
        break;
    }
  }
  actions_.clear();
}

void IndexService::Impl::sendReplayRequest(Conn& c, std::uint64_t start, SeqTime now) {
  const auto seq = protocol::encodeSeqNo(start);
  const std::array<zmq::const_buffer, 2> frames{zmq::const_buffer(),
                                                zmq::buffer(seq.data(), seq.size())};
  std::string error;
  const service::SendOutcome outcome = service::trySendMultipart(c.replay, frames, &error);
  const bool sent = outcome == service::SendOutcome::Sent;
  c.sequencer.onReplayRequestResult(sent, now);
  if (sent) {
    ++s_.replay_requests;
    return;
  }
  // Not outstanding: the sequencer asks again on a later tick or gap.
  ++s_.requests_unsent;
  if (outcome == service::SendOutcome::Failed) {
    spdlog::warn("index: replay request to {} failed: {}; will retry", c.spec.replay, error);
  } else {
    spdlog::debug("index: replay request to {} not sent ({}); will retry", c.spec.replay,
                  service::sendOutcomeName(outcome));
  }
}

void IndexService::Impl::sendResyncRequest(std::size_t i, SeqTime now) {
  Conn& c = conns_[i];
  MOCKER_CHECK(c.channel != kNoChannel && c.rank.has_value());
  Channel& ch = channels_[c.channel];
  const auto payload = protocol::encodeClientMessage(protocol::KvSnapshotRequest{c.rank});
  const std::array<zmq::const_buffer, 1> frames{zmq::buffer(payload.data(), payload.size())};
  std::string error;
  const service::SendOutcome outcome = service::trySendMultipart(ch.dealer, frames, &error);
  if (outcome == service::SendOutcome::Sent) {
    ch.waiting.push_back({SnapKind::Resync, i, now});
    return;
  }
  ++s_.requests_unsent;
  ++s_.resync_failures;
  c.sequencer.onResyncResult(false, now, actions_);
  spdlog::warn("index: {}: kv_snapshot request to {} not sent ({}{}{}); continuing from seq {}",
               rankName(c.spec.worker_id, c.rank), ch.endpoint, service::sendOutcomeName(outcome),
               error.empty() ? "" : ": ", error, c.sequencer.next());
}

void IndexService::Impl::onSnapshot(std::size_t chi, const SnapRequest& req,
                                    const Result<protocol::ClientMessage>& msg) {
  Channel& ch = channels_[chi];
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
    Conn& c = conns_[req.conn];
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
      spdlog::warn("index: {}: resync failed ({}); continuing from seq {}",
                   rankName(c.spec.worker_id, c.rank), failure, c.sequencer.next());
    } else {
      index_.applyCleared(src);
      index_.applyStored(src, blocks->block_hashes, std::nullopt);
      c.last_applied = blocks->last_seq;
      spdlog::warn("index: {}: resynced from kv_snapshot ({} blocks); continuing at seq {}",
                   rankName(c.spec.worker_id, c.rank), blocks->block_hashes.size(),
                   c.sequencer.next());
    }
    const SeqTime now = Clock::now();
    c.sequencer.onResyncResult(blocks != nullptr, now, actions_);
    perform(req.conn, now);
    return;
  }
  // Verify.
  if (verifies_.empty()) return;
  VerifyJob& job = verifies_.front();
  if (snap == nullptr) {
    job.reply.errors.push_back("worker " + std::to_string(ch.worker_id) + ": " + failure);
  } else {
    std::set<std::uint32_t> ranks;
    for (const auto& r : snap->ranks) {
      ranks.insert(r.dp_rank);
      compareAt(chi, r);
    }
    for (const WorkerRank& src : index_.sources()) {
      if (src.worker_id != ch.worker_id || ranks.contains(src.dp_rank)) continue;
      job.reply.sources.push_back({.worker_id = src.worker_id,
                                   .dp_rank = src.dp_rank,
                                   .index_blocks = index_.numBlocks(src),
                                   .worker_blocks = 0,
                                   .missing = {},
                                   .extra = index_.snapshot(src)});
    }
  }
  for (Conn& c : conns_) {
    if (c.channel == chi && !c.deferred) stopLogging(c);
  }
  if (job.awaiting > 0 && --job.awaiting == 0) finishVerify();
}

void IndexService::Impl::compareNow(WorkerRank src,
                                    const std::vector<std::uint64_t>& worker_hashes) {
  verifies_.front().reply.sources.push_back(compareSource(index_, src, worker_hashes));
}

void IndexService::Impl::compareAt(std::size_t chi, const protocol::RankBlocks& r) {
  const WorkerRank src{channels_[chi].worker_id, r.dp_rank};
  Conn* conn = nullptr;
  for (Conn& c : conns_) {
    if (c.channel == chi && c.rank == r.dp_rank) conn = &c;
  }
  // Without the seq (an older service, no KV events) or after the stream jumped, the snapshot
  // is compared as it is: exact only while the worker is idle.
  if (conn == nullptr || !r.last_seq || conn->log_broken) {
    compareNow(src, r.block_hashes);
    return;
  }
  const std::uint64_t at = *r.last_seq;
  if (conn->last_applied == at) {
    compareNow(src, r.block_hashes);
    return;
  }
  if (conn->last_applied && *conn->last_applied > at) {
    // The index is ahead: carry the snapshot forward through the batches logged since the
    // request was sent (it was sent before the worker published `at + 1`, so they cover it).
    Result<std::vector<std::uint64_t>> carried =
        carrySnapshotForward(src, r.block_hashes, at, conn->log, *conn->last_applied);
    if (!carried) {
      verifies_.front().reply.errors.push_back(rankName(src.worker_id, src.dp_rank) + ": " +
                                               carried.error().message);
      return;
    }
    compareNow(src, *carried);
    return;
  }
  // The index has not reached the snapshot's seq yet: compare when it applies it.
  conn->deferred = Conn::Deferred{
      .hashes = r.block_hashes, .seq = at, .deadline = Clock::now() + config_.snapshot_timeout};
  ++verifies_.front().awaiting;
}

void IndexService::Impl::resolveDeferred(Conn& c, std::optional<std::string> error) {
  Conn::Deferred d = std::move(*c.deferred);
  c.deferred.reset();
  stopLogging(c);
  if (verifies_.empty()) return;
  const WorkerRank src = source(c);
  if (error) {
    verifies_.front().reply.errors.push_back(rankName(src.worker_id, src.dp_rank) + ": " + *error);
  } else {
    compareNow(src, d.hashes);
  }
  // Finished by the loop, not here: perform() may be iterating its actions.
  if (VerifyJob& job = verifies_.front(); job.awaiting > 0 && --job.awaiting == 0) {
    verify_done_ = true;
  }
}

void IndexService::Impl::streamJumped(Conn& c) {
  c.last_applied.reset();
  c.log_broken = c.logging;
  if (c.deferred) {
    resolveDeferred(c, "the stream restarted or lost batches before the index reached seq " +
                           std::to_string(c.deferred->seq) + " of the worker's kv_snapshot");
  }
}

void IndexService::Impl::stopLogging(Conn& c) {
  c.logging = false;
  c.log_broken = false;
  c.log.clear();
}

// ---------------------------------------------------------------------------------------------
// Sockets

void IndexService::Impl::drainSub(std::size_t i) {
  Conn& c = conns_[i];
  service::drainSocket(
      c.sub, parts_, kSubBudget,
      [&](const std::vector<zmq::message_t>& parts) {
        ++s_.live_messages;
        if (parts.size() != 3) {
          ++s_.malformed_messages;
          return;
        }
        const auto seq = protocol::decodeSeqNo(bytes(parts[1]));
        if (!seq) {
          ++s_.malformed_messages;
          return;
        }
        onBatch(i, *seq, bytes(parts[2]), false);
      },
      [&](std::string_view error) {
        spdlog::warn("index: receive on {} failed: {}", c.spec.events, error);
      });
}

void IndexService::Impl::drainReplay(std::size_t i) {
  Conn& c = conns_[i];
  service::drainSocket(
      c.replay, parts_, -1,
      [&](const std::vector<zmq::message_t>& parts) {
        // DEALER view: r1 ["", seq, payload], r2 ["", topic, seq, payload]; end marker seq ff×8.
        std::size_t seq_at = 0;
        if (parts.size() == 3 && parts[0].size() == 0) {
          seq_at = 1;
        } else if (parts.size() == 4 && parts[0].size() == 0) {
          seq_at = 2;
        } else {
          ++s_.malformed_messages;
          return;
        }
        const auto seq = protocol::decodeSeqNo(bytes(parts[seq_at]));
        if (!seq) {
          ++s_.malformed_messages;
          return;
        }
        if (*seq == protocol::kReplayEndMarker) {
          const SeqTime now = Clock::now();
          c.sequencer.onReplayEnd(now, actions_);
          perform(i, now);
          return;
        }
        onBatch(i, *seq, bytes(parts[seq_at + 1]), true);
      },
      [&](std::string_view error) {
        spdlog::warn("index: receive on {} failed: {}", c.spec.replay, error);
      });
}

void IndexService::Impl::drainChannel(std::size_t chi) {
  Channel& ch = channels_[chi];
  service::drainSocket(
      ch.dealer, parts_, -1,
      [&](const std::vector<zmq::message_t>& parts) {
        if (parts.empty()) return;
        auto msg = protocol::decodeClientMessage(bytes(parts.back()));
        if (msg && (std::holds_alternative<protocol::OutputBatch>(*msg) ||
                    std::holds_alternative<protocol::SubmitAck>(*msg))) {
          return;  // not ours
        }
        if (ch.waiting.empty()) return;  // a late reply to a request that timed out
        const SnapRequest req = ch.waiting.front();
        ch.waiting.pop_front();
        onSnapshot(chi, req, msg);
      },
      [&](std::string_view error) {
        spdlog::warn("index: receive on {} failed: {}", ch.endpoint, error);
      });
}

void IndexService::Impl::sendQueryReply(const std::string& identity, bool delimiter,
                                        const QueryReply& reply) {
  const auto payload = encodeQueryReply(reply);
  std::string error;
  const service::SendOutcome outcome = service::trySendRouted(
      query_, identity, delimiter, zmq::message_t(payload.data(), payload.size()), &error);
  if (outcome == service::SendOutcome::Sent) return;
  // The client is gone or not reading; it gets no reply (it would time out and ask again).
  ++s_.replies_unsent;
  spdlog::debug("index: query reply dropped ({}{}{})", service::sendOutcomeName(outcome),
                error.empty() ? "" : ": ", error);
}

OverlapReply IndexService::Impl::overlap(const OverlapQuery& q) {
  OverlapReply r;
  r.id = q.id;
  std::vector<Overlap> overlaps;
  if (q.tokens) {
    const std::uint32_t bs = q.block_size.value_or(config_.block_size);
    const engine::HashSeeds seeds{q.hash_seed.value_or(config_.seeds.hash_seed),
                                  q.chain_seed.value_or(config_.seeds.chain_seed)};
    overlaps = index_.overlapsByTokens(*q.tokens, bs, seeds);
    r.num_blocks = static_cast<std::uint32_t>(q.tokens->size() / bs);
  } else {
    overlaps = index_.overlapsByHashes(*q.block_hashes);
    r.num_blocks = static_cast<std::uint32_t>(q.block_hashes->size());
  }
  std::map<std::uint64_t, WorkerOverlap> by_worker;
  for (const WorkerEndpoint& w : config_.workers) by_worker[w.worker_id].worker_id = w.worker_id;
  for (const Overlap& o : overlaps) {
    WorkerOverlap& w = by_worker[o.source.worker_id];
    w.worker_id = o.source.worker_id;
    w.blocks = std::max(w.blocks, o.blocks);
    w.ranks.push_back({o.source.dp_rank, o.blocks});
    if (q.with_cached) w.ranks.back().cached = index_.numBlocks(o.source);
  }
  for (auto& [id, w] : by_worker) {
    std::sort(w.ranks.begin(), w.ranks.end(),
              [](const RankOverlap& a, const RankOverlap& b) { return a.dp_rank < b.dp_rank; });
    r.workers.push_back(std::move(w));
  }
  return r;
}

void IndexService::Impl::drainQueries() {
  service::drainSocket(
      query_, parts_, kQueryBudget,
      [&](const std::vector<zmq::message_t>& parts) { onQuery(parts); },
      [&](std::string_view error) {
        spdlog::warn("index: receive on the query endpoint failed: {}", error);
      });
}

void IndexService::Impl::onQuery(const std::vector<zmq::message_t>& parts) {
  ++s_.queries;
  if (parts.size() < 2) return;
  const std::string identity = parts[0].to_string();
  const bool delimiter = parts.size() == 3 && parts[1].size() == 0;
  if (parts.size() != 2 && !delimiter) {
    ++s_.query_errors;
    sendQueryReply(identity, false,
                   QueryError{std::nullopt, "expected one payload frame (got " +
                                                std::to_string(parts.size() - 1) + ")"});
    return;
  }
  const auto payload = bytes(parts.back());
  auto request = decodeQueryRequest(payload);
  if (!request) {
    ++s_.query_errors;
    sendQueryReply(identity, delimiter, QueryError{peekQueryId(payload), request.error().message});
    return;
  }
  if (const auto* q = std::get_if<OverlapQuery>(&*request)) {
    sendQueryReply(identity, delimiter, overlap(*q));
  } else if (const auto* st = std::get_if<StatsQuery>(&*request)) {
    publishStats();
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

// ---------------------------------------------------------------------------------------------
// Verify

void IndexService::Impl::startVerify(VerifyJob job) {
  verifies_.push_back(std::move(job));
  if (verifies_.size() == 1) beginVerify();
}

void IndexService::Impl::beginVerify() {
  VerifyJob& job = verifies_.front();
  job.catching_up = true;
  job.targets.assign(conns_.size(), 0);
  const SeqTime now = Clock::now();
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    // Catch up first: a replay from the next expected seq brings any lost tail.
    conns_[i].sequencer.catchUp(now, actions_);
    perform(i, now);
    job.targets[i] = conns_[i].sequencer.catchUpTarget();
  }
  job.deadline = now + 2 * config_.replay_timeout;
  stepVerify();
}

void IndexService::Impl::stepVerify() {
  if (verifies_.empty()) return;
  VerifyJob& job = verifies_.front();
  if (!job.catching_up) return;
  bool ready = true;
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    if (!conns_[i].sequencer.settled(job.targets[i])) ready = false;
  }
  if (!ready && Clock::now() < job.deadline) return;
  if (!ready) job.reply.errors.push_back("catch-up did not finish before the deadline");
  job.catching_up = false;
  std::set<std::uint64_t> without;
  for (const Conn& c : conns_) {
    if (c.channel == kNoChannel) without.insert(c.spec.worker_id);
  }
  for (std::uint64_t w : without) {
    job.reply.errors.push_back("worker " + std::to_string(w) +
                               ": no snapshot endpoint (give snapshot=EP)");
  }
  job.awaiting = 0;
  const auto payload = protocol::encodeClientMessage(protocol::KvSnapshotRequest{});
  const std::array<zmq::const_buffer, 1> frames{zmq::buffer(payload.data(), payload.size())};
  for (Channel& ch : channels_) {
    std::string error;
    const service::SendOutcome outcome = service::trySendMultipart(ch.dealer, frames, &error);
    if (outcome == service::SendOutcome::Sent) {
      ch.waiting.push_back({SnapKind::Verify, 0, Clock::now()});
      ++job.awaiting;
      const auto chi = static_cast<std::size_t>(&ch - channels_.data());
      for (Conn& c : conns_) {
        if (c.channel != chi) continue;
        stopLogging(c);
        c.logging = true;
      }
    } else {
      ++s_.requests_unsent;
      job.reply.errors.push_back("worker " + std::to_string(ch.worker_id) +
                                 ": kv_snapshot request not sent (" +
                                 std::string(service::sendOutcomeName(outcome)) +
                                 (error.empty() ? "" : ": " + error) + ")");
    }
  }
  if (job.awaiting == 0) finishVerify();
}

void IndexService::Impl::finishVerify() {
  VerifyJob job = std::move(verifies_.front());
  verifies_.pop_front();
  VerifyReply& r = job.reply;
  r.id = job.id;
  finishVerifyReply(r);
  ++s_.verify_runs;
  if (!r.ok) ++s_.verify_differences;
  if (job.requester) {
    sendQueryReply(*job.requester, job.delimiter, r);
  } else {
    if (config_.on_verify) config_.on_verify(r);
    if (config_.stop_after_verify) stop_ = true;
  }
  if (!verifies_.empty()) beginVerify();
}

// ---------------------------------------------------------------------------------------------
// Loop

bool IndexService::Impl::caughtUp() const {
  return std::all_of(conns_.begin(), conns_.end(),
                     [](const Conn& c) { return c.sequencer.caughtUp(); });
}

void IndexService::Impl::publishStats() {
  s_.uptime_s = std::chrono::duration<double>(Clock::now() - start_).count();
  s_.events_applied = index_.counters().events_applied;
  s_.blocks_indexed = index_.numBlocksIndexed();
  s_.distinct_hashes = index_.numDistinctHashes();
  s_.sources = index_.sources().size();
  s_.caught_up = caughtUp() ? 1 : 0;
  std::lock_guard lock(stats_mutex_);
  published_ = s_;
}

void IndexService::Impl::timers() {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    conns_[i].sequencer.onTick(now, actions_);  // replay timeout, unsent retry, idle probe
    perform(i, now);
  }
  for (std::size_t chi = 0; chi < channels_.size(); ++chi) {
    Channel& ch = channels_[chi];
    if (ch.waiting.empty() || now - ch.waiting.front().sent <= config_.snapshot_timeout) continue;
    // Reconnect so that late replies cannot be matched to later requests; fail every waiter.
    std::deque<SnapRequest> waiting = std::move(ch.waiting);
    ch.waiting.clear();
    ch.dealer.close();
    if (Status st = connectChannel(ch); !st) spdlog::error("index: {}", st.error().message);
    for (const SnapRequest& req : waiting) {
      onSnapshot(
          chi, req,
          Error{ErrorCode::IoError, "no kv_snapshot reply from " + ch.endpoint + " within " +
                                        std::to_string(config_.snapshot_timeout.count()) + " ms"});
    }
  }
  for (Conn& c : conns_) {
    if (!c.deferred || now < c.deferred->deadline) continue;
    const std::uint64_t at = c.deferred->seq;
    resolveDeferred(c, "the index did not reach seq " + std::to_string(at) +
                           " of the worker's kv_snapshot within " +
                           std::to_string(config_.snapshot_timeout.count()) + " ms (it is at " +
                           (c.last_applied ? "seq " + std::to_string(*c.last_applied)
                                           : std::string("no batch")) +
                           ")");
  }
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

Status IndexService::Impl::run() {
  const auto now = Clock::now();
  next_stats_ = now + config_.stats_interval;
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    conns_[i].sequencer.start(now, config_.replay_at_start, actions_);
    perform(i, now);
  }
  if (config_.verify_at_start) startVerify(VerifyJob{});
  auto tick = std::chrono::milliseconds(100);
  if (config_.probe_interval.count() > 0) tick = std::min(tick, config_.probe_interval);
  if (config_.stats_interval.count() > 0) tick = std::min(tick, config_.stats_interval);
  tick = std::max(tick, std::chrono::milliseconds(1));

  std::vector<zmq::pollitem_t> items;
  while (!stop_) {
    items.clear();
    items.push_back({nullptr, stop_event_.fd(), ZMQ_POLLIN, 0});
    if (query_) items.push_back({query_.handle(), 0, ZMQ_POLLIN, 0});
    for (Conn& c : conns_) {
      items.push_back({c.sub.handle(), 0, ZMQ_POLLIN, 0});
      if (c.has_replay) items.push_back({c.replay.handle(), 0, ZMQ_POLLIN, 0});
    }
    for (Channel& ch : channels_) items.push_back({ch.dealer.handle(), 0, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items, tick);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
    }
    if (items[0].revents & ZMQ_POLLIN) break;
    // Replays first: they fill gaps that buffered live batches wait on.
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      if (conns_[i].has_replay) drainReplay(i);
      drainSub(i);
    }
    for (std::size_t chi = 0; chi < channels_.size(); ++chi) drainChannel(chi);
    if (query_) drainQueries();
    timers();
    publishStats();
  }
  publishStats();
  if (config_.on_stats) config_.on_stats(s_);
  return {};
}

Result<std::unique_ptr<IndexService>> IndexService::create(IndexServiceConfig config) {
  auto impl = std::make_unique<Impl>(std::move(config));
  MOCKER_TRY_VOID(impl->init());
  return std::unique_ptr<IndexService>(new IndexService(std::move(impl)));
}

IndexService::IndexService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IndexService::~IndexService() = default;
const std::string& IndexService::queryEndpoint() const { return impl_->query_endpoint; }
Status IndexService::run() { return impl_->run(); }
void IndexService::requestStop() { impl_->requestStop(); }
IndexStats IndexService::stats() const { return impl_->stats(); }

}  // namespace mocker::index
