// RadixCache (compressed runs) against a page-granular reference model: one node per page, a
// hash → page map, eviction of the unlocked leaf page with the oldest tick. Random requests
// over a small token alphabet share prefixes, diverge inside runs (splits), re-lock matched
// prefixes, publish in chunks and release in random order under a small pool (constant
// eviction); every step compares events, counts and created flags, and checks the invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engine/block_hash.h"
#include "engine/radix_cache.h"

namespace mocker::engine {
namespace {

// The uncompressed page tree the compressed one must be indistinguishable from.
class ReferenceTree {
 public:
  explicit ReferenceTree(std::uint32_t pages) : free_(pages) {}

  std::uint32_t free() const { return free_; }
  std::uint32_t evictable() const {
    std::uint32_t n = 0;
    for (const auto& [h, p] : pages_) n += p.lock == 0 ? 1u : 0u;
    return n;
  }
  std::uint32_t cached() const { return static_cast<std::uint32_t>(pages_.size()); }
  std::uint32_t match(std::span<const BlockHash> hashes) const {
    std::uint32_t n = 0;
    while (n < hashes.size() && pages_.contains(hashes[n].value())) ++n;
    return n;
  }
  std::uint32_t countUnlocked(std::span<const BlockHash> hashes) const {
    std::uint32_t n = 0;
    for (BlockHash h : hashes) n += pages_.at(h.value()).lock == 0 ? 1u : 0u;
    return n;
  }
  void lock(std::span<const BlockHash> hashes) {
    for (BlockHash h : hashes) {
      Page& p = pages_.at(h.value());
      ++p.lock;
      p.tick = ++clock_;
    }
  }
  void allocate(std::uint32_t n, std::vector<std::uint64_t>& removed) {
    while (free_ < n) {
      std::optional<std::uint64_t> victim;
      for (const auto& [h, p] : pages_) {
        if (p.lock == 0 && p.children == 0 && (!victim || p.tick < pages_.at(*victim).tick)) {
          victim = h;
        }
      }
      ASSERT_TRUE(victim.has_value());
      if (const auto parent = pages_.at(*victim).parent) --pages_.at(*parent).children;
      pages_.erase(*victim);
      removed.push_back(*victim);
      ++free_;
    }
    free_ -= n;
  }
  bool insert(std::optional<std::uint64_t> parent, BlockHash h) {
    if (auto it = pages_.find(h.value()); it != pages_.end()) {
      ++it->second.lock;
      it->second.tick = ++clock_;
      ++free_;
      return false;
    }
    pages_[h.value()] = Page{parent, ++clock_, 1, 0};
    if (parent) ++pages_.at(*parent).children;
    return true;
  }
  void release(std::span<const BlockHash> hashes, std::uint32_t private_pages) {
    for (BlockHash h : hashes) pages_.at(h.value()).tick = ++clock_;
    for (BlockHash h : hashes) --pages_.at(h.value()).lock;
    free_ += private_pages;
  }

