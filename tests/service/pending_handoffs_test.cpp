#include "service/pending_handoffs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using Clock = PendingHandoffs::Clock;
using engine::RequestId;

RequestId rid(std::uint64_t v) { return RequestId(v); }

TEST(PendingHandoffsTest, AddFindsByIdAndByKey) {
  PendingHandoffs p;
  p.add(rid(4), "tcp://prefill:1", "k4");
  ASSERT_NE(p.find(rid(4)), nullptr);
  EXPECT_EQ(p.find(rid(4))->source, "tcp://prefill:1");
  EXPECT_EQ(p.find(rid(4))->key, "k4");
  EXPECT_EQ(p.find(rid(4))->deadline, std::nullopt);
  EXPECT_EQ(p.byKey("k4"), rid(4));
  EXPECT_TRUE(p.hasKey("k4"));
  EXPECT_FALSE(p.hasKey("k5"));
  EXPECT_EQ(p.find(rid(5)), nullptr);
  EXPECT_EQ(p.size(), 1u);
}

TEST(PendingHandoffsTest, OnlySentHandoffsExpireInIdOrder) {
  const Clock::time_point t0{};
  PendingHandoffs p;
  p.add(rid(9), "s", "k9");
  p.add(rid(3), "s", "k3");
  p.add(rid(5), "s", "k5");
  EXPECT_TRUE(p.sent(rid(9), t0 + 10ms));
  EXPECT_TRUE(p.sent(rid(3), t0 + 20ms));
  EXPECT_FALSE(p.sent(rid(7), t0));
  EXPECT_EQ(p.nextDeadline(), t0 + 10ms);
  EXPECT_TRUE(p.expired(t0 + 9ms).empty());
  EXPECT_EQ(p.expired(t0 + 10ms), (std::vector<RequestId>{rid(9)}));
  EXPECT_EQ(p.expired(t0 + 1s), (std::vector<RequestId>{rid(3), rid(9)}));
  // expired() only reports: the caller fails each one (remove).
  EXPECT_EQ(p.size(), 3u);
}

TEST(PendingHandoffsTest, RemoveForgetsIdAndKey) {
  PendingHandoffs p;
  p.add(rid(1), "s1", "k1");
  p.add(rid(2), "s2", "k2");
  const auto removed = p.remove(rid(1));
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->source, "s1");
  EXPECT_EQ(removed->key, "k1");
  EXPECT_EQ(p.remove(rid(1)), std::nullopt);
  EXPECT_FALSE(p.hasKey("k1"));
  EXPECT_EQ(p.byKey("k1"), std::nullopt);
  EXPECT_EQ(p.byKey("k2"), rid(2));
  EXPECT_EQ(p.nextDeadline(), std::nullopt);
}

TEST(PendingHandoffsTest, TakeAllEmptiesBothIndexes) {
  PendingHandoffs p;
  p.add(rid(1), "s1", "k1");
  p.add(rid(2), "s2", "k2");
  std::vector<PendingHandoffs::Handoff> all = p.takeAll();
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].source, "s1");
  EXPECT_EQ(all[1].key, "k2");
  EXPECT_EQ(p.size(), 0u);
  EXPECT_FALSE(p.hasKey("k1"));
}

}  // namespace
}  // namespace mocker::service
