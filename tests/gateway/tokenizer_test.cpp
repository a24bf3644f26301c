#include "gateway/tokenizer.h"

#include <gtest/gtest.h>

#include <vector>

#include "tools/replay/random.h"

namespace mocker::gateway {
namespace {

TEST(BuiltinTokenizerTest, CutsWordsWithTheirLeadingSpace) {
  BuiltinTokenizer t;
  EXPECT_EQ(t.encode("Hello world").size(), 2u);
  EXPECT_EQ(t.encode("Hello  world").size(), 3u);  // "Hello", " ", " world"
  EXPECT_EQ(t.encode("a\nb").size(), 3u);          // "a", "\n", "b"
  EXPECT_EQ(t.encode(" ").size(), 1u);
  EXPECT_EQ(t.encode("").size(), 0u);
  EXPECT_EQ(t.encode("abcdefghijklmnop").size(), 2u);   // 12 + 4 bytes
  EXPECT_EQ(t.encode(" abcdefghijklmnop").size(), 2u);  // " abcdefghijk" + "lmnop"
}

TEST(BuiltinTokenizerTest, NeverCutsInsideACodePoint) {
  BuiltinTokenizer t;
  // 7 two-byte code points: 14 bytes → pieces of 12 and 2 bytes, never 13 / 1.
  const std::string text = "ééééééé";
  const auto ids = t.encode(text);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(t.encode("éééééé").size(), 1u);  // 12 bytes exactly
}

TEST(BuiltinTokenizerTest, EqualTextPrefixesGiveEqualTokenPrefixes) {
  BuiltinTokenizer t;
  const auto a = t.encode("You are a helpful assistant. Tell me about cats");
  const auto b = t.encode("You are a helpful assistant. Tell me about dogs please");
  ASSERT_GE(a.size(), 8u);
  for (std::size_t i = 0; i + 1 < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "token " << i;
  EXPECT_NE(a.back(), b[a.size() - 1]);
}

TEST(BuiltinTokenizerTest, DecodedIdsReTokenizeToTheSameIds) {
  BuiltinTokenizer t;
  replay::SplitMix64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::uint32_t> ids(rng.uniformIndex(40) + 1);
    for (auto& id : ids) {
      // Small ids, ids with many hex digits and the extremes.
      const auto pick = rng.uniformIndex(4);
      id = pick == 0   ? 0u
           : pick == 1 ? 0xFFFF'FFFFu
                       : static_cast<std::uint32_t>(rng.next() >> (pick * 12));
    }
    EXPECT_EQ(t.encode(t.decode(ids)), ids) << "round " << round;
  }
  EXPECT_EQ(t.piece(0), " t0");
  EXPECT_EQ(t.piece(0x1f), " t1f");
  EXPECT_EQ(t.decode(std::vector<std::uint32_t>{1, 255}), " t1 tff");
}

TEST(BuiltinTokenizerTest, NonCanonicalSpellingsHashInstead) {
  BuiltinTokenizer t;
  // Leading zero, upper case, too many digits: not the canonical spelling of an id.
  for (const char* text : {" t01", " tFF", " t123456789", " tx"}) {
    const auto ids = t.encode(text);
    ASSERT_EQ(ids.size(), 1u) << text;
    EXPECT_NE(t.piece(ids[0]), text) << text;
  }
  EXPECT_EQ(t.encode(" t10"), std::vector<std::uint32_t>{16});
}

}  // namespace
}  // namespace mocker::gateway