 private:
  struct Page {
    std::optional<std::uint64_t> parent;
    std::uint64_t tick;
    std::uint32_t lock;
    std::uint32_t children;
  };
  std::map<std::uint64_t, Page> pages_;
  std::uint32_t free_;
  std::uint64_t clock_ = 0;
};

struct Holder {
  std::vector<BlockHash> hashes;
  std::uint32_t path = 0;  // cached pages held
  std::uint32_t private_pages = 0;
};

std::vector<BlockHash> randomSequence(std::mt19937_64& rng) {
  // Alphabet 3, length 1..14: sequences share prefixes often and diverge at every depth.
  const auto len = static_cast<std::size_t>(1 + rng() % 14);
  std::vector<BlockHash> out;
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < len; ++i) {
    h = (h ^ (rng() % 3 + 1)) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    out.push_back(BlockHash{h});
  }
  return out;
}

TEST(RadixCacheTest, MatchesPageGranularReferenceUnderRandomTraffic) {
  constexpr std::uint32_t kPages = 40;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    RadixCache cache(kPages);
    ReferenceTree ref(kPages);
    std::vector<Holder> held;
    for (int step = 0; step < 400; ++step) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
      std::vector<KvEvent> events;
      std::vector<std::uint64_t> expected_removed;
      if (!held.empty() && (rng() % 2 == 0 || held.size() > 6)) {
        const std::size_t i = rng() % held.size();
        Holder& h = held[i];
        cache.releasePath(std::span(h.hashes).first(h.path));
        cache.freePrivate(h.private_pages);
        ref.release(std::span(h.hashes).first(h.path), h.private_pages);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        Holder h{randomSequence(rng)};
        const std::uint32_t matched = cache.matchLength(h.hashes);
        ASSERT_EQ(matched, ref.match(h.hashes));
        const auto prefix = static_cast<std::uint32_t>(rng() % (matched + 1));
        const auto total = static_cast<std::uint32_t>(h.hashes.size());
        const std::span<const BlockHash> lock = std::span(h.hashes).first(prefix);
        const std::uint32_t newly = cache.countUnlocked(lock);
        ASSERT_EQ(newly, ref.countUnlocked(lock));
        if (total - prefix + newly > cache.numFree() + cache.numEvictable()) continue;
        cache.lockPath(lock);
        ref.lock(lock);
        cache.allocatePrivate(total - prefix, events);
        ref.allocate(total - prefix, expected_removed);
        h.path = prefix;
        h.private_pages = total - prefix;
        // Publish in up to two chunks, locating the path end afresh for each.
        const auto mid = static_cast<std::uint32_t>(prefix + rng() % (total - prefix + 1));
        for (const std::uint32_t end : {mid, total}) {
          RadixCache::PageRef parent = cache.locate(std::span(h.hashes).first(h.path));
          while (h.path < end) {
            // Runs of random length, one page at a time or all at once.
            const auto want = static_cast<std::uint32_t>(1 + rng() % (end - h.path));
            bool created = false;
            // A random capacity hint: it may size a run's storage, never change the tree.
            const std::uint32_t n =
                cache.insertRun(parent, std::span(h.hashes).subspan(h.path, want), created,
                                static_cast<std::uint32_t>(rng() % 3 == 0 ? 0 : rng() % 20));
            ASSERT_TRUE(n >= 1 && n <= want);
            for (const std::uint32_t stop = h.path + n; h.path < stop; ++h.path) {
              const std::optional<std::uint64_t> ref_parent =
                  h.path == 0 ? std::nullopt : std::optional(h.hashes[h.path - 1].value());
              ASSERT_EQ(created, ref.insert(ref_parent, h.hashes[h.path]));
              --h.private_pages;
            }
            ASSERT_EQ(cache.locate(std::span(h.hashes).first(h.path)).node, parent.node);
            ASSERT_EQ(cache.locate(std::span(h.hashes).first(h.path)).offset, parent.offset);
          }
        }
        held.push_back(std::move(h));
      }
      std::vector<std::uint64_t> removed;
      for (const KvEvent& e : events) removed.push_back(std::get<BlockRemoved>(e).block_hash);
      ASSERT_EQ(removed, expected_removed);
      ASSERT_EQ(cache.numFree(), ref.free());
      ASSERT_EQ(cache.numEvictable(), ref.evictable());
      ASSERT_EQ(cache.numCached(), ref.cached());
      std::vector<std::span<const BlockHash>> paths;
      for (const Holder& h : held) paths.push_back(std::span(h.hashes).first(h.path));
      const Status ok = cache.checkInvariants(paths);
      ASSERT_TRUE(ok.has_value()) << ok.error().message;
    }
  }
}

std::vector<BlockHash> hashesOf(std::initializer_list<std::uint64_t> values) {
  std::vector<BlockHash> out;
  for (const std::uint64_t v : values) out.push_back(BlockHash{v});
  return out;
}

