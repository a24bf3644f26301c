#include "tools/index/index_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
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
#include "publishers/endpoint.h"
#include "service/stop_event.h"

namespace mocker::index {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSubBudget = 4096;  // messages read from one SUB per loop iteration
constexpr int kMaxReplayRetries = 8;
constexpr std::size_t kNoChannel = ~std::size_t{0};

Error invalid(std::string message) { return Error{ErrorCode::InvalidArgument, std::move(message)}; }

Result<std::uint64_t> parseU64(std::string_view s, std::string_view what) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size()) {
    return invalid(std::string(what) + ": expected a decimal unsigned integer, got '" +
                   std::string(s) + "'");
  }
  return v;
}

std::span<const std::byte> bytes(const zmq::message_t& m) {
  return {static_cast<const std::byte*>(m.data()), m.size()};
}

std::string rankName(std::uint64_t worker, std::optional<std::uint32_t> rank) {
  return "worker " + std::to_string(worker) + " rank " +
         (rank ? std::to_string(*rank) : std::string("?"));
}

}  // namespace

Result<std::vector<WorkerEndpoint>> parseWorkerSpec(std::string_view spec) {
  const std::string where = "--worker '" + std::string(spec) + "'";
  const auto eq = spec.find('=');
  if (eq == std::string_view::npos) {
    return invalid(where +
                   ": expected ID[/RANK]=tcp://HOST:PORT[,replay=EP][,snapshot=EP]"
                   "[,dp=N][,topic=T]");
  }
  WorkerEndpoint base;
  std::string_view head = spec.substr(0, eq);
  if (const auto slash = head.find('/'); slash != std::string_view::npos) {
    MOCKER_TRY(const std::uint64_t rank, parseU64(head.substr(slash + 1), where + " RANK"));
    if (rank > 0xFFFF'FFFFu) return invalid(where + ": RANK out of range");
    base.dp_rank = static_cast<std::uint32_t>(rank);
    head = head.substr(0, slash);
  }
  MOCKER_TRY(base.worker_id, parseU64(head, where + " ID"));
  std::string_view rest = spec.substr(eq + 1);
  std::uint32_t dp = 0;
  bool first = true;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (first) {
      if (item.empty()) return invalid(where + ": missing the KV-event endpoint");
      base.events = std::string(item);
      first = false;
    } else {
      const auto ieq = item.find('=');
      if (ieq == std::string_view::npos) {
        return invalid(where + ": option '" + std::string(item) + "' is not key=value");
      }
      const std::string_view key = item.substr(0, ieq);
      const std::string_view value = item.substr(ieq + 1);
      if (key == "replay") {
        base.replay = std::string(value);
      } else if (key == "snapshot") {
        base.snapshot = std::string(value);
      } else if (key == "topic") {
        base.topic = std::string(value);
      } else if (key == "dp") {
        MOCKER_TRY(const std::uint64_t n, parseU64(value, where + " dp"));
        if (n == 0 || n > 1024) return invalid(where + ": dp must be in 1..1024");
        dp = static_cast<std::uint32_t>(n);
      } else {
        return invalid(where + ": unknown option '" + std::string(key) +
                       "' (expected replay, snapshot, dp or topic)");
      }
      if (key != "topic" && value.empty()) {
        return invalid(where + ": option '" + std::string(key) + "' needs a value");
      }
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (dp != 0 && base.dp_rank) return invalid(where + ": give either /RANK or dp=N, not both");
  if (dp == 0) return std::vector<WorkerEndpoint>{base};
  std::vector<WorkerEndpoint> out;
  for (std::uint32_t r = 0; r < dp; ++r) {
    WorkerEndpoint w = base;
    w.dp_rank = r;
    MOCKER_TRY(w.events, publishers::offsetEndpoint(base.events, r));
    if (!base.replay.empty()) {
      MOCKER_TRY(w.replay, publishers::offsetEndpoint(base.replay, r));
    }
    out.push_back(std::move(w));
  }
  return out;
}

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
      {"replay_requests", s.replay_requests},
      {"replay_timeouts", s.replay_timeouts},
      {"live_dropped_for_test", s.live_dropped_for_test},
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
  // One configured rank endpoint: SUB (+ replay DEALER) and its sequence state.
  struct Conn {
    WorkerEndpoint spec;
    zmq::socket_t sub;
    zmq::socket_t replay;
    bool has_replay = false;
    std::optional<std::uint32_t> rank;
    bool started = false;  // `next` is meaningful
    std::uint64_t next = 0;
    bool any_seen = false;
    std::uint64_t max_seen = 0;
    std::map<std::uint64_t, protocol::KvEventBatch> pending;  // seq > next, not yet applied
    bool resyncing = false;
    bool gap_open = false;
    int replay_outstanding = 0;
    std::optional<std::uint64_t> replay_first;  // seqs the current replay stream delivered
    std::uint64_t replay_requests = 0;
    std::uint64_t replay_ends = 0;
    Clock::time_point replay_sent{};
    int replay_retries = 0;
    bool initial_done = false;
    Clock::time_point last_activity{};
    bool warned_mismatch = false;
    std::size_t channel = kNoChannel;
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

  Result<zmq::socket_t> makeSocket(zmq::socket_type type, const std::string& endpoint, bool bind);
  Status connectChannel(Channel& ch);
  WorkerRank source(const Conn& c) const { return {c.spec.worker_id, c.rank.value_or(0)}; }

  void drainSub(std::size_t i);
  void drainReplay(std::size_t i);
  void drainChannel(std::size_t ch);
  void drainQueries();
  void onBatch(std::size_t i, std::uint64_t seq, std::span<const std::byte> payload);
  void apply(Conn& c, const protocol::KvEventBatch& batch);
  void drainPending(Conn& c);
  void onGap(std::size_t i);
  void requestReplay(Conn& c, std::uint64_t start);
  void onReplayEnd(std::size_t i, bool timed_out);
  void unhealable(std::size_t i, const std::string& reason);
  void onSnapshot(std::size_t ch, const SnapRequest& req,
                  const Result<protocol::ClientMessage>& msg);
  void timers();
  void startVerify(VerifyJob job);
  void beginVerify();
  void stepVerify();
  void finishVerify();
  void sendQueryReply(const std::string& identity, bool delimiter, const QueryReply& reply);
  OverlapReply overlap(const OverlapQuery& q);
  bool caughtUp() const;
  void publishStats();

  IndexServiceConfig config_;
  service::StopEvent stop_event_;
  bool stop_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point next_stats_{};
  KvIndex index_;
  IndexStats s_;
  mutable std::mutex stats_mutex_;
  IndexStats published_;

  zmq::context_t context_{1};
  zmq::socket_t query_;
  std::vector<Conn> conns_;
  std::vector<Channel> channels_;
  std::deque<VerifyJob> verifies_;
  std::vector<zmq::message_t> parts_;
};

Result<zmq::socket_t> IndexService::Impl::makeSocket(zmq::socket_type type,
                                                     const std::string& endpoint, bool bind) {
  try {
    zmq::socket_t s(context_, type);
    s.set(zmq::sockopt::linger, config_.linger_ms);
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
  if (!config_.query_endpoint.empty()) {
    MOCKER_TRY(query_, makeSocket(zmq::socket_type::router, config_.query_endpoint, true));
    query_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kMaxQueryBytes));
    query_endpoint = query_.get(zmq::sockopt::last_endpoint);
  }
  std::map<std::uint64_t, std::size_t> channel_of;
  conns_.resize(config_.workers.size());
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    Conn& c = conns_[i];
    c.spec = config_.workers[i];
    c.rank = c.spec.dp_rank;
    if (c.rank) index_.registerSource(source(c));
    MOCKER_TRY(c.sub, makeSocket(zmq::socket_type::sub, c.spec.events, false));
    try {
      c.sub.set(zmq::sockopt::rcvhwm, config_.sub_rcvhwm);
      if (config_.sub_rcvbuf >= 0) c.sub.set(zmq::sockopt::rcvbuf, config_.sub_rcvbuf);
      c.sub.set(zmq::sockopt::subscribe, c.spec.topic);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, "endpoint '" + c.spec.events + "': " + e.what()};
    }
    if (!c.spec.replay.empty()) {
      MOCKER_TRY(c.replay, makeSocket(zmq::socket_type::dealer, c.spec.replay, false));
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
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sequence handling

void IndexService::Impl::apply(Conn& c, const protocol::KvEventBatch& batch) {
  const WorkerRank src = source(c);
  for (const protocol::KvEvent& ev : batch.events) {
    if (const auto* st = std::get_if<protocol::BlockStoredEvent>(&ev)) {
      index_.applyStored(src, st->block_hashes, st->parent_block_hash);
      s_.blocks_applied += st->block_hashes.size();
    } else if (const auto* rm = std::get_if<protocol::BlockRemovedEvent>(&ev)) {
      index_.applyRemoved(src, rm->block_hashes);
      s_.blocks_applied += rm->block_hashes.size();
    } else {
      index_.applyCleared(src);
    }
  }
  ++s_.batches_applied;
}

void IndexService::Impl::drainPending(Conn& c) {
  while (!c.pending.empty() && c.pending.begin()->first <= c.next) {
    auto node = c.pending.extract(c.pending.begin());
    if (node.key() == c.next) {
      apply(c, node.mapped());
      ++c.next;
    } else {
      ++s_.duplicate_batches;
    }
  }
  if (c.gap_open && c.pending.empty()) {
    c.gap_open = false;
    c.replay_retries = 0;
    ++s_.gaps_healed;
  }
}

void IndexService::Impl::onBatch(std::size_t i, std::uint64_t seq,
                                 std::span<const std::byte> payload) {
  Conn& c = conns_[i];
  c.last_activity = Clock::now();
  if (c.started && seq < c.next) {
    ++s_.duplicate_batches;
    return;
  }
  auto decoded = protocol::decodeKvEventBatch(payload);
  protocol::KvEventBatch batch;
  if (!decoded) {
    // The seq is consumed (as an empty batch) so that ordering goes on; verify shows the cost.
    ++s_.decode_errors;
    spdlog::warn("index: {} seq {}: undecodable batch skipped: {}",
                 rankName(c.spec.worker_id, c.rank), seq, decoded.error().message);
  } else {
    batch = std::move(*decoded);
    ++s_.batches_received;
    if (!c.rank) {
      c.rank = batch.dp_rank;
    } else if (*c.rank != batch.dp_rank) {
      ++s_.rank_mismatches;
      if (!c.warned_mismatch) {
        c.warned_mismatch = true;
        spdlog::warn(
            "index: worker {}: endpoint {} is configured as rank {} but sends batches "
            "of rank {}; applying them to rank {}",
            c.spec.worker_id, c.spec.events, *c.rank, batch.dp_rank, *c.rank);
      }
    }
  }
  if (!c.any_seen || seq > c.max_seen) c.max_seen = seq;
  c.any_seen = true;
  if (!c.started) {
    // No replay from 0 at start: adopt the first seq seen.
    c.started = true;
    c.next = seq;
    if (seq > 0) {
      c.pending.emplace(seq, std::move(batch));
      ++s_.gaps_detected;
      c.gap_open = true;
      if (c.has_replay) {
        c.next = 0;
        requestReplay(c, 0);
      } else {
        unhealable(i, "joined at seq " + std::to_string(seq) + " without a replay endpoint");
      }
      return;
    }
  }
  if (c.resyncing) {
    if (seq >= c.next) c.pending.emplace(seq, std::move(batch));
    return;
  }
  if (seq == c.next) {
    apply(c, batch);
    ++c.next;
    drainPending(c);
    return;
  }
  c.pending.emplace(seq, std::move(batch));
  if (!c.gap_open) {
    c.gap_open = true;
    ++s_.gaps_detected;
    spdlog::debug("index: {}: gap, expected seq {} got {}", rankName(c.spec.worker_id, c.rank),
                  c.next, seq);
  }
  if (c.replay_outstanding == 0) onGap(i);
}

void IndexService::Impl::onGap(std::size_t i) {
  Conn& c = conns_[i];
  if (c.has_replay) {
    requestReplay(c, c.next);
  } else {
    unhealable(i, "no replay endpoint");
  }
}

void IndexService::Impl::requestReplay(Conn& c, std::uint64_t start) {
  const auto seq = protocol::encodeSeqNo(start);
  try {
    c.replay.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    c.replay.send(zmq::buffer(seq.data(), seq.size()), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("index: replay request to {} failed: {}", c.spec.replay, e.what());
    return;
  }
  if (c.replay_outstanding == 0) c.replay_first.reset();
  ++c.replay_outstanding;
  ++c.replay_requests;
  ++s_.replay_requests;
  c.replay_sent = Clock::now();
}

void IndexService::Impl::onReplayEnd(std::size_t i, bool timed_out) {
  Conn& c = conns_[i];
  if (timed_out) {
    c.replay_ends += static_cast<std::uint64_t>(c.replay_outstanding);
    c.replay_outstanding = 0;
  } else {
    ++c.replay_ends;
    if (c.replay_outstanding > 0) --c.replay_outstanding;
    if (c.replay_outstanding > 0) return;
  }
  c.initial_done = true;
  const std::optional<std::uint64_t> first = c.replay_first;
  c.replay_first.reset();
  if (c.resyncing || c.pending.empty()) return;
  // Still missing [next, pending.begin()): gone from the ring (the replay started after it),
  // or published after the ring was copied (ask again).
  if (!timed_out && first && c.next < *first) {
    unhealable(i, "replay ring overrun: the replay started at seq " + std::to_string(*first));
  } else if (c.replay_retries++ < kMaxReplayRetries) {
    requestReplay(c, c.next);
  } else {
    unhealable(i, timed_out ? "replay timed out" : "the replay never returned the batches");
  }
}

void IndexService::Impl::unhealable(std::size_t i, const std::string& reason) {
  Conn& c = conns_[i];
  ++s_.gaps_unhealed;
  c.gap_open = false;
  c.replay_retries = 0;
  const std::uint64_t upto = c.pending.empty() ? c.max_seen + 1 : c.pending.begin()->first;
  const std::string what = rankName(c.spec.worker_id, c.rank);
  if (c.channel != kNoChannel && c.rank) {
    spdlog::warn(
        "index: {}: batches {}..{} were lost and cannot be replayed ({}); resyncing "
        "from the worker's kv_snapshot",
        what, c.next, upto - 1, reason);
    // The snapshot reflects at least every batch seen so far (max_seen was published before
    // the request is sent); batches after it are re-applied, which is idempotent.
    ++s_.resyncs;
    c.resyncing = true;
    c.pending.clear();
    c.next = c.max_seen + 1;
    Channel& ch = channels_[c.channel];
    const auto payload = protocol::encodeClientMessage(protocol::KvSnapshotRequest{c.rank});
    try {
      ch.dealer.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::dontwait);
      ch.waiting.push_back({SnapKind::Resync, i, Clock::now()});
    } catch (const zmq::error_t& e) {
      spdlog::warn("index: {}: kv_snapshot request failed: {}", what, e.what());
      ++s_.resync_failures;
      c.resyncing = false;
    }
    return;
  }
  spdlog::warn(
      "index: {}: batches {}..{} were lost and cannot be replayed ({}); no snapshot "
      "endpoint, so the index for this rank may stay wrong (give snapshot=EP)",
      what, c.next, upto - 1, reason);
  c.next = upto;
  drainPending(c);
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
    c.resyncing = false;
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
                   rankName(c.spec.worker_id, c.rank), failure, c.next);
    } else {
      index_.applyCleared(src);
      index_.applyStored(src, blocks->block_hashes, std::nullopt);
      spdlog::warn("index: {}: resynced from kv_snapshot ({} blocks); continuing at seq {}",
                   rankName(c.spec.worker_id, c.rank), blocks->block_hashes.size(), c.next);
    }
    drainPending(c);
    if (!c.pending.empty()) {
      c.gap_open = true;
      ++s_.gaps_detected;
      if (c.replay_outstanding == 0) onGap(req.conn);
    }
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
      const WorkerRank src{ch.worker_id, r.dp_rank};
      ranks.insert(r.dp_rank);
      SnapshotDiff diff = diffSnapshot(index_, src, r.block_hashes);
      job.reply.sources.push_back({.worker_id = src.worker_id,
                                   .dp_rank = src.dp_rank,
                                   .index_blocks = index_.numBlocks(src),
                                   .worker_blocks = r.block_hashes.size(),
                                   .missing = std::move(diff.missing_in_index),
                                   .extra = std::move(diff.extra_in_index)});
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
  if (job.awaiting > 0 && --job.awaiting == 0) finishVerify();
}

