// The decode-hop router's three rules (tools/replay/decode_router.h).
#include "tools/replay/decode_router.h"

#include <gtest/gtest.h>

#include <vector>

namespace mocker::replay {
namespace {

TEST(DecodeRouterTest, TheDecodeRouterFlagPicksTheRule) {
  EXPECT_EQ(decodeRouterKindFor(RouterKind::RoundRobin), DecodeRouterKind::RoundRobin);
  EXPECT_EQ(decodeRouterKindFor(RouterKind::Random), DecodeRouterKind::Random);
  EXPECT_EQ(decodeRouterKindFor(RouterKind::Kv), DecodeRouterKind::LeastLoaded);
}

TEST(DecodeRouterTest, RoundRobinFollowsTheDispatchIndex) {
  const std::vector<std::uint32_t> load = {5, 0, 9};
  for (std::uint64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(pickDecodeWorker(DecodeRouterKind::RoundRobin, 1, i, load), i % 3);
  }
}

TEST(DecodeRouterTest, LeastLoadedTakesTheFewestInFlightTiesToTheLowest) {
  EXPECT_EQ(
      pickDecodeWorker(DecodeRouterKind::LeastLoaded, 0, 0, std::vector<std::uint32_t>{3, 1, 2}),
      1u);
  EXPECT_EQ(
      pickDecodeWorker(DecodeRouterKind::LeastLoaded, 0, 9, std::vector<std::uint32_t>{2, 4, 2}),
      0u);
}

TEST(DecodeRouterTest, RandomIsAFunctionOfSeedAndIndexAndCoversEveryWorker) {
  const std::vector<std::uint32_t> load(4, 0);
  std::vector<int> hits(4, 0);
  for (std::uint64_t i = 0; i < 200; ++i) {
    const auto d = pickDecodeWorker(DecodeRouterKind::Random, 42, i, load);
    ASSERT_LT(d, 4u);
    EXPECT_EQ(d, pickDecodeWorker(DecodeRouterKind::Random, 42, i,
                                  std::vector<std::uint32_t>{9, 9, 9, 9}));
    ++hits[d];
  }
  for (const int h : hits) EXPECT_GT(h, 20);
  int differs = 0;
  for (std::uint64_t i = 0; i < 50; ++i) {
    differs += pickDecodeWorker(DecodeRouterKind::Random, 42, i, load) !=
               pickDecodeWorker(DecodeRouterKind::Random, 43, i, load);
  }
  EXPECT_GT(differs, 10);
}

}  // namespace
}  // namespace mocker::replay
