// RadixCache: the SGLang-style prefix cache of one DP rank (docs/engine.md, Radix cache).
//
// The token pool has N pages of `page_size` tokens. A page is free, *private* (held by one
// request, not cache-visible: uncomputed, partial, or prefix caching off) or *cached* (in the
// tree). The tree is a compressed radix tree over pages, as SGLang's RadixCache: a node holds a
// run of consecutive pages of one sequence (its edge), and a run is split where sequences
// diverge. A cached page's identity is its key: its sequence hash s_i, which already chains the
// whole prefix, or with token keys (page size 1, SGLang's own keying) its token under its parent
// page (page 0: s_0). A node's children are found through one index from a node's *first* page
// key (mixed with the parent node for a token) to the node (one entry per node, not per page);
// inside a node the walk compares the run's keys in order. There is exactly one cached page per
// identity: a request whose page completes with one that is already cached frees its private page
// and shares the cached one. Token keys are used only while no BlockRemoved is recorded, so no
// sequence hash is stored: snapshots derive them from the keys.
//
// Every cached page has a `lock` (the number of requests holding it; a request holds its whole
// path, so along a path locks never grow with depth) and a logical access tick. Unlocked pages
// are *evictable*; eviction repeatedly removes the unlocked leaf page (the last page of a node
// without children) with the oldest tick and produces a BlockRemoved for its hash. A page's
// creation is the caller's Stored event. This is exactly the page-granular LRU-of-leaves order
// of an uncompressed tree (ticks are unique, so no tie-break is ever needed); compressing runs
// only changes the cost: with page size 1 one request's prompt is one node, not 40,000.
// Neither is stored per page. A holder covers a prefix [0, end) of every run it enters, so a
// run keeps its holders' ends (page i's lock = holders whose end > i; the pages from the
// largest end on are the unlocked ones), and every operation gives a range of a run
// consecutive ticks, so a run keeps segments of consecutive ticks (tick = base + offset).
// Locking, inserting and releasing a path therefore cost O(1) per run on it, not per page.
//
// Invariants (checkInvariants): free + private + cached = N; evictable = unlocked pages; the leaf
// set holds exactly the nodes without children whose last page is unlocked; locks never grow
// along a path; every node but the root holds >= 1 page.
//
// Costs: match O(pages on the path) (hash compares, sequential within a node), lock and release
// O(runs on the path × their holders' ends and tick segments), plus one index lookup per node;
// inserting pages appends their hashes, plus O(run) for a split (the split node's hashes are
// moved once); eviction takes every page of a leaf's last tick segment in one step (one
// BlockRemoved each when recorded), O(log n) per leaf-set update. Not thread-safe; owned by one
// rank's SglangScheduler.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "base/hash_index.h"
#include "base/result.h"
#include "base/strong_id.h"
#include "engine/block_hash.h"
#include "engine/types.h"

namespace mocker::engine {

class RadixCache final {
 public:
  /// Slot of a tree node; slots of removed nodes are reused.
  using NodeId = StrongId<struct RadixNodeTag, std::uint32_t>;
  /// The root: parent of every node that starts at page 0. Holds no page.
  static constexpr NodeId kRoot{0};
  /// One cached page: `offset` within `node`'s run, or the root itself (node kRoot). Valid until
  /// the next call that changes the tree (insertRun() keeps the ref it advances valid).
  struct PageRef {
    NodeId node = kRoot;
    std::uint32_t offset = 0;
  };

  /// Keyed by sequence hashes: a page's key is its sequence hash s_i. With `token_keys` (page
  /// size 1 only) the cache becomes keyed by tokens when removal recording is switched off while
  /// it is empty: page i > 0 of a path then has the key BlockHash{t_i} (its token), page 0 its
  /// sequence hash s_0 (which carries the request's LoRA adapter); a page is identified by its
  /// parent page and its key, as in SGLang's token-keyed RadixCache. Sequence hashes are then
  /// needed only for snapshots and derived with the seeds (hash and chain seed; the adapter is
  /// in s_0); switching recording back on re-keys the tree by sequence hashes (O(pool)).
  explicit RadixCache(std::uint32_t num_pages,
                      const std::optional<HashSeeds>& token_keys = std::nullopt);
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  std::uint32_t numPages() const { return num_pages_; }
  std::uint32_t numFree() const { return num_free_; }
  std::uint32_t numPrivate() const { return num_private_; }
  /// Pages in the tree.
  std::uint32_t numCached() const { return num_cached_; }
  /// Unlocked cached pages (reclaimable by eviction).
  std::uint32_t numEvictable() const { return num_evictable_; }
  /// Private pages plus locked cached pages (active_blocks of "Load metrics").
  std::uint32_t numActive() const { return num_private_ + num_cached_ - num_evictable_; }

