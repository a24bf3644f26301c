#include "engine/block_pool.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace mocker::engine {

BlockPool::BlockPool(std::uint32_t num_blocks) : blocks_(num_blocks), copies_(num_blocks) {
  free_.reserve(num_blocks);
  // Stack with block 0 on top, so allocation order is 0, 1, 2, ... on a fresh pool.
  for (std::uint32_t i = num_blocks; i-- > 0;) free_.push_back(BlockId{i});
}

std::uint32_t BlockPool::countPrefixHits(std::span<const BlockHash> hashes) const {
  std::uint32_t n = 0;
  for (BlockHash h : hashes) {
    if (copies_.find(h.value()) == nullptr) break;
    ++n;
  }
  return n;
}

bool BlockPool::hasActiveCopy(BlockHash hash) const {
  const Copies* c = copies_.find(hash.value());
  return c != nullptr && c->num_active > 0;
}

BlockId BlockPool::claimCached(BlockHash hash) {
  Copies* found = copies_.find(hash.value());
  MOCKER_CHECK(found != nullptr);
  Copies& c = *found;
  BlockId chosen = kNil;
  for (BlockId b = c.head; b != kNil; b = at(b).copy_next) {
    if (at(b).refcount > 0) {
      chosen = b;
      break;
    }
  }
  if (chosen == kNil) {
    chosen = c.head;
    lruRemove(chosen);
    ++c.num_active;
  }
  ++at(chosen).refcount;
  return chosen;
}

BlockId BlockPool::allocatePrivate(std::vector<KvEvent>& events) {
  if (free_.empty()) {
    MOCKER_CHECK(lru_head_ != kNil);
    prefetchEvictions();
    const BlockId victim = lru_head_;
    lruRemove(victim);
    Block& v = at(victim);
    const BlockHash hash = v.hash;
    unlinkCopy(victim);
    Copies* c = copies_.find(hash.value());
    if (c->count > 1) {
      --c->count;
    } else {
      copies_.erase(hash.value());
      ++num_removals_;
      if (record_removals_) events.emplace_back(BlockRemoved{hash.value()});
    }
    v = Block{};
    free_.push_back(victim);
  }
  const BlockId b = free_.back();
  free_.pop_back();
  at(b).state = State::Private;
  at(b).refcount = 1;
  return b;
}

bool BlockPool::finalize(BlockId block, BlockHash hash) {
  Block& b = at(block);
  MOCKER_CHECK(b.state == State::Private);
  b.state = State::Cached;
  b.hash = hash;
  auto [found, inserted] = copies_.findOrInsert(hash.value());
  Copies& c = *found;
  b.copy_next = c.head;
  c.head = block;
  ++c.count;
  ++c.num_active;
  return inserted;
}

void BlockPool::release(BlockId block) {
  Block& b = at(block);
  MOCKER_CHECK(b.refcount > 0);
  if (b.state == State::Private) {
    b = Block{};
    free_.push_back(block);
    return;
  }
  MOCKER_CHECK(b.state == State::Cached);
  if (--b.refcount == 0) {
    --copies_.find(b.hash.value())->num_active;
    lruAppend(block);
  }
}

std::vector<BlockHash> BlockPool::cachedHashes() const {
  std::vector<BlockHash> out;
  out.reserve(copies_.size());
  copies_.forEach([&](std::uint64_t hash, const Copies&) { out.push_back(BlockHash{hash}); });
  std::sort(out.begin(), out.end());
  return out;
}

bool BlockPool::clearCache() {
  if (numActive() != 0) return false;
  while (lru_head_ != kNil) {
    const BlockId b = lru_head_;
    lruRemove(b);
    at(b) = Block{};
    free_.push_back(b);
  }
  copies_.clear();
  evict_cursor_ = kNil;
  return true;
}

void BlockPool::lruAppend(BlockId b) {
  Block& blk = at(b);
  blk.lru_prev = lru_tail_;
  blk.lru_next = kNil;
  if (lru_tail_ != kNil) {
    at(lru_tail_).lru_next = b;
  } else {
    lru_head_ = b;
  }
  lru_tail_ = b;
  ++num_inactive_;
}

