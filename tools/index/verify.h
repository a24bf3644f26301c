// The socket-free parts of `mocker index --verify` (tools/index/README.md, Verify): a worker's
// kv_snapshot carried forward to the index's position through the batches logged since it was
// asked for, one source's comparison, the reply's final form, and `VerifyPosition`: one stream's
// bookkeeping that decides when a snapshot is compared. The core (index_core.cpp) sends the
// requests and performs the comparisons.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "protocol/client.h"
#include "protocol/index_query.h"
#include "protocol/kv_events.h"
#include "tools/index/kv_index.h"

namespace mocker::index {

/// A batch the index applied, with its seq.
using LoggedBatch = std::pair<std::uint64_t, protocol::KvEventBatch>;

/// The blocks `src` holds after the last batch of `log`: `snapshot` (its cache after batch `at`)
/// with every logged batch after `at` applied in seq order (stored, removed, cleared). Error: the
/// batch right after `at` is not in `log` (the log does not reach back to the snapshot; the
/// message says where the index is, `index_at`).
Result<std::vector<std::uint64_t>> carrySnapshotForward(WorkerRank src,
                                                        const std::vector<std::uint64_t>& snapshot,
                                                        std::uint64_t at,
                                                        const std::vector<LoggedBatch>& log,
                                                        std::uint64_t index_at);

/// `src` compared: the index's and the worker's block counts, and the blocks only one side holds.
SourceDiff compareSource(const KvIndex& index, WorkerRank src,
                         const std::vector<std::uint64_t>& worker_hashes);

/// The reply's final form: sources in (worker, rank) order, ok = no error and no difference.
void finishVerifyReply(VerifyReply& reply);

/// One stream's position as verify sees it. A kv_snapshot is the worker's cache after batch
/// `last_seq`, which the index may have passed or not reached when the reply arrives: while a
/// request is out the batches applied are logged (to carry a snapshot behind the index forward),
/// and a snapshot ahead of the index waits here until the index applies its seq. No sockets.
class VerifyPosition {
 public:
  using Clock = std::chrono::steady_clock;

  /// What to do with one rank of a kv_snapshot reply.
  struct Decision {
    enum class Kind { CompareNow, Error, Later } kind = Kind::CompareNow;
    std::vector<std::uint64_t> hashes;  ///< CompareNow: the worker's blocks at the index's seq
    std::string error;                  ///< Error: why it cannot be compared
  };

  std::optional<std::uint64_t> lastApplied() const { return last_applied_; }
  bool waiting() const { return pending_.has_value(); }

  /// A kv_snapshot request was sent: log the batches applied from now on.
  void startLogging();
  void stopLogging();

  /// Batch `seq` was applied. Returns the waiting snapshot's hashes when this is its seq (it is
  /// compared now; logging stops).
  std::optional<std::vector<std::uint64_t>> applied(std::uint64_t seq,
                                                    protocol::KvEventBatch&& batch);
  /// The index's position is now `seq` (a resync from a snapshot at that seq; none = unknown).
  void resetTo(std::optional<std::uint64_t> seq) { last_applied_ = seq; }
  /// A restart, resync or skipped range: the position is unknown until the next batch sets it,
  /// a log being kept can no longer carry a snapshot. Returns the error of a waiting snapshot.
  std::optional<std::string> jumped();
  /// `rank` (of `src`) of a kv_snapshot reply: compare now (at once, carried forward, or as is
  /// without a seq or after a jump), an error, or later (it waits, until `deadline`).
  Decision decide(WorkerRank src, const protocol::RankBlocks& rank, Clock::time_point deadline);
  /// The error of a waiting snapshot whose deadline passed at `now` (`timeout_ms` for the text).
  std::optional<std::string> expire(Clock::time_point now, std::int64_t timeout_ms);

 private:
  struct Pending {
    std::vector<std::uint64_t> hashes;
    std::uint64_t seq = 0;
    Clock::time_point deadline{};
  };
  std::optional<std::uint64_t> last_applied_;
  bool logging_ = false;
  bool log_broken_ = false;  // a restart or lost range while logging: compare as is
  std::vector<LoggedBatch> log_;
  std::optional<Pending> pending_;
};

}  // namespace mocker::index
