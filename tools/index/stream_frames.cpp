#include "tools/index/stream_frames.h"

namespace mocker::index {
namespace {

std::optional<StreamMessage> at(Frames frames, std::size_t seq_at) {
  const auto seq = protocol::decodeSeqNo(frames[seq_at]);
  if (!seq) return std::nullopt;
  return StreamMessage{.seq = *seq, .payload = frames[seq_at + 1]};
}

}  // namespace

std::optional<StreamMessage> parseLiveMessage(Frames frames) {
  if (frames.size() != 3) return std::nullopt;
  return at(frames, 1);
}

std::optional<StreamMessage> parseReplayMessage(Frames frames) {
  if ((frames.size() != 3 && frames.size() != 4) || !frames[0].empty()) return std::nullopt;
  return at(frames, frames.size() - 2);
}

}  // namespace mocker::index
