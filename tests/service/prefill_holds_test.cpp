#include "service/prefill_holds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "protocol/limits.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using Clock = PrefillHolds::Clock;
using engine::RequestId;

RequestId rid(std::uint64_t v) { return RequestId(v); }

// 1 token of KV costs 1 ms to transfer: kv_bytes_per_token / bandwidth.
engine::EngineConfig oneMsPerToken() {
  engine::EngineConfig c;
  c.kv_transfer_bandwidth_gbps = 1.0;
  const double ms_per_token = engine::kvTransferMs(c, 1);
  c.kv_transfer_bandwidth_gbps = ms_per_token;  // now exactly 1 ms per token
  return c;
}

TEST(PrefillHoldsTest, RandomKeysHaveTheProtocolLengthAndDiffer) {
  std::set<std::string> keys;
  for (int i = 0; i < 64; ++i) {
    const std::string k = randomHandoffKey();
    EXPECT_EQ(k.size(), protocol::kHandoffKeyBytes);
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), 64u);
}

TEST(PrefillHoldsTest, FetchIsDueAtThePrefillEndPlusTheTransferOfAtMostTheHeldTokens) {
  const engine::EngineConfig config = oneMsPerToken();
  ASSERT_DOUBLE_EQ(engine::kvTransferMs(config, 10), 10.0);
  const Clock::time_point start{};
  const LoopClock clock(start);
  PrefillHolds holds(config);
  holds.hold("a", rid(1), /*prefill_end_ms=*/100.0, /*max_tokens=*/64);
  holds.hold("b", rid(2), 200.0, 64);
  EXPECT_TRUE(holds.isHeld(rid(1)));
  EXPECT_EQ(holds.numHeld(), 2u);
  // Paced: on the loop clock. Asked for 1,000 tokens, 64 are held: 100 + 64 ms.
  EXPECT_EQ(holds.fetch("a", 1000, {"peer-a", true}, start, &clock),
            clock.wallAt(100.0 + engine::kvTransferMs(config, 64)));
  // Unpaced: at once.
  const Clock::time_point now = start + 5ms;
  EXPECT_EQ(holds.fetch("b", 8, {"peer-b", false}, now, nullptr), now);
  EXPECT_EQ(holds.nextDue(), now);
  EXPECT_EQ(holds.numFetching(), 2u);
}

TEST(PrefillHoldsTest, UnknownOrAlreadyFetchingKeysAreNotFound) {
  const engine::EngineConfig config = oneMsPerToken();
  PrefillHolds holds(config);
  holds.hold("a", rid(1), 0.0, 16);
  EXPECT_EQ(holds.fetch("x", 1, {"p", false}, Clock::time_point{}, nullptr), std::nullopt);
  EXPECT_TRUE(holds.fetch("a", 1, {"p", false}, Clock::time_point{}, nullptr));
  EXPECT_EQ(holds.fetch("a", 1, {"q", false}, Clock::time_point{}, nullptr), std::nullopt);
  EXPECT_EQ(holds.numFetching(), 1u);
}

TEST(PrefillHoldsTest, TakeDueReleasesInDueOrderAndLeavesTheRest) {
  const Clock::time_point start{};
  const LoopClock clock(start);
  const engine::EngineConfig config = oneMsPerToken();
  PrefillHolds holds(config);
  holds.hold("late", rid(1), 0.0, 30);
  holds.hold("early", rid(2), 0.0, 10);
  holds.hold("later", rid(3), 0.0, 50);
  ASSERT_TRUE(holds.fetch("late", 30, {"p1", false}, start, &clock));
  ASSERT_TRUE(holds.fetch("early", 10, {"p2", true}, start, &clock));
  ASSERT_TRUE(holds.fetch("later", 50, {"p3", false}, start, &clock));
  EXPECT_TRUE(holds.takeDue(clock.wallAt(9.5)).empty());
  const auto due = holds.takeDue(clock.wallAt(30.5));
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].key, "early");
  EXPECT_EQ(due[0].to.peer, "p2");
  EXPECT_TRUE(due[0].to.delimiter);
  EXPECT_EQ(due[0].held, rid(2));
  EXPECT_EQ(due[1].key, "late");
  EXPECT_EQ(due[1].held, rid(1));
  EXPECT_FALSE(holds.isHeld(rid(1)));
  EXPECT_FALSE(holds.isHeld(rid(2)));
  EXPECT_TRUE(holds.isHeld(rid(3)));
  EXPECT_EQ(holds.nextDue(), clock.wallAt(engine::kvTransferMs(config, 50)));
}

