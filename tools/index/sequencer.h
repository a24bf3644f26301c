// Sequencer: the sequencing state machine of one KV-event stream (one worker rank) in
// `mocker index`. It decides, batch by batch, what to apply and when to ask for a replay or a
// resync; the IndexService performs what it decides (sockets, index, counters, logs).
//
// Inputs: live batches, replayed batches and the replay end marker (each with its sequence
// number), the outcome of each replay request send, snapshot (resync) results, the verify
// catch-up and a periodic tick. Time is passed in; nothing here reads a clock, touches a socket
// or logs. Each input appends what happened to an `Actions` vector, in order:
//
//   input                          actions (one table row of tests/tools/index_sequencer_test)
//   live 0, live 1, live 3         apply 0, apply 1, gap@2, replay(1)
//   replay 1, 2, 3, end            dup 1, apply 2, apply 3, healed, dup 3
//
// States (derived from the fields below, see state()):
//   Joining   → no batch and no replay(0) yet: the first live batch sets the start.
//   InOrder   → every batch up to next()-1 applied, nothing buffered.
//   Gap       → batches after a missing seq are buffered; a replay from next() is asked for
//               (again when its end marker leaves the gap open, up to max_replay_retries).
//   (any)     → a live batch whose seq is not after the previous live one, a live batch
//               behind next() whose timestamp is not that of the batch applied at its seq,
//               or a replay that does not return the last applied batch with its timestamp
//               (every replay asks from that seq): the publisher restarted (Restarted); the
//               stream starts over at 0 with a gap from 0, replayed from the new process (or
//               resynced). A live batch behind next() whose seq is too old to be remembered
//               is a duplicate and asks for a replay from the last applied seq, which checks.
//   Resyncing → the gap could not be healed (the replay ring overran, the retries ran out, no
//               replay endpoint): the caller asks the worker for a kv_snapshot and reports
//               the result through onResyncResult(); batches newer than every seq seen so
//               far are buffered meanwhile and applied after the snapshot.
// Without a resync (no snapshot endpoint) the lost range is skipped instead (SkipLost).
//
// Invariants: apply actions come in strictly increasing seq order, each seq at most once
// between resyncs; after a RequestReplay action the caller reports the send outcome through
// onReplayRequestResult() before giving any other input (a request that could not be sent is
// not outstanding; it is retried on a later tick or gap).
//
// Not thread-safe. Owned by the IndexService thread (one per configured rank endpoint).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "protocol/kv_events.h"

