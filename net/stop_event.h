// StopEvent: a wake-up for a zmq_poll loop that any thread or a signal handler can trigger.
// An eventfd; its fd goes into the loop's poll items (ZMQ_POLLIN).
//
// notify() is async-signal-safe and callable from any thread; the rest belongs to the loop's
// thread. Neither copyable nor movable.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace mocker::net {

class StopEvent final {
 public:
  StopEvent() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~StopEvent() {
    if (fd_ >= 0) close(fd_);
  }
  StopEvent(const StopEvent&) = delete;
  StopEvent& operator=(const StopEvent&) = delete;

  /// False if the eventfd could not be created.
  bool valid() const { return fd_ >= 0; }
  /// The fd to poll for ZMQ_POLLIN.
  int fd() const { return fd_; }
  /// Wakes the loop. Async-signal-safe.
  void notify() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = write(fd_, &one, sizeof one);
  }
  /// Clears pending notifications (after the loop saw POLLIN).
  void drain() {
    std::uint64_t v = 0;
    [[maybe_unused]] const auto n = read(fd_, &v, sizeof v);
  }

 private:
  int fd_;
};

}  // namespace mocker::net