  // Below, a path's `hashes` are its pages' keys: the sequence hashes, or with token keys s_0
  // followed by the tokens.

  /// Number of leading hashes that form a path of cached pages from the root. Side-effect free.
  std::uint32_t matchLength(std::span<const BlockHash> hashes) const;
  /// How many of the pages of `hashes` (a matched path) are currently unlocked.
  std::uint32_t countUnlocked(std::span<const BlockHash> hashes) const;
  /// Locks the pages of the matched path `hashes` (REQUIRES matchLength(hashes) == size), root
  /// first, marking each accessed now.
  void lockPath(std::span<const BlockHash> hashes);
  /// The last page of the cached path `hashes` (the root if empty). REQUIRES: matched.
  PageRef locate(std::span<const BlockHash> hashes) const;

  /// Takes `n` private pages, evicting unlocked leaves (oldest first) when free pages run out;
  /// each eviction appends a BlockRemoved to `events` (unless recording is off, below).
  /// REQUIRES: n <= numFree() + numEvictable().
  void allocatePrivate(std::uint32_t n, std::vector<KvEvent>& events);
  /// Whether evictions append BlockRemoved events (default on); the tree is the same either way.
  /// With `token_keys` (constructor): off on an empty cache switches to token keys, on re-keys a
  /// token-keyed tree by sequence hashes.
  void setRecordRemovals(bool on);
  /// Whether the keys are currently tokens (then removals are never recorded).
  bool tokenKeyed() const { return token_keyed_; }
  /// Pages evicted since construction (counted whether or not they are recorded).
  std::uint64_t numEvicted() const { return num_evicted_; }
  /// Returns `n` private pages to the free pool.
  void freePrivate(std::uint32_t n);

  /// Publishes private, now complete pages with sequence hashes `hashes` (non-empty) that follow
  /// page `parent` (the root for page 0; the caller holds it locked): takes the longest leading
  /// run of them that is either all new or all already cached and returns its length. New pages
  /// become cached, locked once (`created` = true ⇒ the caller emits Stored); for cached ones the
  /// private pages are freed and the cached pages are locked instead. Either way each page is
  /// marked accessed now, in order. `parent` advances to the run's last page. `expected` (a
  /// capacity hint, no effect on the tree) is how many pages the caller expects to publish in
  /// all from `hashes` on, so a run that later chunks extend is allocated once.
  std::uint32_t insertRun(PageRef& parent, std::span<const BlockHash> hashes, bool& created,
                          std::uint32_t expected = 0);
  /// insertRun() of one page; returns `created`.
  bool insert(PageRef& parent, BlockHash hash) {
    bool created = false;
    insertRun(parent, std::span(&hash, 1), created);
    return created;
  }

  /// Releases a request's hold on its cached path `hashes` (root first): marks the path accessed
  /// now (leaf-first eviction within it, least recently released first across paths) and
  /// unlocks every page.
  void releasePath(std::span<const BlockHash> hashes);

  /// Sorted sequence hashes of every cached page (token keys: derived, O(pool)).
  std::vector<BlockHash> cachedHashes() const;
  /// Drops every cached page without events if no page is active; false otherwise.
  bool clear();

  /// Checks the tree and pool accounting. `held` is every holder's cached path (a request holds
  /// each page of its path once); every page's lock must equal the number of paths through it.
  Status checkInvariants(std::span<const std::span<const BlockHash>> held) const;

 private:
  // Ticks of a run's pages, in segments of consecutive ticks: page i of [start, next start)
  // has tick base + (i − start). Locking, inserting or releasing a path assigns consecutive
  // ticks to a range of a run, so one call adds at most two segments whatever the pages.
  struct TickSegment {
    std::uint32_t start = 0;
    std::uint64_t base = 0;
  };
  // Locks of a run as the ends of the paths holding it: a holder covers pages [0, end) (a
  // path is a prefix of each run it enters), so page i's lock is Σ count over ends > i and the
  // pages from the largest end on are the unlocked ones.
  struct LockEnd {
    std::uint32_t end = 0;
    std::uint32_t count = 0;
  };
  struct Node {
    NodeId parent = kRoot;
    std::uint32_t num_children = 0;
    bool live = false;
    bool in_leaves = false;
    std::vector<BlockHash> hashes;   // the run's page keys, root side first
    std::vector<TickSegment> ticks;  // by start; covers [0, size) when non-empty
    std::vector<LockEnd> locks;      // by end, counts > 0, ends <= size

