#include "engine/radix_cache.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace mocker::engine {

RadixCache::RadixCache(std::uint32_t num_pages)
    : num_pages_(num_pages), num_free_(num_pages), index_(num_pages) {
  // Nothing is sized by num_pages: node slots and the hash index grow with the pages that are
  // actually cached, so an idle pool of 1 Mi pages costs almost nothing.
}

std::uint32_t RadixCache::matchLength(std::span<const BlockHash> hashes) const {
  std::uint32_t n = 0;
  for (BlockHash h : hashes) {
    if (index_.find(h.value()) == nullptr) break;
    ++n;
  }
  return n;
}

std::uint32_t RadixCache::countUnlocked(std::span<const BlockHash> hashes) const {
  std::uint32_t n = 0;
  for (BlockHash h : hashes) {
    const Entry* e = index_.find(h.value());
    MOCKER_CHECK(e != nullptr);
    if (at(e->node).lock_ref == 0) ++n;
  }
  return n;
}

void RadixCache::lockPath(std::span<const BlockHash> hashes, std::vector<NodeId>& path) {
  for (BlockHash h : hashes) {
    const Entry* e = index_.find(h.value());
    MOCKER_CHECK(e != nullptr);
    lock(e->node);  // leaves the leaf set (keyed by the old tick) before the tick changes
    at(e->node).tick = ++clock_;
    path.push_back(e->node);
  }
}

void RadixCache::lock(NodeId n) {
  Node& node = at(n);
  if (node.lock_ref++ == 0) {
    --num_evictable_;
    if (node.in_leaves) removeLeaf(n);
  }
}

void RadixCache::unlock(NodeId n) {
  Node& node = at(n);
  MOCKER_CHECK(node.lock_ref > 0);
  if (--node.lock_ref == 0) {
    ++num_evictable_;
    if (node.num_children == 0) addLeaf(n);
  }
}

void RadixCache::addLeaf(NodeId n) {
  at(n).in_leaves = true;
  leaves_.emplace(at(n).tick, n);
}

void RadixCache::removeLeaf(NodeId n) {
  at(n).in_leaves = false;
  leaves_.erase({at(n).tick, n});
}

void RadixCache::allocatePrivate(std::uint32_t n, std::vector<KvEvent>& events) {
  MOCKER_CHECK(n <= num_free_ + num_evictable_);
  if (num_free_ < n) evict(n - num_free_, events);
  num_free_ -= n;
  num_private_ += n;
}

void RadixCache::freePrivate(std::uint32_t n) {
  MOCKER_CHECK(n <= num_private_);
  num_private_ -= n;
  num_free_ += n;
}

void RadixCache::evict(std::uint32_t count, std::vector<KvEvent>& events) {
  while (count > 0) {
    MOCKER_CHECK(!leaves_.empty());
    // The set node is taken out and reused for the leaf a victim's parent may become, so the
    // common chain (a released path evicted leaf-first) allocates nothing.
    auto handle = leaves_.extract(leaves_.begin());
    NodeId victim = handle.value().second;
    at(victim).in_leaves = false;
    for (;;) {
      const NodeId parent = removeNode(victim, events);
      --count;
      if (parent == kRoot) break;
      Node& p = at(parent);
      if (--p.num_children != 0 || p.lock_ref != 0) break;
      // `parent` is now an unlocked leaf. If it is older than every leaf in the set it is the
      // very next victim: evict it directly instead of passing it through the set.
      const std::pair<std::uint64_t, NodeId> key{p.tick, parent};
      if (count > 0 && (leaves_.empty() || key < *leaves_.begin())) {
        victim = parent;
        continue;
      }
      p.in_leaves = true;
      handle.value() = key;
      leaves_.insert(std::move(handle));
      break;
    }
  }
}

RadixCache::NodeId RadixCache::removeNode(NodeId victim, std::vector<KvEvent>& events) {
  Node& v = at(victim);
  const BlockHash hash = v.hash;
  const NodeId parent = v.parent;
  index_.erase(hash.value());
  events.emplace_back(BlockRemoved{hash.value()});
  v = Node{};
  free_slots_.push_back(victim);
  --num_evictable_;
  ++num_free_;
  return parent;
}

