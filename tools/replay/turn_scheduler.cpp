#include "tools/replay/turn_scheduler.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace mocker::replay {

Status checkSchedulable(const Workload& workload, std::optional<std::uint32_t> concurrency) {
  if (concurrency && *concurrency == 0) return invalidArgument("concurrency must be >= 1 (got 0)");
  if (concurrency) return {};
  for (const Session& s : workload.sessions) {
    if (!s.first_arrival_ms && s.wait_for.empty()) {
      return invalidArgument("session '" + s.session_id +
                             "' has no arrival time: trace mode needs a timestamp on every "
                             "first turn (closed-loop replay with a concurrency does not)");
    }
  }
  return {};
}

TurnScheduler::TurnScheduler(const Workload& workload, std::optional<std::uint32_t> concurrency)
    : workload_(workload), concurrency_(concurrency) {
  const std::size_t n = workload.sessions.size();
  dependents_.resize(n);
  waiting_on_.assign(n, 0);
  released_at_.assign(n, 0.0);
  for (std::uint32_t s = 0; s < n; ++s) {
    const Session& session = workload.sessions[s];
    for (std::uint32_t d : session.wait_for) dependents_[d].push_back(s);
    waiting_on_[s] = static_cast<std::uint32_t>(session.wait_for.size());
    if (!session.wait_for.empty() || session.turns.empty()) continue;
    MOCKER_CHECK(concurrency_ || session.first_arrival_ms.has_value());
    const double at = concurrency_ ? 0.0 : *session.first_arrival_ms;
    eligible_.push({at, session.turns.front().line, s, 0});
  }
}

double TurnScheduler::nextDueMs() const {
  if (eligible_.empty()) return std::numeric_limits<double>::infinity();
  if (concurrency_ && in_flight_ >= *concurrency_) return std::numeric_limits<double>::infinity();
  return eligible_.top().time_ms;
}

std::optional<detail::EligibleTurn> TurnScheduler::popDue(double now_ms) {
  if (nextDueMs() > now_ms) return std::nullopt;
  const detail::EligibleTurn next = eligible_.top();
  eligible_.pop();
  ++in_flight_;
  return next;
}

void TurnScheduler::ended(std::uint32_t session, std::uint32_t turn, double time_ms) {
  MOCKER_CHECK(in_flight_ > 0);
  --in_flight_;
  const Session& s = workload_.sessions[session];
  if (turn + 1 < s.turns.size()) {
    const Turn& next = s.turns[turn + 1];
    eligible_.push({time_ms + next.delay_after_previous_ms, next.line, session, turn + 1});
    return;
  }
  // The session ended: release the sessions waiting for it once all their dependencies ended.
  for (std::uint32_t d : dependents_[session]) {
    released_at_[d] = std::max(released_at_[d], time_ms);
    if (--waiting_on_[d] > 0) continue;
    const Session& dependent = workload_.sessions[d];
    if (dependent.turns.empty()) continue;
    eligible_.push(
        {released_at_[d] + dependent.dependency_delay_ms, dependent.turns.front().line, d, 0});
  }
}

}  // namespace mocker::replay
