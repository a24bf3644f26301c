// The strict UTF-8 validator every msgpack str goes through (protocol/detail/utf8.h).
#include "protocol/detail/utf8.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace mocker::protocol::detail {
namespace {

struct Utf8Case {
  std::string name;
  std::string bytes;
  std::optional<std::size_t> invalid_at;  ///< offset findInvalidUtf8 reports; nullopt = valid
};

TEST(Utf8Test, AcceptsWellFormedAndPinpointsIllFormedSequences) {
  const std::vector<Utf8Case> cases = {
      {"empty", "", std::nullopt},
      {"ASCII", "req-42 hello, world", std::nullopt},
      {"NUL is ASCII", std::string("a\0b", 3), std::nullopt},
      {"2-byte U+00E9", "caf\xc3\xa9", std::nullopt},
      {"2-byte lowest U+0080", "\xc2\x80", std::nullopt},
      {"3-byte U+20AC", "\xe2\x82\xac", std::nullopt},
      {"3-byte lowest U+0800", "\xe0\xa0\x80", std::nullopt},
      {"3-byte below the surrogates U+D7FF", "\xed\x9f\xbf", std::nullopt},
      {"3-byte above the surrogates U+E000", "\xee\x80\x80", std::nullopt},
      {"3-byte U+FFFF", "\xef\xbf\xbf", std::nullopt},
      {"4-byte U+1F600", "\xf0\x9f\x98\x80", std::nullopt},
      {"4-byte lowest U+10000", "\xf0\x90\x80\x80", std::nullopt},
      {"4-byte highest U+10FFFF", "\xf4\x8f\xbf\xbf", std::nullopt},
      {"mixed after a long ASCII run", "0123456789abcdef\xc3\xa9\xe2\x82\xac!", std::nullopt},
      {"ff fe 41",
       "\xff\xfe"
       "A",
       0},
      {"overlong NUL c0 80", "\xc0\x80", 0},
      {"overlong c1 bf", "\xc1\xbf", 0},
      {"overlong 3-byte e0 9f bf", "\xe0\x9f\xbf", 0},
      {"overlong 4-byte f0 8f bf bf", "\xf0\x8f\xbf\xbf", 0},
      {"surrogate U+D800 ed a0 80", "\xed\xa0\x80", 0},
      {"surrogate U+DFFF ed bf bf", "\xed\xbf\xbf", 0},
      {"above U+10FFFF f4 90 80 80", "\xf4\x90\x80\x80", 0},
      {"lead f5", "\xf5\x80\x80\x80", 0},
      {"truncated 3-byte e2 82", "\xe2\x82", 0},
      {"truncated 2-byte at the end", "ab\xc3", 2},
      {"truncated 4-byte f0 9f 98", "\xf0\x9f\x98", 0},
      {"stray continuation 80", "\x80", 0},
      {"stray continuation after a character", "\xc3\xa9\xa9", 2},
      {"second byte not a continuation",
       "\xc3"
       "A",
       0},
      {"third byte not a continuation",
       "\xe2\x82"
       "A",
       0},
      {"fourth byte not a continuation", "\xf0\x9f\x98\xc0", 0},
      {"invalid after eight ASCII bytes", "abcdefgh\xff", 8},
      {"invalid inside an eight-byte word", "abcdefghijk\x80mnopqrstu", 11},
  };
  for (const Utf8Case& c : cases) {
    EXPECT_EQ(findInvalidUtf8(c.bytes), c.invalid_at) << c.name;
  }
}

TEST(Utf8Test, ClipNeverSplitsACharacter) {
  EXPECT_EQ(clipUtf8("abc", 64), "abc");
  EXPECT_EQ(clipUtf8("abcdef", 3), "abc");
  EXPECT_EQ(clipUtf8("ab\xc3\xa9", 3), "ab");
  EXPECT_EQ(clipUtf8("ab\xe2\x82\xac", 4), "ab");
  EXPECT_EQ(clipUtf8("ab\xf0\x9f\x98\x80x", 6), "ab\xf0\x9f\x98\x80");
  EXPECT_EQ(clipUtf8("\xf0\x9f\x98\x80", 2), "");
}

}  // namespace
}  // namespace mocker::protocol::detail