namespace mocker::index {

/// Monotonic time as the caller's clock gives it (the service: steady_clock::now()).
using SeqTime = std::chrono::steady_clock::time_point;

struct SequencerConfig {
  bool has_replay = false;  ///< the rank has a replay endpoint
  /// A replay that gets no end marker within this is over (counted as ended, then retried).
  std::chrono::milliseconds replay_timeout{2000};
  /// An idle stream (nothing received, nothing asked) is asked for a replay from next() this
  /// often, so that a lost tail is found; 0 = never.
  std::chrono::milliseconds probe_interval{1000};
  /// A replay request that could not be sent is tried again after this.
  std::chrono::milliseconds send_retry_interval{50};
  /// Replays that end with the gap still open are asked again this many times before the gap
  /// is declared unhealable.
  int max_replay_retries = 8;
  /// Timestamps of this many last applied batches are kept: a live batch behind next() that
  /// carries another timestamp than the batch applied at its seq is from a new process.
  std::size_t applied_ts_window = 1024;
};

/// Why a range of batches is given up.
enum class LossReason {
  JoinedWithoutReplay,  ///< the first batch seen was > 0 and there is no replay endpoint
  NoReplayEndpoint,     ///< a gap on a rank without a replay endpoint
  RingOverrun,          ///< the replay started after the missing seq (replay_start)
  ReplayTimedOut,       ///< the last retry got no end marker in time
  ReplayIncomplete,     ///< the replays ended without the missing batches, retries used up
};
std::string_view lossReasonName(LossReason reason);

enum class SeqActionKind {
  Apply,           ///< apply `batch` (seq) to the index
  Duplicate,       ///< seq was dropped: already applied (replay overlap, old batch)
  GapDetected,     ///< seq = first missing, seq_end = the batch that revealed the gap
  GapHealed,       ///< the open gap was filled
  RequestReplay,   ///< send a replay request from seq, then call onReplayRequestResult()
  ReplayTimedOut,  ///< the outstanding replays got no end marker within replay_timeout
  Resync,          ///< [seq, seq_end) lost: send a kv_snapshot request, then onResyncResult()
  SkipLost,        ///< [seq, seq_end) lost and skipped (no resync possible)
  /// The publisher restarted: live batch `seq` is not after the previous live batch (a PUB's
  /// stream only goes forward, so a new process is numbering from 0 again); seq_end = the seq
  /// the old stream expected next. Drop the source's blocks; the stream starts over at 0
  /// (apply 0, or a gap from 0 that is replayed from the new process or resynced).
  Restarted,
};

struct SeqAction {
  SeqActionKind kind = SeqActionKind::Apply;
  std::uint64_t seq = 0;
  std::uint64_t seq_end = 0;       ///< GapDetected, Resync, SkipLost (see the kinds)
  LossReason reason{};             ///< Resync, SkipLost
  std::uint64_t replay_start = 0;  ///< Resync, SkipLost with RingOverrun
  protocol::KvEventBatch batch;    ///< Apply
};
using SeqActions = std::vector<SeqAction>;

enum class StreamState { Joining, InOrder, Gap, Resyncing };
std::string_view streamStateName(StreamState state);

class Sequencer {
 public:
  explicit Sequencer(SequencerConfig config);

  /// Whether a failed gap can be healed by a resync (the rank has a snapshot endpoint and its
  /// rank number is known). Without it, lost ranges are skipped.
  void setCanResync(bool can_resync) { can_resync_ = can_resync; }

  /// The service starts: with `replay_from_zero` (and a replay endpoint) a replay from seq 0
  /// covers what the live stream missed before it connected; otherwise the first live batch
  /// decides where the stream starts.
  void start(SeqTime now, bool replay_from_zero, SeqActions& out);

  /// A batch from the live stream / the replay stream. Decode failures are passed as empty
  /// batches: the seq is consumed either way.
  void onLiveBatch(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now, SeqActions& out);
  void onReplayBatch(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                     SeqActions& out);
  /// The replay end marker.
  void onReplayEnd(SeqTime now, SeqActions& out);

  /// REQUIRES: the last action given out was RequestReplay.
  void onReplayRequestResult(bool sent, SeqTime now);

  /// The kv_snapshot of a Resync was applied to the index (`ok`), or the resync failed (the
  /// request could not be sent, the reply was an error or did not come). Either way the stream
  /// goes on from the seq after the newest one seen when the resync began.
  /// REQUIRES: resyncing().
  void onResyncResult(bool ok, SeqTime now, SeqActions& out);

  /// Replay timeout, retry of an unsent request, idle probe.
  void onTick(SeqTime now, SeqActions& out);

  /// Verify's catch-up: ask for a replay from next() (when there is a replay endpoint and the
  /// stream is neither joining nor resyncing). Wait for settled(catchUpTarget()) afterwards.
  void catchUp(SeqTime now, SeqActions& out);
  /// Replay ends the stream has to see before a catch-up asked now is complete.
  std::uint64_t catchUpTarget() const { return num_replay_ends_ + num_outstanding_; }
  bool settled(std::uint64_t catch_up_target) const {
    return num_replay_ends_ >= catch_up_target && !resyncing_ && pending_.empty();
  }

