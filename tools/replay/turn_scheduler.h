// TurnScheduler: which turn of a Workload a live load driver sends next, and when (docs/traces.md,
// Live replay and Closed loop): the shared TurnSchedule (trace timing, the next turn at the
// previous terminal + its delay, agentic dependencies) with, in closed loop (`concurrency`), at
// most that many turns in flight (popped and not yet ended). Socket-free and clock-free: the
// driver gives the times (wall milliseconds since its start) and sends what popDue returns.
//
//   TurnScheduler s(workload, concurrency);
//   while (!s.finished()) {
//     while (auto t = s.popDue(now)) send(*t);      // ... later, for each request that ended:
//     s.ended(session, turn, now);                  // wait until s.nextDueMs() or an end
//   }
//
// REQUIRES (trace mode): checkSchedulable passed. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "base/result.h"
#include "tools/replay/detail/eligible_turn.h"
#include "tools/replay/turn_schedule.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// Whether `workload` can be scheduled: concurrency (closed loop) >= 1 when set; in trace mode
/// every session without dependencies has a first arrival. The error says which session.
Status checkSchedulable(const Workload& workload, std::optional<std::uint32_t> concurrency);

class TurnScheduler {
 public:
  TurnScheduler(const Workload& workload, std::optional<std::uint32_t> concurrency);

  /// The earliest time a turn could be sent: the top eligible turn's due time; +inf when none is
  /// eligible or every closed-loop slot is taken.
  double nextDueMs() const;
  /// The next turn due at `now_ms` with a free slot (it is then in flight), or nullopt.
  std::optional<detail::EligibleTurn> popDue(double now_ms);
  /// The turn (session, turn) popped earlier ended at `time_ms`: frees its slot and makes what
  /// follows it eligible.
  void ended(std::uint32_t session, std::uint32_t turn, double time_ms);
  /// Nothing eligible and nothing in flight.
  bool finished() const { return schedule_.empty() && in_flight_ == 0; }
  std::uint32_t inFlight() const { return in_flight_; }
  /// The schedule's prompt history (mooncake-delta cumulative prompts): TurnSchedule::prompt and
  /// TurnSchedule::received.
  std::vector<std::uint32_t> prompt(const detail::EligibleTurn& turn,
                                    std::vector<std::uint32_t> tokens) {
    return schedule_.prompt(turn, std::move(tokens));
  }
  void received(std::uint32_t session, std::uint32_t turn, std::span<const std::uint32_t> tokens) {
    schedule_.received(session, turn, tokens);
  }

 private:
  TurnSchedule schedule_;
  std::optional<std::uint32_t> concurrency_;
  std::uint32_t in_flight_ = 0;
};

}  // namespace mocker::replay
