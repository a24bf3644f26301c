#include "engine/radix_cache.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "base/check.h"

namespace mocker::engine {

RadixCache::RadixCache(std::uint32_t num_pages)
    : num_pages_(num_pages), num_free_(num_pages), index_(num_pages) {
  // Nothing is sized by num_pages: nodes and the index grow with the runs actually cached, so an
  // idle pool of 1 Mi pages costs almost nothing.
  nodes_.emplace_back().live = true;  // the root
}

bool RadixCache::findChild(NodeId parent, BlockHash hash, NodeId& child) const {
  const Entry* e = index_.find(hash.value());
  // A first page hash chains its whole prefix, so an entry under another parent is a 64-bit
  // hash collision: not a match.
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
    const std::vector<Page>& pages = at(node).pages;
    const std::size_t limit = std::min(pages.size(), hashes.size() - i);
    std::size_t take = 1;  // the first page matched through the index
    if (compare) {
      while (take < limit && pages[take].hash == hashes[i + take]) ++take;
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
    const std::vector<Page>& pages = at(s.node).pages;
    for (std::uint32_t k = s.begin; k < s.end; ++k) n += pages[k].lock == 0 ? 1u : 0u;
  });
  return n;
}

void RadixCache::lockPath(std::span<const BlockHash> hashes) {
  segments_.clear();
  walk(hashes, false, [&](const Segment& s) { segments_.push_back(s); });
  for (const Segment& s : segments_) {
    for (std::uint32_t k = s.begin; k < s.end; ++k) {
      lockPage(s.node, k);  // leaves the leaf set (keyed by the old tick) before the tick changes
      at(s.node).pages[k].tick = ++clock_;
    }
  }
}

RadixCache::PageRef RadixCache::locate(std::span<const BlockHash> hashes) const {
  PageRef ref;
  walk(hashes, false, [&](const Segment& s) { ref = {s.node, s.end - 1}; });
  return ref;
}

void RadixCache::lockPage(NodeId n, std::uint32_t offset) {
  Node& node = at(n);
  if (node.pages[offset].lock++ == 0) {
    --num_evictable_;
    if (node.in_leaves && offset + 1 == node.pages.size()) removeLeaf(n);
  }
}