  /// The initial replay ended (or none was asked) and nothing is missing or being resynced.
  bool caughtUp() const {
    return (!config_.has_replay || initial_done_) && !resyncing_ && pending_.empty();
  }
  /// seq would be dropped as a duplicate (lets the caller skip decoding it). A live batch at or
  /// before the previous live one is decoded: a restart unless its timestamp shows it is this
  /// process's own batch again or late (isOwnBatch).
  /// A live batch behind next() is decoded when the timestamp applied at its seq is known:
  /// another one reveals a restart.
  bool isDuplicate(std::uint64_t seq, bool live) const {
    return started_ && seq < next_ &&
           !(live ? isRestart(seq) || appliedTs(seq).has_value()
                  : identity_seq_ && seq == *identity_seq_);
  }
  /// Live batch seq is at or before the previous live one: a publisher restart, unless
  /// isOwnBatch says otherwise.
  bool isRestart(std::uint64_t seq) const { return last_live_ && seq <= *last_live_; }

  StreamState state() const;
  std::uint64_t next() const { return next_; }
  std::size_t numPending() const { return pending_.size(); }
  bool resyncing() const { return resyncing_; }
  int numOutstandingReplays() const { return static_cast<int>(num_outstanding_); }

 private:
  void onBatch(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now, SeqActions& out);
  /// A live batch behind next(): a duplicate, or (another timestamp) from a restarted process.
  void onLiveBehind(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                    SeqActions& out);
  /// The timestamp of the batch applied at seq, while it is among the last applied_ts_window.
  std::optional<double> appliedTs(std::uint64_t seq) const;
  /// A live batch at or before the previous live one (ts: its timestamp) is this process's:
  /// applied at seq with the same timestamp, buffered with it, or filling a hole before a
  /// buffered batch whose timestamp is not older.
  bool isOwnBatch(std::uint64_t seq, double ts) const;
  void recordApplied(std::uint64_t seq, double ts);
  void restart(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now, SeqActions& out);
  void restartStream(std::uint64_t seq, SeqTime now, SeqActions& out);
  void drainPending(SeqActions& out);
  void onGap(SeqTime now, SeqActions& out);
  void requestReplay(SeqTime now, SeqActions& out);
  void endReplay(bool timed_out, SeqTime now, SeqActions& out);
  void unhealable(LossReason reason, std::uint64_t replay_start, SeqActions& out);

  SequencerConfig config_;
  bool can_resync_ = false;
  bool started_ = false;  // next_ is meaningful
  std::uint64_t next_ = 0;
  bool any_seen_ = false;
  std::optional<std::uint64_t> last_live_;  // seq of the previous live batch
  std::optional<double> applied_ts_;        // timestamp of batch next_ - 1, applied here
  // (seq, ts) of recently applied batches in slot seq % size (seq kNoSeq: empty); emptied
  // on a restart.
  static constexpr std::uint64_t kNoSeq = ~std::uint64_t{0};
  std::vector<std::pair<std::uint64_t, double>> applied_window_;
  // A replay was asked from identity_seq_ (= the last applied seq, timestamp identity_ts_).
  std::optional<std::uint64_t> identity_seq_;
  double identity_ts_ = 0.0;
  std::uint64_t max_seen_ = 0;
  std::map<std::uint64_t, protocol::KvEventBatch> pending_;  // seq > next_, not yet applied
  bool resyncing_ = false;
  bool gap_open_ = false;
  int replay_retries_ = 0;
  // Replay requests: outstanding ones, ends seen, the first seq the current replay delivered.
  std::uint64_t num_outstanding_ = 0;
  std::uint64_t num_replay_ends_ = 0;
  std::optional<std::uint64_t> replay_first_;
  bool awaiting_send_result_ = false;
  bool want_replay_ = false;  // a replay request could not be sent; retry
  SeqTime last_attempt_{};    // last RequestReplay given out
  SeqTime replay_sent_{};     // last replay request actually sent
  SeqTime last_activity_{};   // last batch received
  bool initial_done_ = false;
};

}  // namespace mocker::index
