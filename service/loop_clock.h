// LoopClock and PollTimeout: the serve loop's time arithmetic, without reading a clock.
//
// LoopClock maps wall time (steady_clock) to the engine's time (double milliseconds since the
// service started) and back: a pass computed at engine time t with modelled end e is published
// at wallAt(e). Durations are already divided by speedup_ratio in the engine.
//
// PollTimeout folds "wake me at t" requests into one zmq_poll timeout. zmq_poll counts whole
// milliseconds: pass deadlines round down (the last sub-millisecond of a pass is spent polling
// with timeout 0, and passes shorter than 1 ms of wall time are not stretched to 1 ms);
// everything else (heartbeats, retries, the startup delay) rounds up. A deadline in the past
// gives 0; no deadline at all gives -1 (block until a socket is readable).
//
// Both are values: copyable, no state beyond their fields. Not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>

namespace mocker::service {

class LoopClock {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LoopClock(Clock::time_point start) : start_(start) {}

  Clock::time_point start() const { return start_; }
  /// Engine time (ms since start) at wall time `now`.
  double engineMs(Clock::time_point now) const {
    return std::chrono::duration<double, std::milli>(now - start_).count();
  }
  /// Wall time at engine time `engine_ms`.
  Clock::time_point wallAt(double engine_ms) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double, std::milli>(engine_ms));
  }

 private:
  Clock::time_point start_;
};

class PollTimeout {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PollTimeout(Clock::time_point now) : now_(now) {}

  /// Wake by `t` at the latest (whole milliseconds, rounded up).
  void wakeBy(Clock::time_point t) { fold(std::chrono::ceil<std::chrono::milliseconds>(t - now_)); }
  /// Wake at the end of a pass due at `t` (rounded down).
  void wakeForPassEnd(Clock::time_point t) {
    fold(std::chrono::floor<std::chrono::milliseconds>(t - now_));
  }
  /// The timeout for zmq_poll: the earliest wake-up, ≥ 0, or -1 when there is none.
  std::chrono::milliseconds value() const { return timeout_; }

 private:
  void fold(std::chrono::milliseconds ms) {
    const auto clamped = std::max(ms, std::chrono::milliseconds(0));
    if (timeout_.count() < 0 || clamped < timeout_) timeout_ = clamped;
  }

  Clock::time_point now_;
  std::chrono::milliseconds timeout_{-1};
};

}  // namespace mocker::service
