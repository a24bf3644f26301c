#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/closest_name.h"
#include "base/enum_names.h"
#include "base/result.h"
#include "base/strong_id.h"

namespace mocker {
namespace {

enum class Shade { Red, Blue };
constexpr EnumNames<Shade, 3> kShades{
    {{"red", Shade::Red}, {"blue", Shade::Blue}, {"azure", Shade::Blue}}};

TEST(EnumNamesTest, BothWaysWithAliasesAndCase) {
  EXPECT_EQ(enumName(kShades, Shade::Blue), "blue");  // the first entry is canonical
  EXPECT_EQ(enumFromName(kShades, "Azure"), Shade::Blue);
  EXPECT_FALSE(enumFromName(kShades, "green").has_value());
  EXPECT_EQ(enumNameList(kShades, " | "), "red | blue | azure");
}

TEST(EnumNamesTest, ErrorCodeNamesAreTheWireNames) {
  EXPECT_STREQ(errorCodeName(ErrorCode::InvalidArgument), "invalid_argument");
  EXPECT_STREQ(errorCodeName(ErrorCode::IoError), "io_error");
  EXPECT_STREQ(errorCodeName(ErrorCode::ResourceExhausted), "resource_exhausted");
  EXPECT_EQ((Error{ErrorCode::NotFound, "x"}).toString(), "not_found: x");
}

Result<int> parsePositive(int x) {
  if (x <= 0) return invalidArgument("x must be > 0 (got " + std::to_string(x) + ")");
  return x;
}

Result<int> doubled(int x) {
  MOCKER_TRY(const int v, parsePositive(x));
  return 2 * v;
}

Status validate(int x) {
  MOCKER_TRY_VOID(parsePositive(x));
  return {};
}

TEST(ResultTest, HoldsValue) {
  const Result<int> r = parsePositive(3);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(*r, 3);
  EXPECT_EQ(r.value(), 3);
}

TEST(ResultTest, HoldsErrorNamingTheProblem) {
  const Result<int> r = parsePositive(-1);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(r.error().toString(), "invalid_argument: x must be > 0 (got -1)");
  EXPECT_EQ(r.error().withContext("field").message, "field: x must be > 0 (got -1)");
}

TEST(ResultTest, TryPropagatesErrorsAndValues) {
  EXPECT_EQ(*doubled(4), 8);
  EXPECT_FALSE(doubled(0).has_value());
  EXPECT_TRUE(validate(1).has_value());
  EXPECT_EQ(validate(0).error().code, ErrorCode::InvalidArgument);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  const Result<int> r = parsePositive(0);
  EXPECT_DEATH((void)r.value(), "MOCKER_CHECK failed");
}

struct ATag {};
struct BTag {};
using AId = StrongId<ATag>;
using BId = StrongId<BTag>;

TEST(StrongIdTest, ComparesAndHashesByValue) {
  EXPECT_LT(AId{1}, AId{2});
  EXPECT_EQ(AId{5}, AId{5});
  std::unordered_set<AId> set{AId{1}, AId{1}, AId{2}};
  EXPECT_EQ(set.size(), 2u);
  static_assert(!std::is_convertible_v<AId, BId>, "distinct tags must not convert");
  static_assert(!std::is_convertible_v<std::uint64_t, AId>, "construction must be explicit");
}

}  // namespace
}  // namespace mocker

namespace {

// The rule of closestName stated directly: every candidate's full distance (a truncation counts
// as at most the limit), the first smallest one if within the limit.
std::optional<std::string> closestNameByFullAlignment(std::string_view name,
                                                      const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  std::vector<std::size_t> distance;
  for (const std::string& c : candidates) {
    const bool truncation = name.size() >= 4 && c.size() > name.size() && c.starts_with(name);
    const std::size_t full = mocker::editDistance(name, c);
    const bool other_word = !mocker::wordsCouldBeTypos(name, c);
    distance.push_back(c == name || other_word ? limit + 1
                       : truncation            ? std::min(full, limit)
                                               : full);
  }
  const auto best = std::min_element(distance.begin(), distance.end());
  if (best == distance.end() || *best > limit) return std::nullopt;
  return candidates[static_cast<std::size_t>(best - distance.begin())];
}

}  // namespace

