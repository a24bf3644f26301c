// FrameSink: where publishers put their multipart ZeroMQ messages. The ZMQ adapter
// (zmq_sinks.h) implements it over a PUB socket; tests use RecordingFrameSink
// (tests/testing/recording_frame_sink.h). Publishers own no sockets and never block on a sink.
//
// Interface only. An implementation is used by one thread (the one that owns its socket).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace mocker::publishers {

/// One message part; its bytes are only borrowed for the duration of send().
using Frame = std::span<const std::byte>;

/// An owned multipart message (what replay handlers return).
using Message = std::vector<std::vector<std::byte>>;

enum class SendResult {
  Sent,     ///< handed to the transport (a PUB may still drop it later at its high-water mark)
  Dropped,  ///< not sent: the transport would have blocked or failed; the caller counts it
};

class FrameSink {
 public:
  virtual ~FrameSink() = default;

  /// Sends `frames` as one multipart message without blocking.
  virtual SendResult send(std::span<const Frame> frames) = 0;
};

}  // namespace mocker::publishers