void BlockPool::prefetchEvictions() {
  constexpr std::uint32_t kEvictAhead = 8;
  if (evict_cursor_ == kNil) {
    evict_cursor_ = lru_head_;
    evict_lag_ = 0;
  }
  // One step per eviction in the steady state: the block kEvictAhead after the head is loaded
  // (its record was prefetched one step earlier), its hash slot and its successor prefetched.
  while (evict_lag_ < kEvictAhead) {
    const BlockId next = at(evict_cursor_).lru_next;
    if (next == kNil) break;
    evict_cursor_ = next;
    ++evict_lag_;
    const Block& ahead = at(next);
    copies_.prefetch(ahead.hash.value());
    if (ahead.lru_next != kNil) prefetch(ahead.lru_next);
  }
}

void BlockPool::lruRemove(BlockId b) {
  // The eviction cursor stays on the list: it restarts when its block leaves, and is one step
  // nearer the head when the head leaves (a block leaving between them only shortens the lead).
  if (b == evict_cursor_) {
    evict_cursor_ = kNil;
  } else if (b == lru_head_ && evict_lag_ > 0) {
    --evict_lag_;
  }
  Block& blk = at(b);
  if (blk.lru_prev != kNil) {
    at(blk.lru_prev).lru_next = blk.lru_next;
  } else {
    lru_head_ = blk.lru_next;
  }
  if (blk.lru_next != kNil) {
    at(blk.lru_next).lru_prev = blk.lru_prev;
  } else {
    lru_tail_ = blk.lru_prev;
  }
  blk.lru_prev = blk.lru_next = kNil;
  --num_inactive_;
}

void BlockPool::unlinkCopy(BlockId b) {
  Copies& c = *copies_.find(at(b).hash.value());
  if (c.head == b) {
    c.head = at(b).copy_next;
  } else {
    BlockId p = c.head;
    while (at(p).copy_next != b) p = at(p).copy_next;
    at(p).copy_next = at(b).copy_next;
  }
  at(b).copy_next = kNil;
}

Status BlockPool::checkInvariants() const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "block pool invariant: " + what};
  };
  std::uint32_t free = 0, active = 0, inactive = 0;
  std::unordered_map<BlockHash, std::pair<std::uint32_t, std::uint32_t>> seen;
  for (const Block& b : blocks_) {
    switch (b.state) {
      case State::Free:
        ++free;
        if (b.refcount != 0) return fail("free block with refcount");
        break;
      case State::Private:
        ++active;
        if (b.refcount != 1) return fail("private block refcount != 1");
        break;
      case State::Cached:
        (b.refcount > 0 ? active : inactive) += 1;
        ++seen[b.hash].first;
        if (b.refcount > 0) ++seen[b.hash].second;
        break;
    }
  }
  if (free != free_.size()) return fail("free list size mismatch");
  if (inactive != num_inactive_) return fail("inactive count mismatch");
  if (free + active + inactive != blocks_.size()) return fail("free + active + inactive != total");
  std::uint32_t lru_len = 0;
  for (BlockId b = lru_head_; b != kNil; b = at(b).lru_next) {
    if (at(b).state != State::Cached || at(b).refcount != 0) {
      return fail("LRU list holds an active block");
    }
    if (++lru_len > blocks_.size()) return fail("LRU cycle");
  }
  if (lru_len != inactive) return fail("LRU length != inactive blocks");
  if (seen.size() != copies_.size()) return fail("copies map size mismatch");
  bool mismatch = false;
  copies_.forEach([&](std::uint64_t hash, const Copies& c) {
    const auto it = seen.find(BlockHash{hash});
    mismatch |=
        it == seen.end() || it->second.first != c.count || it->second.second != c.num_active;
  });
  if (mismatch) return fail("copies count mismatch for a hash");
  return {};
}

}  // namespace mocker::engine
