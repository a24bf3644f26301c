#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <random>
#include <type_traits>

#include "base/hash_index.h"
#include "engine/detail/stats.h"

namespace mocker::engine {
namespace {

struct Counted {
  std::uint32_t count = 0;
  std::uint32_t payload = 0;
};

// Randomized comparison with std::map, with keys chosen to collide in the low bits so that
// probe runs wrap around the table and backward-shift deletion is exercised.
TEST(HashIndexTest, MatchesStdMapUnderRandomInsertAndErase) {
  HashIndex<Counted> index(64);  // 128 slots
  std::map<std::uint64_t, std::uint32_t> ref;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t key = ((rng() % 40) << 7) | (120 + rng() % 8);  // homes 120..127
    const auto it = ref.find(key);
    if (it != ref.end() && rng() % 2 == 0) {
      index.erase(key);
      ref.erase(it);
    } else if (it == ref.end() && ref.size() < 60) {
      auto [v, inserted] = index.findOrInsert(key);
      ASSERT_TRUE(inserted);
      v->count = 1;
      v->payload = static_cast<std::uint32_t>(i);
      ref[key] = static_cast<std::uint32_t>(i);
    }
    ASSERT_EQ(index.size(), ref.size());
    if (i % 97 == 0) {
      for (const auto& [k, payload] : ref) {
        const Counted* v = index.find(k);
        ASSERT_NE(v, nullptr) << "lost key after " << i << " operations";
        ASSERT_EQ(v->payload, payload);
      }
    }
  }
}

// Block ids, block hashes and request ids are distinct types: none converts to another or from a
// bare integer.
static_assert(!std::is_convertible_v<std::uint32_t, BlockId>);
static_assert(!std::is_convertible_v<std::uint64_t, BlockHash>);
static_assert(!std::is_constructible_v<BlockId, BlockHash>);
static_assert(!std::is_constructible_v<BlockHash, BlockId>);
static_assert(!std::is_constructible_v<BlockHash, RequestId>);

TEST(BlockPoolTest, AllocatesFreeBlocksBeforeEvicting) {
  BlockPool pool(2);
  std::vector<KvEvent> events;
  const BlockId a = pool.allocatePrivate(events);
  EXPECT_TRUE(pool.finalize(a, BlockHash{11}));
  pool.release(a);  // inactive
  EXPECT_EQ(pool.numInactive(), 1u);
  const BlockId b = pool.allocatePrivate(events);
  EXPECT_NE(a, b);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(pool.countPrefixHits(std::vector<BlockHash>{BlockHash{11}}), 1u);
  const BlockId c = pool.allocatePrivate(events);  // evicts 11
  EXPECT_EQ(c, a);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<BlockRemoved>(events[0]).block_hash, 11u);
  EXPECT_TRUE(pool.checkInvariants().has_value());
}

TEST(BlockPoolTest, PrefixHitsStopAtFirstMissAndPreferActiveCopies) {
  BlockPool pool(4);
  std::vector<KvEvent> events;
  const BlockId a = pool.allocatePrivate(events);
  const BlockId b = pool.allocatePrivate(events);
  EXPECT_TRUE(pool.finalize(a, BlockHash{1}));
  EXPECT_FALSE(pool.finalize(b, BlockHash{1}));  // duplicate copy: not newly visible
  pool.release(b);                               // inactive copy
  EXPECT_EQ(pool.countPrefixHits(std::vector<BlockHash>{BlockHash{1}, BlockHash{2}, BlockHash{1}}),
            1u);
  EXPECT_TRUE(pool.hasActiveCopy(BlockHash{1}));
  EXPECT_EQ(pool.claimCached(BlockHash{1}), a);  // the active copy, not the inactive one
  EXPECT_EQ(pool.numInactive(), 1u);
  EXPECT_TRUE(pool.checkInvariants().has_value());
}

