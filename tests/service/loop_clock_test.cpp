#include "service/loop_clock.h"

#include <gtest/gtest.h>

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

TEST(PollTimeoutTest, EarliestWakeUpWithPassEndsRoundedDownAndTheRestUp) {
  const Clock::time_point now = Clock::time_point{} + 1h;
  struct Wake {
    bool pass_end;
    Clock::duration after_now;
  };
  struct Row {
    const char* name;
    std::vector<Wake> wakes;
    std::chrono::milliseconds expected;
  };
  const std::vector<Row> rows = {
      {"nothing to wait for: block", {}, -1ms},
      {"heartbeat rounds up", {{false, 2300us}}, 3ms},
      {"pass end rounds down", {{true, 2300us}}, 2ms},
      {"a pass shorter than 1 ms polls without waiting", {{true, 400us}}, 0ms},
      {"overdue is 0, not negative", {{false, -5ms}}, 0ms},
      {"overdue pass end", {{true, -1us}}, 0ms},
      {"the earliest wins", {{false, 9ms}, {true, 4700us}, {false, 6ms}}, 4ms},
      {"a later request does not extend", {{true, 1ms}, {false, 50ms}}, 1ms},
      {"exact milliseconds are kept", {{false, 5ms}, {true, 7ms}}, 5ms},
  };
  for (const Row& row : rows) {
    PollTimeout t(now);
    for (const Wake& w : row.wakes) {
      if (w.pass_end) {
        t.wakeForPassEnd(now + w.after_now);
      } else {
        t.wakeBy(now + w.after_now);
      }
    }
    EXPECT_EQ(t.value(), row.expected) << row.name;
  }
}

}  // namespace
}  // namespace mocker::service