    std::uint32_t size() const { return static_cast<std::uint32_t>(hashes.size()); }
    /// Pages [0, lockedEnd()) are locked, the rest unlocked.
    std::uint32_t lockedEnd() const { return locks.empty() ? 0 : locks.back().end; }
    std::uint64_t lastTick() const { return ticks.back().base + (size() - 1 - ticks.back().start); }
  };
  struct Entry {
    std::uint32_t count = 0;  // 1 while present (HashIndex's occupancy marker)
    NodeId node;
  };
  // A run of one path's pages inside one node.
  struct Segment {
    NodeId node;
    std::uint32_t begin;
    std::uint32_t end;
  };
  using LeafKey = std::pair<std::uint64_t, NodeId>;
  static constexpr std::size_t kKeptCapacity = 64;  // pages a free node slot may keep allocated

  Node& at(NodeId n) { return nodes_[n.value()]; }
  const Node& at(NodeId n) const { return nodes_[n.value()]; }
  /// The child of `parent` whose run starts with `hash`, if any.
  bool findChild(NodeId parent, BlockHash hash, NodeId& child) const;
  /// The index key of a run under `parent` whose first page key is `first`: the key itself when
  /// it is a sequence hash (page 0 with token keys, every page otherwise), else a bijective mix
  /// of (parent, token) (uniform low bits for the index's slots).
  std::uint64_t indexKey(NodeId parent, BlockHash first) const;
  /// Token keys: every live node's sequence hashes by slot (derived from the keys).
  std::vector<std::vector<BlockHash>> deriveHashes() const;
  /// Calls f(Segment) for the per-node runs of the cached path `hashes`, root first, and returns
  /// how many leading hashes are cached: with `compare`, the walk stops at the first hash that
  /// is not; without, the path is trusted (REQUIRES: cached) and only node starts are looked up.
  template <typename F>
  std::uint32_t walk(std::span<const BlockHash> hashes, bool compare, F&& f) const;
  /// A holder's lock on `n` grows from pages [0, from) (0: it held none of `n`) to [0, to);
  /// pages it makes locked leave the evictable count (and `n` the leaf set).
  void lockRange(NodeId n, std::uint32_t from, std::uint32_t to);
  /// A holder of pages [0, end) of `n` lets go; pages left unlocked become evictable.
  void unlockRange(NodeId n, std::uint32_t end);
  /// Pages [from, from + count) of `n` get ticks clock_ + 1, clock_ + 2, …; the clock advances.
  void assignTicks(NodeId n, std::uint32_t from, std::uint32_t count);
  LeafKey leafKey(NodeId n) const { return {at(n).lastTick(), n}; }
  void addLeaf(NodeId n);
  void removeLeaf(NodeId n);
  NodeId newNode(NodeId parent);
  /// Moves pages [0, at) of `n` into a new node that becomes `n`'s parent; returns it.
  NodeId splitBefore(NodeId n, std::uint32_t at);
  /// Locks pages [from, from + n) of `node` (cached copies of a caller's private pages, which
  /// are freed) and marks them accessed; returns n.
  std::uint32_t share(NodeId node, std::uint32_t from, std::uint32_t n);
  /// Evicts `count` unlocked leaf pages, oldest tick first; one BlockRemoved each.
  void evict(std::uint32_t count, std::vector<KvEvent>& events);
  /// Drops the last `count` pages of unlocked leaf node `victim` (out of the leaf set; the
  /// pages are unlocked). Returns the node that holds the last remaining page's parent page (the
  /// same node unless it became empty, then its parent, whose child count is decremented).
  NodeId removeLastPages(NodeId victim, std::uint32_t count, std::vector<KvEvent>& events);

  std::uint32_t num_pages_;
  std::uint32_t num_free_;
  std::uint32_t num_private_ = 0;
  std::uint32_t num_cached_ = 0;
  std::uint32_t num_evictable_ = 0;
  std::uint64_t clock_ = 0;
  std::uint64_t num_evicted_ = 0;
  bool record_removals_ = true;
  std::optional<HashSeeds> token_seeds_;  // set: token keys are allowed (page size 1)
  bool token_keyed_ = false;
  std::vector<Node> nodes_;         // slot per node id (slot 0: the root); free slots recycled
  std::vector<NodeId> free_slots_;  // stack
  HashIndex<Entry> index_;          // first page hash of a node → node
  std::set<LeafKey> leaves_;        // nodes whose last page is an unlocked leaf, by (tick, id)
  std::vector<Segment> segments_;   // scratch of releasePath
};

}  // namespace mocker::engine
