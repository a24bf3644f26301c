// RecordingFrameSink: a FrameSink for tests that keeps a copy of every message it accepts and
// can be told to drop the next N sends (to simulate a full queue / high-water mark).
//
// Not thread-safe; test-only.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "publishers/frame_sink.h"

namespace mocker::testing {

class RecordingFrameSink final : public publishers::FrameSink {
 public:
  publishers::SendResult send(std::span<const publishers::Frame> frames) override;

  /// The next `n` sends return Dropped and are not recorded.
  void dropNext(std::size_t n) { drop_next_ = n; }

  const std::vector<publishers::Message>& messages() const { return messages_; }
  std::size_t numDropped() const { return num_dropped_; }
  void clear() { messages_.clear(); }

 private:
  std::vector<publishers::Message> messages_;
  std::size_t drop_next_ = 0;
  std::size_t num_dropped_ = 0;
};

/// The bytes of a frame as a std::string (for readable assertions).
std::string frameText(const std::vector<std::byte>& frame);

}  // namespace mocker::testing
