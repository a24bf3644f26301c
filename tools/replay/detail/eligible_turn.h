// EligibleTurn: a session turn waiting to be dispatched, shared by the offline and live replay
// loops so both order dispatches identically (docs/traces.md, Replay modes): by eligibility time,
// then trace order — source line (0 for synthetic turns), session index, turn index.
//
// Internal to tools/replay. Value type.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mocker::replay::detail {

struct EligibleTurn {
  double time_ms = 0.0;
  std::size_t line = 0;
  std::uint32_t session = 0;
  std::uint32_t turn = 0;
  /// For std::priority_queue with std::greater: the earliest turn is on top.
  bool operator>(const EligibleTurn& o) const {
    if (time_ms != o.time_ms) return time_ms > o.time_ms;
    if (line != o.line) return line > o.line;
    if (session != o.session) return session > o.session;
    return turn > o.turn;
  }
};

}  // namespace mocker::replay::detail