// Publishes `hashes` (all private, none held yet) as one holder's path; returns the created flag
// of each insertRun() call in order.
std::vector<bool> publish(RadixCache& cache, std::span<const BlockHash> hashes) {
  std::vector<KvEvent> events;
  cache.allocatePrivate(static_cast<std::uint32_t>(hashes.size()), events);
  RadixCache::PageRef parent;
  std::vector<bool> created;
  for (std::size_t i = 0; i < hashes.size();) {
    bool c = false;
    i += cache.insertRun(parent, hashes.subspan(i), c);
    created.push_back(c);
  }
  return created;
}

std::vector<std::uint64_t> evictAll(RadixCache& cache) {
  std::vector<KvEvent> events;
  cache.allocatePrivate(cache.numFree() + cache.numEvictable(), events);
  std::vector<std::uint64_t> removed;
  for (const KvEvent& e : events) removed.push_back(std::get<BlockRemoved>(e).block_hash);
  return removed;
}

TEST(RadixCacheTest, SplitsARunWhereASequenceDivergesAndSharesTheCommonPrefix) {
  RadixCache cache(16);
  const std::vector<BlockHash> a = hashesOf({1, 2, 3, 4});
  const std::vector<BlockHash> b = hashesOf({1, 2, 7, 8});
  EXPECT_EQ(publish(cache, a), std::vector<bool>{true});  // one run of 4 pages
  EXPECT_EQ(cache.numCached(), 4u);
  EXPECT_EQ(cache.matchLength(b), 2u);
  // b shares [1, 2] (its private copies are freed) and creates [7, 8] below page 2, which
  // splits a's run in two: the shared head and a's tail [3, 4].
  EXPECT_EQ(publish(cache, b), (std::vector<bool>{false, true}));
  EXPECT_EQ(cache.numCached(), 6u);
  EXPECT_EQ(cache.numPrivate(), 0u);
  EXPECT_EQ(cache.locate(std::span(a).first(2)).node, cache.locate(std::span(b).first(2)).node);
  EXPECT_NE(cache.locate(a).node, cache.locate(b).node);
  EXPECT_EQ(cache.matchLength(a), 4u);
  EXPECT_EQ(cache.matchLength(b), 4u);
  EXPECT_EQ(cache.matchLength(hashesOf({1, 2, 3, 9})), 3u);
  EXPECT_EQ(cache.matchLength(hashesOf({2, 3})), 0u);  // a run is found only from its parent
  const std::vector<std::span<const BlockHash>> held{a, b};
  const Status ok = cache.checkInvariants(held);
  EXPECT_TRUE(ok.has_value()) << ok.error().message;
}

TEST(RadixCacheTest, LockRefsCountHoldersAndOnlyUnlockedLeavesAreEvictable) {
  RadixCache cache(8);
  const std::vector<BlockHash> a = hashesOf({1, 2, 3});
  publish(cache, a);
  const std::vector<BlockHash> prefix = hashesOf({1, 2});
  EXPECT_EQ(cache.countUnlocked(prefix), 0u);
  cache.lockPath(prefix);  // a second holder of [1, 2]
  EXPECT_EQ(cache.numActive(), 3u);
  cache.releasePath(a);  // page 3 is free to go; 1 and 2 are still held once
  EXPECT_EQ(cache.numEvictable(), 1u);
  EXPECT_EQ(cache.countUnlocked(a), 1u);
  const std::vector<std::span<const BlockHash>> held{prefix};
  const Status ok = cache.checkInvariants(held);
  EXPECT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(evictAll(cache), std::vector<std::uint64_t>{3});  // never a locked page
  EXPECT_EQ(cache.matchLength(a), 2u);
  cache.releasePath(prefix);
  EXPECT_EQ(cache.numEvictable(), 2u);
  EXPECT_EQ(evictAll(cache), (std::vector<std::uint64_t>{2, 1}));  // leaf first
  EXPECT_EQ(cache.numCached(), 0u);
  EXPECT_EQ(cache.numActive(), 8u);  // every page is now private to the caller
}

