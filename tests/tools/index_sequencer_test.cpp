// The sequencing state machine of `mocker index` (tools/index/sequencer.h), driven by a table:
// each row is a script of inputs and the actions it must produce, leveldb style.
//
// Inputs (comma separated):
//   start    the service starts with a replay from 0      join   starts without it
//   N        live batch seq N                             rN     replayed batch seq N
//   N', rN'  the same from a restarted publisher (a later timestamp)
//   end      replay end marker                            +N     N ms pass, then a tick
//   snap     the resync's kv_snapshot was applied         snap!  the resync failed
//   catchup  verify's catch-up
//   block    replay requests cannot be sent from now on   unblock  they can again
// Actions:
//   apply N | dup N | gap@N (first missing) | healed | replay(N) [unsent] | timeout |
//   lost A..B (reason[@replay start]) resync|skip | restart N (live N after the previous live)
#include "tools/index/sequencer.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace mocker::index {
namespace {

using namespace std::chrono_literals;

struct Setup {
  bool has_replay = true;
  bool can_resync = true;
  int max_replay_retries = 8;
  std::size_t applied_ts_window = 1024;
};

struct Row {
  Setup setup;
  const char* input;
  const char* expected;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(' ');
    const auto e = item.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
  }
  return out;
}

/// A batch that names its seq (ts), so that an apply of the wrong batch shows. A batch of a
/// restarted publisher (`N'`) has another, later timestamp: seq + kRestartedTs (a new process
/// publishes after every batch of the old one).
constexpr double kRestartedTs = 1000.5;
protocol::KvEventBatch batchFor(std::uint64_t seq, bool restarted) {
  return {.ts = static_cast<double>(seq) + (restarted ? kRestartedTs : 0.0),
          .events = {},
          .dp_rank = 0};
}

/// "12" → (12, false); "12'" → (12, true).
std::pair<std::uint64_t, bool> parseSeq(std::string token) {
  const bool restarted = !token.empty() && token.back() == '\'';
  if (restarted) token.pop_back();
  return {std::stoull(token), restarted};
}

/// Runs a script against a fresh Sequencer; returns the actions as text.
class Harness {
 public:
  explicit Harness(const Setup& setup)
      : sequencer_(SequencerConfig{.has_replay = setup.has_replay,
                                   .replay_timeout = 2000ms,
                                   .probe_interval = 1000ms,
                                   .send_retry_interval = 50ms,
                                   .max_replay_retries = setup.max_replay_retries,
                                   .applied_ts_window = setup.applied_ts_window}) {
    sequencer_.setCanResync(setup.can_resync);
  }

  std::string run(const std::string& script) {
    for (const std::string& token : split(script)) step(token);
    std::ostringstream text;
    for (std::size_t i = 0; i < log_.size(); ++i) text << (i == 0 ? "" : ", ") << log_[i];
    return text.str();
  }

  Sequencer& sequencer() { return sequencer_; }
  SeqTime now() const { return now_; }

 private:
  void step(const std::string& token) {
    if (token == "start" || token == "join") {
      sequencer_.start(now_, token == "start", out_);
    } else if (token == "end") {
      sequencer_.onReplayEnd(now_, out_);
    } else if (token == "snap" || token == "snap!") {
      // The service only reports a resync result for a resync the sequencer asked for.
      if (!sequencer_.resyncing()) {
        ADD_FAILURE() << token << " while not resyncing";
        return;
      }
      sequencer_.onResyncResult(token == "snap", now_, out_);
    } else if (token == "catchup") {
      sequencer_.catchUp(now_, out_);
    } else if (token == "block" || token == "unblock") {
      blocked_ = token == "block";
    } else if (token[0] == '+') {
      now_ += std::chrono::milliseconds(std::stoll(token.substr(1)));
      sequencer_.onTick(now_, out_);
    } else if (token[0] == 'r') {
      const auto [seq, restarted] = parseSeq(token.substr(1));
      sequencer_.onReplayBatch(seq, batchFor(seq, restarted), now_, out_);
    } else {
      const auto [seq, restarted] = parseSeq(token);
      sequencer_.onLiveBatch(seq, batchFor(seq, restarted), now_, out_);
    }
    perform();
  }

