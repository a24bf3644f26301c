#include "engine/radix_cache.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "base/check.h"

namespace mocker::engine {

RadixCache::RadixCache(std::uint32_t num_pages, const std::optional<HashSeeds>& token_keys)
    : num_pages_(num_pages), num_free_(num_pages), index_(num_pages) {
  // Hash keys until recording is switched off while empty (setRecordRemovals).
  if (token_keys) token_seeds_ = HashSeeds{token_keys->hash_seed, token_keys->chain_seed, {}};
  // Nothing is sized by num_pages: nodes and the index grow with the runs actually cached, so an
  // idle pool of 1 Mi pages costs almost nothing.
  nodes_.emplace_back().live = true;  // the root
}

std::uint64_t RadixCache::indexKey(NodeId parent, BlockHash first) const {
  if (!token_keyed_ || parent == kRoot) return first.value();
  // (parent slot, token) packed into 64 bits, then the murmur3 finalizer (a bijection): equal
  // keys are equal pairs, and the low bits the index uses are well mixed.
  std::uint64_t k = (std::uint64_t{parent.value()} << 32) | first.value();
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

void RadixCache::setRecordRemovals(bool on) {
  record_removals_ = on;
  if (!on && token_seeds_ && num_cached_ == 0) {
    token_keyed_ = true;  // empty: nothing to re-key
  } else if (on && token_keyed_) {
    // BlockRemoved carries sequence hashes: re-key every run by them (and the index with it).
    std::vector<std::vector<BlockHash>> all = deriveHashes();
    token_keyed_ = false;
    index_.clear();
    for (std::uint32_t slot = 1; slot < nodes_.size(); ++slot) {
      Node& n = nodes_[slot];
      if (!n.live) continue;
      n.hashes = std::move(all[slot]);
      auto [entry, inserted] = index_.findOrInsert(indexKey(n.parent, n.hashes.front()));
      MOCKER_CHECK(inserted);
      entry->count = 1;
      entry->node = NodeId{slot};
    }
  }
}

std::vector<std::vector<BlockHash>> RadixCache::deriveHashes() const {
  MOCKER_CHECK(tokenKeyed());
  std::vector<std::vector<BlockHash>> out(nodes_.size());
  std::vector<bool> done(nodes_.size(), false);
  done[kRoot.value()] = true;
  std::vector<NodeId> chain;  // a node and its ancestors not yet derived, deepest first
  for (std::uint32_t slot = 1; slot < nodes_.size(); ++slot) {
    if (!nodes_[slot].live || done[slot]) continue;
    chain.clear();
    for (NodeId n{slot}; !done[n.value()]; n = at(n).parent) chain.push_back(n);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& node = at(*it);
      std::vector<BlockHash>& seq = out[it->value()];
      seq.reserve(node.size());
      std::size_t k = 0;
      std::uint64_t prev = 0;
      if (node.parent == kRoot) {
        prev = node.hashes.front().value();  // page 0's key is its sequence hash
        seq.push_back(node.hashes.front());
        k = 1;
      } else {
        prev = out[node.parent.value()].back().value();
      }
      for (; k < node.size(); ++k) {
        const auto token = static_cast<std::uint32_t>(node.hashes[k].value());
        prev = chainHash(prev, contentHash(std::span(&token, 1), token_seeds_->hash_seed),
                         token_seeds_->chain_seed);
        seq.push_back(BlockHash{prev});
      }
      done[it->value()] = true;
    }
  }
  return out;
}

bool RadixCache::findChild(NodeId parent, BlockHash hash, NodeId& child) const {
  const Entry* e = index_.find(indexKey(parent, hash));
  // A first page hash chains its whole prefix (and a token key is mixed with its parent), so an
  // entry under another parent is a 64-bit hash collision: not a match.
  if (e == nullptr || at(e->node).parent != parent) return false;
  child = e->node;
  return true;
}

template <typename F>
std::uint32_t RadixCache::walk(std::span<const BlockHash> hashes, bool compare, F&& f) const {
  NodeId node = kRoot;
  std::size_t i = 0;
  while (i < hashes.size()) {
    NodeId child;
    if (!findChild(node, hashes[i], child)) {
      MOCKER_CHECK(compare);  // a trusted path is cached
      break;
    }
    node = child;
    const std::vector<BlockHash>& pages = at(node).hashes;
    const std::size_t limit = std::min(pages.size(), hashes.size() - i);
    std::size_t take = 1;  // the first page matched through the index
    if (compare) {
      while (take < limit && pages[take] == hashes[i + take]) ++take;
    } else {
      take = limit;
    }
    f(Segment{node, 0, static_cast<std::uint32_t>(take)});
    i += take;
    if (take < pages.size()) break;  // diverged or done inside the run
  }
  return static_cast<std::uint32_t>(i);
}

std::uint32_t RadixCache::matchLength(std::span<const BlockHash> hashes) const {
  return walk(hashes, true, [](const Segment&) {});
}

std::uint32_t RadixCache::countUnlocked(std::span<const BlockHash> hashes) const {
  std::uint32_t n = 0;
  walk(hashes, false, [&](const Segment& s) {
    const std::uint32_t locked = at(s.node).lockedEnd();
    n += s.end > locked ? s.end - locked : 0;  // a path starts each run at page 0
  });
  return n;
}

void RadixCache::lockPath(std::span<const BlockHash> hashes) {
  segments_.clear();
  walk(hashes, false, [&](const Segment& s) { segments_.push_back(s); });
  for (const Segment& s : segments_) {
    lockRange(s.node, 0, s.end);  // leaves the leaf set (keyed by the old tick) first
    assignTicks(s.node, 0, s.end);
  }
}

RadixCache::PageRef RadixCache::locate(std::span<const BlockHash> hashes) const {
  PageRef ref;
  walk(hashes, false, [&](const Segment& s) { ref = {s.node, s.end - 1}; });
  return ref;
}

void RadixCache::lockRange(NodeId n, std::uint32_t from, std::uint32_t to) {
  Node& node = at(n);
  const std::uint32_t before = node.lockedEnd();
  std::vector<LockEnd>& locks = node.locks;
  if (from > 0) {
    const auto it = std::lower_bound(locks.begin(), locks.end(), from,
                                     [](const LockEnd& e, std::uint32_t v) { return e.end < v; });
    MOCKER_CHECK(it != locks.end() && it->end == from);
    if (--it->count == 0) locks.erase(it);
  }
  const auto it = std::lower_bound(locks.begin(), locks.end(), to,
                                   [](const LockEnd& e, std::uint32_t v) { return e.end < v; });
  if (it != locks.end() && it->end == to) {
    ++it->count;
  } else {
    locks.insert(it, LockEnd{to, 1});
  }
  const std::uint32_t after = node.lockedEnd();
  if (after > before) {
    num_evictable_ -= after - before;
    if (node.in_leaves && after == node.size()) removeLeaf(n);
  }
}

void RadixCache::unlockRange(NodeId n, std::uint32_t end) {
  Node& node = at(n);
  const std::uint32_t before = node.lockedEnd();
  std::vector<LockEnd>& locks = node.locks;
  const auto it = std::lower_bound(locks.begin(), locks.end(), end,
                                   [](const LockEnd& e, std::uint32_t v) { return e.end < v; });
  MOCKER_CHECK(it != locks.end() && it->end == end);
  if (--it->count == 0) locks.erase(it);
  const std::uint32_t after = node.lockedEnd();
  if (after < before) {
    num_evictable_ += before - after;
    if (node.num_children == 0 && before == node.size()) addLeaf(n);
  }
}

void RadixCache::assignTicks(NodeId n, std::uint32_t from, std::uint32_t count) {
  Node& node = at(n);
  std::vector<TickSegment>& ticks = node.ticks;
  const std::uint32_t end = from + count;
  const std::uint64_t first = clock_ + 1;
  clock_ += count;
  const auto by_start = [](const TickSegment& t, std::uint32_t v) { return t.start < v; };
  const auto lo = std::lower_bound(ticks.begin(), ticks.end(), from, by_start);
  const auto hi = std::lower_bound(lo, ticks.end(), end, by_start);
  // The segment covering page `end` (the last one starting before it) keeps the pages after.
  std::optional<TickSegment> tail;
  if (end < node.size() && (hi == ticks.end() || hi->start != end)) {
    const TickSegment& cover = *(hi - 1);
    tail = TickSegment{end, cover.base + (end - cover.start)};
  }
  // A range that continues the ticks of the pages before it needs no segment of its own.
  const bool continues = lo != ticks.begin() && (lo - 1)->base + (from - (lo - 1)->start) == first;
  TickSegment fresh[2];
  std::size_t num_fresh = 0;
  if (!continues) fresh[num_fresh++] = TickSegment{from, first};
  if (tail) fresh[num_fresh++] = *tail;
  // Overwrite the erased range in place where it is long enough.
  const auto replaced = static_cast<std::size_t>(hi - lo);
  const std::size_t common = std::min(replaced, num_fresh);
  std::copy(fresh, fresh + common, lo);
  if (replaced > num_fresh) {
    ticks.erase(lo + static_cast<std::ptrdiff_t>(common), hi);
  } else if (num_fresh > replaced) {
    ticks.insert(hi, fresh + common, fresh + num_fresh);
  }
}

void RadixCache::addLeaf(NodeId n) {
  at(n).in_leaves = true;
  leaves_.insert(leafKey(n));
}

void RadixCache::removeLeaf(NodeId n) {
  at(n).in_leaves = false;
  leaves_.erase(leafKey(n));
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
  num_evicted_ += count;
  // One BlockRemoved per page: grow the event list once (geometrically), not per event.
  if (const std::size_t need = events.size() + count;
      record_removals_ && need > events.capacity()) {
    events.reserve(std::max(need, 2 * events.capacity()));
  }
  while (count > 0) {
    MOCKER_CHECK(!leaves_.empty());
    // The set node is taken out and reused for the leaf the victim's parent page may become, so
    // the common chain (a released path evicted leaf-first) allocates nothing.
    auto handle = leaves_.extract(leaves_.begin());
    NodeId node = handle.value().second;
    at(node).in_leaves = false;
    for (;;) {
      // The victim is the oldest leaf page. The unlocked pages before it in its tick segment are
      // older still (ticks fall by one towards the root) and each becomes the leaf page once the
      // one after it is gone: they go in one step.
      const Node& v = at(node);
      const std::uint32_t lo = std::max(v.ticks.back().start, v.lockedEnd());
      const std::uint32_t take = std::min(count, v.size() - lo);
      node = removeLastPages(node, take, events);
      count -= take;
      if (node == kRoot) break;
      const Node& p = at(node);
      if (p.num_children != 0 || p.lockedEnd() == p.size()) break;
      // The parent page is now an unlocked leaf. If it is older than every leaf in the set it
      // is the very next victim: evict it directly instead of passing it through the set.
      const LeafKey key = leafKey(node);
      if (count > 0 && (leaves_.empty() || key < *leaves_.begin())) continue;
      at(node).in_leaves = true;
      handle.value() = key;
      leaves_.insert(std::move(handle));
      break;
    }
  }
}

RadixCache::NodeId RadixCache::removeLastPages(NodeId victim, std::uint32_t count,
                                               std::vector<KvEvent>& events) {
  Node& v = at(victim);
  MOCKER_CHECK(count >= 1 && count <= v.size() - v.lockedEnd());
  const std::uint32_t keep = v.size() - count;
  if (record_removals_) {
    for (std::uint32_t i = v.size(); i-- > keep;)
      events.emplace_back(BlockRemoved{v.hashes[i].value()});
  }
  const BlockHash first = v.hashes.front();
  v.hashes.resize(keep);
  while (!v.ticks.empty() && v.ticks.back().start >= keep) v.ticks.pop_back();
  num_evictable_ -= count;
  num_cached_ -= count;
  num_free_ += count;
  if (keep > 0) return victim;
  // The run is gone.
  const NodeId parent = v.parent;
  index_.erase(indexKey(parent, first));
  v.live = false;
  v.parent = kRoot;
  // A recycled slot keeps a small buffer; a long run's memory goes back (dead slots would
  // otherwise pin the peak of every run they ever held).
  if (v.hashes.capacity() > kKeptCapacity) std::vector<BlockHash>().swap(v.hashes);
  free_slots_.push_back(victim);
  --at(parent).num_children;
  return parent;
}

RadixCache::NodeId RadixCache::newNode(NodeId parent) {
  NodeId id;
  if (!free_slots_.empty()) {
    id = free_slots_.back();
    free_slots_.pop_back();
  } else {
    id = NodeId{static_cast<std::uint32_t>(nodes_.size())};
    nodes_.emplace_back();
  }
  Node& node = at(id);
  node.parent = parent;
  node.num_children = 0;
  node.live = true;
  node.in_leaves = false;
  node.hashes.clear();
  node.ticks.clear();
  node.locks.clear();
  ++at(parent).num_children;
  return id;
}

RadixCache::NodeId RadixCache::splitBefore(NodeId n, std::uint32_t split) {
  MOCKER_CHECK(split > 0 && split < at(n).size());
  const NodeId head = newNode(at(n).parent);
  --at(at(n).parent).num_children;  // `head` replaces `n` under the old parent
  Node& tail = at(n);
  Node& h = at(head);
  h.hashes.assign(tail.hashes.begin(), tail.hashes.begin() + split);
  tail.hashes.erase(tail.hashes.begin(), tail.hashes.begin() + split);
  // Ticks: the segments starting before the split go to the head; the tail starts with the
  // rest of the segment covering the split.
  std::vector<TickSegment> ticks;
  for (const TickSegment& t : tail.ticks) {
    if (t.start < split) {
      h.ticks.push_back(t);
    } else {
      if (ticks.empty() && t.start != split) {
        const TickSegment& cover = h.ticks.back();
        ticks.push_back({0, cover.base + (split - cover.start)});
      }
      ticks.push_back({t.start - split, t.base});
    }
  }
  if (ticks.empty()) {
    const TickSegment& cover = h.ticks.back();
    ticks.push_back({0, cover.base + (split - cover.start)});
  }
  tail.ticks = std::move(ticks);
  // Locks: a holder past the split holds the whole head; the tail keeps the ends past it.
  std::vector<LockEnd> locks;
  for (const LockEnd& e : tail.locks) {
    if (e.end <= split) {
      h.locks.push_back(e);
      continue;
    }
    if (!h.locks.empty() && h.locks.back().end == split) {
      h.locks.back().count += e.count;
    } else {
      h.locks.push_back({split, e.count});
    }
    locks.push_back({e.end - split, e.count});
  }
  tail.locks = std::move(locks);
  tail.parent = head;
  h.num_children = 1;
  // `n` keeps its id and last page, so its leaf-set key is unchanged; the index moves.
  index_.find(indexKey(h.parent, h.hashes.front()))->node = head;
  auto [entry, inserted] = index_.findOrInsert(indexKey(head, tail.hashes.front()));
  MOCKER_CHECK(inserted);
  entry->count = 1;
  entry->node = n;
  return head;
}

std::uint32_t RadixCache::share(NodeId node, std::uint32_t from, std::uint32_t n) {
  lockRange(node, from, from + n);  // leaves the leaf set (keyed by the old tick) first
  assignTicks(node, from, n);
  freePrivate(n);  // the duplicates go back
  return n;
}

std::uint32_t RadixCache::insertRun(PageRef& parent, std::span<const BlockHash> hashes,
                                    bool& created, std::uint32_t expected) {
  MOCKER_CHECK(!hashes.empty() && hashes.size() <= num_private_);
  MOCKER_CHECK(parent.node == kRoot || at(parent.node).lockedEnd() > parent.offset);
  created = false;
  if (parent.node != kRoot && parent.offset + 1 < at(parent.node).size()) {
    // Inside a run the parent page's only child is the run's next page: share while they agree.
    const std::vector<BlockHash>& pages = at(parent.node).hashes;
    const std::size_t limit = std::min(pages.size() - parent.offset - 1, hashes.size());
    std::uint32_t n = 0;
    while (n < limit && pages[parent.offset + 1 + n] == hashes[n]) ++n;
    if (n > 0) {
      share(parent.node, parent.offset + 1, n);
      parent.offset += n;
      return n;
    }
    parent.node = splitBefore(parent.node, parent.offset + 1);  // diverges: a new child below
  } else if (NodeId child; (parent.node == kRoot || at(parent.node).num_children != 0) &&
                           findChild(parent.node, hashes.front(), child)) {
    const std::vector<BlockHash>& pages = at(child).hashes;
    const std::size_t limit = std::min(pages.size(), hashes.size());
    std::uint32_t n = 1;  // the first page matched through the index
    while (n < limit && pages[n] == hashes[n]) ++n;
    share(child, 0, n);
    parent = {child, n - 1};
    return n;
  }
  // No page of `hashes` can be cached: they would all descend from a page that has no such child.
  created = true;
  const auto n = static_cast<std::uint32_t>(hashes.size());
  num_private_ -= n;
  num_cached_ += n;
  NodeId target = parent.node;
  if (parent.node == kRoot || at(parent.node).num_children != 0) {
    target = newNode(parent.node);
    auto [entry, inserted] = index_.findOrInsert(indexKey(parent.node, hashes.front()));
    // Only a 64-bit collision of sequence hashes could put this hash under another parent.
    MOCKER_CHECK(inserted);
    entry->count = 1;
    entry->node = target;
  }
  // Otherwise the parent page ends a childless run (locked by the caller, so not a leaf in the
  // set): the run grows instead of getting a child.
  Node& node = at(target);
  std::vector<BlockHash>& pages = node.hashes;
  MOCKER_DCHECK(!node.in_leaves);
  const std::uint32_t from = node.size();
  // Grow once for every page the caller expects to publish (a prompt's later chunks extend this
  // run), else geometrically (a run also grows a page at a time while decoding).
  if (const std::size_t need = pages.size() + n; need > pages.capacity()) {
    pages.reserve(std::max({need, pages.size() + expected, 2 * pages.capacity()}));
  }
  pages.insert(pages.end(), hashes.begin(), hashes.end());
  // The caller's hold on the run moves from its old end to the new one (new pages were never
  // evictable, so no count changes).
  if (from > 0) {
    MOCKER_CHECK(node.locks.back().end == from);
    if (--node.locks.back().count == 0) node.locks.pop_back();
  }
  node.locks.push_back(LockEnd{node.size(), 1});
  assignTicks(target, from, n);
  parent = {target, node.size() - 1};
  return n;
}

void RadixCache::releasePath(std::span<const BlockHash> hashes) {
  segments_.clear();
  walk(hashes, false, [&](const Segment& s) { segments_.push_back(s); });
  // One pass, root first: a page's tick is set before it is unlocked, and only a node's last page
  // can join the leaf set (keyed by that tick), so the order of unlocks does not matter.
  for (const Segment& s : segments_) {
    assignTicks(s.node, 0, s.end);
    unlockRange(s.node, s.end);
  }
}

std::vector<BlockHash> RadixCache::cachedHashes() const {
  std::vector<BlockHash> out;
  out.reserve(num_cached_);
  if (tokenKeyed()) {
    for (const std::vector<BlockHash>& seq : deriveHashes())
      out.insert(out.end(), seq.begin(), seq.end());
  } else {
    for (const Node& n : nodes_) {
      if (!n.live) continue;
      out.insert(out.end(), n.hashes.begin(), n.hashes.end());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool RadixCache::clear() {
  if (numActive() != 0) return false;
  index_.clear();
  nodes_.clear();
  nodes_.emplace_back().live = true;
  free_slots_.clear();
  leaves_.clear();
  num_free_ = num_pages_;
  num_cached_ = 0;
  num_evictable_ = 0;
  return true;
}

namespace {

// Σ count over the lock ends past page k.
template <typename Locks>
std::uint32_t lockAt(const Locks& locks, std::uint32_t k) {
  std::uint32_t lock = 0;
  for (const auto& e : locks) lock += e.end > k ? e.count : 0;
  return lock;
}

// The shape of a run's tick segments and lock ends; empty when sound.
template <typename Ticks, typename Locks>
std::string runShapeError(const Ticks& ticks, const Locks& locks, std::size_t size) {
  if (ticks.empty() || ticks.front().start != 0) return "tick segments do not start at page 0";
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    if (ticks[i].start >= size) return "tick segment past the run";
    if (i > 0 && ticks[i].start <= ticks[i - 1].start) return "tick segments out of order";
  }
  for (std::size_t i = 0; i < locks.size(); ++i) {
    if (locks[i].count == 0 || locks[i].end == 0 || locks[i].end > size) return "bad lock end";
    if (i > 0 && locks[i].end <= locks[i - 1].end) return "lock ends out of order";
  }
  return {};
}

}  // namespace

Status RadixCache::checkInvariants(std::span<const std::span<const BlockHash>> held) const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "radix cache invariant: " + what};
  };
  const auto num_slots = static_cast<std::uint32_t>(nodes_.size());
  std::vector<std::vector<std::uint32_t>> holders(num_slots);
  for (std::uint32_t slot = 0; slot < num_slots; ++slot) holders[slot].resize(nodes_[slot].size());
  for (std::span<const BlockHash> path : held) {
    const std::uint32_t matched = walk(path, true, [&](const Segment& s) {
      for (std::uint32_t k = s.begin; k < s.end; ++k) ++holders[s.node.value()][k];
    });
    if (matched != path.size()) return fail("a held path is not cached");
  }
  std::uint64_t cached = 0, unlocked = 0, leaves = 0, live = 0;
  std::vector<std::uint32_t> children(num_slots, 0);
  if (token_keyed_ && record_removals_) return fail("token keys while removals are recorded");
  for (std::uint32_t slot = 1; slot < num_slots; ++slot) {
    const NodeId id{slot};
    const Node& n = at(id);
    if (!n.live) continue;
    ++live;
    if (n.hashes.empty()) return fail("empty run");
    if (std::string shape = runShapeError(n.ticks, n.locks, n.size()); !shape.empty()) {
      return fail(shape);
    }
    const Entry* e = index_.find(indexKey(n.parent, n.hashes.front()));
    if (e == nullptr || e->node != id) return fail("run missing from the first-page index");
    if (n.parent.value() >= num_slots || !at(n.parent).live) return fail("dangling parent");
    ++children[n.parent.value()];
    const Node& up = at(n.parent);
    std::uint32_t above = n.parent == kRoot ? ~std::uint32_t{0} : lockAt(up.locks, up.size() - 1);
    for (std::uint32_t k = 0; k < n.size(); ++k) {
      const std::uint32_t lock = lockAt(n.locks, k);
      if (lock > above) return fail("parent page less locked than child");
      above = lock;
      if (lock != holders[slot][k]) {
        return fail("lock " + std::to_string(lock) + " != holders " +
                    std::to_string(holders[slot][k]));
      }
      if (lock == 0) ++unlocked;
    }
    cached += n.size();
  }
  for (std::uint32_t slot = 0; slot < num_slots; ++slot) {
    const NodeId id{slot};
    const Node& n = at(id);
    if (!n.live) continue;
    if (children[slot] != n.num_children) return fail("child count mismatch");
    if (id == kRoot) continue;
    const bool unlocked_leaf = n.num_children == 0 && n.lockedEnd() < n.size();
    if (unlocked_leaf != n.in_leaves) return fail("leaf set membership mismatch");
    if (unlocked_leaf) {
      ++leaves;
      if (!leaves_.contains(leafKey(id))) return fail("leaf set key mismatch");
    }
  }
  if (!at(kRoot).live || !at(kRoot).hashes.empty()) return fail("root holds pages");
  if (live != index_.size()) return fail("first-page index size != runs");
  if (cached != num_cached_) return fail("cached page count mismatch");
  if (leaves != leaves_.size()) return fail("leaf set size mismatch");
  if (unlocked != num_evictable_) return fail("evictable count mismatch");
  if (std::uint64_t{num_free_} + num_private_ + num_cached_ != num_pages_) {
    return fail("free + private + cached != pages");
  }
  return {};
}

}  // namespace mocker::engine