TEST(RadixCacheTest, EvictsLeafPagesLeastRecentlyUsedFirst) {
  // Three sequences under one shared page; released in the order b, c, a. Within a released
  // path the deepest page is the oldest leaf (ticks are set root first), across paths the one
  // released first; a shared page goes only when it has no child left.
  RadixCache cache(16);
  const std::vector<BlockHash> a = hashesOf({1, 10, 11});
  const std::vector<BlockHash> b = hashesOf({1, 20, 21});
  const std::vector<BlockHash> c = hashesOf({1, 30});
  publish(cache, a);
  publish(cache, b);
  publish(cache, c);
  cache.releasePath(b);
  cache.releasePath(c);
  cache.releasePath(a);
  std::vector<KvEvent> events;
  cache.allocatePrivate(cache.numFree() + 3, events);  // exactly three evictions
  std::vector<std::uint64_t> removed;
  for (const KvEvent& e : events) removed.push_back(std::get<BlockRemoved>(e).block_hash);
  EXPECT_EQ(removed, (std::vector<std::uint64_t>{21, 20, 30}));
  // Touching a's path again makes it the most recent: nothing is left but a.
  cache.lockPath(std::span(a).first(2));
  cache.releasePath(std::span(a).first(2));
  EXPECT_EQ(evictAll(cache), (std::vector<std::uint64_t>{11, 10, 1}));
}

TEST(RadixCacheTest, EvictionWithoutRecordingLeavesTheSameTree) {
  // Eviction with KV events off takes a leaf's last tick segment in one step; it must leave the
  // tree, the counts and the eviction total exactly as recorded eviction (page by page) does.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    RadixCache recorded(40);
    RadixCache silent(40);
    silent.setRecordRemovals(false);
    std::vector<KvEvent> recorded_events;
    std::vector<KvEvent> silent_events;
    for (int step = 0; step < 200; ++step) {
      const std::vector<BlockHash> seq = randomSequence(rng);
      // Lock a random cached prefix again (new ticks inside runs), then publish and release.
      const std::uint32_t matched = recorded.matchLength(seq);
      ASSERT_EQ(silent.matchLength(seq), matched);
      const auto prefix = static_cast<std::uint32_t>(rng() % (matched + 1));
      for (RadixCache* c : {&recorded, &silent}) {
        c->lockPath(std::span(seq).first(prefix));
        c->releasePath(std::span(seq).first(prefix));
      }
      publish(recorded, seq);
      publish(silent, seq);
      recorded.releasePath(seq);
      silent.releasePath(seq);
      const auto take =
          static_cast<std::uint32_t>(rng() % (recorded.numFree() + 1 + recorded.numEvictable()));
      recorded.allocatePrivate(take, recorded_events);
      silent.allocatePrivate(take, silent_events);
      recorded.freePrivate(take);
      silent.freePrivate(take);
      ASSERT_EQ(silent.cachedHashes(), recorded.cachedHashes());
      ASSERT_EQ(silent.numEvictable(), recorded.numEvictable());
      ASSERT_EQ(silent.numFree(), recorded.numFree());
      ASSERT_EQ(silent.numEvicted(), recorded.numEvicted());
      const Status ok = silent.checkInvariants({});
      ASSERT_TRUE(ok.has_value()) << ok.error().message;
    }
    EXPECT_TRUE(silent_events.empty());
    EXPECT_FALSE(recorded_events.empty());
    EXPECT_GT(silent.numEvicted(), 0u);
  }
}

// A random token sequence (alphabet 3, length 1..14, one adapter of two or none) as a
// hash-keyed cache sees it (sequence hashes) and as a token-keyed one does (s_0, then tokens).
struct TokenSequence {
  std::vector<BlockHash> hashes;
  std::vector<BlockHash> keys;
};