TEST(ClosestNameTest, SuggestsTyposTranspositionsAndTruncations) {
  const std::vector<std::string> flags{"--num-gpu-blocks", "--block-size", "--max-num-seqs"};
  EXPECT_EQ(mocker::closestName("--num-gpu-block", flags), "--num-gpu-blocks");
  EXPECT_EQ(mocker::closestName("--blokc-size", flags), "--block-size");
  EXPECT_EQ(mocker::closestName("--num-gpu", flags), "--num-gpu-blocks");
  EXPECT_EQ(mocker::closestName("--speculative", flags), std::nullopt);
  EXPECT_EQ(mocker::closestName(std::string(4096, 'k'), flags), std::nullopt);
  EXPECT_EQ(mocker::didYouMean("--block-sise", flags), " (did you mean '--block-size'?)");
  EXPECT_EQ(mocker::didYouMean("--nothing-like-it", flags), "");
}

// Another word in the same place is not a typo: vLLM's --tensor-parallel-size is not a
// misspelt --data-parallel-size, though only 5 of 22 characters differ.
TEST(ClosestNameTest, AnotherWordIsNotATypo) {
  const std::vector<std::string> flags{"--data-parallel-size", "--max-num-seqs"};
  EXPECT_EQ(mocker::closestName("--tensor-parallel-size", flags), std::nullopt);
  EXPECT_EQ(mocker::closestName("--data-paralel-size", flags), "--data-parallel-size");
  EXPECT_EQ(mocker::closestName("--dta-parallel-size", flags), "--data-parallel-size");
  EXPECT_TRUE(mocker::wordsCouldBeTypos("--num-gpu", "--num-gpu-blocks"));  // a truncation
  EXPECT_FALSE(mocker::wordsCouldBeTypos("engine.tensor_size", "engine.data_size"));
}

TEST(ClosestNameTest, SkippingByLengthGapChangesNoAnswer) {
  const std::vector<std::string> keys{"a",
                                      "ab",
                                      "abc",
                                      "block_size",
                                      "block_sizes",
                                      "num_gpu_blocks",
                                      "max_num_seqs",
                                      "seed",
                                      "speedup_ratio",
                                      "endpoints",
                                      "kv_events",
                                      "x"};
  std::vector<std::string> names{"",
                                 "a",
                                 "b",
                                 "ac",
                                 "abd",
                                 "blok_size",
                                 "block",
                                 "blocksize",
                                 "num_gpu",
                                 "num_gpu_block",
                                 "max_num_seq",
                                 "sed",
                                 "speed",
                                 "speedup",
                                 "endpoint",
                                 "kv_event",
                                 "kvevents",
                                 "zzzzzzzzzzzz"};
  for (const auto& k : keys) {  // every key with each of its characters dropped, doubled, swapped
    for (std::size_t i = 0; i < k.size(); ++i) {
      names.push_back(k.substr(0, i) + k.substr(i + 1));
      names.push_back(k.substr(0, i + 1) + k.substr(i));
      if (i + 1 < k.size()) {
        std::string swapped = k;
        std::swap(swapped[i], swapped[i + 1]);
        names.push_back(swapped);
      }
    }
  }
  for (const auto& name : names) {
    EXPECT_EQ(mocker::closestName(name, keys), closestNameByFullAlignment(name, keys)) << name;
    for (const auto& k : keys) {
      const std::size_t full = mocker::editDistance(name, k);
      for (std::size_t bound = 0; bound <= 14; ++bound) {
        EXPECT_EQ(mocker::editDistance(name, k, bound), std::min(full, bound + 1))
            << name << " / " << k << " bound " << bound;
      }
    }
  }
}
