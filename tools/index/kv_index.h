// KvIndex: which (worker, dp_rank) holds which KV block — the prefix index a KV-aware router
// keeps, rebuilt from the workers' KV events (docs/engine.md, KV block pool; docs/wire.md).
// Used in-process by the offline replay's `kv` router and by `mocker index` (ZMQ subscriber).
//
// Design: a hash-chain map. A block's identity is its sequence hash s_i, which already encodes
// the whole prefix before it (docs/engine.md), so a flat map hash → set of sources answers prefix
// queries without a tree: a request's overlap with a source is the number of leading hashes
// s_0, s_1, … that the source holds. Sources are numbered densely in order of first sight; an
// owner set is a 64-bit mask for the first 64 sources plus a sorted overflow list beyond.
// The map is open addressing with linear probing and backward-shift deletion; applying an event
// costs one probe per block hash.
//
// Event semantics (per source):
//   Stored  → each hash becomes held by the source (already held ⇒ duplicate_stores counter);
//             a parent hash the source does not hold is counted, not rejected.
//   Removed → each hash stops being held (not held ⇒ unknown_removes counter).
//   Cleared → the source holds nothing.
// Bad or out-of-order input never aborts; it shows up in the counters and in diffSnapshot().
//
// Not thread-safe. Owned by one thread (the replay loop or the index service's thread).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_hash.h"
#include "engine/types.h"

namespace mocker::index {

/// One KV-event stream: a worker and one of its data-parallel ranks.
struct WorkerRank {
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  friend auto operator<=>(const WorkerRank&, const WorkerRank&) = default;
};

/// A source's cached-prefix overlap with a query, in blocks.
struct Overlap {
  WorkerRank source{};
  std::uint32_t blocks = 0;
  friend bool operator==(const Overlap&, const Overlap&) = default;
};

/// Cumulative counters since construction.
struct KvIndexCounters {
  std::uint64_t events_applied = 0;  ///< Stored + Removed + Cleared events
  std::uint64_t stored_events = 0;
  std::uint64_t removed_events = 0;
  std::uint64_t cleared_events = 0;
  std::uint64_t blocks_stored = 0;   ///< (hash, source) pairs added
  std::uint64_t blocks_removed = 0;  ///< (hash, source) pairs dropped by Removed
  std::uint64_t duplicate_stores = 0;
  std::uint64_t unknown_removes = 0;
  std::uint64_t stored_with_unknown_parent = 0;
  friend bool operator==(const KvIndexCounters&, const KvIndexCounters&) = default;
};

class KvIndex final {
 public:
  KvIndex();
  ~KvIndex();
  KvIndex(const KvIndex&) = delete;
  KvIndex& operator=(const KvIndex&) = delete;
  KvIndex(KvIndex&&) noexcept;
  KvIndex& operator=(KvIndex&&) noexcept;

  /// Dense index of `source`, registering it if new. Registration order fixes the order of
  /// sources() and of every overlap result; callers that want a fixed order register up front.
  std::uint32_t registerSource(WorkerRank source);
  /// Dense index of a registered source.
  std::optional<std::uint32_t> sourceIndex(WorkerRank source) const;
  /// Every registered source, in dense-index order.
  const std::vector<WorkerRank>& sources() const { return sources_; }

  void applyStored(WorkerRank source, std::span<const std::uint64_t> block_hashes,
                   std::optional<std::uint64_t> parent_block_hash);
  void applyRemoved(WorkerRank source, std::span<const std::uint64_t> block_hashes);
  void applyCleared(WorkerRank source);
  /// Applies one engine KV event (the in-process form of the wire event).
  void apply(const engine::KvEvent& event, WorkerRank source);

  /// Hints the CPU to load the slot a later apply() of `hash` probes first (no effect on the
  /// index): a caller applying many one-hash events looks a few ahead, so the table's cache
  /// misses overlap instead of following one another.
  void prefetch(std::uint64_t hash) const { __builtin_prefetch(&table_[home(hash)]); }
  /// Hashes ahead of the one being applied that a span's loop prefetches.
  static constexpr std::size_t kPrefetchAhead = 8;