  void perform() {
    for (const SeqAction& a : out_) {
      std::ostringstream text;
      switch (a.kind) {
        case SeqActionKind::Apply: {
          const bool restarted = a.batch.ts != static_cast<double>(a.seq);
          EXPECT_EQ(a.batch.ts, static_cast<double>(a.seq) + (restarted ? kRestartedTs : 0.0))
              << "apply " << a.seq;
          text << "apply " << a.seq << (restarted ? "'" : "");
          break;
        }
        case SeqActionKind::Duplicate:
          text << "dup " << a.seq;
          break;
        case SeqActionKind::GapDetected:
          text << "gap@" << a.seq;
          break;
        case SeqActionKind::GapHealed:
          text << "healed";
          break;
        case SeqActionKind::RequestReplay:
          // The sequencer must not count a request it was not told was sent.
          sequencer_.onReplayRequestResult(!blocked_, now_);
          text << "replay(" << a.seq << ")" << (blocked_ ? " unsent" : "");
          break;
        case SeqActionKind::ReplayTimedOut:
          text << "timeout";
          break;
        case SeqActionKind::Restarted:
          text << "restart " << a.seq;
          break;
        case SeqActionKind::Resync:
        case SeqActionKind::SkipLost:
          text << "lost " << a.seq << ".." << a.seq_end - 1 << " (" << lossReasonName(a.reason);
          if (a.reason == LossReason::RingOverrun) text << "@" << a.replay_start;
          text << ") " << (a.kind == SeqActionKind::Resync ? "resync" : "skip");
          break;
      }
      log_.push_back(text.str());
    }
    out_.clear();
  }

  Sequencer sequencer_;
  SeqActions out_;
  std::vector<std::string> log_;
  SeqTime now_ = SeqTime{} + 1h;  // "never" (time 0) lies far in the past
  bool blocked_ = false;
};

constexpr Setup kReplay{};
constexpr Setup kReplayNoSnapshot{.has_replay = true, .can_resync = false};
constexpr Setup kSnapshotOnly{.has_replay = false, .can_resync = true};
constexpr Setup kNeither{.has_replay = false, .can_resync = false};
constexpr Setup kTwoRetries{.has_replay = true, .can_resync = true, .max_replay_retries = 2};
constexpr Setup kOneRetry{.has_replay = true, .can_resync = true, .max_replay_retries = 1};
constexpr Setup kTwoTimestamps{.applied_ts_window = 2};
constexpr Setup kTwoRetriesNoSnapshot{
    .has_replay = true, .can_resync = false, .max_replay_retries = 2};