void RadixCache::unlockPage(NodeId n, std::uint32_t offset) {
  Node& node = at(n);
  Page& page = node.pages[offset];
  MOCKER_CHECK(page.lock > 0);
  if (--page.lock == 0) {
    ++num_evictable_;
    if (node.num_children == 0 && offset + 1 == node.pages.size()) addLeaf(n);
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
      node = removeLastPage(node, events);
      --count;
      if (node == kRoot) break;
      const Node& p = at(node);
      if (p.num_children != 0 || p.pages.back().lock != 0) break;
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

RadixCache::NodeId RadixCache::removeLastPage(NodeId victim, std::vector<KvEvent>& events) {
  Node& v = at(victim);
  const BlockHash hash = v.pages.back().hash;
  v.pages.pop_back();
  if (record_removals_) events.emplace_back(BlockRemoved{hash.value()});
  --num_evictable_;
  --num_cached_;
  ++num_free_;
  if (!v.pages.empty()) return victim;
  // The run is gone: `hash` was its first page.
  const NodeId parent = v.parent;
  index_.erase(hash.value());
  v.live = false;
  v.parent = kRoot;
  // A recycled slot keeps a small buffer; a long run's memory goes back (dead slots would
  // otherwise pin the peak of every run they ever held).
  if (v.pages.capacity() > kKeptCapacity) std::vector<Page>().swap(v.pages);
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
  node.pages.clear();
  ++at(parent).num_children;
  return id;
}

RadixCache::NodeId RadixCache::splitBefore(NodeId n, std::uint32_t split) {
  MOCKER_CHECK(split > 0 && split < at(n).pages.size());
  const NodeId head = newNode(at(n).parent);
  --at(at(n).parent).num_children;  // `head` replaces `n` under the old parent
  Node& tail = at(n);
  Node& h = at(head);
  h.pages.assign(tail.pages.begin(), tail.pages.begin() + split);
  tail.pages.erase(tail.pages.begin(), tail.pages.begin() + split);
  tail.parent = head;
  h.num_children = 1;
  // `n` keeps its id and last page, so its leaf-set key is unchanged; the index moves.
  index_.find(h.pages.front().hash.value())->node = head;
  auto [entry, inserted] = index_.findOrInsert(tail.pages.front().hash.value());
  MOCKER_CHECK(inserted);
  entry->count = 1;
  entry->node = n;
  return head;
}

std::uint32_t RadixCache::share(NodeId node, std::uint32_t from, std::uint32_t n) {
  for (std::uint32_t k = from; k < from + n; ++k) {
    lockPage(node, k);  // leaves the leaf set (keyed by the old tick) before the tick changes
    at(node).pages[k].tick = ++clock_;
  }
  freePrivate(n);  // the duplicates go back
  return n;
}

std::uint32_t RadixCache::insertRun(PageRef& parent, std::span<const BlockHash> hashes,
                                    bool& created, std::uint32_t expected) {
  MOCKER_CHECK(!hashes.empty() && hashes.size() <= num_private_);
  MOCKER_CHECK(parent.node == kRoot || at(parent.node).pages[parent.offset].lock > 0);
  created = false;
  if (parent.node != kRoot && parent.offset + 1 < at(parent.node).pages.size()) {
    // Inside a run the parent page's only child is the run's next page: share while they agree.
    const std::vector<Page>& pages = at(parent.node).pages;
    const std::size_t limit = std::min(pages.size() - parent.offset - 1, hashes.size());
    std::uint32_t n = 0;
    while (n < limit && pages[parent.offset + 1 + n].hash == hashes[n]) ++n;
    if (n > 0) {
      share(parent.node, parent.offset + 1, n);
      parent.offset += n;
      return n;
    }
    parent.node = splitBefore(parent.node, parent.offset + 1);  // diverges: a new child below
  } else if (NodeId child; (parent.node == kRoot || at(parent.node).num_children != 0) &&
                           findChild(parent.node, hashes.front(), child)) {
    const std::vector<Page>& pages = at(child).pages;
    const std::size_t limit = std::min(pages.size(), hashes.size());
    std::uint32_t n = 1;  // the first page matched through the index
    while (n < limit && pages[n].hash == hashes[n]) ++n;
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
    auto [entry, inserted] = index_.findOrInsert(hashes.front().value());
    // Only a 64-bit collision of sequence hashes could put this hash under another parent.
    MOCKER_CHECK(inserted);
    entry->count = 1;
    entry->node = target;
  }
  // Otherwise the parent page ends a childless run (locked by the caller, so not a leaf in the
  // set): the run grows instead of getting a child.
  std::vector<Page>& pages = at(target).pages;
  MOCKER_DCHECK(!at(target).in_leaves);
  // Grow once for every page the caller expects to publish (a prompt's later chunks extend this
  // run), else geometrically (a run also grows a page at a time while decoding).
  if (const std::size_t need = pages.size() + n; need > pages.capacity()) {
    pages.reserve(std::max({need, pages.size() + expected, 2 * pages.capacity()}));
  }
  std::uint64_t tick = clock_;
  for (const BlockHash h : hashes) pages.push_back(Page{h, ++tick, 1});
  clock_ = tick;
  parent = {target, static_cast<std::uint32_t>(pages.size() - 1)};
  return n;
}

void RadixCache::releasePath(std::span<const BlockHash> hashes) {
  segments_.clear();
  walk(hashes, false, [&](const Segment& s) { segments_.push_back(s); });
  // One pass, root first: a page's tick is set before it is unlocked, and only a node's last page
  // can join the leaf set (keyed by that tick), so the order of unlocks does not matter.
  for (const Segment& s : segments_) {
    for (std::uint32_t k = s.begin; k < s.end; ++k) {
      at(s.node).pages[k].tick = ++clock_;
      unlockPage(s.node, k);
    }
  }
}

std::vector<BlockHash> RadixCache::cachedHashes() const {
  std::vector<BlockHash> out;
  out.reserve(num_cached_);
  for (const Node& n : nodes_) {
    if (!n.live) continue;
    for (const Page& p : n.pages) out.push_back(p.hash);
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

Status RadixCache::checkInvariants(std::span<const std::span<const BlockHash>> held) const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "radix cache invariant: " + what};
  };
  const auto num_slots = static_cast<std::uint32_t>(nodes_.size());
  std::vector<std::vector<std::uint32_t>> holders(num_slots);
  for (std::uint32_t slot = 0; slot < num_slots; ++slot)
    holders[slot].resize(nodes_[slot].pages.size());
  for (std::span<const BlockHash> path : held) {
    const std::uint32_t matched = walk(path, true, [&](const Segment& s) {
      for (std::uint32_t k = s.begin; k < s.end; ++k) ++holders[s.node.value()][k];
    });
    if (matched != path.size()) return fail("a held path is not cached");
  }
  std::uint64_t cached = 0, unlocked = 0, leaves = 0, live = 0;
  std::vector<std::uint32_t> children(num_slots, 0);
  for (std::uint32_t slot = 1; slot < num_slots; ++slot) {
    const NodeId id{slot};
    const Node& n = at(id);
    if (!n.live) continue;
    ++live;
    if (n.pages.empty()) return fail("empty run");
    const Entry* e = index_.find(n.pages.front().hash.value());
    if (e == nullptr || e->node != id) return fail("run missing from the first-page index");
    if (n.parent.value() >= num_slots || !at(n.parent).live) return fail("dangling parent");
    ++children[n.parent.value()];
    std::uint32_t above = n.parent == kRoot ? ~std::uint32_t{0} : at(n.parent).pages.back().lock;
    for (std::uint32_t k = 0; k < n.pages.size(); ++k) {
      const Page& p = n.pages[k];
      if (p.lock > above) return fail("parent page less locked than child");
      above = p.lock;
      if (p.lock != holders[slot][k]) {
        return fail("lock " + std::to_string(p.lock) + " != holders " +
                    std::to_string(holders[slot][k]));
      }
      if (p.lock == 0) ++unlocked;
    }
    cached += n.pages.size();
  }
  for (std::uint32_t slot = 0; slot < num_slots; ++slot) {
    const NodeId id{slot};
    const Node& n = at(id);
    if (!n.live) continue;
    if (children[slot] != n.num_children) return fail("child count mismatch");
    if (id == kRoot) continue;
    const bool unlocked_leaf = n.num_children == 0 && n.pages.back().lock == 0;
    if (unlocked_leaf != n.in_leaves) return fail("leaf set membership mismatch");
    if (unlocked_leaf) {
      ++leaves;
      if (!leaves_.contains(leafKey(id))) return fail("leaf set key mismatch");
    }
  }
  if (!at(kRoot).live || !at(kRoot).pages.empty()) return fail("root holds pages");
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