// Eviction takes the least recently released inactive block, whatever claims and releases
// happen around it: a model LRU list against the pool's Removed events, with claims near the
// head (where the eviction prefetch cursor walks) and evictions in bursts, then a clearCache.
TEST(BlockPoolTest, EvictsInLruOrderWhileClaimsAndReleasesInterleave) {
  constexpr std::uint32_t kBlocks = 64;
  BlockPool pool(kBlocks);
  std::vector<KvEvent> events;
  std::vector<std::uint64_t> lru;         // model: inactive hashes, the next victim first
  std::map<std::uint64_t, BlockId> held;  // active hashes (one copy each)
  std::uint64_t next_hash = 1;
  const auto allocateCached = [&] {
    const BlockId b = pool.allocatePrivate(events);
    EXPECT_TRUE(pool.finalize(b, BlockHash{next_hash}));
    held[next_hash++] = b;
  };
  for (std::uint32_t i = 0; i < kBlocks; ++i) allocateCached();
  ASSERT_TRUE(events.empty());
  std::mt19937 rng(7);
  std::uint64_t evictions = 0;
  for (int round = 0; round < 3000; ++round) {
    const auto op = rng() % 10;
    if (op < 4 && !held.empty()) {  // release a random active block
      auto it = held.begin();
      std::advance(it, rng() % held.size());
      pool.release(it->second);
      lru.push_back(it->first);
      held.erase(it);
    } else if (op < 6 && !lru.empty()) {  // claim one of the first 16 inactive blocks
      const std::size_t i = rng() % std::min<std::size_t>(16, lru.size());
      held[lru[i]] = pool.claimCached(BlockHash{lru[i]});
      lru.erase(lru.begin() + static_cast<std::ptrdiff_t>(i));
    } else {  // a burst of evictions
      for (auto n = 1 + rng() % 12; n > 0 && !lru.empty(); --n) {
        events.clear();
        allocateCached();
        ASSERT_EQ(events.size(), 1u);
        ASSERT_EQ(std::get<BlockRemoved>(events[0]).block_hash, lru.front()) << "round " << round;
        lru.erase(lru.begin());
        ++evictions;
      }
    }
    ASSERT_EQ(pool.numInactive(), lru.size());
  }
  EXPECT_GT(evictions, 500u);
  EXPECT_TRUE(pool.checkInvariants().has_value());
  // After a clearCache the pool allocates from free blocks, then evicts in release order again.
  for (const auto& [hash, block] : held) pool.release(block);
  held.clear();
  ASSERT_TRUE(pool.clearCache());
  lru.clear();
  for (std::uint32_t i = 0; i < kBlocks; ++i) allocateCached();
  for (auto& [hash, block] : held) {
    pool.release(block);
    lru.push_back(hash);
  }
  held.clear();
  for (const std::uint64_t expected : lru) {
    events.clear();
    allocateCached();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(std::get<BlockRemoved>(events[0]).block_hash, expected);
  }
  EXPECT_TRUE(pool.checkInvariants().has_value());
}

TEST(BlockPoolTest, ClearCacheOnlyWhenNothingActive) {
  BlockPool pool(2);
  std::vector<KvEvent> events;
  const BlockId a = pool.allocatePrivate(events);
  pool.finalize(a, BlockHash{5});
  EXPECT_FALSE(pool.clearCache());
  pool.release(a);
  EXPECT_TRUE(pool.clearCache());
  EXPECT_EQ(pool.numFree(), 2u);
  EXPECT_TRUE(pool.cachedHashes().empty());
  EXPECT_TRUE(events.empty());
}

TEST(StatsTest, WelfordPopulationVariance) {
  detail::Welford w;
  for (double x : {2, 4, 4, 4, 5, 5, 7, 9}) w.add(x);
  EXPECT_DOUBLE_EQ(w.variance(), 4.0);
  detail::Welford two;
  two.add(4);
  two.add(12);
  EXPECT_DOUBLE_EQ(two.variance(), 16.0);
  EXPECT_EQ(detail::Welford{}.variance(), 0.0);
}

TEST(StatsTest, RunningMomentsSupportRemoval) {
  detail::RunningMoments m;
  for (std::uint64_t x : {2u, 4u, 4u, 4u, 5u, 5u, 7u, 9u, 100u}) m.add(x);
  m.remove(100);
  EXPECT_EQ(m.count(), 8u);
  EXPECT_EQ(m.sum(), 40u);
  EXPECT_DOUBLE_EQ(m.variance(), 4.0);
}

}  // namespace
}  // namespace mocker::engine