// ---------------------------------------------------------------------------------------------
// Sockets

void IndexService::Impl::drainSub(std::size_t i) {
  Conn& c = conns_[i];
  for (int n = 0; n < kSubBudget; ++n) {
    parts_.clear();
    zmq::recv_result_t got;
    try {
      got = zmq::recv_multipart(c.sub, std::back_inserter(parts_), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("index: receive on {} failed: {}", c.spec.events, e.what());
      return;
    }
    if (!got) return;
    ++s_.live_messages;
    if (parts_.size() != 3) {
      ++s_.malformed_messages;
      continue;
    }
    const auto seq = protocol::decodeSeqNo(bytes(parts_[1]));
    if (!seq) {
      ++s_.malformed_messages;
      continue;
    }
    if (config_.drop_live_for_test && config_.drop_live_for_test(source(c), *seq)) {
      ++s_.live_dropped_for_test;
      continue;
    }
    onBatch(i, *seq, bytes(parts_[2]));
  }
}

void IndexService::Impl::drainReplay(std::size_t i) {
  Conn& c = conns_[i];
  while (true) {
    parts_.clear();
    zmq::recv_result_t got;
    try {
      got = zmq::recv_multipart(c.replay, std::back_inserter(parts_), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("index: receive on {} failed: {}", c.spec.replay, e.what());
      return;
    }
    if (!got) return;
    // DEALER view: r1 ["", seq, payload], r2 ["", topic, seq, payload]; end marker seq ff×8.
    std::size_t seq_at = 0;
    if (parts_.size() == 3 && parts_[0].size() == 0) {
      seq_at = 1;
    } else if (parts_.size() == 4 && parts_[0].size() == 0) {
      seq_at = 2;
    } else {
      ++s_.malformed_messages;
      continue;
    }
    const auto seq = protocol::decodeSeqNo(bytes(parts_[seq_at]));
    if (!seq) {
      ++s_.malformed_messages;
      continue;
    }
    if (*seq == protocol::kReplayEndMarker) {
      onReplayEnd(i, false);
      continue;
    }
    if (!c.replay_first) c.replay_first = *seq;
    onBatch(i, *seq, bytes(parts_[seq_at + 1]));
  }
}

void IndexService::Impl::drainChannel(std::size_t chi) {
  Channel& ch = channels_[chi];
  while (true) {
    parts_.clear();
    zmq::recv_result_t got;
    try {
      got = zmq::recv_multipart(ch.dealer, std::back_inserter(parts_), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("index: receive on {} failed: {}", ch.endpoint, e.what());
      return;
    }
    if (!got) return;
    if (parts_.empty()) continue;
    auto msg = protocol::decodeClientMessage(bytes(parts_.back()));
    if (msg && (std::holds_alternative<protocol::OutputBatch>(*msg) ||
                std::holds_alternative<protocol::SubmitAck>(*msg))) {
      continue;  // not ours
    }
    if (ch.waiting.empty()) continue;  // a late reply to a request that timed out
    const SnapRequest req = ch.waiting.front();
    ch.waiting.pop_front();
    onSnapshot(chi, req, msg);
  }
}

void IndexService::Impl::sendQueryReply(const std::string& identity, bool delimiter,
                                        const QueryReply& reply) {
  const auto payload = encodeQueryReply(reply);
  try {
    if (!query_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return;
    }
    if (delimiter) query_.send(zmq::message_t(), zmq::send_flags::sndmore);
    query_.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    spdlog::debug("index: query reply dropped: {}", e.what());
  }
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
  }
  for (auto& [id, w] : by_worker) {
    std::sort(w.ranks.begin(), w.ranks.end(),
              [](const RankOverlap& a, const RankOverlap& b) { return a.dp_rank < b.dp_rank; });
    r.workers.push_back(std::move(w));
  }
  return r;
}

void IndexService::Impl::drainQueries() {
  for (int n = 0; n < 256; ++n) {
    parts_.clear();
    zmq::recv_result_t got;
    try {
      got = zmq::recv_multipart(query_, std::back_inserter(parts_), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("index: receive on the query endpoint failed: {}", e.what());
      return;
    }
    if (!got) return;
    ++s_.queries;
    if (parts_.size() < 2) continue;
    const std::string identity = parts_[0].to_string();
    const bool delimiter = parts_.size() == 3 && parts_[1].size() == 0;
    if (parts_.size() != 2 && !delimiter) {
      ++s_.query_errors;
      sendQueryReply(identity, false,
                     QueryError{std::nullopt, "expected one payload frame (got " +
                                                  std::to_string(parts_.size() - 1) + ")"});
      continue;
    }
    const auto payload = bytes(parts_.back());
    auto request = decodeQueryRequest(payload);
    if (!request) {
      ++s_.query_errors;
      sendQueryReply(identity, delimiter,
                     QueryError{peekQueryId(payload), request.error().message});
      continue;
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
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    Conn& c = conns_[i];
    // Catch up first: a replay from the next expected seq brings any lost tail.
    if (c.has_replay && c.started && !c.resyncing) requestReplay(c, c.next);
    job.targets[i] = c.replay_ends + static_cast<std::uint64_t>(c.replay_outstanding);
  }
  job.deadline = Clock::now() + 2 * config_.replay_timeout;
  stepVerify();
}

void IndexService::Impl::stepVerify() {
  if (verifies_.empty()) return;
  VerifyJob& job = verifies_.front();
  if (!job.catching_up) return;
  bool ready = true;
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    const Conn& c = conns_[i];
    if (c.replay_ends < job.targets[i] || c.resyncing || !c.pending.empty()) ready = false;
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
  for (Channel& ch : channels_) {
    try {
      ch.dealer.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::dontwait);
      ch.waiting.push_back({SnapKind::Verify, 0, Clock::now()});
      ++job.awaiting;
    } catch (const zmq::error_t& e) {
      job.reply.errors.push_back("worker " + std::to_string(ch.worker_id) +
                                 ": kv_snapshot request failed: " + e.what());
    }
  }
  if (job.awaiting == 0) finishVerify();
}

void IndexService::Impl::finishVerify() {
  VerifyJob job = std::move(verifies_.front());
  verifies_.pop_front();
  VerifyReply& r = job.reply;
  r.id = job.id;
  std::sort(r.sources.begin(), r.sources.end(), [](const SourceDiff& a, const SourceDiff& b) {
    return std::pair(a.worker_id, a.dp_rank) < std::pair(b.worker_id, b.dp_rank);
  });
  r.ok = r.errors.empty() && std::all_of(r.sources.begin(), r.sources.end(), [](const auto& d) {
           return d.missing.empty() && d.extra.empty();
         });
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
  return std::all_of(conns_.begin(), conns_.end(), [](const Conn& c) {
    return (!c.has_replay || c.initial_done) && !c.resyncing && c.pending.empty();
  });
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
    Conn& c = conns_[i];
    if (!c.has_replay) continue;
    if (c.replay_outstanding > 0 && now - c.replay_sent > config_.replay_timeout) {
      ++s_.replay_timeouts;
      spdlog::warn("index: {}: no replay end marker from {} within {} ms",
                   rankName(c.spec.worker_id, c.rank), c.spec.replay,
                   config_.replay_timeout.count());
      onReplayEnd(i, true);
    } else if (config_.probe_interval.count() > 0 && c.started && !c.resyncing &&
               c.replay_outstanding == 0 && now - c.last_activity >= config_.probe_interval &&
               now - c.replay_sent >= config_.probe_interval) {
      requestReplay(c, c.next);  // idle: fetch any lost tail
    }
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
  for (Conn& c : conns_) {
    c.last_activity = now;
    if (c.has_replay && config_.replay_at_start) {
      c.started = true;  // apply from seq 0; the replay fills what the SUB missed
      c.next = 0;
      requestReplay(c, 0);
    } else {
      c.initial_done = true;
    }
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
