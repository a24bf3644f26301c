#include "publishers/kv_event_publisher.h"

#include <algorithm>
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
    return protocol::BlockStoredEvent{
        .block_hashes = s->block_hashes,
        .parent_block_hash = s->parent_block_hash,
        .token_ids = s->token_ids,
        .block_size = s->block_size,
        .lora_id = s->lora_id == 0 ? std::nullopt : std::optional<std::int64_t>(s->lora_id),
        .medium = std::string(engine::mediumName(s->medium)),
        .lora_name = s->lora_name.empty() ? std::nullopt : std::optional(s->lora_name)};
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
                                                           double ts, const KvBatchFault& fault) {
  if (events.empty()) return std::nullopt;
  protocol::KvEventBatch batch{.ts = ts, .dp_rank = config_.dp_rank};
  if (!fault.suppress) {
    batch.events.reserve(events.size());
    for (const engine::KvEvent& e : events) batch.events.push_back(toWireEvent(e));
  }
  return publishBatch(std::move(batch), fault);
}

std::optional<std::uint64_t> KvEventPublisher::publishEvents(std::vector<protocol::KvEvent> events,
                                                             double ts) {
  if (events.empty()) return std::nullopt;
  return publishBatch(
      protocol::KvEventBatch{.ts = ts, .events = std::move(events), .dp_rank = config_.dp_rank});
}

void KvEventPublisher::send(std::uint64_t seq, std::span<const std::byte> payload, int copies) {
  const auto seq_frame = protocol::encodeSeqNo(seq);
  const std::array<Frame, 3> frames{bytesOf(config_.topic), Frame(seq_frame), payload};
  for (int i = 0; i < copies; ++i) {
    (sink_->send(frames) == SendResult::Sent ? num_sent_ : num_dropped_) += 1;
  }
}

std::uint64_t KvEventPublisher::publishBatch(protocol::KvEventBatch batch,
                                             const KvBatchFault& fault) {
  const std::uint64_t seq = next_seq_++;
  if (fault.suppress) batch.events.clear();
  std::vector<std::byte> payload = protocol::encodeKvEventBatch(batch, config_.encoding);
  if (fault.truncate_ring) ring_.clear();
  // Ring first (docs/wire.md, Live message): a batch lost by the sink stays replayable.
  std::span<const std::byte> stored = payload;
  if (config_.buffer_steps > 0 && !(fault.drop && fault.unhealable)) {
    if (ring_.size() == config_.buffer_steps) ring_.pop_front();
    ring_.emplace_back(seq, std::move(payload));
    stored = ring_.back().second;
  }
  // Batches a reorder fault held go out after this one (this one is "the next batch").
  std::vector<Held> after;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->release) {
      ++it;
      continue;
    }
    after.push_back(std::move(*it));
    it = held_.erase(it);
  }
  const int copies = fault.duplicate ? 2 : 1;
  if (fault.drop) {
    // Not sent (a gap for consumers).
  } else if (fault.reorder || fault.delay_s > 0) {
    held_.push_back(
        {.seq = seq,
         .payload = {stored.begin(), stored.end()},
         .release = fault.delay_s > 0 ? std::optional(batch.ts + fault.delay_s) : std::nullopt,
         .copies = copies});
  } else {
    send(seq, stored, copies);
  }
  for (const Held& h : after) send(h.seq, h.payload, h.copies);
  return seq;
}

void KvEventPublisher::restart() {
  next_seq_ = 0;
  ring_.clear();
  held_.clear();
}

std::size_t KvEventPublisher::releaseDue(double now) {
  std::size_t n = 0;
  for (auto it = held_.begin(); it != held_.end();) {
    if (!it->release || *it->release > now) {
      ++it;
      continue;
    }
    send(it->seq, it->payload, it->copies);
    it = held_.erase(it);
    ++n;
  }
  return n;
}

std::optional<double> KvEventPublisher::nextRelease() const {
  std::optional<double> next;
  for (const Held& h : held_) {
    if (h.release && (!next || *h.release < *next)) next = h.release;
  }
  return next;
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
  // Ascending seqs, with a hole where a drop_unhealable fault left a batch out.
  const auto from =
      std::lower_bound(ring_.begin(), ring_.end(), start_seq,
                       [](const auto& entry, std::uint64_t s) { return entry.first < s; });
  const auto first = static_cast<std::size_t>(from - ring_.begin());
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
