#include "service/loop_clock.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>

#include <atomic>
#include <thread>

#include <optional>
#include <vector>

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(LoopClockTest, EngineTimeAndWallTimeRoundTrip) {
  const Clock::time_point start = Clock::time_point{} + 1h;
  const LoopClock clock(start);
  EXPECT_EQ(clock.engineMs(start), 0.0);
  EXPECT_EQ(clock.engineMs(start + 2500us), 2.5);
  EXPECT_EQ(clock.wallAt(2.5), start + 2500us);
  EXPECT_EQ(clock.wallAt(clock.engineMs(start + 123456us)), start + 123456us);
}

TEST(PollTimeoutTest, EarliestWakeUpRoundedUp) {
  const Clock::time_point now = Clock::time_point{} + 1h;
  struct Row {
    const char* name;
    std::vector<Clock::duration> wakes;  // wakeBy(now + each)
    bool wake_now;
    std::chrono::milliseconds expected;
  };
  const std::vector<Row> rows = {
      {"nothing to wait for: block", {}, false, -1ms},
      {"rounds up", {2300us}, false, 3ms},
      {"less than 1 ms rounds up to 1 ms", {400us}, false, 1ms},
      {"overdue is 0, not negative", {-5ms}, false, 0ms},
      {"the earliest wins", {9ms, 4700us, 6ms}, false, 5ms},
      {"exact milliseconds are kept", {5ms, 7ms}, false, 5ms},
      {"wakeNow beats everything", {2ms}, true, 0ms},
  };
  for (const Row& row : rows) {
    PollTimeout t(now);
    for (const auto w : row.wakes) t.wakeBy(now + w);
    if (row.wake_now) t.wakeNow();
    EXPECT_EQ(t.value(), row.expected) << row.name;
  }
}

TEST(PassStartTest, AnchoredToTheModelledTimelineWithinTheCatchUpBound) {
  struct Row {
    const char* name;
    std::optional<double> anchor;
    double now;
    double start;
    bool resynced;
  };
  const std::vector<Row> rows = {
      {"no anchor (idle rank, no arrival): now", std::nullopt, 50.0, 50.0, false},
      {"late by 0.3 ms: starts at the modelled end, not now", 49.7, 50.0, 49.7, false},
      {"late by exactly the bound: still caught up", 0.0, 100.0, 0.0, false},
      {"late by more than the bound: resync to now", 0.0, 100.5, 100.5, true},
      {"an anchor ahead of now (rounding) is kept", 50.001, 50.0, 50.001, false},
  };
  for (const Row& row : rows) {
    const PassStart s = passStart(row.anchor, row.now, /*max_catch_up_ms=*/100.0);
    EXPECT_EQ(s.start_ms, row.start) << row.name;
    EXPECT_EQ(s.resynced, row.resynced) << row.name;
  }
}

TEST(LatenessStatsTest, CountMeanMaxAndQuantilesWithinABucket) {
  LatenessStats empty;
  EXPECT_EQ(empty.count(), 0u);
  EXPECT_EQ(empty.meanMs(), 0.0);
  EXPECT_EQ(empty.quantileMs(0.99), 0.0);

  LatenessStats s;
  // 98 passes 0.010 ms late, one 2.5 ms, one 40 ms; a negative lateness counts as 0.
  for (int i = 0; i < 97; ++i) s.record(0.010);
  s.record(-1.0);
  s.record(2.5);
  s.record(40.0);
  EXPECT_EQ(s.count(), 100u);
  EXPECT_NEAR(s.meanMs(), (97 * 0.010 + 2.5 + 40.0) / 100, 1e-12);
  EXPECT_EQ(s.maxMs(), 40.0);
  EXPECT_NEAR(s.quantileMs(0.5), 0.011, 1e-12);  // the 10 µs bucket's upper bound
  const double p99 = s.quantileMs(0.99);         // the 99th value: 2.5 ms
  EXPECT_GE(p99, 2.5);
  EXPECT_LE(p99, 2.5 * (1 + 1.0 / 16));
  EXPECT_EQ(s.quantileMs(1.0), 40.0);  // never above the maximum
  LatenessStats huge;
  huge.record(1e12);  // beyond the last bucket: counted there, the maximum stays exact
  EXPECT_EQ(huge.quantileMs(0.5), 1e12);
}

bool readableWithin(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && (p.revents & POLLIN) != 0;
}

TEST(PassTimerTest, FiresAtTheArmedTimeAndNotBefore) {
  PassTimer timer;
  ASSERT_TRUE(timer.valid());
  EXPECT_FALSE(readableWithin(timer.fd(), 0ms));  // unarmed
  const auto at = Clock::now() + 30ms;
  timer.armAt(at);
  EXPECT_EQ(timer.armedAt(), at);
  EXPECT_FALSE(readableWithin(timer.fd(), 0ms));
  ASSERT_TRUE(readableWithin(timer.fd(), 10s));
  EXPECT_GE(Clock::now(), at);  // never early
  timer.acknowledge();
  EXPECT_FALSE(timer.armedAt().has_value());
  EXPECT_FALSE(readableWithin(timer.fd(), 0ms));

  timer.armAt(Clock::now() - 1s);  // in the past: readable at once
  EXPECT_TRUE(readableWithin(timer.fd(), 1s));
  timer.armAt(Clock::now() + 1h);  // re-arming clears the pending expiry
  EXPECT_FALSE(readableWithin(timer.fd(), 0ms));
  timer.disarm();
  EXPECT_FALSE(timer.armedAt().has_value());
  EXPECT_FALSE(readableWithin(timer.fd(), 0ms));
}

TEST(TimerSlackTest, TightenedForTheCallingThreadOnly) {
  // Run on a fresh thread: the slack is per thread, so the test runner's stays as it was.
  const long before = prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
  long after = -1;
  long other = -1;
  std::thread([&] {
    ASSERT_TRUE(tightenTimerSlack());
    after = prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
  }).join();
  std::thread([&] { other = prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL); }).join();
  EXPECT_EQ(after, 1);
  EXPECT_EQ(other, before);  // a new thread inherits the creator's slack, unchanged
  EXPECT_GT(before, 1);      // the default (50,000 ns) is what the call improves on
}

// One trim per interval, whoever asks: a claim within the interval of the standing one is
// refused and names it; the first claim at or after its end is granted.
TEST(HeapTrimGateTest, OneClaimPerIntervalTheRefusedLearnWhenItEnds) {
  HeapTrimGate gate(1000ms);
  const Clock::time_point t0 = Clock::now();
  Clock::time_point latest{};
  EXPECT_TRUE(gate.claim(t0, latest));
  EXPECT_FALSE(gate.claim(t0 + 999ms, latest));
  EXPECT_EQ(latest, t0);
  EXPECT_TRUE(gate.claim(t0 + 1000ms, latest));
  EXPECT_FALSE(gate.claim(t0 + 1500ms, latest));
  EXPECT_EQ(latest, t0 + 1000ms);
}

// Workers asking at the same moment from their own threads: exactly one trims.
TEST(HeapTrimGateTest, ConcurrentClaimsGrantExactlyOne) {
  for (int round = 0; round < 50; ++round) {
    HeapTrimGate gate(1000ms);
    const Clock::time_point now = Clock::now();
    std::atomic<int> granted{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 8; ++w) {
      workers.emplace_back([&] {
        Clock::time_point latest{};
        if (gate.claim(now, latest)) ++granted;
      });
    }
    for (auto& t : workers) t.join();
    ASSERT_EQ(granted.load(), 1) << "round " << round;
  }
}

}  // namespace
}  // namespace mocker::service