  /// Forgets every rank of `worker_id` (its blocks; the sources stay registered, empty).
  void removeWorker(std::uint64_t worker_id);

  /// Leading blocks of `block_hashes` (sequence hashes s_0, s_1, …) each source holds, one
  /// entry per registered source in dense order (0 for sources holding none).
  std::vector<Overlap> overlapsByHashes(std::span<const std::uint64_t> block_hashes) const;
  /// Same, from a token sequence: hashes its full blocks with `block_size` and `seeds`
  /// (engine/block_hash.h) first. REQUIRES: block_size >= 1.
  std::vector<Overlap> overlapsByTokens(std::span<const std::uint32_t> tokens,
                                        std::uint32_t block_size,
                                        const engine::HashSeeds& seeds) const;
  /// Hot-path form of overlapsByHashes: `blocks_by_source` is resized to sources().size() and
  /// filled by dense source index. No allocation once the vector has its size.
  void overlapBlocks(std::span<const std::uint64_t> block_hashes,
                     std::vector<std::uint32_t>& blocks_by_source) const;
  /// Per worker: the largest overlap over its ranks, ordered by worker id.
  static std::map<std::uint64_t, std::uint32_t> perWorker(const std::vector<Overlap>& overlaps);

  /// Sorted hashes `source` holds (empty for an unknown source): compare with the worker's
  /// kv_snapshot / Engine::cachedBlockHashes for `--verify`.
  std::vector<std::uint64_t> snapshot(WorkerRank source) const;
  /// Blocks `source` holds.
  std::uint64_t numBlocks(WorkerRank source) const;
  /// Whether `source` holds `hash` (false for an unknown source).
  bool holds(WorkerRank source, std::uint64_t hash) const;
  /// Σ over sources of blocks held ((hash, source) pairs).
  std::uint64_t numBlocksIndexed() const { return num_pairs_; }
  /// Distinct hashes held by at least one source.
  std::uint64_t numDistinctHashes() const { return size_; }
  const KvIndexCounters& counters() const { return counters_; }

 private:
  static constexpr std::uint32_t kNoOverflow = 0xFFFF'FFFFu;
  struct Entry {
    std::uint64_t hash = 0;
    std::uint64_t mask = 0;                ///< sources 0..63
    std::uint32_t overflow = kNoOverflow;  ///< index into overflow_ (sources >= 64)
    bool occupied() const { return mask != 0 || overflow != kNoOverflow; }
  };

  std::size_t home(std::uint64_t hash) const;
  Entry* find(std::uint64_t hash);
  const Entry* find(std::uint64_t hash) const;
  Entry& findOrInsert(std::uint64_t hash);
  void eraseAt(std::size_t slot);
  void grow();
  bool addOwner(Entry& e, std::uint32_t source);
  bool removeOwner(Entry& e, std::uint32_t source);
  bool holds(const Entry& e, std::uint32_t source) const;
  /// Drops every source for which `drop(source)` is true from every entry (rebuilds the table).
  template <typename Pred>
  void dropSources(Pred drop);

  std::vector<Entry> table_;
  std::size_t mask_ = 0;
  int shift_ = 0;
  std::size_t size_ = 0;  ///< occupied entries
  std::vector<std::vector<std::uint32_t>> overflow_;
  std::vector<std::uint32_t> free_overflow_;
  std::vector<WorkerRank> sources_;
  std::map<WorkerRank, std::uint32_t> source_ids_;
  std::vector<std::uint64_t> blocks_per_source_;
  std::uint64_t num_pairs_ = 0;
  KvIndexCounters counters_;
};

/// Difference between the index and a worker's own list of cached hashes (--verify).
struct SnapshotDiff {
  std::vector<std::uint64_t> missing_in_index;  ///< the worker holds it, the index does not
  std::vector<std::uint64_t> extra_in_index;    ///< the index has it, the worker does not
  bool empty() const { return missing_in_index.empty() && extra_in_index.empty(); }
};
/// `worker_hashes` need not be sorted or unique.
SnapshotDiff diffSnapshot(const KvIndex& index, WorkerRank source,
                          std::vector<std::uint64_t> worker_hashes);

}  // namespace mocker::index
