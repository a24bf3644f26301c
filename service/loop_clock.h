// The serve loop's time keeping: engine time ↔ wall time, where a pass starts on the modelled
// timeline, how late passes end, and the wait for the next pass end.
//
// LoopClock maps wall time (steady_clock) to the engine's time (double milliseconds since the
// service started) and back: a pass computed at engine time t with modelled end e is published
// at wallAt(e). Durations are already divided by speedup_ratio in the engine.
//
// passStart() anchors a rank's passes to the modelled timeline: a pass starts where the model
// says it does (the previous pass's modelled end, or the arrival that woke an idle rank), not at
// whatever wall time the loop reaches it. So the work between passes (publishing, reading,
// waking up) is caught up by the next pass instead of being added to every pass. Only when the
// loop is more than `max_catch_up_ms` behind does a pass start "now" (a resync: that lateness is
// then inherited, and counted).
//
// LatenessStats records how late each pass was published (wall time at completion − its
// modelled end) in a log-linear histogram: count, mean, max and quantiles within 1/16 of the
// value (and within 1 µs below 16 µs).
//
// PollTimeout folds "wake me at t" requests other than pass ends (heartbeats, retries, the
// startup delay, heap trims) into one zmq_poll timeout in whole milliseconds, rounded up; a
// deadline in the past gives 0, none gives -1 (block until something is readable). Pass ends
// are not rounded: they are waited for with a PassTimer.
//
// PassTimer: a timerfd on CLOCK_MONOTONIC (steady_clock's clock) armed at an absolute time; its
// fd goes into the poll items next to the sockets, so the loop sleeps until the pass end with
// the kernel's timer precision (tens of microseconds) instead of spinning through the last
// millisecond that zmq_poll's millisecond timeout cannot express.
//
// HeapTrimGate: one heap trim per interval for the whole process. malloc_trim(0) trims every
// arena of the process and each of its madvise calls makes the kernel flush the TLBs of every
// CPU running it, so in a fleet (one serve loop per worker, one process) the workers share one
// gate: a worker whose trim is due claims it; another's claim within the interval refuses it and
// tells it when that interval ends.
//
// LoopClock, PollTimeout and LatenessStats are values without a clock of their own; PassTimer
// owns a file descriptor. None is thread-safe but HeapTrimGate (atomic).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>

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

/// Where a pass starts on the engine clock.
struct PassStart {
  double start_ms = 0.0;
  bool resynced = false;  ///< the anchor was more than max_catch_up_ms behind: started at now
};

/// The start of a rank's next pass: `anchor_ms` (the previous pass's modelled end while the rank
/// stayed busy, or the arrival that woke it), unless there is none or it lies more than
/// `max_catch_up_ms` before `now_ms`; then `now_ms`.
inline PassStart passStart(std::optional<double> anchor_ms, double now_ms, double max_catch_up_ms) {
  if (!anchor_ms) return {now_ms, false};
  if (*anchor_ms < now_ms - max_catch_up_ms) return {now_ms, true};
  return {*anchor_ms, false};
}

