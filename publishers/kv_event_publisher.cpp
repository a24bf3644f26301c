#include "publishers/kv_event_publisher.h"

#include <array>

#include "protocol/framing.h"

namespace mocker::publishers {
namespace {

std::span<const std::byte> bytesOf(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::vector<std::byte> copyOf(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

}  // namespace

std::string_view toString(ReplayLayout layout) { return enumName(kReplayLayoutNames, layout); }

Result<ReplayLayout> parseReplayLayout(std::string_view s) {
  if (auto layout = enumFromName(kReplayLayoutNames, s)) return *layout;
  return invalidArgument("replay_layout: '" + std::string(s) + "' is not one of " +
                         enumNameList(kReplayLayoutNames, ", "));
}

Status validateKvTopic(std::string_view topic) {
  if (!topic.starts_with("kv@")) return {};
  const std::string_view rest = topic.substr(3);
  const auto at = rest.find('@');
  const auto fail = [&](const std::string& why) {
    return invalidArgument("topic '" + std::string(topic) + "': " + why +
                           " (llm-d form is kv@<pod>@<model>)");
  };
  if (at == std::string_view::npos) return fail("missing '@<model>'");
  const std::string_view pod = rest.substr(0, at);
  const std::string_view model = rest.substr(at + 1);
  if (pod.empty()) return fail("empty pod id");
  if (model.empty()) return fail("empty model name");
  if (model.find('@') != std::string_view::npos) return fail("the model name must not contain '@'");
  return {};
}

protocol::KvEvent toWireEvent(const engine::KvEvent& event) {
  if (const auto* s = std::get_if<engine::BlockStored>(&event)) {
    return protocol::BlockStoredEvent{.block_hashes = s->block_hashes,
                                      .parent_block_hash = s->parent_block_hash,
                                      .token_ids = s->token_ids,
                                      .block_size = s->block_size,
                                      .medium = std::string(engine::mediumName(s->medium))};
  }
  if (const auto* r = std::get_if<engine::BlockRemoved>(&event)) {
    return protocol::BlockRemovedEvent{.block_hashes = {r->block_hash},
                                       .medium = std::string(engine::mediumName(r->medium))};
  }
  return protocol::AllBlocksClearedEvent{};
}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::create(KvEventPublisherConfig config,
                                                                   FrameSink& sink) {
  MOCKER_TRY_VOID(validateKvTopic(config.topic));
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(config), sink));
}

std::optional<std::uint64_t> KvEventPublisher::publishPass(std::span<const engine::KvEvent> events,
                                                           double ts) {
  if (events.empty()) return std::nullopt;
  protocol::KvEventBatch batch{.ts = ts, .dp_rank = config_.dp_rank};
  batch.events.reserve(events.size());
  for (const engine::KvEvent& e : events) batch.events.push_back(toWireEvent(e));
  return publishBatch(batch);
}

std::optional<std::uint64_t> KvEventPublisher::publishEvents(std::vector<protocol::KvEvent> events,
                                                             double ts) {
  if (events.empty()) return std::nullopt;
  return publishBatch(
      protocol::KvEventBatch{.ts = ts, .events = std::move(events), .dp_rank = config_.dp_rank});
}

std::uint64_t KvEventPublisher::publishBatch(const protocol::KvEventBatch& batch) {
  const std::uint64_t seq = next_seq_++;
  std::vector<std::byte> payload = protocol::encodeKvEventBatch(batch, config_.encoding);
  const auto seq_frame = protocol::encodeSeqNo(seq);
  const std::array<Frame, 3> frames{bytesOf(config_.topic), Frame(seq_frame), Frame(payload)};
  // Ring first (docs/wire.md, Live message): a batch lost by the sink stays replayable.
  if (config_.buffer_steps > 0) {
    if (ring_.size() == config_.buffer_steps) ring_.pop_front();
    ring_.emplace_back(seq, std::move(payload));
    const auto& stored = ring_.back().second;
    const std::array<Frame, 3> ringed{frames[0], frames[1], Frame(stored)};
    (sink_->send(ringed) == SendResult::Sent ? num_sent_ : num_dropped_) += 1;
  } else {
    (sink_->send(frames) == SendResult::Sent ? num_sent_ : num_dropped_) += 1;
  }
  return seq;
}

std::vector<Message> KvEventPublisher::handleReplayRequest(std::span<const Frame> frames) {
  if (frames.size() != 3 || !frames[1].empty() || frames[2].size() != 8) {
    ++num_malformed_replay_requests_;
    return {};
  }
  const auto start = protocol::decodeSeqNo(frames[2]);
  if (!start) {
    ++num_malformed_replay_requests_;
    return {};
  }
  ++num_replay_requests_;
  const std::uint64_t start_seq = *start;
  const bool r2 = config_.replay_layout == ReplayLayout::R2;
  const std::vector<std::byte> identity = copyOf(frames[0]);
  std::vector<Message> replies;
  std::size_t first = 0;
  if (!ring_.empty() && start_seq > ring_.front().first) {
    first = static_cast<std::size_t>(
        std::min<std::uint64_t>(start_seq - ring_.front().first, ring_.size()));
  }
  replies.reserve(ring_.size() - first + 1);
  for (std::size_t i = first; i < ring_.size(); ++i) {
    const auto& [seq, payload] = ring_[i];
    const auto seq_frame = protocol::encodeSeqNo(seq);
    Message m{identity, {}};
    if (r2) m.push_back(copyOf(bytesOf(config_.topic)));
    m.push_back(copyOf(seq_frame));
    m.push_back(payload);
    replies.push_back(std::move(m));
  }
  Message end{identity, {}};
  if (r2) end.emplace_back();
  end.push_back(copyOf(protocol::encodeSeqNo(protocol::kReplayEndMarker)));
  end.emplace_back();
  replies.push_back(std::move(end));
  return replies;
}

}  // namespace mocker::publishers