TokenSequence randomTokenSequence(std::mt19937_64& rng, const HashSeeds& base) {
  const auto len = static_cast<std::size_t>(1 + rng() % 14);
  std::vector<std::uint32_t> tokens;
  for (std::size_t i = 0; i < len; ++i) tokens.push_back(static_cast<std::uint32_t>(rng() % 3));
  HashSeeds seeds = base;
  if (const std::uint64_t adapter = rng() % 3; adapter != 0) seeds.lora_key = adapter * 977;
  TokenSequence out;
  for (const std::uint64_t h : sequenceHashes(tokens, 1, seeds)) out.hashes.push_back(BlockHash{h});
  out.keys.push_back(out.hashes.front());
  for (std::size_t i = 1; i < len; ++i) out.keys.push_back(BlockHash{tokens[i]});
  return out;
}

std::vector<std::uint64_t> removedHashes(const std::vector<KvEvent>& events) {
  std::vector<std::uint64_t> out;
  for (const KvEvent& e : events) out.push_back(std::get<BlockRemoved>(e).block_hash);
  return out;
}

// Page size 1: the token-keyed tree (identity = parent page + token) behaves exactly as the
// hash-keyed one on the same traffic — matches, created flags, counts, evictions and the cached
// set (derived from the keys) — and, in half of the seeds, once recording is switched on halfway
// (re-keying the tree by sequence hashes), the same BlockRemoved hashes in order.
TEST(RadixCacheTest, TokenKeysBehaveAsSequenceHashKeys) {
  constexpr std::uint32_t kPages = 40;
  const HashSeeds seeds{.hash_seed = 7, .chain_seed = 11, .lora_key = std::nullopt};
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    RadixCache by_hash(kPages);
    RadixCache by_token(kPages, seeds);
    ASSERT_FALSE(by_token.tokenKeyed());  // until recording is off on an empty cache
    by_hash.setRecordRemovals(false);
    by_token.setRecordRemovals(false);
    ASSERT_TRUE(by_token.tokenKeyed());
    ASSERT_FALSE(by_hash.tokenKeyed());
    struct Held {
      TokenSequence seq;
      std::uint32_t path = 0;
      std::uint32_t private_pages = 0;
    };
    std::vector<Held> held;
    const auto keysOf = [&](const Held& h) -> std::span<const BlockHash> {
      return by_token.tokenKeyed() ? h.seq.keys : h.seq.hashes;
    };
    for (int step = 0; step < 300; ++step) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (step == 150 && seed % 2 == 1) {
        by_hash.setRecordRemovals(true);
        by_token.setRecordRemovals(true);
        ASSERT_FALSE(by_token.tokenKeyed());
      }
      std::vector<KvEvent> hash_events;
      std::vector<KvEvent> token_events;
      if (!held.empty() && (rng() % 2 == 0 || held.size() > 6)) {
        const std::size_t i = rng() % held.size();
        Held& h = held[i];
        by_hash.releasePath(std::span(h.seq.hashes).first(h.path));
        by_token.releasePath(keysOf(h).first(h.path));
        by_hash.freePrivate(h.private_pages);
        by_token.freePrivate(h.private_pages);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        Held h{randomTokenSequence(rng, seeds)};
        const std::span<const BlockHash> keys = keysOf(h);
        const std::uint32_t matched = by_hash.matchLength(h.seq.hashes);
        ASSERT_EQ(by_token.matchLength(keys), matched);
        const auto prefix = static_cast<std::uint32_t>(rng() % (matched + 1));
        const auto total = static_cast<std::uint32_t>(keys.size());
        const std::uint32_t newly = by_hash.countUnlocked(std::span(h.seq.hashes).first(prefix));
        ASSERT_EQ(by_token.countUnlocked(keys.first(prefix)), newly);
        if (total - prefix + newly > by_hash.numFree() + by_hash.numEvictable()) continue;
        by_hash.lockPath(std::span(h.seq.hashes).first(prefix));
        by_token.lockPath(keys.first(prefix));
        by_hash.allocatePrivate(total - prefix, hash_events);
        by_token.allocatePrivate(total - prefix, token_events);
        h.path = prefix;
        h.private_pages = total - prefix;
        RadixCache::PageRef hash_parent = by_hash.locate(std::span(h.seq.hashes).first(h.path));
        RadixCache::PageRef token_parent = by_token.locate(keys.first(h.path));
        while (h.path < total) {
          const auto want = static_cast<std::uint32_t>(1 + rng() % (total - h.path));
          bool hash_created = false;
          bool token_created = false;
          const std::uint32_t n = by_hash.insertRun(
              hash_parent, std::span(h.seq.hashes).subspan(h.path, want), hash_created);
          ASSERT_EQ(by_token.insertRun(token_parent, keys.subspan(h.path, want), token_created), n);
          ASSERT_EQ(token_created, hash_created);
          h.path += n;
          h.private_pages -= n;
        }
        held.push_back(std::move(h));
      }
      ASSERT_EQ(removedHashes(token_events), removedHashes(hash_events));
      ASSERT_EQ(by_token.numFree(), by_hash.numFree());
      ASSERT_EQ(by_token.numEvictable(), by_hash.numEvictable());
      ASSERT_EQ(by_token.numCached(), by_hash.numCached());
      ASSERT_EQ(by_token.numEvicted(), by_hash.numEvicted());
      ASSERT_EQ(by_token.cachedHashes(), by_hash.cachedHashes());
      std::vector<std::span<const BlockHash>> paths;
      for (const Held& h : held) paths.push_back(keysOf(h).first(h.path));
      const Status ok = by_token.checkInvariants(paths);
      ASSERT_TRUE(ok.has_value()) << ok.error().message;
    }
    EXPECT_GT(by_token.numEvicted(), 0u);
  }
}

