// The socket-free core of `mocker index` (tools/index/README.md): the prefix index, one
// Sequencer per configured rank endpoint ("stream"), the kv_snapshot requests waiting per worker
// ("channel"), the verify queue and the counters. The service's loop (index_service.cpp) owns
// the sockets: it hands the core what it reads (stream messages, snapshot replies, queries, a
// tick) and sends what the core asks through an IndexOutbox. Tested with a recording outbox
// (tests/tools/index_core_test.cpp).
//
// Thread-safety: one thread (the loop's), except stats(), which any thread may call.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "protocol/client.h"
#include "protocol/index_query.h"
#include "tools/index/index_service.h"
#include "tools/index/kv_index.h"
#include "tools/index/sequencer.h"
#include "tools/index/stream_frames.h"
#include "tools/index/tiered_kv_index.h"
#include "tools/index/verify.h"

namespace mocker::index {

/// What became of a send the core asked for.
struct SendReport {
  bool sent = false;
  bool failed = false;       ///< the socket reported an error (not merely: no peer, pipe full)
  std::string_view outcome;  ///< its name (net::sendOutcomeName)
  std::string error;         ///< the socket's error text, if any
  /// "outcome" or "outcome: error".
  std::string describe() const;
};

/// The sends the core needs; the service implements them on its sockets.
class IndexOutbox {
 public:
  virtual ~IndexOutbox() = default;
  /// `["", start (8 B BE)]` on stream `stream`'s replay DEALER.
  virtual SendReport replayRequest(std::size_t stream, std::uint64_t start) = 0;
  /// A client-protocol kv_snapshot request on channel `channel`'s DEALER.
  virtual SendReport snapshotRequest(std::size_t channel,
                                     const protocol::KvSnapshotRequest& request) = 0;
  /// A reply on the query ROUTER.
  virtual SendReport queryReply(const std::string& identity, bool delimiter,
                                const QueryReply& reply) = 0;
  /// A kv_snapshot timed out: reconnect the channel's DEALER so that late replies cannot be
  /// matched to later requests.
  virtual void reconnectChannel(std::size_t channel) = 0;
};

class IndexCore final {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kNoChannel = ~std::size_t{0};

  /// Checks the configuration (workers given, block size, no (worker, events) twice, one
  /// snapshot endpoint per worker) and lays out the streams (config.workers in order) and the
  /// channels (one per worker with a snapshot endpoint, in order of first mention).
  static Result<std::unique_ptr<IndexCore>> create(const IndexServiceConfig& config,
                                                   IndexOutbox& outbox);

  std::size_t numStreams() const { return streams_.size(); }
  const WorkerEndpoint& streamSpec(std::size_t i) const { return streams_[i].spec; }
  std::size_t numChannels() const { return channels_.size(); }
  const std::string& channelEndpoint(std::size_t ch) const { return channels_[ch].endpoint; }

  /// Every stream joins (replay(0) unless disabled); with verify_at_start a verify is queued.
  void start(Clock::time_point now);
  /// A message read from stream i's SUB (nullopt: malformed frames).
  void onLiveMessage(std::size_t i, const std::optional<StreamMessage>& message);
  /// A message read from stream i's replay DEALER (nullopt: malformed frames).
  void onReplayMessage(std::size_t i, const std::optional<StreamMessage>& message);
  /// The last frame of a message read from channel ch's DEALER.
  void onChannelMessage(std::size_t ch, std::span<const std::byte> payload);
  /// A message read from the query ROUTER: [identity, ("",) payload].
  void onQuery(Frames frames);
  /// Timeouts, retries, probes, the verify's progress and the stats interval.
  void tick(Clock::time_point now);

  /// With stop_after_verify: the verify finished, the loop should stop.
  bool stopRequested() const { return stop_; }
  /// Refreshes the gauges and the copy stats() returns.
  void publishStats();
  /// The counters as of the last publishStats() (at the latest the end of the loop's turn, and
  /// before every query is answered: never behind an answer the caller saw). Any thread.
  IndexStats stats() const;
  /// The counters now (the loop's thread), after publishStats().
  const IndexStats& counters() const { return s_; }
  /// The per-tier views (GPU, CPU, DISK) of every source.
  const TieredKvIndex& tiers() const { return tiers_; }

