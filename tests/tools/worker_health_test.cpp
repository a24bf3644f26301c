// WorkerHealth (tools/replay/worker_health.h): the live replay's detection rule as table tests —
// a sequence of observations with their times, and the states and transitions they must give.
#include "tools/replay/worker_health.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "tools/replay/kv_router.h"

namespace mocker::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// One observation: what the loop saw at `t` about worker `w` (request `r` where it applies).
struct Step {
  enum Kind { Sent, Acked, Progress, Answer, Release, Closed, Connected, Advance } kind;
  double t = 0;
  std::uint32_t w = 0;
  std::uint64_t r = 0;
};

struct Case {
  std::string name;
  WorkerHealthConfig config;
  std::vector<Step> steps;
  std::vector<WorkerState> states;  // of workers 0, 1, 2 at the end
  std::vector<HealthTransition> transitions;
};

void apply(WorkerHealth& h, const Step& s) {
  switch (s.kind) {
    case Step::Sent:
      h.sent(s.w, s.r, s.t);
      break;
    case Step::Acked:
      h.acked(s.w, s.r, s.t);
      break;
    case Step::Progress:
      h.progressed(s.w, s.t);
      break;
    case Step::Answer:
      h.answered(s.w, s.t);
      break;
    case Step::Release:
      h.released(s.w, s.r);
      break;
    case Step::Closed:
      h.connectionClosed(s.w, s.t);
      break;
    case Step::Connected:
      h.connected(s.w, s.t);
      break;
    case Step::Advance:
      h.advance(s.t);
      break;
  }
}

using enum WorkerState;
using R = HealthReason;
const WorkerHealthConfig kDefaults{
    .ack_timeout_ms = 100, .down_after_ms = 50, .stall_timeout_ms = 1000};

