// Fuzz checks of the KV replay protocol: the publisher's request handler (the ROUTER side) and
// the index's sequencer that consumes live batches, replayed batches and end markers.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "protocol/framing.h"
#include "protocol/kv_events.h"
#include "publishers/frame_sink.h"
#include "publishers/kv_event_publisher.h"
#include "tests/fuzz/fuzz_checks.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/index/sequencer.h"

namespace mocker::fuzz {
namespace {

/// Accepts every message and keeps nothing (the ring is what the check looks at).
class NullSink final : public publishers::FrameSink {
 public:
  publishers::SendResult send(std::span<const publishers::Frame>) override {
    return publishers::SendResult::Sent;
  }
};

/// Reads the fuzz input front to back; past the end it yields zeros.
class Reader {
 public:
  explicit Reader(Input input) : input_(input) {}
  bool done() const { return pos_ >= input_.size(); }
  std::uint8_t byte() { return done() ? 0 : input_[pos_++]; }
  std::span<const std::byte> bytes(std::size_t n) {
    n = std::min(n, input_.size() - std::min(pos_, input_.size()));
    const auto out = std::as_bytes(input_.subspan(pos_, n));
    pos_ += n;
    return out;
  }

 private:
  Input input_;
  std::size_t pos_ = 0;
};

std::vector<std::byte> copyOf(std::span<const std::byte> bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace

void checkKvReplay(Input input) {
  Reader in(input);
  const std::uint8_t setup = in.byte();
  const std::size_t capacity = setup & 7u;
  const bool r2 = (setup & 8u) != 0;
  const std::size_t num_published = in.byte() & 15u;

  NullSink sink;
  auto publisher = publishers::KvEventPublisher::create(
      {.topic = "kv@pod@model",
       .buffer_steps = capacity,
       .replay_layout = r2 ? publishers::ReplayLayout::R2 : publishers::ReplayLayout::R1},
      sink);
  MOCKER_FUZZ_REQUIRE(publisher.has_value());
  for (std::size_t i = 0; i < num_published; ++i) {
    const auto seq = (*publisher)
                         ->publishEvents({protocol::BlockRemovedEvent{.block_hashes = {i}}},
                                         static_cast<double>(i));
    MOCKER_FUZZ_REQUIRE(seq == i);
  }

  std::vector<std::vector<std::byte>> owned;
  while (!in.done()) owned.push_back(copyOf(in.bytes(in.byte() & 15u)));
  const std::vector<publishers::Frame> frames(owned.begin(), owned.end());

  // The seq frame decoder on its own: exactly 8 bytes, big-endian, round trip.
  for (const publishers::Frame& f : frames) {
    const auto seq = protocol::decodeSeqNo(f);
    MOCKER_FUZZ_REQUIRE(seq.has_value() == (f.size() == 8));
    if (seq) {
      const auto again = protocol::encodeSeqNo(*seq);
      MOCKER_FUZZ_REQUIRE(std::equal(again.begin(), again.end(), f.begin(), f.end()));
    }
  }

  const std::uint64_t malformed_before = (*publisher)->numMalformedReplayRequests();
  const auto replies = (*publisher)->handleReplayRequest(frames);
  const bool well_formed = frames.size() == 3 && frames[1].empty() && frames[2].size() == 8;
  if (!well_formed) {
    MOCKER_FUZZ_REQUIRE(replies.empty());
    MOCKER_FUZZ_REQUIRE((*publisher)->numMalformedReplayRequests() == malformed_before + 1);
    return;
  }
  MOCKER_FUZZ_REQUIRE((*publisher)->numReplayRequests() == 1);
  // Every ringed batch with seq >= start, ascending, then the end marker; all to the requester.
  const std::uint64_t start = *protocol::decodeSeqNo(frames[2]);
  const std::uint64_t oldest = num_published - std::min(num_published, capacity);
  const std::uint64_t first = std::max(start, oldest);
  const std::size_t expected = first < num_published ? num_published - first : 0;
  MOCKER_FUZZ_REQUIRE(replies.size() == expected + 1);
  const std::size_t parts = r2 ? 5 : 4;
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const publishers::Message& m = replies[k];
    MOCKER_FUZZ_REQUIRE(m.size() == parts);
    MOCKER_FUZZ_REQUIRE(m[0] == copyOf(frames[0]) && m[1].empty());
    const auto seq = protocol::decodeSeqNo(m[parts - 2]);
    MOCKER_FUZZ_REQUIRE(seq.has_value());
    if (k + 1 == replies.size()) {
      MOCKER_FUZZ_REQUIRE(*seq == protocol::kReplayEndMarker && m[parts - 1].empty());
      continue;
    }
    MOCKER_FUZZ_REQUIRE(*seq == first + k);
    const auto batch = protocol::decodeKvEventBatch(m[parts - 1]);
    MOCKER_FUZZ_REQUIRE(batch.has_value() && batch->events.size() == 1);
  }
}

void checkSequencer(Input input) {
  using std::chrono::milliseconds;
  Reader in(input);
  const std::uint8_t setup = in.byte();
  index::Sequencer sequencer({.has_replay = (setup & 1u) != 0,
                              .replay_timeout = milliseconds(100),
                              .probe_interval = milliseconds((setup & 2u) != 0 ? 50 : 0),
                              .send_retry_interval = milliseconds(10),
                              .max_replay_retries = (setup >> 4) & 3});
  sequencer.setCanResync((setup & 4u) != 0);
  index::SeqTime now{};
  index::SeqActions actions;
  // Plain fields rather than an optional: g++ 12 -O3 misreports an optional as uninitialised.
  bool any_applied = false;
  std::uint64_t last_applied = 0;

  // What IndexService::perform does with the actions, with the send and resync outcomes taken
  // from the input; checks the ordering contract on the way.
  auto perform = [&] {
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const index::SeqAction a = std::move(actions[k]);
      switch (a.kind) {
        case index::SeqActionKind::Apply:
          MOCKER_FUZZ_REQUIRE(!any_applied || a.seq > last_applied);
          any_applied = true;
          last_applied = a.seq;
          break;
        case index::SeqActionKind::GapDetected:
        case index::SeqActionKind::SkipLost:
          MOCKER_FUZZ_REQUIRE(a.seq < a.seq_end);
          break;
        case index::SeqActionKind::RequestReplay:
          sequencer.onReplayRequestResult((in.byte() & 1u) == 0, now);
          break;
        case index::SeqActionKind::Resync:
          MOCKER_FUZZ_REQUIRE(a.seq < a.seq_end);
          MOCKER_FUZZ_REQUIRE(sequencer.resyncing());
          any_applied = false;  // the snapshot replaces what was applied
          if ((in.byte() & 1u) != 0) sequencer.onResyncResult(false, now, actions);  // unsent
          break;
        case index::SeqActionKind::Restarted:
          // A new publisher process: its batches are numbered from 0 again.
          any_applied = false;
          break;
        case index::SeqActionKind::Duplicate:
        case index::SeqActionKind::GapHealed:
        case index::SeqActionKind::ReplayTimedOut:
          break;
      }
    }
    actions.clear();
  };

  sequencer.start(now, (setup & 8u) != 0, actions);
  perform();
  while (!in.done()) {
    const std::uint8_t op = in.byte();
    switch (op & 7u) {
      case 0:
        sequencer.onLiveBatch(in.byte(), {}, now, actions);
        break;
      case 1:
        sequencer.onReplayBatch(in.byte(), {}, now, actions);
        break;
      case 2:
        sequencer.onReplayEnd(now, actions);
        break;
      case 3:
        now += milliseconds(in.byte());
        sequencer.onTick(now, actions);
        break;
      case 4:
        if (sequencer.resyncing()) sequencer.onResyncResult((op & 8u) != 0, now, actions);
        break;
      case 5:
        sequencer.catchUp(now, actions);
        break;
      case 6:
        sequencer.onLiveBatch(sequencer.next() + (op >> 4), {}, now, actions);
        break;
      case 7:
        sequencer.onReplayBatch(sequencer.next() + (op >> 4), {}, now, actions);
        break;
    }
    perform();
  }
}

}  // namespace mocker::fuzz
