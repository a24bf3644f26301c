#include "engine/block_pool.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace mocker::engine {

BlockPool::BlockPool(std::uint32_t num_blocks) : blocks_(num_blocks), copies_(num_blocks) {
  free_.reserve(num_blocks);
  // Stack with block 0 on top, so allocation order is 0, 1, 2, ... on a fresh pool.
  for (std::uint32_t i = num_blocks; i-- > 0;) free_.push_back(i);
}

std::uint32_t BlockPool::countPrefixHits(std::span<const std::uint64_t> hashes) const {
  std::uint32_t n = 0;
  for (std::uint64_t h : hashes) {
    if (copies_.find(h) == nullptr) break;
    ++n;
  }
  return n;
}

bool BlockPool::hasActiveCopy(std::uint64_t hash) const {
  const Copies* c = copies_.find(hash);
  return c != nullptr && c->num_active > 0;
}

BlockId BlockPool::claimCached(std::uint64_t hash) {
  Copies* found = copies_.find(hash);
  MOCKER_CHECK(found != nullptr);
  Copies& c = *found;
  BlockId chosen = kNil;
  for (BlockId b = c.head; b != kNil; b = blocks_[b].copy_next) {
    if (blocks_[b].refcount > 0) {
      chosen = b;
      break;
    }
  }
  if (chosen == kNil) {
    chosen = c.head;
    lruRemove(chosen);
    ++c.num_active;
  }
  ++blocks_[chosen].refcount;
  return chosen;
}

BlockId BlockPool::allocatePrivate(std::vector<KvEvent>& events) {
  if (free_.empty()) {
    MOCKER_CHECK(lru_head_ != kNil);
    const BlockId victim = lru_head_;
    lruRemove(victim);
    Block& v = blocks_[victim];
    const std::uint64_t hash = v.hash;
    unlinkCopy(victim);
    Copies* c = copies_.find(hash);
    if (c->count > 1) {
      --c->count;
    } else {
      copies_.erase(hash);
      events.emplace_back(BlockRemoved{hash});
    }
    v = Block{};
    free_.push_back(victim);
  }
  const BlockId b = free_.back();
  free_.pop_back();
  blocks_[b].state = State::Private;
  blocks_[b].refcount = 1;
  return b;
}

bool BlockPool::finalize(BlockId block, std::uint64_t hash) {
  Block& b = blocks_[block];
  MOCKER_CHECK(b.state == State::Private);
  b.state = State::Cached;
  b.hash = hash;
  auto [found, inserted] = copies_.findOrInsert(hash);
  Copies& c = *found;
  b.copy_next = c.head;
  c.head = block;
  ++c.count;
  ++c.num_active;
  return inserted;
}

void BlockPool::release(BlockId block) {
  Block& b = blocks_[block];
  MOCKER_CHECK(b.refcount > 0);
  if (b.state == State::Private) {
    b = Block{};
    free_.push_back(block);
    return;
  }
  MOCKER_CHECK(b.state == State::Cached);
  if (--b.refcount == 0) {
    --copies_.find(b.hash)->num_active;
    lruAppend(block);
  }
}

std::vector<std::uint64_t> BlockPool::cachedHashes() const {
  std::vector<std::uint64_t> out;
  out.reserve(copies_.size());
  copies_.forEach([&](std::uint64_t hash, const Copies&) { out.push_back(hash); });
  std::sort(out.begin(), out.end());
  return out;
}

bool BlockPool::clearCache() {
  if (numActive() != 0) return false;
  while (lru_head_ != kNil) {
    const BlockId b = lru_head_;
    lruRemove(b);
    blocks_[b] = Block{};
    free_.push_back(b);
  }
  copies_.clear();
  return true;
}

void BlockPool::lruAppend(BlockId b) {
  Block& blk = blocks_[b];
  blk.lru_prev = lru_tail_;
  blk.lru_next = kNil;
  if (lru_tail_ != kNil) {
    blocks_[lru_tail_].lru_next = b;
  } else {
    lru_head_ = b;
  }
  lru_tail_ = b;
  ++num_inactive_;
}

void BlockPool::lruRemove(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.lru_prev != kNil) {
    blocks_[blk.lru_prev].lru_next = blk.lru_next;
  } else {
    lru_head_ = blk.lru_next;
  }
  if (blk.lru_next != kNil) {
    blocks_[blk.lru_next].lru_prev = blk.lru_prev;
  } else {
    lru_tail_ = blk.lru_prev;
  }
  blk.lru_prev = blk.lru_next = kNil;
  --num_inactive_;
}

void BlockPool::unlinkCopy(BlockId b) {
  Copies& c = *copies_.find(blocks_[b].hash);
  if (c.head == b) {
    c.head = blocks_[b].copy_next;
  } else {
    BlockId p = c.head;
    while (blocks_[p].copy_next != b) p = blocks_[p].copy_next;
    blocks_[p].copy_next = blocks_[b].copy_next;
  }
  blocks_[b].copy_next = kNil;
}

Status BlockPool::checkInvariants() const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "block pool invariant: " + what};
  };
  std::uint32_t free = 0, active = 0, inactive = 0;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> seen;
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
  for (BlockId b = lru_head_; b != kNil; b = blocks_[b].lru_next) {
    if (blocks_[b].state != State::Cached || blocks_[b].refcount != 0) {
      return fail("LRU list holds an active block");
    }
    if (++lru_len > blocks_.size()) return fail("LRU cycle");
  }
  if (lru_len != inactive) return fail("LRU length != inactive blocks");
  if (seen.size() != copies_.size()) return fail("copies map size mismatch");
  bool mismatch = false;
  copies_.forEach([&](std::uint64_t hash, const Copies& c) {
    const auto it = seen.find(hash);
    mismatch |=
        it == seen.end() || it->second.first != c.count || it->second.second != c.num_active;
  });
  if (mismatch) return fail("copies count mismatch for a hash");
  return {};
}

}  // namespace mocker::engine
