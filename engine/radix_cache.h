// RadixCache: the SGLang-style prefix cache of one DP rank (docs/engine.md, Radix cache).
//
// The token pool has N pages of `page_size` tokens. A page is free, *private* (held by one
// request, not cache-visible: uncomputed, partial, or prefix caching off) or a tree *node*. The
// tree is a radix tree over pages: a node is one complete page, its parent the previous page of
// the same sequence. Because a node's identity is its sequence hash s_i, which already
// chains the whole prefix, nodes are found through one hash → node index instead of per-node
// child maps; walking s_0, s_1, … while the index has them is the radix prefix match (edges are
// never compressed, so no split is needed). There is exactly one node per hash: a request whose
// page completes with a hash that already has a node frees its private page and shares the node.
//
// Nodes carry `lock_ref` (the number of requests holding them; a request holds its whole path,
// so ancestors of a locked node are locked) and a logical access tick. Unlocked nodes are
// *evictable*; eviction repeatedly removes the unlocked leaf with the oldest tick and produces a
// BlockRemoved for its hash. A node's creation is the caller's Stored event.
//
// Invariants (checkInvariants): free + private + nodes = N; evictable = unlocked nodes; the leaf
// set holds exactly the unlocked nodes without children; lock_ref(parent) >= lock_ref(child).
//
// Costs: match O(pages matched); lock/unlock O(1) + O(log n) leaf-set update; eviction
// O(log n) per page, O(1) while it follows a chain: a victim's parent that becomes the oldest
// unlocked leaf is evicted next without entering the leaf set (a released path — with page
// size 1, one node per token — is evicted leaf-first this way). Not thread-safe; owned by one
// rank's SglangScheduler.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/strong_id.h"
#include "engine/detail/hash_index.h"
#include "engine/types.h"

namespace mocker::engine {

class RadixCache final {
 public:
  /// Slot of a tree node; slots of evicted nodes are reused.
  using NodeId = StrongId<struct RadixNodeTag, std::uint32_t>;
  /// The (virtual) root: parent of every page-0 node. Holds no page.
  static constexpr NodeId kRoot{~std::uint32_t{0}};

  explicit RadixCache(std::uint32_t num_pages);
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  std::uint32_t numPages() const { return num_pages_; }
  std::uint32_t numFree() const { return num_free_; }
  std::uint32_t numPrivate() const { return num_private_; }
  std::uint32_t numNodes() const { return static_cast<std::uint32_t>(index_.size()); }
  /// Unlocked nodes (reclaimable by eviction).
  std::uint32_t numEvictable() const { return num_evictable_; }
  /// Private pages plus locked nodes (active_blocks of "Load metrics").
  std::uint32_t numActive() const { return num_private_ + numNodes() - num_evictable_; }

  /// Number of leading hashes that form a path of nodes from the root. Side-effect free.
  std::uint32_t matchLength(std::span<const BlockHash> hashes) const;
  /// How many of the nodes of `hashes` (a matched path) are currently unlocked.
  std::uint32_t countUnlocked(std::span<const BlockHash> hashes) const;
  /// Locks the nodes of the matched path `hashes` (REQUIRES matchLength(hashes) == size) and
  /// appends their ids to `path`.
  void lockPath(std::span<const BlockHash> hashes, std::vector<NodeId>& path);

  /// Takes `n` private pages, evicting unlocked leaves (oldest first) when free pages run out;
  /// each eviction appends a BlockRemoved to `events`. REQUIRES: n <= numFree() + numEvictable().
  void allocatePrivate(std::uint32_t n, std::vector<KvEvent>& events);
  /// Returns `n` private pages to the free pool.
  void freePrivate(std::uint32_t n);

  /// Publishes one private, now complete page with sequence hash `hash` whose previous page is
  /// node `parent` (kRoot for page 0; the caller holds it locked). If `hash` has no node, the page
  /// becomes a new node locked once (returned `created` = true ⇒ the caller emits Stored);
  /// otherwise the private page is freed and the existing node is locked instead.
  std::pair<NodeId, bool> insert(NodeId parent, BlockHash hash);

  /// Releases a request's hold on `path` (root first): marks the path accessed now (leaf-first
  /// eviction within it, least recently released first across paths) and unlocks every node.
  void releasePath(std::span<const NodeId> path);

  /// Prefetches the index slot of `hash` ahead of an insert or match of it (a hint only).
  void prefetch(BlockHash hash) const { index_.prefetch(hash.value()); }

  /// Sequence hash of a node.
  BlockHash hashOf(NodeId node) const { return at(node).hash; }
  std::uint32_t lockRef(NodeId node) const { return at(node).lock_ref; }

  /// Sorted hashes of every node.
  std::vector<BlockHash> cachedHashes() const;
  /// Drops every node without events if no page is active; false otherwise.
  bool clear();

  /// Checks the tree and pool accounting. `expected_locks` (node id → number of holders as the
  /// scheduler sees them, indexed by NodeId::value(), may be shorter) must match every lock_ref.
  Status checkInvariants(std::span<const std::uint32_t> expected_locks) const;
  /// Size of the node id space (for building `expected_locks`).
  std::size_t nodeCapacity() const { return nodes_.size(); }

 private:
  struct Node {
    BlockHash hash;
    NodeId parent = kRoot;
    std::uint32_t num_children = 0;
    std::uint32_t lock_ref = 0;
    std::uint64_t tick = 0;
    bool live = false;
    bool in_leaves = false;
  };
  struct Entry {
    std::uint32_t count = 0;  // 1 while present (HashIndex's occupancy marker)
    NodeId node;
  };

  Node& at(NodeId n) { return nodes_[n.value()]; }
  const Node& at(NodeId n) const { return nodes_[n.value()]; }
  void lock(NodeId n);
  void unlock(NodeId n);
  void addLeaf(NodeId n);
  void removeLeaf(NodeId n);
  /// Evicts `count` unlocked leaves, oldest (tick, id) first; one BlockRemoved each.
  void evict(std::uint32_t count, std::vector<KvEvent>& events);
  /// Drops unlocked leaf `victim` (already out of the leaf set); returns its parent.
  NodeId removeNode(NodeId victim, std::vector<KvEvent>& events);

  std::uint32_t num_pages_;
  std::uint32_t num_free_;
  std::uint32_t num_private_ = 0;
  std::uint32_t num_evictable_ = 0;
  std::uint64_t clock_ = 0;
  std::vector<Node> nodes_;                            // slot per node id; free slots recycled
  std::vector<NodeId> free_slots_;                     // stack
  detail::HashIndex<Entry> index_;                     // hash value → node
  std::set<std::pair<std::uint64_t, NodeId>> leaves_;  // unlocked leaves by (tick, id)
};

}  // namespace mocker::engine