const Row kRows[] = {
    // --- In order, duplicates, plain gaps.
    {kReplay, "join, 0, 1, 2", "apply 0, apply 1, apply 2"},
    {kReplay, "join, 0, 1, r1, r0, 2", "apply 0, apply 1, dup 1, dup 0, apply 2"},
    // Live batches behind a replay that got ahead are duplicates, not a restart.
    {kReplay, "start, r0, r1, r2, end, 1, 2, 3",
     "replay(0), apply 0, apply 1, apply 2, dup 1, "
     "dup 2, apply 3"},
    {kReplay, "join, 0, 1, 3", "apply 0, apply 1, gap@2, replay(1)"},
    // Live batches arriving during the replay are buffered; no second request.
    {kReplay, "join, 0, 2, 3, 4", "apply 0, gap@1, replay(0)"},

    // --- Replay fills the gap; live and replayed copies are deduplicated by seq.
    {kReplay, "join, 0, 1, 3, r1, r2, r3, end",
     "apply 0, apply 1, gap@2, replay(1), dup 1, apply 2, apply 3, healed, dup 3"},
    {kReplay, "join, 0, 2, 3, r0, r1, r2, r3, end, 4",
     "apply 0, gap@1, replay(0), dup 0, apply 1, apply 2, apply 3, healed, dup 2, dup 3, apply"
     " 4"},
    // A late replayed copy after the gap healed is a duplicate.
    {kReplay, "join, 0, 2, r0, r1, end, r1",
     "apply 0, gap@1, replay(0), dup 0, apply 1, apply 2, healed, dup 1"},

    // --- Start: replay from 0 covers the slow-joiner window.
    {kReplay, "start, 2, r0, r1, r2, end, 3",
     "replay(0), gap@0, apply 0, apply 1, apply 2, healed, dup 2, apply 3"},
    {kReplay, "start, end, 0, 1", "replay(0), apply 0, apply 1"},
    // Joining late without the start replay: everything before the first batch is a gap.
    {kReplay, "join, 5, r0, r1, r2, r3, r4, end",
     "gap@0, replay(0), apply 0, apply 1, apply 2, apply 3, apply 4, apply 5, healed"},

    // --- Replay ring overrun: the replay starts after the missing seq → resync.
    // The snapshot covers everything up to the newest seq seen (5); 6 follows it.
    {kReplay, "start, end, 0, 1, 5, r4, r5, end, snap, 6",
     "replay(0), apply 0, apply 1, gap@2, replay(1), lost 2..3 (overrun@4) resync, apply 6"},
    {kReplay, "join, 5, r3, r4, end, snap, 6",
     "gap@0, replay(0), lost 0..2 (overrun@3) resync, apply 6"},
    // Without a snapshot endpoint the lost range is skipped and the buffer goes on.
    {kReplayNoSnapshot, "join, 0, 1, 5, r4, r5, end, 6",
     "apply 0, apply 1, gap@2, replay(1), lost 2..3 (overrun@4) skip, apply 4, apply 5, apply "
     "6"},

    // --- Replay end with the gap still open: ask again, then give up.
    {kReplay, "join, 0, 2, r0, end, r0, r1, end",
     "apply 0, gap@1, replay(0), dup 0, replay(0), dup 0, apply 1, apply 2, healed"},
    {kTwoRetries, "join, 0, 2, r0, end, r0, end, r0, end, snap, 3",
     "apply 0, gap@1, replay(0), dup 0, replay(0), dup 0, replay(0), dup 0, lost 1..1 "
     "(incomplete) resync, apply 3"},
    {kTwoRetriesNoSnapshot, "join, 0, 2, r0, end, r0, end, r0, end, 3",
     "apply 0, gap@1, replay(0), dup 0, replay(0), dup 0, replay(0), dup 0, lost 1..1 "
     "(incomplete) skip, apply 2, apply 3"},

    // --- Timeouts (replay_timeout 2000 ms, strictly more than it).
    {kReplay, "join, 0, 2, +2000", "apply 0, gap@1, replay(0)"},
    {kReplay, "join, 0, 2, +2001, r0, r1, end",
     "apply 0, gap@1, replay(0), timeout, replay(0), dup 0, apply 1, apply 2, healed"},
    {kReplay, "start, +2001", "replay(0), timeout"},
    {kOneRetry, "join, 0, 2, +2001, +2001, snap, 3",
     "apply 0, gap@1, replay(0), timeout, replay(0), timeout, lost 1..1 (timed-out) resync, "
     "apply 3"},
    // The end marker of the timed-out replay arrives late: taken as the end of the retry, so the
    // gap is asked for once more.
    {kReplay, "join, 0, 2, +2001, r0, end, r0, r1, end",
     "apply 0, gap@1, replay(0), timeout, replay(0), dup 0, replay(0), dup 0, apply 1, apply "
     "2, healed"},

    // --- No replay endpoint: a gap is resynced at once (or skipped).
    {kSnapshotOnly, "join, 0, 2, 3, snap, 4",
     "apply 0, gap@1, lost 1..1 (no-replay) resync, apply 3, apply 4"},
    {kNeither, "join, 0, 2, 3", "apply 0, gap@1, lost 1..1 (no-replay) skip, apply 2, apply 3"},
    {kNeither, "join, 5, 6", "gap@0, lost 0..4 (joined) skip, apply 5, apply 6"},
    {kSnapshotOnly, "join, 5, snap, 6", "gap@0, lost 0..4 (joined) resync, apply 6"},

    // --- Resync completion.
    // Old batches during the resync are duplicates; newer ones wait for the snapshot.
    {kSnapshotOnly, "join, 0, 2, r1, r2, 3, snap",
     "apply 0, gap@1, lost 1..1 (no-replay) resync, dup 1, dup 2, apply 3"},
    // A hole among the batches buffered during the resync is a new gap.
    {kSnapshotOnly, "join, 0, 2, 3, 5, snap, snap, 6",
     "apply 0, gap@1, lost 1..1 (no-replay) resync, apply 3, gap@4, lost 4..4 (no-replay) "
     "resync, apply 6"},
    {kReplay, "start, end, 0, 1, 5, r4, end, 6, 8, snap, r6, r7, end",
     "replay(0), apply 0, apply 1, gap@2, replay(1), lost 2..3 (overrun@4) resync, apply 6, "
     "gap@7, replay(6), dup 6, apply 7, apply 8, healed"},
    // A failed resync goes on from the seq after the newest seen, too.
    {kSnapshotOnly, "join, 0, 2, snap!, 3",
     "apply 0, gap@1, lost 1..1 (no-replay) resync, apply 3"},
    // Replay end and timeouts during a resync change nothing.
    {kReplay, "start, end, 0, 3, r2, end, end, +3000, snap, 4",
     "replay(0), apply 0, gap@1, replay(0), lost 1..1 (overrun@2) resync, apply 4"},

    // --- Publisher restart: a live seq at or before the previous live one. The stream starts
    // over at 0; the new process's ring fills what the live stream missed.
    {kReplay, "join, 0, 1, 2, 0', 1'", "apply 0, apply 1, apply 2, restart 0, apply 0', apply 1'"},
    {kReplay, "join, 0, 1, 2, 3, 2', r0', r1', r2', end, 3'",
     "apply 0, apply 1, apply 2, apply 3, restart 2, gap@0, replay(0), apply 0', apply 1', "
     "apply 2', healed, dup 2, apply 3'"},
    // The same seq again with another timestamp is a restart too.
    {kReplay, "join, 0, 1, 1'", "apply 0, apply 1, restart 1, gap@0, replay(0)"},
    // The same batch again (a duplicated message: same seq, same timestamp) is a duplicate, and
    // a batch that arrives after its successor (reordered) fills the gap: this process's own.
    {kReplay, "join, 0, 1, 1, 2", "apply 0, apply 1, dup 1, apply 2"},
    {kReplay, "join, 0, 2, 1, 3", "apply 0, gap@1, replay(0), apply 1, apply 2, healed, apply 3"},
    {kReplay, "join, 0, 2, 2, 1", "apply 0, gap@1, replay(0), apply 1, apply 2, healed"},
    {kReplay, "join, 0, 3, 1, 2", "apply 0, gap@1, replay(0), apply 1, apply 2, apply 3, healed"},
    // Without a replay endpoint: resync from the new process's snapshot, or skip.
    {kSnapshotOnly, "join, 0, 1, 2, 1', snap, 2'",
     "apply 0, apply 1, apply 2, restart 1, gap@0, lost 0..0 (no-replay) resync, apply 2'"},
    {kNeither, "join, 0, 1, 2, 1', 2'",
     "apply 0, apply 1, apply 2, restart 1, gap@0, lost 0..0 (no-replay) skip, apply 1', "
     "apply 2'"},
    // During a resync: the resync result comes, then the stream goes on from 0.
    {kSnapshotOnly, "join, 0, 2, 1', snap",
     "apply 0, gap@1, lost 1..1 (no-replay) resync, restart 1, gap@0, lost 0..0 (no-replay) "
     "resync"},
    // A replay outstanding when the restart is seen ends first; the gap is asked for again.
    {kReplay, "join, 0, 2, 1', end, r0', end",
     "apply 0, gap@1, replay(0), restart 1, gap@0, replay(0), apply 0', apply 1', healed"},

    // A publisher restart seen through a replay: every replay asks from the last applied seq,
    // and that batch must come back as it was applied (same timestamp). Another one, or none
    // at all, means a new process: start over from 0.
    {kReplay, "join, 0, 1, 2, 5', r2', r3', r4', r5', end, r0', r1', r2', r3', r4', r5', end",
     "apply 0, apply 1, apply 2, gap@3, replay(2), restart 2, gap@0, replay(0), apply 0', "
     "apply 1', apply 2', apply 3', apply 4', apply 5', healed, dup 2, dup 3, dup 4, dup 5"},
    {kReplay, "join, 0, 1, 2, +1000, end, r0', end, 1'",
     "apply 0, apply 1, apply 2, replay(2), restart 2, replay(0), apply 0', apply 1'"},
    {kReplay, "join, 0, 1, +1000, r1, end, 2", "apply 0, apply 1, replay(1), dup 1, apply 2"},

    // A stream joined through the replay has no previous live batch: a restarted publisher's
    // live batches behind next() are told from duplicates by their timestamp.
    {kReplay, "start, r0, r1, r2, r3, end, 0', 1', 2'",
     "replay(0), apply 0, apply 1, apply 2, apply 3, restart 0, apply 0', apply 1', apply 2'"},
    {kReplay, "start, r0, r1, r2, r3, end, 2', 3', r0', r1', r2', r3', end",
     "replay(0), apply 0, apply 1, apply 2, apply 3, restart 2, gap@0, replay(0), apply 0', "
     "apply 1', apply 2', apply 3', healed, dup 2, dup 3"},
    // Older than the remembered timestamps (2 here): a duplicate, and a replay from the last
    // applied seq checks the publisher (here: it restarted).
    {kTwoTimestamps, "start, r0, r1, r2, r3, end, 0', r3', end",
     "replay(0), apply 0, apply 1, apply 2, apply 3, dup 0, replay(3), restart 3, gap@0, "
     "replay(0)"},
    {kTwoTimestamps, "start, r0, r1, r2, r3, end, 0, r3, end, 4",
     "replay(0), apply 0, apply 1, apply 2, apply 3, dup 0, replay(3), dup 3, apply 4"},

    // --- Idle probe (1000 ms): a lost tail is found without a later batch.
    {kReplay, "join, 0, +999, +1", "apply 0, replay(0)"},
    {kReplay, "join, 0, +1000, r0, r1, r2, end", "apply 0, replay(0), dup 0, apply 1, apply 2"},
    {kReplay, "join, 0, +1000, r0, end, +999, +1", "apply 0, replay(0), dup 0, replay(0)"},
    {kReplay, "join, +5000", ""},  // nothing seen yet: nothing to probe from
    {kNeither, "join, 0, +5000", "apply 0"},

    // --- A request that cannot be sent is not outstanding (no timeout) and is retried.
    {kReplay, "block, start, +2001, unblock, +49, +1",
     "replay(0) unsent, replay(0) unsent, replay(0)"},
    {kReplay, "join, 0, block, 2, 3, +49, +1, unblock, +50, r0, r1, end",
     "apply 0, gap@1, replay(0) unsent, replay(0) unsent, replay(0) unsent, replay(0), dup 0, "
     "apply 1, apply 2, apply 3, healed"},

    // --- Verify catch-up.
    {kReplay, "join, 0, catchup, r0, r1, end", "apply 0, replay(0), dup 0, apply 1"},
    {kReplay, "join, catchup", ""},
    {kSnapshotOnly, "join, 0, catchup", "apply 0"},
};