class LatenessStats {
 public:
  /// Records one pass published `late_ms` after its modelled end (negative counts as 0).
  void record(double late_ms) {
    const double ms = std::max(late_ms, 0.0);
    ++count_;
    sum_ms_ += ms;
    max_ms_ = std::max(max_ms_, ms);
    ++buckets_[bucketOf(ms)];
  }
  std::uint64_t count() const { return count_; }
  double meanMs() const { return count_ == 0 ? 0.0 : sum_ms_ / static_cast<double>(count_); }
  double maxMs() const { return max_ms_; }
  /// The smallest bucket bound that at least q·count values do not exceed (0 when empty);
  /// never above the maximum.
  double quantileMs(double q) const {
    if (count_ == 0) return 0.0;
    const auto rank = static_cast<std::uint64_t>(
        std::max(1.0, std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_))));
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < kBuckets; ++b) {
      seen += buckets_[b];
      if (seen >= rank) return b + 1 == kBuckets ? max_ms_ : std::min(upperBoundMs(b), max_ms_);
    }
    return max_ms_;
  }

 private:
  // Microseconds: 0..15 one bucket each, then 16 linear sub-buckets per power of two up to
  // 2^36 µs (19 hours); anything longer goes into the last bucket.
  static constexpr std::size_t kSub = 16;
  static constexpr std::size_t kBuckets = kSub + kSub * 32;
  static std::size_t bucketOf(double ms) {
    const double us_d = ms * 1000.0;
    if (!(us_d < 6.0e10)) return kBuckets - 1;
    const auto us = static_cast<std::uint64_t>(us_d);
    if (us < kSub) return static_cast<std::size_t>(us);
    const int log2 = 63 - __builtin_clzll(us);  // >= 4
    const auto sub = static_cast<std::size_t>((us >> (log2 - 4)) & (kSub - 1));
    return std::min(kBuckets - 1, kSub + static_cast<std::size_t>(log2 - 4) * kSub + sub);
  }
  static double upperBoundMs(std::size_t b) {
    if (b < kSub) return static_cast<double>(b + 1) / 1000.0;
    const std::size_t octave = (b - kSub) / kSub;  // values in [16·2^octave, 32·2^octave) µs
    const std::size_t sub = (b - kSub) % kSub;
    const double width = static_cast<double>(std::uint64_t{1} << octave);
    return (static_cast<double>(kSub) * width + static_cast<double>(sub + 1) * width) / 1000.0;
  }

  std::uint64_t count_ = 0;
  double sum_ms_ = 0.0;
  double max_ms_ = 0.0;
  std::array<std::uint64_t, kBuckets> buckets_{};
};

class PollTimeout {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PollTimeout(Clock::time_point now) : now_(now) {}

  /// Wake by `t` at the latest (whole milliseconds, rounded up).
  void wakeBy(Clock::time_point t) { fold(std::chrono::ceil<std::chrono::milliseconds>(t - now_)); }
  /// Do not block at all (something is due already).
  void wakeNow() { fold(std::chrono::milliseconds(0)); }
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

/// Sets the calling thread's timer slack to 1 ns (prctl PR_SET_TIMERSLACK). Linux lets a
/// normal thread's timed waits (poll timeouts, timerfd wake-ups) end up to 50 µs late by default
/// so it can coalesce wake-ups; a loop that must publish at a modelled time calls this once on
/// the thread that waits. Returns false if the kernel refused (the default slack then stays).
bool tightenTimerSlack();

class PassTimer {
 public:
  using Clock = std::chrono::steady_clock;
  PassTimer();
  ~PassTimer();
  PassTimer(const PassTimer&) = delete;
  PassTimer& operator=(const PassTimer&) = delete;

  /// False if the timerfd could not be created.
  bool valid() const { return fd_ >= 0; }
  /// The fd to poll for readability (ZMQ_POLLIN): readable once the armed time has passed.
  int fd() const { return fd_; }
  /// Fires at `t` (absolute); a system call only when `t` differs from the armed time. A time
  /// in the past makes the fd readable at once.
  void armAt(Clock::time_point t);
  /// Stops the timer and clears a pending expiry (no system call when not armed).
  void disarm();
  /// Clears the expiry after the fd was readable; the timer stays unarmed until armAt.
  void acknowledge();
  std::optional<Clock::time_point> armedAt() const { return armed_; }

 private:
  int fd_;
  std::optional<Clock::time_point> armed_;
};

class HeapTrimGate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit HeapTrimGate(Clock::duration interval) : interval_(interval.count()) {}
  /// The gate every serve loop of this process shares.
  static HeapTrimGate& process(Clock::duration interval) {
    static HeapTrimGate gate(interval);
    return gate;
  }
  /// True: no trim was claimed in the interval before `now`, and the caller trims now. False:
  /// `latest` is the claim that stands (the caller's trim waits for its interval to end).
  bool claim(Clock::time_point now, Clock::time_point& latest) {
    Clock::rep last = last_.load(std::memory_order_relaxed);
    const Clock::rep t = now.time_since_epoch().count();
    while (last == 0 || t - last >= interval_) {
      if (last_.compare_exchange_weak(last, t, std::memory_order_relaxed)) return true;
    }
    latest = Clock::time_point(Clock::duration(last));
    return false;
  }

 private:
  const Clock::rep interval_;
  std::atomic<Clock::rep> last_{0};  // 0: never claimed
};

}  // namespace mocker::service