TEST(WorkerHealthTest, Table) {
  const std::vector<Case> cases = {
      {"acked and streaming: stays up",
       kDefaults,
       {{Step::Sent, 0, 1, 1},
        {Step::Acked, 5, 1, 1},
        {Step::Progress, 500, 1},
        {Step::Advance, 1400, 1},
        {Step::Progress, 1450, 1},
        {Step::Release, 1450, 1, 1},
        {Step::Advance, 5000}},
       {Up, Up, Up},
       {}},
      {"connection closed: suspect at once, down after down_after_ms",
       kDefaults,
       {{Step::Sent, 0, 1, 1},
        {Step::Acked, 1, 1, 1},
        {Step::Closed, 10, 1},
        {Step::Advance, 59},
        {Step::Advance, 60}},
       {Up, Down, Up},
       {{10, 1, Suspect, R::ConnectionClosed, std::nullopt},
        {60, 1, Down, R::SuspectTooLong, 10.0}}},
      {"closed, and a message that was already queued does not clear it; a handshake does",
       kDefaults,
       {{Step::Closed, 10, 2},
        {Step::Answer, 20, 2},
        {Step::Connected, 30, 2},
        {Step::Advance, 500}},
       {Up, Up, Up},
       {{10, 2, Suspect, R::ConnectionClosed, std::nullopt},
        {30, 2, Up, R::Reconnected, std::nullopt}}},
      {"no ack: suspect at send + ack_timeout, first failure = the send",
       kDefaults,
       {{Step::Sent, 0, 0, 1},
        {Step::Sent, 40, 0, 2},
        {Step::Advance, 99},
        {Step::Advance, 100},
        {Step::Advance, 150}},
       {Down, Up, Up},
       {{100, 0, Suspect, R::NoAck, std::nullopt}, {150, 0, Down, R::SuspectTooLong, 0.0}}},
      {"no ack, then any message clears it (also from down: the stats probe)",
       kDefaults,
       {{Step::Sent, 0, 0, 1},
        {Step::Advance, 100},
        {Step::Advance, 150},
        {Step::Answer, 400, 0},
        {Step::Advance, 499},
        {Step::Advance, 500}},
       {Suspect, Up, Up},
       {{100, 0, Suspect, R::NoAck, std::nullopt},
        {150, 0, Down, R::SuspectTooLong, 0.0},
        {400, 0, Up, R::Answered, std::nullopt},
        // The request still unacked counts from the answer on.
        {500, 0, Suspect, R::NoAck, std::nullopt}}},
      {"an ack in time stops the ack clock; a released request too",
       kDefaults,
       {{Step::Sent, 0, 0, 1},
        {Step::Acked, 99, 0, 1},
        {Step::Sent, 10, 1, 2},
        {Step::Release, 50, 1, 2},
        {Step::Advance, 900}},
       {Up, Up, Up},
       {}},
      {"hung: holds work, no output for stall_timeout_ms: down at once, for good",
       kDefaults,
       {{Step::Sent, 0, 2, 1},
        {Step::Acked, 1, 2, 1},
        {Step::Progress, 200, 2},
        {Step::Answer, 900, 2},  // stats replies and acks are not progress
        {Step::Advance, 1199},
        {Step::Advance, 1200},
        {Step::Release, 1200, 2, 1},
        {Step::Answer, 1300, 2},
        {Step::Progress, 1400, 2},
        {Step::Advance, 9000}},
       {Up, Up, Down},
       {{1200, 2, Down, R::Stalled, 200.0}}},
      {"the stall clock starts when the worker starts holding work",
       kDefaults,
       {{Step::Progress, 0, 0},
        {Step::Sent, 5000, 0, 1},
        {Step::Acked, 5001, 0, 1},
        {Step::Advance, 5999},
        {Step::Advance, 6000}},
       {Down, Up, Up},
       {{6000, 0, Down, R::Stalled, 5000.0}}},
      {"rules off: ack 0 and stall 0 never fire; a closed connection still does",
       {.ack_timeout_ms = 0, .down_after_ms = 0, .stall_timeout_ms = 0},
       {{Step::Sent, 0, 0, 1}, {Step::Advance, 1e6}, {Step::Closed, 1e6, 1}, {Step::Advance, 1e6}},
       {Up, Down, Up},
       {{1e6, 1, Suspect, R::ConnectionClosed, std::nullopt},
        {1e6, 1, Down, R::SuspectTooLong, 1e6}}},
      {"disabled: nothing ever changes",
       {.enabled = false},
       {{Step::Sent, 0, 0, 1}, {Step::Closed, 1, 0}, {Step::Advance, 1e9}},
       {Up, Up, Up},
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WorkerHealth h(3, c.config);
    for (const Step& s : c.steps) apply(h, s);
    for (std::uint32_t w = 0; w < 3; ++w) {
      EXPECT_EQ(h.state(w), c.states[w]) << "worker " << w;
    }
    EXPECT_EQ(h.transitions(), c.transitions);
  }
}

TEST(WorkerHealthTest, NextDeadlineIsTheEarliestTimerAndDownIsReportedOnce) {
  WorkerHealth h(2, kDefaults);
  EXPECT_EQ(h.nextDeadlineMs(), kInf);
  h.sent(0, 1, 10);
  EXPECT_EQ(h.nextDeadlineMs(), 110);  // the ack deadline (before the stall one, 1010)
  h.acked(0, 1, 20);
  EXPECT_EQ(h.nextDeadlineMs(), 1010);  // the stall deadline
  h.connectionClosed(1, 30);
  EXPECT_EQ(h.nextDeadlineMs(), 80);  // suspect since 30 + 50
  h.advance(80);
  EXPECT_EQ(h.takeNewlyDown(), std::vector<std::uint32_t>{1});
  EXPECT_TRUE(h.takeNewlyDown().empty());
  EXPECT_EQ(h.routable(), (std::vector<bool>{true, false}));
}

TEST(WorkerHealthTest, RoutableFallsBackToSuspectThenNone) {
  WorkerHealth h(2, kDefaults);
  h.connectionClosed(0, 0);
  EXPECT_EQ(h.routable(), (std::vector<bool>{false, true}));
  h.connectionClosed(1, 0);
  EXPECT_EQ(h.routable(), (std::vector<bool>{true, true}));  // both suspect: both usable
  h.advance(50);
  EXPECT_EQ(h.routable(), (std::vector<bool>{false, false}));
}

TEST(WorkerHealthTest, RoundRobinAndRandomPicksSkipUnroutableWorkers) {
  const std::vector<bool> ok = {true, false, true, false};
  EXPECT_EQ(nthRoutable(ok, 0), 0u);
  EXPECT_EQ(nthRoutable(ok, 1), 2u);
  EXPECT_EQ(nthRoutable({true, true, true}, 2), 2u);  // all up: the plain index
}

TEST(WorkerHealthTest, KvRouterNeverPicksAnExcludedCandidate) {
  // Candidate 1 holds the whole prefix (the cheapest by far) but is excluded: 0 or 2 win.
  KvCostRouter router(3, 4, {}, 7);
  const std::vector<std::uint64_t> hashes = {11, 12, 13};
  const std::vector<std::uint32_t> overlaps = {0, 3, 0};
  EXPECT_EQ(router.select(hashes, 12, overlaps, {}), 1u);
  router.setExcluded({false, true, false});
  for (int i = 0; i < 50; ++i) EXPECT_NE(router.select(hashes, 12, overlaps, {}), 1u);
  router.setExcluded({true, true, true});  // all excluded: none is
  EXPECT_EQ(router.select(hashes, 12, overlaps, {}), 1u);
  router.setExcluded({});
  EXPECT_EQ(router.select(hashes, 12, overlaps, {}), 1u);
}

TEST(WorkerHealthTest, ReportLinesNameTheRuleAndEachTransition) {
  const std::string text = formatWorkerHealth(
      kDefaults,
      {{10, 1, Suspect, R::ConnectionClosed, std::nullopt}, {60, 1, Down, R::SuspectTooLong, 10.0}},
      {.failed_by_down = 4});
  EXPECT_EQ(text,
            "Live worker health (suspect: connection closed or no ack within 100 ms; down after "
            "50 ms suspect or no output for 1000 ms while holding work): 1 declared down; 4 "
            "requests failed with a worker that went down, 0 failed with no worker up\n"
            "  10 ms: server 1 suspect (connection closed)\n"
            "  60 ms: server 1 down (suspect too long; first failure at 10 ms, detected in 50 "
            "ms)\n");
  EXPECT_NE(formatWorkerHealth(kDefaults, {}, {.failed_by_down = 1})
                .find("; 1 request failed with a worker"),
            std::string::npos);
  // With migration on: how many requests were re-sent, and how often.
  EXPECT_NE(formatWorkerHealth(kDefaults, {},
                               {.migration_limit = 3,
                                .migrated_requests = 5,
                                .migrations = 6,
                                .failed_by_down = 1,
                                .no_worker = 2})
                .find("): 0 declared down; 5 requests migrated to another server (6 migrations, "
                      "limit 3 per request), 1 request failed with a worker that went down, 2 "
                      "failed with no worker up\n"),
            std::string::npos);
  // Worker health off: no rule to name; migrations of submits that could not be sent.
  WorkerHealthConfig off = kDefaults;
  off.enabled = false;
  EXPECT_EQ(
      formatWorkerHealth(off, {}, {.migration_limit = 2, .migrated_requests = 3, .migrations = 3}),
      "Live worker health off (no server declared down): 3 requests migrated to another "
      "server (3 migrations, limit 2 per request), 0 requests failed with a worker that "
      "went down, 0 failed with no worker up\n");
  // Requests whose finish was lost with their server after every token: said when any.
  EXPECT_NE(
      formatWorkerHealth(
          kDefaults, {},
          {.migration_limit = 1, .migrated_requests = 1, .migrations = 1, .completed_when_lost = 2})
          .find("limit 1 per request), 2 requests completed whose finish was lost (every "
                "token streamed, not re-sent), 0 requests failed"),
      std::string::npos);
}

TEST(WorkerHealthTest, ReportLinesMergeTheDecodeServersInTimeOrder) {
  // Disaggregated: the decode servers' changes interleave with the first hop's by time (the
  // first hop's first at a tie), named "decode server i"; the count is over both hops.
  const std::string text = formatWorkerHealth(
      kDefaults,
      {{10, 1, Suspect, R::ConnectionClosed, std::nullopt}, {60, 1, Down, R::SuspectTooLong, 10.0}},
      {.failed_by_down = 3, .no_decode_worker = 2},
      {{5, 0, Suspect, R::ConnectionClosed, std::nullopt},
       {55, 0, Down, R::SuspectTooLong, 5.0},
       {60, 1, Down, R::Stalled, 20.0}});
  EXPECT_EQ(text,
            "Live worker health (suspect: connection closed or no ack within 100 ms; down after "
            "50 ms suspect or no output for 1000 ms while holding work): 3 declared down; 3 "
            "requests failed with a worker that went down, 0 failed with no worker up, 2 failed "
            "at their handoff with no decode server up\n"
            "  5 ms: decode server 0 suspect (connection closed)\n"
            "  10 ms: server 1 suspect (connection closed)\n"
            "  55 ms: decode server 0 down (suspect too long; first failure at 5 ms, detected in "
            "50 ms)\n"
            "  60 ms: server 1 down (suspect too long; first failure at 10 ms, detected in 50 "
            "ms)\n"
            "  60 ms: decode server 1 down (stalled: no output while holding work; first failure "
            "at 20 ms, detected in 40 ms)\n");
}

TEST(WorkerHealthTest, ConfigErrorsNameTheValue) {
  EXPECT_TRUE(validateWorkerHealthConfig({}));
  const auto bad = validateWorkerHealthConfig({.ack_timeout_ms = -1});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("worker ack timeout"), std::string::npos);
  EXPECT_FALSE(validateWorkerHealthConfig({.stall_timeout_ms = kInf}));
}

}  // namespace
}  // namespace mocker::replay
