// TurnSchedule (tools/replay/turn_schedule.h), the turn order both replay loops follow: first
// turns at their arrival (0 in closed loop), a next turn at the terminal + its delay, ties in
// trace order, an agentic session at the latest terminal of its dependencies + its delay, and
// cumulative prompts built from the earlier prompts and the tokens they received.
#include "tools/replay/turn_schedule.h"

#include <gtest/gtest.h>

#include <vector>

namespace mocker::replay {
namespace {

Session session(std::string id, std::optional<double> arrival, std::vector<double> delays,
                std::size_t line) {
  Session s{.session_id = std::move(id), .first_arrival_ms = arrival};
  for (double d : delays) {
    s.turns.push_back({.input_length = 1, .delay_after_previous_ms = d, .line = line++});
  }
  return s;
}

TEST(TurnScheduleTest, TurnsFollowArrivalsTerminalsAndDelays) {
  Workload w;
  w.sessions = {session("a", 10.0, {0.0, 5.0}, 1), session("b", 10.0, {0.0}, 3)};
  TurnSchedule schedule(w, /*closed_loop=*/false);
  ASSERT_FALSE(schedule.empty());
  const auto first = schedule.pop();  // same time: trace order (line 1 before line 3)
  EXPECT_EQ(first.session, 0u);
  EXPECT_EQ(first.time_ms, 10.0);
  EXPECT_EQ(schedule.pop().session, 1u);
  EXPECT_TRUE(schedule.empty());
  schedule.ended(0, 0, 40.0);
  const auto second = schedule.pop();
  EXPECT_EQ(second.turn, 1u);
  EXPECT_EQ(second.time_ms, 45.0);
  schedule.ended(0, 1, 50.0);  // the last turn: nothing follows
  schedule.ended(1, 0, 60.0);
  EXPECT_TRUE(schedule.empty());

  TurnSchedule closed(w, /*closed_loop=*/true);
  EXPECT_EQ(closed.top().time_ms, 0.0);
}

TEST(TurnScheduleTest, TraceModeNeedsAnArrivalOnEverySessionThatWaitsForNone) {
  Workload w;
  w.sessions = {session("a", 0.0, {0.0}, 1), session("b", std::nullopt, {0.0}, 2)};
  const Status st = TurnSchedule::checkArrivals(w, /*closed_loop=*/false);
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.error().message.find("session 'b' has no arrival time"), std::string::npos)
      << st.error().message;
  EXPECT_TRUE(TurnSchedule::checkArrivals(w, /*closed_loop=*/true).has_value());
  w.sessions[1].wait_for = {0};  // released by its dependency instead
  EXPECT_TRUE(TurnSchedule::checkArrivals(w, false).has_value());
}

TEST(TurnScheduleTest, ADependentSessionStartsAfterTheLatestOfItsDependencies) {
  Workload w;
  w.sessions = {session("a", 0.0, {0.0}, 1), session("b", 0.0, {0.0}, 2),
                session("c", std::nullopt, {0.0}, 3)};
  w.sessions[2].wait_for = {0, 1};
  w.sessions[2].dependency_delay_ms = 7.0;
  TurnSchedule schedule(w, false);
  (void)schedule.pop();
  (void)schedule.pop();
  schedule.ended(1, 0, 30.0);
  EXPECT_TRUE(schedule.empty());  // still waits for a
  schedule.ended(0, 0, 20.0);
  const auto c = schedule.pop();
  EXPECT_EQ(c.session, 2u);
  EXPECT_EQ(c.time_ms, 37.0);  // the latest dependency (30) + 7
}

TEST(TurnScheduleTest, CumulativePromptsCarryTheHistory) {
  Workload w;
  w.cumulative_prompts = true;
  w.sessions = {session("a", 0.0, {0.0, 0.0, 0.0}, 1)};
  TurnSchedule schedule(w, false);
  const auto t0 = schedule.pop();
  EXPECT_EQ(schedule.prompt(t0, {1, 2}), (std::vector<std::uint32_t>{1, 2}));
  const std::vector<std::uint32_t> out{9};
  schedule.received(0, 0, out);
  schedule.ended(0, 0, 1.0);
  const auto t1 = schedule.pop();
  EXPECT_EQ(schedule.prompt(t1, {3}), (std::vector<std::uint32_t>{1, 2, 9, 3}));
  schedule.received(0, 1, out);
  schedule.ended(0, 1, 2.0);
  const auto t2 = schedule.pop();
  EXPECT_EQ(schedule.prompt(t2, {4}), (std::vector<std::uint32_t>{1, 2, 9, 3, 9, 4}));
  schedule.received(0, 2, out);  // the last turn: not kept

  Workload plain = w;
  plain.cumulative_prompts = false;
  TurnSchedule as_is(plain, false);
  EXPECT_EQ(as_is.prompt(as_is.pop(), {5}), (std::vector<std::uint32_t>{5}));
}

}  // namespace
}  // namespace mocker::replay
