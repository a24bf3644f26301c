// What `mocker index`'s query ROUTER answers without touching a socket (tools/index/README.md,
// "Query protocol"): the overlap reply from the index, and the stats counters (statsCounters,
// declared in index_service.h, is defined here).
#pragma once

#include <cstdint>
#include <span>

#include "engine/block_hash.h"
#include "protocol/index_query.h"
#include "tools/index/tiered_kv_index.h"
#include "tools/index/worker_spec.h"

namespace mocker::index {

/// The command line's defaults for token queries.
struct QueryDefaults {
  std::uint32_t block_size = 64;
  engine::HashSeeds seeds;
};

/// The overlap reply: every configured worker (`workers`) and every worker the index has seen,
/// ascending id, each with the leading blocks it holds (max over its ranks) and per-rank entries
/// in rank order (with the rank's cache size when the query asks `with_cached`). Overlaps are
/// the GPU view's; a `tiers` query adds each rank's prefix per tier (TieredKvIndex::
/// offloadedRun), and ranks known only to the host or disk view.
OverlapReply answerOverlap(const TieredKvIndex& index, const OverlapQuery& query,
                           const QueryDefaults& defaults, std::span<const WorkerEndpoint> workers);

}  // namespace mocker::index