TEST(SequencerTest, Table) {
  for (const Row& row : kRows) {
    Harness h(row.setup);
    EXPECT_EQ(h.run(row.input), row.expected) << "input: " << row.input;
  }
}

TEST(SequencerTest, StatesFollowTheStream) {
  Harness h(kSnapshotOnly);
  EXPECT_EQ(streamStateName(h.sequencer().state()), "joining");
  h.run("join, 0");
  EXPECT_EQ(streamStateName(h.sequencer().state()), "in-order");
  EXPECT_TRUE(h.sequencer().caughtUp());
  h.run("2");
  EXPECT_EQ(streamStateName(h.sequencer().state()), "resyncing");
  EXPECT_FALSE(h.sequencer().caughtUp());
  EXPECT_TRUE(h.sequencer().isDuplicate(2, /*live=*/false));
  EXPECT_FALSE(h.sequencer().isDuplicate(3, /*live=*/false));
  h.run("4");
  EXPECT_EQ(h.sequencer().numPending(), 1u);
  h.run("snap!");
  EXPECT_EQ(streamStateName(h.sequencer().state()), "resyncing") << "3 is missing: resync again";
  h.run("snap");
  EXPECT_EQ(streamStateName(h.sequencer().state()), "in-order");
  EXPECT_EQ(h.sequencer().next(), 5u);
}

