// The socket-free parts of `mocker index --verify` (tools/index/README.md, Verify): a worker's
// kv_snapshot carried forward to the index's position through the batches logged since it was
// asked for, one source's comparison, and the reply's final form. The service (index_service.cpp)
// sends the requests, logs the batches and decides when to compare.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/result.h"
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

}  // namespace mocker::index
