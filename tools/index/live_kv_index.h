// LiveKvIndex: a kv router's view of running `mocker serve` caches — the IndexService of
// `mocker index` (tools/index/index_service.h: a KvIndex fed by every rank's KV events, with
// per-rank gap healing through the replay ROUTER and resync from kv_snapshot) running on a thread
// of its own, and a DEALER that asks its query ROUTER (bound on an ephemeral loopback port) how
// many leading blocks of a prompt each (server, rank) caches. Used by `mocker replay --mode live
// --router kv` (tools/replay/live_replay.h); any in-process router can use it the same way.
//
// Sources: server s of the config is worker_id s; its ranks 0..ranks-1 are the dp_ranks.
// Results are laid out by global rank index: the servers in config order, each one's ranks in
// order (liveKvRankOffsets()).
//
// Thread-safety: start(), waitCaughtUp(), overlaps() and destruction on one thread (the caller's;
// the query socket is not shared); stats() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "protocol/index_query.h"
#include "tools/index/index_service.h"

namespace mocker::index {

/// One running `mocker serve` the index follows: its submit endpoint (kv_snapshot for a resync;
/// also names the server in errors), its KV-event PUB and replay ROUTER endpoints (one per DP
/// rank, or only rank 0's: rank r then uses port + r), and how many DP ranks it runs.
struct LiveKvServer {
  std::string submit_endpoint;
  std::vector<std::string> kv_events{};
  std::vector<std::string> kv_replay{};
  std::uint32_t ranks = 1;
};

struct LiveKvIndexConfig {
  std::vector<LiveKvServer> servers{};
  std::uint32_t block_size = 0;  ///< the servers' KV block size (> 0)
  engine::HashSeeds seeds{};     ///< the servers' hash seeds
  /// How long one overlap query may take before it fails (the caller then routes as if
  /// nothing were cached).
  std::chrono::milliseconds query_timeout{1000};
};

/// The index's subscriptions for `servers`: one WorkerEndpoint per (server s, rank r), worker_id
/// s, dp_rank r, snapshot = the submit endpoint, in global rank order. Errors (naming the server):
/// no KV-event or no replay endpoint, more ranks than endpoints given (when more than one), an
/// endpoint that cannot be offset by the rank (offsetEndpoint).
Result<std::vector<WorkerEndpoint>> liveKvSubscriptions(const std::vector<LiveKvServer>& servers);

/// Global rank index of server s's rank 0: the ranks of servers 0..s-1 summed.
std::vector<std::uint32_t> liveKvRankOffsets(const std::vector<LiveKvServer>& servers);

/// Spreads an overlap reply over global rank indices: overlaps[offset[w] + r] = the leading
/// blocks (worker w, rank r) caches, cached[...] = the blocks the index holds for it (0 when the
/// reply does not say). Everything else is 0; workers and ranks outside the layout are ignored.
/// `overlaps` and `cached` have one entry per global rank.
void spreadOverlaps(const OverlapReply& reply, const std::vector<LiveKvServer>& servers,
                    std::span<std::uint32_t> overlaps, std::span<std::uint64_t> cached);

class LiveKvIndex final {
 public:
  using Clock = std::chrono::steady_clock;

  /// Creates the IndexService (subscribed to every rank of every server), starts its thread and
  /// connects the query DEALER. Errors: an empty server list, a block size of 0, those of
  /// liveKvSubscriptions, and sockets that cannot be created (IndexService::create).
  static Result<std::unique_ptr<LiveKvIndex>> start(LiveKvIndexConfig config);
  /// Stops the service thread and joins it.
  ~LiveKvIndex();
  LiveKvIndex(const LiveKvIndex&) = delete;
  LiveKvIndex& operator=(const LiveKvIndex&) = delete;

  /// Waits until every subscription finished its initial replay (what the servers published
  /// before is in the index), at most until `deadline`. Error: not caught up by then (naming
  /// the likely cause), no answer from the index.
  Status waitCaughtUp(Clock::time_point deadline);

  /// The leading cached blocks of `hashes` per global rank, into `overlaps`, and the blocks the
  /// index holds for each, into `cached` (both resized to numRanks(); spreadOverlaps). An empty
  /// `hashes` (a prompt shorter than a block) is still asked: the cache sizes break ties.
  /// Errors: no answer within query_timeout, an error reply (both outputs are then all 0).
  Status overlaps(std::span<const std::uint64_t> hashes, std::vector<std::uint32_t>& overlaps,
                  std::vector<std::uint64_t>& cached);

  /// (server, rank) pairs in global rank order.
  std::uint32_t numRanks() const;
  /// The IndexService's counters (gaps detected / healed, resyncs, batches applied, ...).
  IndexStats stats() const;

 private:
  class Impl;
  explicit LiveKvIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mocker::index