// Two runs that share a token but hang under different parent pages are different pages: the
// token-keyed index keys a child by (parent, token), not by the token alone.
TEST(RadixCacheTest, TokenKeysIdentifyAPageByItsParentAndToken) {
  const HashSeeds seeds{};
  RadixCache cache(16, seeds);
  cache.setRecordRemovals(false);  // empty: token keys from here on
  ASSERT_TRUE(cache.tokenKeyed());
  const auto keysOf = [&](std::vector<std::uint32_t> tokens) {
    std::vector<BlockHash> keys{BlockHash{sequenceHashes(tokens, 1, seeds).front()}};
    for (std::size_t i = 1; i < tokens.size(); ++i) keys.push_back(BlockHash{tokens[i]});
    return keys;
  };
  const std::vector<BlockHash> a = keysOf({5, 1, 2});
  const std::vector<BlockHash> b = keysOf({6, 1, 2});  // same tokens after a different page 0
  EXPECT_EQ(publish(cache, a), std::vector<bool>{true});
  EXPECT_EQ(cache.matchLength(b), 0u);
  EXPECT_EQ(publish(cache, b), std::vector<bool>{true});
  EXPECT_EQ(cache.numCached(), 6u);
  EXPECT_EQ(cache.matchLength(keysOf({5, 1, 3})), 2u);
  std::vector<std::uint64_t> expected =
      sequenceHashes(std::vector<std::uint32_t>{5, 1, 2}, 1, seeds);
  for (const std::uint64_t h : sequenceHashes(std::vector<std::uint32_t>{6, 1, 2}, 1, seeds)) {
    expected.push_back(h);
  }
  std::sort(expected.begin(), expected.end());
  std::vector<std::uint64_t> cached;
  for (const BlockHash h : cache.cachedHashes()) cached.push_back(h.value());
  EXPECT_EQ(cached, expected);
  const std::vector<std::span<const BlockHash>> held{a, b};
  const Status ok = cache.checkInvariants(held);
  EXPECT_TRUE(ok.has_value()) << ok.error().message;
}

}  // namespace
}  // namespace mocker::engine
