#include "tools/replay/turn_scheduler.h"

#include <limits>

#include "base/check.h"

namespace mocker::replay {

Status checkSchedulable(const Workload& workload, std::optional<std::uint32_t> concurrency) {
  if (concurrency && *concurrency == 0) return invalidArgument("concurrency must be >= 1 (got 0)");
  return TurnSchedule::checkArrivals(workload, concurrency.has_value());
}

TurnScheduler::TurnScheduler(const Workload& workload, std::optional<std::uint32_t> concurrency)
    : schedule_(workload, concurrency.has_value()), concurrency_(concurrency) {}

double TurnScheduler::nextDueMs() const {
  if (schedule_.empty()) return std::numeric_limits<double>::infinity();
  if (concurrency_ && in_flight_ >= *concurrency_) return std::numeric_limits<double>::infinity();
  return schedule_.top().time_ms;
}

std::optional<detail::EligibleTurn> TurnScheduler::popDue(double now_ms) {
  if (nextDueMs() > now_ms) return std::nullopt;
  ++in_flight_;
  return schedule_.pop();
}

void TurnScheduler::ended(std::uint32_t session, std::uint32_t turn, double time_ms) {
  MOCKER_CHECK(in_flight_ > 0);
  --in_flight_;
  schedule_.ended(session, turn, time_ms);
}

}  // namespace mocker::replay
