#include "tools/replay/turn_schedule.h"

#include <algorithm>
#include <utility>

namespace mocker::replay {

Status TurnSchedule::checkArrivals(const Workload& workload, bool closed_loop) {
  if (closed_loop) return {};
  for (const Session& s : workload.sessions) {
    if (!s.first_arrival_ms && s.wait_for.empty()) {
      return invalidArgument("session '" + s.session_id +
                             "' has no arrival time: trace mode needs a timestamp on every "
                             "first turn (closed-loop replay with a concurrency does not)");
    }
  }
  return {};
}

TurnSchedule::TurnSchedule(const Workload& workload, bool closed_loop) : workload_(workload) {
  const std::size_t n = workload.sessions.size();
  waiting_on_.assign(n, 0);
  released_at_.assign(n, 0.0);
  dependents_.resize(n);
  if (workload.cumulative_prompts) history_.resize(n);
  for (std::uint32_t s = 0; s < n; ++s) {
    const Session& session = workload.sessions[s];
    for (std::uint32_t d : session.wait_for) dependents_[d].push_back(s);
    waiting_on_[s] = static_cast<std::uint32_t>(session.wait_for.size());
    if (!session.wait_for.empty()) continue;  // released when its dependencies end
    const double at = closed_loop ? 0.0 : *session.first_arrival_ms;
    eligible_.push({at, session.turns.front().line, s, 0});
  }
}

detail::EligibleTurn TurnSchedule::pop() {
  const detail::EligibleTurn next = eligible_.top();
  eligible_.pop();
  return next;
}

std::vector<std::uint32_t> TurnSchedule::prompt(const detail::EligibleTurn& turn,
                                                std::vector<std::uint32_t> tokens) {
  if (!workload_.cumulative_prompts) return tokens;
  std::vector<std::uint32_t>& history = history_[turn.session];
  history.insert(history.end(), tokens.begin(), tokens.end());
  if (turn.turn + 1 < workload_.sessions[turn.session].turns.size()) return history;
  return std::exchange(history, {});
}

void TurnSchedule::received(std::uint32_t session, std::uint32_t turn,
                            std::span<const std::uint32_t> tokens) {
  if (!workload_.cumulative_prompts || turn + 1 >= workload_.sessions[session].turns.size()) {
    return;
  }
  std::vector<std::uint32_t>& history = history_[session];
  history.insert(history.end(), tokens.begin(), tokens.end());
}

void TurnSchedule::ended(std::uint32_t session, std::uint32_t turn, double time_ms) {
  const Session& s = workload_.sessions[session];
  if (turn + 1 < s.turns.size()) {
    const Turn& next = s.turns[turn + 1];
    eligible_.push({time_ms + next.delay_after_previous_ms, next.line, session, turn + 1});
    return;
  }
  for (std::uint32_t d : dependents_[session]) {
    released_at_[d] = std::max(released_at_[d], time_ms);
    if (--waiting_on_[d] > 0) continue;
    const Session& dependent = workload_.sessions[d];
    eligible_.push(
        {released_at_[d] + dependent.dependency_delay_ms, dependent.turns.front().line, d, 0});
  }
}

}  // namespace mocker::replay
