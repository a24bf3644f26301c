// Pins the reference hash vectors. The same vectors are recomputed
// independently with python3-xxhash by tests/engine/hash_vectors.py (registered with ctest).
#include "engine/block_hash.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace mocker::engine {
namespace {

std::vector<std::uint32_t> iota(std::uint32_t first, std::uint32_t last) {
  std::vector<std::uint32_t> v(last - first + 1);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(BlockHashTest, ContentHashVectors) {
  EXPECT_EQ(contentHash(iota(1, 4), 1337), 14643705804678351452ull);
  EXPECT_EQ(contentHash(iota(1, 4), 1337), 0xcb38e4d7fb2dca5cull);
  EXPECT_EQ(contentHash(iota(5, 8), 1337), 16777012769546811212ull);
  EXPECT_EQ(contentHash(iota(9, 12), 1337), 483935686894639516ull);
}

TEST(BlockHashTest, SequenceHashVectorsChainSeed1337) {
  const auto s = sequenceHashes(iota(1, 12), 4, HashSeeds{1337, 1337});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], 0xcb38e4d7fb2dca5cull);
  EXPECT_EQ(s[1], 4945711292740353085ull);
  EXPECT_EQ(s[2], 12583592247330656132ull);
}

TEST(BlockHashTest, SequenceHashVectorsChainSeed0) {
  const auto s = sequenceHashes(iota(1, 12), 4, HashSeeds{1337, 0});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1], 13257339816715102022ull);
  EXPECT_EQ(s[2], 18362646011897812054ull);
}

TEST(BlockHashTest, DynamoRecordedVector) {
  const auto s = sequenceHashes({{11, 22, 33, 44, 55, 66, 77, 88}}, 4, HashSeeds{});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], 4117275816416024698ull);
  EXPECT_EQ(contentHash({{55, 66, 77, 88}}, 1337), 6081346995852963768ull);
  EXPECT_EQ(s[1], 5947898228081096063ull);
}

TEST(BlockHashTest, PartialBlockHasNoHash) {
  EXPECT_EQ(sequenceHashes(iota(1, 10), 4, HashSeeds{}).size(), 2u);
  EXPECT_TRUE(sequenceHashes(iota(1, 3), 4, HashSeeds{}).empty());
}

TEST(BlockHashTest, IncrementalExtensionMatchesFullComputation) {
  const auto tokens = iota(1, 40);
  std::vector<BlockHash> grown;
  for (std::size_t len = 0; len <= tokens.size(); ++len) {
    extendSequenceHashes(std::span(tokens).first(len), 4, HashSeeds{}, grown);
  }
  std::vector<BlockHash> full;
  for (std::uint64_t h : sequenceHashes(tokens, 4, HashSeeds{})) full.push_back(BlockHash{h});
  EXPECT_EQ(grown, full);
}

TEST(BlockHashTest, RawIncrementalExtensionEqualsTypedAndFullComputation) {
  // Repeated blocks (runs of one token) take the reused-content-hash path, also across calls.
  std::vector<std::uint32_t> tokens;
  for (std::uint32_t run : {7u, 7u, 7u, 9u, 9u, 7u, 3u}) tokens.insert(tokens.end(), 4, run);
  std::vector<std::uint64_t> raw;
  std::vector<BlockHash> typed;
  for (std::size_t len = 0; len <= tokens.size(); len += 3) {
    extendSequenceHashes(std::span(tokens).first(len), 4, HashSeeds{}, raw);
    extendSequenceHashes(std::span(tokens).first(len), 4, HashSeeds{}, typed);
  }
  extendSequenceHashes(tokens, 4, HashSeeds{}, raw);
  extendSequenceHashes(tokens, 4, HashSeeds{}, typed);
  const auto full = sequenceHashes(tokens, 4, HashSeeds{});
  EXPECT_EQ(raw, full);
  ASSERT_EQ(typed.size(), full.size());
  for (std::size_t i = 0; i < full.size(); ++i) EXPECT_EQ(typed[i].value(), full[i]);
}

TEST(BlockHashTest, LargeBlocksHashTheSameAsSpecFormula) {
  // 512-token blocks exceed the stack buffer; the chain must still match contentHash+chainHash.
  const auto tokens = iota(1, 1024);
  const auto s = sequenceHashes(tokens, 512, HashSeeds{});
  ASSERT_EQ(s.size(), 2u);
  const auto c0 = contentHash(std::span(tokens).first(512), 1337);
  const auto c1 = contentHash(std::span(tokens).subspan(512), 1337);
  EXPECT_EQ(s[0], c0);
  EXPECT_EQ(s[1], chainHash(c0, c1, 1337));
}

TEST(BlockHashTest, RepeatedBlocksHashTheSameAsSpecFormula) {
  // Runs of one token (as replayed traces produce) make blocks equal to their predecessor; a
  // block that differs only in its last token, or equals an earlier but not the previous block,
  // must get its own content hash.
  std::vector<std::uint32_t> tokens(12, 7);                     // blocks 0-2: 7 7 7 7
  tokens.insert(tokens.end(), {7, 7, 7, 8});                    // block 3: last token differs
  tokens.insert(tokens.end(), {7, 7, 7, 7, 9, 9, 9, 9, 9, 9});  // blocks 4-5, partial 6
  tokens.insert(tokens.end(), {9, 9, 7, 7, 7, 7});              // block 6, block 7 = block 4
  const auto s = sequenceHashes(tokens, 4, HashSeeds{});
  ASSERT_EQ(s.size(), tokens.size() / 4);
  std::uint64_t parent = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::uint64_t c = contentHash(std::span(tokens).subspan(i * 4, 4), 1337);
    const std::uint64_t want = i == 0 ? c : chainHash(parent, c, 1337);
    EXPECT_EQ(s[i], want) << "block " << i;
    parent = want;
  }
}

}  // namespace
}  // namespace mocker::engine
