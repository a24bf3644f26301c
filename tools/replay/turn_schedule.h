// TurnSchedule: which session turn goes out next, shared by the offline and live replay loops
// (docs/traces.md, "Sessions and delays", "Dependencies", "Closed loop"). A session's first turn
// is eligible at its first_arrival_ms (0 in closed loop); a later turn at the previous turn's
// terminal + its delay; a session that waits for others (agentic) at the latest of their last
// terminals + its dependency delay. Due turns come out in EligibleTurn order. Cumulative prompts
// (mooncake-delta): a turn's prompt is the session's earlier prompts and the tokens they
// received, then its own delta. No clock: the loops say when turns end.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <span>
#include <vector>

#include "base/result.h"
#include "tools/replay/detail/eligible_turn.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

class TurnSchedule {
 public:
  /// Error: not `closed_loop` and a session that waits for no other has no arrival time (it
  /// names the session).
  static Status checkArrivals(const Workload& workload, bool closed_loop);
  /// `closed_loop`: first turns eligible at 0 (the workload may lack arrival times); otherwise
  /// checkArrivals must have passed.
  TurnSchedule(const Workload& workload, bool closed_loop);

  bool empty() const { return eligible_.empty(); }
  /// The earliest eligible turn. Precondition: !empty().
  const detail::EligibleTurn& top() const { return eligible_.top(); }
  detail::EligibleTurn pop();

  /// The prompt of `turn` (just popped) given its own synthesized tokens: with cumulative
  /// prompts the session's history followed by them (the history keeps it while turns remain).
  std::vector<std::uint32_t> prompt(const detail::EligibleTurn& turn,
                                    std::vector<std::uint32_t> tokens);
  /// Tokens (session, turn) received: kept for the session's next prompt (cumulative prompts).
  void received(std::uint32_t session, std::uint32_t turn, std::span<const std::uint32_t> tokens);
  /// (session, turn) reached its terminal at `time_ms`: its next turn becomes eligible, or, the
  /// session being done, the sessions waiting for it once all their dependencies ended.
  void ended(std::uint32_t session, std::uint32_t turn, double time_ms);

 private:
  const Workload& workload_;
  std::priority_queue<detail::EligibleTurn, std::vector<detail::EligibleTurn>, std::greater<>>
      eligible_;
  std::vector<std::vector<std::uint32_t>> dependents_;
  std::vector<std::uint32_t> waiting_on_;
  std::vector<double> released_at_;
  std::vector<std::vector<std::uint32_t>> history_;
};

}  // namespace mocker::replay
