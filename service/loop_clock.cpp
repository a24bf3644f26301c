#include "service/loop_clock.h"

#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <ctime>

namespace mocker::service {

bool tightenTimerSlack() { return prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0; }

PassTimer::PassTimer() : fd_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {}

PassTimer::~PassTimer() {
  if (fd_ >= 0) close(fd_);
}

void PassTimer::armAt(Clock::time_point t) {
  if (armed_ == t) return;
  // steady_clock is CLOCK_MONOTONIC (libstdc++ on Linux): its epoch is the timer's.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  itimerspec spec{};
  // it_value 0 would disarm: a time at (or before) the epoch fires at once as 1 ns.
  const std::int64_t count = std::max<std::int64_t>(ns.count(), 1);
  spec.it_value.tv_sec = static_cast<time_t>(count / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(count % 1'000'000'000);
  // A past absolute time expires at once; setting the timer also clears an unread expiry.
  if (timerfd_settime(fd_, TFD_TIMER_ABSTIME, &spec, nullptr) == 0) armed_ = t;
}

void PassTimer::disarm() {
  if (!armed_) return;
  const itimerspec spec{};
  (void)timerfd_settime(fd_, 0, &spec, nullptr);
  armed_.reset();
}

void PassTimer::acknowledge() {
  std::uint64_t expirations = 0;
  [[maybe_unused]] const auto n = read(fd_, &expirations, sizeof expirations);
  armed_.reset();
}

}  // namespace mocker::service
