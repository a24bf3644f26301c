// Sequencer: the per-stream state machine of `mocker index` — batches in order, gap → replay,
// replay end, unhealable → resync (contract and state table in sequencer.h).
#include "tools/index/sequencer.h"

#include <algorithm>

#include "base/check.h"
#include "base/enum_names.h"

namespace mocker::index {

// NOTE: a replay is one request answered by a run of batches and an end marker, but neither
// carries a request id. Overlapping replays (a gap replay and a probe, a retry after a timeout)
// are therefore only counted: the stream's replay is "over" when as many end markers arrived as
// requests were sent (or on timeout), and the overrun test looks at the first batch delivered
// since the last time no replay was outstanding.

namespace {

constexpr EnumNames<LossReason, 5> kLossReasons{{
    {"joined", LossReason::JoinedWithoutReplay},
    {"no-replay", LossReason::NoReplayEndpoint},
    {"overrun", LossReason::RingOverrun},
    {"timed-out", LossReason::ReplayTimedOut},
    {"incomplete", LossReason::ReplayIncomplete},
}};

constexpr EnumNames<StreamState, 4> kStreamStates{{
    {"joining", StreamState::Joining},
    {"in-order", StreamState::InOrder},
    {"gap", StreamState::Gap},
    {"resyncing", StreamState::Resyncing},
}};

}  // namespace

std::string_view lossReasonName(LossReason reason) { return enumName(kLossReasons, reason); }

std::string_view streamStateName(StreamState state) { return enumName(kStreamStates, state); }

Sequencer::Sequencer(SequencerConfig config)
    : config_(config),
      applied_window_(std::max<std::size_t>(config.applied_ts_window, 1), {kNoSeq, 0.0}) {}

std::optional<double> Sequencer::appliedTs(std::uint64_t seq) const {
  const auto& [at, ts] = applied_window_[seq % applied_window_.size()];
  if (at != seq) return std::nullopt;
  return ts;
}

void Sequencer::recordApplied(std::uint64_t seq, double ts) {
  applied_ts_ = ts;
  applied_window_[seq % applied_window_.size()] = {seq, ts};
}

StreamState Sequencer::state() const {
  if (resyncing_) return StreamState::Resyncing;
  if (!started_) return StreamState::Joining;
  return pending_.empty() ? StreamState::InOrder : StreamState::Gap;
}

void Sequencer::start(SeqTime now, bool replay_from_zero, SeqActions& out) {
  MOCKER_CHECK(!awaiting_send_result_);
  last_activity_ = now;
  if (config_.has_replay && replay_from_zero) {
    started_ = true;  // apply from seq 0; the replay fills what the live stream missed
    next_ = 0;
    requestReplay(now, out);
  } else {
    initial_done_ = true;
  }
}

void Sequencer::onLiveBatch(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                            SeqActions& out) {
  // At or before the previous live batch: a new process, unless it is this process's own
  // batch delivered again or late (a duplicated or reordered message).
  const bool behind_live = isRestart(seq);
  if (behind_live && !isOwnBatch(seq, batch.ts)) {
    restart(seq, std::move(batch), now, out);
    last_live_ = seq;
    return;
  }
  if (started_ && seq < next_) {
    onLiveBehind(seq, std::move(batch), now, out);
    // After: a restart resets it; a repeated or late batch does not move it back.
    last_live_ = behind_live && last_live_ ? std::max(*last_live_, seq) : seq;
    return;
  }
  if (!behind_live) last_live_ = seq;
  onBatch(seq, std::move(batch), now, out);
}

bool Sequencer::isOwnBatch(std::uint64_t seq, double ts) const {
  if (const auto applied = appliedTs(seq)) return *applied == ts;  // the same batch again
  if (seq < next_) return false;  // behind the stream, its timestamp forgotten
  if (const auto it = pending_.find(seq); it != pending_.end()) return it->second.ts == ts;
  // A hole before a buffered batch: filled late by this process if not newer than the batch
  // after it (a new process publishes after every batch of the old one).
  const auto after = pending_.upper_bound(seq);
  return after != pending_.end() && ts <= after->second.ts;
}

void Sequencer::onLiveBehind(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                             SeqActions& out) {
  // Normal after a replay that got ahead of the live stream. But when no live batch of this
  // process was seen before (the stream was joined through the replay, or the subscriber
  // missed the new process's first batches), a restarted publisher's batches look the same:
  // only the timestamp tells.
  const std::optional<double> ts = appliedTs(seq);
  if (ts && *ts != batch.ts) {
    restart(seq, std::move(batch), now, out);
    return;
  }
  last_activity_ = now;
  out.push_back({.kind = SeqActionKind::Duplicate, .seq = seq});
  if (!ts && config_.has_replay && num_outstanding_ == 0 && !resyncing_ && !want_replay_) {
    requestReplay(now, out);  // from the last applied seq: its identity check decides
  }
}

void Sequencer::restart(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                        SeqActions& out) {
  restartStream(seq, now, out);
  if (resyncing_) {
    // The resync result still comes (or fails); the stream goes on from 0 after it.
    pending_.emplace(seq, std::move(batch));
    return;
  }
  if (seq == 0) {
    recordApplied(0, batch.ts);
    out.push_back({.kind = SeqActionKind::Apply, .seq = 0, .batch = std::move(batch)});
    next_ = 1;
    return;
  }
  pending_.emplace(seq, std::move(batch));
  gap_open_ = true;
  out.push_back({.kind = SeqActionKind::GapDetected, .seq = 0, .seq_end = seq});
  if (num_outstanding_ == 0) onGap(now, out);
}

void Sequencer::restartStream(std::uint64_t seq, SeqTime now, SeqActions& out) {
  MOCKER_CHECK(!awaiting_send_result_);
  last_activity_ = now;
  out.push_back({.kind = SeqActionKind::Restarted, .seq = seq, .seq_end = next_});
  // Everything known about the old process's stream is void. An outstanding replay still ends
  // (or times out) and is counted as usual; where it started says nothing about the new
  // numbering, so it cannot show a ring overrun (first = 0).
  pending_.clear();
  gap_open_ = false;
  replay_retries_ = 0;
  want_replay_ = false;
  if (num_outstanding_ > 0) replay_first_ = 0;
  identity_seq_.reset();
  applied_ts_.reset();
  std::fill(applied_window_.begin(), applied_window_.end(), std::pair{kNoSeq, 0.0});
  last_live_.reset();  // the new process's live stream numbers from 0 again
  started_ = true;
  any_seen_ = true;
  max_seen_ = seq;
  next_ = 0;
}

void Sequencer::onReplayBatch(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                              SeqActions& out) {
  if (!replay_first_) replay_first_ = seq;
  if (identity_seq_ && seq == *identity_seq_) {
    // The batch this stream applied last, as the publisher's ring has it now: another
    // timestamp means another process numbered this seq.
    const bool same = batch.ts == identity_ts_;
    identity_seq_.reset();
    if (!same) {
      restartStream(seq, now, out);
      pending_.emplace(seq, std::move(batch));
      if (resyncing_) return;
      gap_open_ = true;
      out.push_back({.kind = SeqActionKind::GapDetected, .seq = 0, .seq_end = seq});
      if (num_outstanding_ == 0) onGap(now, out);
      return;
    }
  }
  onBatch(seq, std::move(batch), now, out);
}

void Sequencer::onBatch(std::uint64_t seq, protocol::KvEventBatch&& batch, SeqTime now,
                        SeqActions& out) {
  MOCKER_CHECK(!awaiting_send_result_);
  last_activity_ = now;
  if (started_ && seq < next_) {
    out.push_back({.kind = SeqActionKind::Duplicate, .seq = seq});
    return;
  }
  if (!any_seen_ || seq > max_seen_) max_seen_ = seq;
  any_seen_ = true;
  if (!started_) {
    // No replay from 0 at start: the first batch seen decides. Anything before it is a gap.
    started_ = true;
    next_ = seq;
    if (seq > 0) {
      next_ = 0;
      pending_.emplace(seq, std::move(batch));
      gap_open_ = true;
      out.push_back({.kind = SeqActionKind::GapDetected, .seq = 0, .seq_end = seq});
      if (config_.has_replay) {
        requestReplay(now, out);
      } else {
        unhealable(LossReason::JoinedWithoutReplay, 0, out);
      }
      return;
    }
  }
  if (resyncing_) {
    pending_.emplace(seq, std::move(batch));  // seq >= next_: newer than the snapshot request
    return;
  }
  if (seq == next_) {
    recordApplied(seq, batch.ts);
    out.push_back({.kind = SeqActionKind::Apply, .seq = seq, .batch = std::move(batch)});
    ++next_;
    drainPending(out);
    return;
  }
  pending_.emplace(seq, std::move(batch));
  if (!gap_open_) {
    gap_open_ = true;
    out.push_back({.kind = SeqActionKind::GapDetected, .seq = next_, .seq_end = seq});
  }
  if (num_outstanding_ == 0) onGap(now, out);
}

void Sequencer::drainPending(SeqActions& out) {
  while (!pending_.empty() && pending_.begin()->first <= next_) {
    auto node = pending_.extract(pending_.begin());
    if (node.key() == next_) {
      recordApplied(node.key(), node.mapped().ts);
      out.push_back(
          {.kind = SeqActionKind::Apply, .seq = node.key(), .batch = std::move(node.mapped())});
      ++next_;
    } else {
      out.push_back({.kind = SeqActionKind::Duplicate, .seq = node.key()});
    }
  }
  if (gap_open_ && pending_.empty()) {
    gap_open_ = false;
    replay_retries_ = 0;
    out.push_back({.kind = SeqActionKind::GapHealed, .seq = next_});
  }
}

void Sequencer::onGap(SeqTime now, SeqActions& out) {
  if (config_.has_replay) {
    requestReplay(now, out);
  } else {
    unhealable(LossReason::NoReplayEndpoint, 0, out);
  }
}

void Sequencer::requestReplay(SeqTime now, SeqActions& out) {
  std::uint64_t from = next_;
  if (next_ > 0 && applied_ts_) {
    // One batch of overlap: the replayed copy of the last applied batch checks that the
    // publisher is still the process that sent it.
    from = next_ - 1;
    identity_seq_ = from;
    identity_ts_ = *applied_ts_;
  }
  out.push_back({.kind = SeqActionKind::RequestReplay, .seq = from});
  awaiting_send_result_ = true;
  last_attempt_ = now;
}

void Sequencer::onReplayRequestResult(bool sent, SeqTime now) {
  MOCKER_CHECK(awaiting_send_result_);
  awaiting_send_result_ = false;
  want_replay_ = !sent;
  if (!sent) return;
  if (num_outstanding_ == 0) replay_first_.reset();
  ++num_outstanding_;
  replay_sent_ = now;
}

void Sequencer::onReplayEnd(SeqTime now, SeqActions& out) {
  MOCKER_CHECK(!awaiting_send_result_);
  endReplay(false, now, out);
}

void Sequencer::endReplay(bool timed_out, SeqTime now, SeqActions& out) {
  if (timed_out) {
    num_replay_ends_ += num_outstanding_;
    num_outstanding_ = 0;
  } else {
    ++num_replay_ends_;
    if (num_outstanding_ > 0) --num_outstanding_;
    if (num_outstanding_ > 0) return;
  }
  initial_done_ = true;
  const std::optional<std::uint64_t> first = replay_first_;
  replay_first_.reset();
  const std::optional<std::uint64_t> identity = identity_seq_;
  identity_seq_.reset();
  if (!timed_out && identity && !first && !resyncing_) {
    // Asked from the last applied seq and got nothing: the publisher's ring has nothing from
    // it on, which the process that published it always has (its ring holds its newest
    // batches). A new process has published fewer batches: start over from 0.
    restartStream(*identity, now, out);
    requestReplay(now, out);
    return;
  }
  if (resyncing_ || pending_.empty()) return;
  // Still missing [next_, pending_.begin()): gone from the ring (the replay started after it),
  // or published after the ring was copied (ask again).
  if (!timed_out && first && next_ < *first) {
    unhealable(LossReason::RingOverrun, *first, out);
  } else if (replay_retries_++ < config_.max_replay_retries) {
    requestReplay(now, out);
  } else {
    unhealable(timed_out ? LossReason::ReplayTimedOut : LossReason::ReplayIncomplete, 0, out);
  }
}

void Sequencer::unhealable(LossReason reason, std::uint64_t replay_start, SeqActions& out) {
  gap_open_ = false;
  replay_retries_ = 0;
  const std::uint64_t upto = pending_.empty() ? max_seen_ + 1 : pending_.begin()->first;
  SeqAction lost{.kind = SeqActionKind::SkipLost,
                 .seq = next_,
                 .seq_end = upto,
                 .reason = reason,
                 .replay_start = replay_start};
  if (can_resync_) {
    // The snapshot reflects at least every batch seen so far (max_seen_ was published before
    // the caller sends the request); batches after it are re-applied, which is idempotent.
    lost.kind = SeqActionKind::Resync;
    out.push_back(std::move(lost));
    resyncing_ = true;
    want_replay_ = false;
    pending_.clear();
    next_ = max_seen_ + 1;
    applied_ts_.reset();
    return;
  }
  out.push_back(std::move(lost));
  next_ = upto;
  applied_ts_.reset();
  drainPending(out);
}

void Sequencer::onResyncResult(bool /*ok*/, SeqTime now, SeqActions& out) {
  MOCKER_CHECK(resyncing_);
  MOCKER_CHECK(!awaiting_send_result_);
  resyncing_ = false;
  drainPending(out);
  if (!pending_.empty()) {
    gap_open_ = true;
    out.push_back(
        {.kind = SeqActionKind::GapDetected, .seq = next_, .seq_end = pending_.begin()->first});
    if (num_outstanding_ == 0) onGap(now, out);
  }
}

void Sequencer::onTick(SeqTime now, SeqActions& out) {
  MOCKER_CHECK(!awaiting_send_result_);
  if (!config_.has_replay) return;
  if (num_outstanding_ > 0 && now - replay_sent_ > config_.replay_timeout) {
    out.push_back({.kind = SeqActionKind::ReplayTimedOut, .seq = next_});
    endReplay(true, now, out);
    return;
  }
  if (num_outstanding_ > 0 || resyncing_) return;
  if (want_replay_) {
    // The last request could not be sent: retry it (it would have been the probe, too).
    if (now - last_attempt_ >= config_.send_retry_interval) requestReplay(now, out);
  } else if (config_.probe_interval.count() > 0 && started_ &&
             now - last_activity_ >= config_.probe_interval &&
             now - replay_sent_ >= config_.probe_interval) {
    requestReplay(now, out);  // idle: fetch any lost tail
  }
}

void Sequencer::catchUp(SeqTime now, SeqActions& out) {
  MOCKER_CHECK(!awaiting_send_result_);
  if (config_.has_replay && started_ && !resyncing_) requestReplay(now, out);
}

}  // namespace mocker::index