std::pair<RadixCache::NodeId, bool> RadixCache::insert(NodeId parent, BlockHash hash) {
  MOCKER_CHECK(num_private_ > 0);
  MOCKER_CHECK(parent == kRoot || at(parent).lock_ref > 0);
  auto [entry, inserted] = index_.findOrInsert(hash.value());
  if (!inserted) {
    // A copy is already visible: share it and give the duplicate page back.
    const NodeId existing = entry->node;
    lock(existing);
    at(existing).tick = ++clock_;
    freePrivate(1);
    return {existing, false};
  }
  NodeId id;
  if (!free_slots_.empty()) {
    id = free_slots_.back();
    free_slots_.pop_back();
  } else {
    id = NodeId{static_cast<std::uint32_t>(nodes_.size())};
    nodes_.emplace_back();
  }
  entry->count = 1;
  entry->node = id;
  Node& node = at(id);
  node = Node{};
  node.hash = hash;
  node.parent = parent;
  node.lock_ref = 1;
  node.tick = ++clock_;
  node.live = true;
  if (parent != kRoot) {
    Node& p = at(parent);
    MOCKER_DCHECK(!p.in_leaves);  // locked by the inserting request
    ++p.num_children;
  }
  --num_private_;
  return {id, true};
}

void RadixCache::releasePath(std::span<const NodeId> path) {
  for (NodeId n : path) at(n).tick = ++clock_;
  for (std::size_t i = path.size(); i-- > 0;) unlock(path[i]);
}

std::vector<BlockHash> RadixCache::cachedHashes() const {
  std::vector<BlockHash> out;
  out.reserve(index_.size());
  index_.forEach([&](std::uint64_t hash, const Entry&) { out.push_back(BlockHash{hash}); });
  std::sort(out.begin(), out.end());
  return out;
}

bool RadixCache::clear() {
  if (numActive() != 0) return false;
  index_.clear();
  nodes_.clear();
  free_slots_.clear();
  leaves_.clear();
  num_free_ = num_pages_;
  num_evictable_ = 0;
  return true;
}

Status RadixCache::checkInvariants(std::span<const std::uint32_t> expected_locks) const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "radix cache invariant: " + what};
  };
  std::uint32_t live = 0, unlocked = 0, leaves = 0;
  std::vector<std::uint32_t> children(nodes_.size(), 0);
  const auto num_slots = static_cast<std::uint32_t>(nodes_.size());
  for (std::uint32_t slot = 0; slot < num_slots; ++slot) {
    const NodeId id{slot};
    const Node& n = at(id);
    if (!n.live) continue;
    ++live;
    const Entry* e = index_.find(n.hash.value());
    if (e == nullptr || e->node != id) return fail("node missing from the hash index");
    if (n.parent != kRoot) {
      if (n.parent.value() >= num_slots || !at(n.parent).live) return fail("dangling parent");
      if (at(n.parent).lock_ref < n.lock_ref) return fail("parent less locked than child");
      ++children[n.parent.value()];
    }
    const std::uint32_t expected = slot < expected_locks.size() ? expected_locks[slot] : 0;
    if (n.lock_ref != expected) {
      return fail("lock_ref " + std::to_string(n.lock_ref) + " != holders " +
                  std::to_string(expected));
    }
  }
  for (std::uint32_t slot = 0; slot < num_slots; ++slot) {
    const NodeId id{slot};
    const Node& n = at(id);
    if (!n.live) continue;
    if (children[slot] != n.num_children) return fail("child count mismatch");
    const bool unlocked_leaf = n.lock_ref == 0 && n.num_children == 0;
    if (n.lock_ref == 0) ++unlocked;
    if (unlocked_leaf != n.in_leaves) return fail("leaf set membership mismatch");
    if (unlocked_leaf) {
      ++leaves;
      if (!leaves_.contains({n.tick, id})) return fail("leaf set key mismatch");
    }
  }
  if (live != index_.size()) return fail("hash index size != live nodes");
  if (leaves != leaves_.size()) return fail("leaf set size mismatch");
  if (unlocked != num_evictable_) return fail("evictable count mismatch");
  if (std::uint64_t{num_free_} + num_private_ + live != num_pages_) {
    return fail("free + private + nodes != pages");
  }
  return {};
}

}  // namespace mocker::engine
