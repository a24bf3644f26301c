// WorkerChoice (gateway/worker_choice.h): round robin and random over the live request
// workers, the decode hop by the shared rule, lost workers skipped until they come back.
#include "gateway/worker_choice.h"

#include <gtest/gtest.h>

#include <set>

namespace mocker::gateway {
namespace {

using replay::DecodeRouterKind;

TEST(WorkerChoiceTest, RoundRobinSkipsLostWorkersUntilTheyAreBack) {
  WorkerChoice c(3, 0, false, DecodeRouterKind::RoundRobin, 0);
  EXPECT_EQ(c.pickRequestWorker(), 0u);
  EXPECT_EQ(c.pickRequestWorker(), 1u);
  c.setLost(2, true);
  EXPECT_EQ(c.pickRequestWorker(), 0u);
  EXPECT_EQ(c.pickRequestWorker(), 1u);
  c.setLost(0, true);
  c.setLost(1, true);
  EXPECT_EQ(c.pickRequestWorker(), std::nullopt);
  c.setLost(2, false);
  EXPECT_EQ(c.pickRequestWorker(), 2u);
  EXPECT_EQ(c.keepOrPick(2), 2u);
  EXPECT_EQ(c.keepOrPick(0), 2u);  // the kv pick is lost: the live one instead
}

TEST(WorkerChoiceTest, RandomDrawsOnlyLiveWorkers) {
  WorkerChoice c(4, 0, true, DecodeRouterKind::RoundRobin, 9);
  c.setLost(1, true);
  std::set<std::size_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(*c.pickRequestWorker());
  EXPECT_EQ(seen, (std::set<std::size_t>{0, 2, 3}));
}

TEST(WorkerChoiceTest, TheDecodeHopFollowsTheSharedRuleAndAvoidsLostDecodeWorkers) {
  WorkerChoice c(1, 3, false, DecodeRouterKind::LeastLoaded, 0);
  EXPECT_EQ(c.pickDecodeWorker(0), 1u);  // all idle: the first decode worker (index 1)
  EXPECT_EQ(c.pickDecodeWorker(1), 2u);
  EXPECT_EQ(c.pickDecodeWorker(2), 3u);
  c.decodeEnded(2);
  EXPECT_EQ(c.pickDecodeWorker(3), 2u);  // the least loaded again
  c.setLost(1, true);
  c.decodeEnded(1);
  EXPECT_EQ(c.pickDecodeWorker(4), 2u);  // worker 1 would win but is lost: the next live one
  c.setLost(2, true);
  c.setLost(3, true);
  EXPECT_EQ(c.pickDecodeWorker(5), std::nullopt);
  EXPECT_FALSE(c.isDecode(0));
  EXPECT_TRUE(c.isDecode(3));
}

}  // namespace
}  // namespace mocker::gateway