TEST(SequencerTest, ALiveSeqNotAfterThePreviousLiveOneIsARestartNotADuplicate) {
  Harness h(kReplay);
  h.run("join, 0, 1, 2");
  EXPECT_TRUE(h.sequencer().isDuplicate(1, /*live=*/false));  // a replayed copy
  EXPECT_FALSE(h.sequencer().isDuplicate(1, /*live=*/true));  // the service must decode it
  EXPECT_TRUE(h.sequencer().isRestart(2));
  EXPECT_FALSE(h.sequencer().isRestart(3));
  h.run("1'");  // another (later) timestamp: a new process
  EXPECT_EQ(streamStateName(h.sequencer().state()), "gap");
  EXPECT_EQ(h.sequencer().next(), 0u);
}

TEST(SequencerTest, TheSameBatchAgainIsADuplicateNotARestart) {
  Harness h(kReplay);
  h.run("join, 0, 1, 2, 1");  // seq 1 again with the timestamp applied at 1
  EXPECT_EQ(streamStateName(h.sequencer().state()), "in-order");
  EXPECT_EQ(h.sequencer().next(), 3u);
  EXPECT_TRUE(h.sequencer().isRestart(2));  // the previous live seq stays 2
}

TEST(SequencerTest, CaughtUpOnlyAfterTheInitialReplayEnded) {
  Harness h(kReplay);
  h.run("start, 0, 1");
  EXPECT_FALSE(h.sequencer().caughtUp());
  h.run("end");
  EXPECT_TRUE(h.sequencer().caughtUp());
  h.run("3");
  EXPECT_FALSE(h.sequencer().caughtUp());
  EXPECT_EQ(streamStateName(h.sequencer().state()), "gap");
}

TEST(SequencerTest, CatchUpSettlesWhenEveryOutstandingReplayEnded) {
  Harness h(kReplay);
  h.run("join, 0, 2");  // replay(1) outstanding
  h.run("catchup");     // and a second one
  EXPECT_EQ(h.sequencer().numOutstandingReplays(), 2);
  const std::uint64_t target = h.sequencer().catchUpTarget();
  h.run("r1, end");
  EXPECT_FALSE(h.sequencer().settled(target));
  h.run("end");
  EXPECT_TRUE(h.sequencer().settled(target));
}

TEST(SequencerTest, UnsentCatchUpIsNotWaitedFor) {
  Harness h(kReplay);
  h.run("join, 0, block, catchup");
  EXPECT_EQ(h.sequencer().numOutstandingReplays(), 0);
  EXPECT_TRUE(h.sequencer().settled(h.sequencer().catchUpTarget()));
}

}  // namespace
}  // namespace mocker::index