 private:
  struct Stream {
    Stream(WorkerEndpoint endpoint, const SequencerConfig& sequencer_config)
        : spec(std::move(endpoint)), rank(spec.dp_rank), sequencer(sequencer_config) {}
    WorkerEndpoint spec;
    std::optional<std::uint32_t> rank;
    bool warned_mismatch = false;
    std::size_t channel = kNoChannel;
    Sequencer sequencer;
    VerifyPosition position;
  };
  enum class SnapKind { Resync, Verify };
  struct SnapRequest {
    SnapKind kind = SnapKind::Resync;
    std::size_t stream = 0;
    Clock::time_point sent{};
  };
  struct Channel {
    std::uint64_t worker_id = 0;
    std::string endpoint;
    std::deque<SnapRequest> waiting;
  };
  struct VerifyJob {
    std::optional<std::string> requester;  // routing id; nullopt = --once
    bool delimiter = false;
    std::optional<std::string> id;
    bool catching_up = true;
    std::vector<std::uint64_t> targets;  // per stream: replay_ends to reach
    Clock::time_point deadline{};
    std::size_t awaiting = 0;
    VerifyReply reply;
  };

  IndexCore(const IndexServiceConfig& config, IndexOutbox& outbox);
  Status layOut();
  WorkerRank source(const Stream& c) const { return {c.spec.worker_id, c.rank.value_or(0)}; }
  std::string rankName(const Stream& c) const;

  void onBatch(std::size_t i, std::uint64_t seq, std::span<const std::byte> payload, bool replayed);
  protocol::KvEventBatch decodeBatch(Stream& c, std::uint64_t seq,
                                     std::span<const std::byte> payload);
  void perform(std::size_t i, Clock::time_point now);
  void performLoss(std::size_t i, const SeqAction& a, Clock::time_point now);
  void apply(const Stream& c, const protocol::KvEventBatch& batch);
  void sendReplayRequest(Stream& c, std::size_t i, std::uint64_t start, Clock::time_point now);
  void sendResyncRequest(std::size_t i, Clock::time_point now);
  void onSnapshot(std::size_t ch, const SnapRequest& req,
                  const Result<protocol::ClientMessage>& msg);
  void onResyncSnapshot(const SnapRequest& req, const protocol::KvSnapshotReply* snap,
                        std::string failure);
  void expireSnapshots(Clock::time_point now);
  void sendQueryReply(const std::string& identity, bool delimiter, const QueryReply& reply);

  // Verify (index_core_verify.cpp).
  void startVerify(VerifyJob job);
  void beginVerify();
  void stepVerify();
  void finishVerify();
  void onVerifySnapshot(std::size_t ch, const protocol::KvSnapshotReply* snap,
                        const std::string& failure);
  void compareAt(std::size_t ch, const protocol::RankBlocks& r);
  void compareNow(WorkerRank src, const std::vector<std::uint64_t>& worker_hashes);
  /// A waiting comparison of stream c ended: compared (`error` empty) or failed.
  void resolvePending(const Stream& c, const std::optional<std::vector<std::uint64_t>>& hashes,
                      const std::optional<std::string>& error);
  /// A restart, resync or skipped range on stream c (VerifyPosition::jumped).
  void streamJumped(Stream& c);
  bool caughtUp() const;

  const IndexServiceConfig& config_;
  IndexOutbox& outbox_;
  bool stop_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point next_stats_{};
  TieredKvIndex tiers_;            // one view per KV tier (medium)
  KvIndex& index_ = tiers_.gpu();  // the GPU view: queries, snapshots, verify
  IndexStats s_;
  mutable std::mutex stats_mutex_;
  IndexStats published_;
  std::vector<Stream> streams_;
  std::vector<Channel> channels_;
  std::deque<VerifyJob> verifies_;
  bool verify_done_ = false;  // the front verify's last waiting comparison was made
  SeqActions actions_;        // what the sequencer last decided; performed and cleared by perform()
};

}  // namespace mocker::index