TEST(PrefillHoldsTest, AForgottenHoldIsAnsweredNotFoundWhenItsFetchIsDue) {
  const engine::EngineConfig config = oneMsPerToken();
  PrefillHolds holds(config);
  holds.hold("a", rid(1), 0.0, 16);
  ASSERT_TRUE(holds.fetch("a", 16, {"p", false}, Clock::time_point{}, nullptr));
  EXPECT_TRUE(holds.forget(rid(1)));
  EXPECT_FALSE(holds.forget(rid(1)));
  const auto due = holds.takeDue(Clock::time_point{});
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].key, "a");
  EXPECT_EQ(due[0].held, std::nullopt);
  EXPECT_EQ(holds.numHeld(), 0u);
}

TEST(PrefillHoldsTest, ReleaseFreesTheHoldAndDropsItsFetch) {
  const engine::EngineConfig config = oneMsPerToken();
  PrefillHolds holds(config);
  holds.hold("a", rid(1), 0.0, 16);
  holds.hold("b", rid(2), 0.0, 16);
  ASSERT_TRUE(holds.fetch("a", 16, {"p", false}, Clock::time_point{}, nullptr));
  EXPECT_EQ(holds.release("a"), rid(1));
  EXPECT_EQ(holds.release("a"), std::nullopt);
  EXPECT_EQ(holds.release("unknown"), std::nullopt);
  EXPECT_EQ(holds.numFetching(), 0u);
  EXPECT_TRUE(holds.takeDue(Clock::time_point::max()).empty());
  EXPECT_TRUE(holds.isHeld(rid(2)));
}

TEST(PrefillHoldsTest, ExpireReturnsTheKeyAndItsWaitingFetchers) {
  const engine::EngineConfig config = oneMsPerToken();
  PrefillHolds holds(config);
  holds.hold("a", rid(1), 0.0, 16);
  holds.hold("b", rid(2), 0.0, 16);
  ASSERT_TRUE(holds.fetch("a", 16, {"pa", true}, Clock::time_point{}, nullptr));
  ASSERT_TRUE(holds.fetch("b", 16, {"pb", false}, Clock::time_point{}, nullptr));
  const auto expired = holds.expire(rid(1));
  ASSERT_TRUE(expired);
  EXPECT_EQ(expired->key, "a");
  ASSERT_EQ(expired->fetches.size(), 1u);
  EXPECT_EQ(expired->fetches[0].peer, "pa");
  EXPECT_EQ(holds.expire(rid(1)), std::nullopt);
  EXPECT_EQ(holds.numFetching(), 1u);
  const auto none_fetching = holds.expire(rid(3));
  EXPECT_FALSE(none_fetching);
  holds.hold("c", rid(3), 0.0, 16);
  const auto idle = holds.expire(rid(3));
  ASSERT_TRUE(idle);
  EXPECT_TRUE(idle->fetches.empty());
}

TEST(PrefillHoldsTest, TakeAllEmptiesEverything) {
  const engine::EngineConfig config = oneMsPerToken();
  PrefillHolds holds(config);
  holds.hold("a", rid(1), 0.0, 16);
  holds.hold("b", rid(2), 0.0, 16);
  ASSERT_TRUE(holds.fetch("a", 16, {"p", false}, Clock::time_point{}, nullptr));
  std::vector<RequestId> all = holds.takeAll();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<RequestId>{rid(1), rid(2)}));
  EXPECT_EQ(holds.numHeld(), 0u);
  EXPECT_EQ(holds.numFetching(), 0u);
  EXPECT_EQ(holds.nextDue(), std::nullopt);
}

}  // namespace
}  // namespace mocker::service
