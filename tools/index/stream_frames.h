// The frame layouts of a worker's KV-event streams as `mocker index` reads them
// (tools/index/README.md, "Gap handling"): a SUB message [topic, seq, payload], and a replay
// reply on a DEALER in either layout, r1 ["", seq, payload] or r2 ["", topic, seq, payload],
// ending with the ff×8 end marker. No sockets: frames are byte spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "protocol/framing.h"

namespace mocker::index {

/// One message of a KV-event stream: a batch (seq, payload), or the replay's end marker.
struct StreamMessage {
  std::uint64_t seq = 0;
  std::span<const std::byte> payload;
  /// Meaningful on a replay DEALER only (a live seq ff×8 is a batch like any other).
  bool isEndMarker() const { return seq == protocol::kReplayEndMarker; }
};

using Frames = std::span<const std::span<const std::byte>>;

/// A SUB message; nullopt when malformed (not three frames, a seq frame not 8 bytes).
std::optional<StreamMessage> parseLiveMessage(Frames frames);
/// A replay reply (r1 or r2, or an end marker in either); nullopt when malformed (no empty
/// delimiter, three or four frames expected, a seq frame not 8 bytes).
std::optional<StreamMessage> parseReplayMessage(Frames frames);

}  // namespace mocker::index
