#include "tests/testing/recording_frame_sink.h"

namespace mocker::testing {

publishers::SendResult RecordingFrameSink::send(std::span<const publishers::Frame> frames) {
  if (drop_next_ > 0) {
    --drop_next_;
    ++num_dropped_;
    return publishers::SendResult::Dropped;
  }
  publishers::Message m;
  m.reserve(frames.size());
  for (const publishers::Frame& f : frames) m.emplace_back(f.begin(), f.end());
  messages_.push_back(std::move(m));
  return publishers::SendResult::Sent;
}

std::string frameText(const std::vector<std::byte>& frame) {
  return std::string(reinterpret_cast<const char*>(frame.data()), frame.size());
}

}  // namespace mocker::testing
