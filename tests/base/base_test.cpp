#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <unordered_set>

#include "base/result.h"
#include "base/strong_id.h"

namespace mocker {
namespace {

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
