// base/lines.h: line splitting and numbering at the edges (empty text, final newline, blank
// lines, CR kept, no newline at the end).
#include "base/lines.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mocker {
namespace {

std::vector<std::string> collect(std::string_view text) {
  std::vector<std::string> out;
  std::size_t expected = 0;
  for (const auto [line, number] : Lines(text)) {
    EXPECT_EQ(number, ++expected);
    out.emplace_back(line);
  }
  return out;
}

TEST(Lines, SplitsAtNewlinesAndNumbersFromOne) {
  using V = std::vector<std::string>;
  EXPECT_EQ(collect(""), V{});
  EXPECT_EQ(collect("\n"), V{""});
  EXPECT_EQ(collect("a"), V{"a"});
  EXPECT_EQ(collect("a\n"), V{"a"});
  EXPECT_EQ(collect("a\n\n"), (V{"a", ""}));
  EXPECT_EQ(collect("a\nbc\n\nd"), (V{"a", "bc", "", "d"}));
  EXPECT_EQ(collect("x\r\ny\r\n"), (V{"x\r", "y\r"}));
}

TEST(Lines, AnEarlyExitStopsWhereItIs) {
  std::size_t seen = 0;
  for (const auto [line, number] : Lines("a\nb\nc\n")) {
    seen = number;
    if (line == "b") break;
  }
  EXPECT_EQ(seen, 2u);
}

}  // namespace
}  // namespace mocker
