#include "engine/block_pool.h"

#include <gtest/gtest.h>

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
