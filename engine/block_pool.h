// BlockPool: the paged KV block pool of one DP rank (docs/engine.md, KV block pool).
//
// Every physical block is Free, Private (held by one request, content not cache-visible) or
// Cached ({hash = s_i, refcount}). Active = Private or Cached with refcount > 0; Inactive =
// Cached with refcount 0: still reusable by prefix match and evictable, kept in one LRU list
// (head = evicted next). A hash may have several physical copies; a Removed event is produced
// only when the last copy is evicted, a "newly visible" result only on 0 → 1 copies.
//
// Invariants (checkInvariants):
//   1. free + active + inactive = num_blocks
//   2. the LRU list holds exactly the inactive blocks
//   3. copies[hash] = number of Cached blocks with that hash; num_active ≤ copies
//
// All operations are O(1) except evictions (O(1) each) and cachedHashes (O(blocks)).
// Not thread-safe; owned by one rank's scheduler.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/hash_index.h"
#include "base/result.h"
#include "base/strong_id.h"
#include "engine/types.h"

namespace mocker::engine {

/// Index of a physical block in one rank's pool, [0, num_blocks).
using BlockId = StrongId<struct BlockIdTag, std::uint32_t>;

class BlockPool final {
 public:
  explicit BlockPool(std::uint32_t num_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  std::uint32_t numBlocks() const { return static_cast<std::uint32_t>(blocks_.size()); }
  std::uint32_t numFree() const { return static_cast<std::uint32_t>(free_.size()); }
  std::uint32_t numInactive() const { return num_inactive_; }
  std::uint32_t numActive() const { return numBlocks() - numFree() - num_inactive_; }

  /// Number of leading hashes that have at least one cached copy (prefix lookup). No side effects.
  std::uint32_t countPrefixHits(std::span<const BlockHash> hashes) const;
  /// True if some copy of `hash` is cached with refcount > 0.
  bool hasActiveCopy(BlockHash hash) const;

  /// Claims a cached copy of `hash` for a request (prefix hit): an active copy gets refcount+1,
  /// otherwise an inactive copy leaves the LRU list with refcount 1.
  /// REQUIRES: countPrefixHits({hash}) == 1.
  BlockId claimCached(BlockHash hash);

  /// Blocks that allocatePrivate() could still provide: free + inactive.
  std::uint32_t numAllocatable() const { return numFree() + num_inactive_; }

  /// Takes a free block, evicting the LRU head first when none is free; evictions that drop the
  /// last copy of a hash append a BlockRemoved to `events` (when recording removals) and count in
  /// numRemovals(). REQUIRES: numAllocatable() >= 1.
  BlockId allocatePrivate(std::vector<KvEvent>& events);

  /// Whether allocatePrivate appends its BlockRemoved events (default on). Off: only counted.
  void setRecordRemovals(bool on) { record_removals_ = on; }
  /// Evictions so far that dropped the last copy of a hash (one BlockRemoved each when recorded).
  std::uint64_t numRemovals() const { return num_removals_; }

  /// Hints the CPU to load where `hash`'s copies are kept (finalize, claimCached and lookups of
  /// it then rarely wait for memory). No effect on contents.
  void prefetch(BlockHash hash) const { copies_.prefetch(hash.value()); }
  /// The same for `block`'s record (release, finalize). No effect on contents.
  void prefetch(BlockId block) const { __builtin_prefetch(&at(block)); }

  /// Turns a private block into a cached copy of `hash` with refcount 1. Returns true if the
  /// hash had no copy before (newly visible ⇒ the caller emits Stored).
  bool finalize(BlockId block, BlockHash hash);

  /// Releases one reference: private ⇒ free; cached ⇒ refcount−1, appended to the LRU tail at 0.
  void release(BlockId block);

  /// True if `block` is private (allocated, not yet cache-visible).
  bool isPrivate(BlockId block) const { return at(block).state == State::Private; }

  /// Sorted hashes with at least one cached copy (active or inactive).
  std::vector<BlockHash> cachedHashes() const;

  /// Drops every cached block (no events) if no block is active; false otherwise.
  bool clearCache();

  Status checkInvariants() const;

 private:
  enum class State : std::uint8_t { Free, Private, Cached };
  static constexpr BlockId kNil{~std::uint32_t{0}};

  struct Block {
    BlockHash hash;
    std::uint32_t refcount = 0;
    State state = State::Free;
    BlockId lru_prev = kNil;
    BlockId lru_next = kNil;
    BlockId copy_next = kNil;  // singly linked list of copies of the same hash
  };
  struct Copies {
    BlockId head = kNil;
    std::uint32_t count = 0;
    std::uint32_t num_active = 0;
  };

  Block& at(BlockId b) { return blocks_[b.value()]; }
  const Block& at(BlockId b) const { return blocks_[b.value()]; }

  void lruAppend(BlockId b);
  void lruRemove(BlockId b);
  void unlinkCopy(BlockId b);
  /// Eviction walks the LRU list from its head, each victim a record and a hash slot at random:
  /// a cursor kept kEvictAhead victims ahead of the head prefetches both (a hint only; the
  /// cursor restarts from the head when its block leaves the list).
  void prefetchEvictions();

  std::vector<Block> blocks_;
  std::vector<BlockId> free_;  // stack; top = next allocated
  BlockId lru_head_ = kNil;
  BlockId lru_tail_ = kNil;
  std::uint32_t num_inactive_ = 0;
  BlockId evict_cursor_ = kNil;  // an inactive block at most evict_lag_ steps after the head
  std::uint32_t evict_lag_ = 0;
  std::uint64_t num_removals_ = 0;
  bool record_removals_ = true;
  HashIndex<Copies> copies_;  // hash value → copies; lookup only, cachedHashes() sorts
};

}  // namespace mocker::engine
