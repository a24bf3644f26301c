// KvEventPublisher: turns the KV events of one DP rank's passes into vLLM-compatible KV-event
// messages (docs/wire.md, KV events) and keeps a replay ring buffer.
//
//   * one batch per pass, only if the pass produced events; batches are never split or merged;
//   * sequence numbers per publisher (= per rank) from 0, +1 per batch;
//   * live message: [topic, seq (8 B BE), payload] to the FrameSink, non-blocking;
//   * the batch is stored in the ring (last `buffer_steps` batches, oldest evicted) BEFORE it is
//     sent, so a batch the sink drops stays replayable (consumers see a gap and replay it);
//   * handleReplayRequest() answers the replay ROUTER protocol (docs/wire.md) in layout r1 or r2;
//   * failure drills (service/README.md "Failure drills"): a batch published with a KvBatchFault
//     is dropped (kept in the ring or not), sent without its events, sent twice, held until the
//     next batch or for a time (releaseDue()), or first empties the ring. The ring stays sorted
//     by seq; a batch left out of it is a hole a replay skips. restart() starts over as a new
//     process's publisher would (seq 0, empty ring).
//
// Not thread-safe: owned and used by the thread that owns the sink (the service loop). Never
// starts threads, never reads a clock (timestamps are parameters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/enum_names.h"
#include "base/result.h"
#include "engine/types.h"
#include "protocol/kv_events.h"
#include "publishers/frame_sink.h"

namespace mocker::publishers {

/// Replay reply layouts (docs/wire.md): r1 = [seq, payload], r2 = [topic, seq, payload].
enum class ReplayLayout { R1, R2 };
/// The replay layouts' names (the config file's and flags' spellings too).
inline constexpr EnumNames<ReplayLayout, 2> kReplayLayoutNames{
    {{"r1", ReplayLayout::R1}, {"r2", ReplayLayout::R2}}};
std::string_view toString(ReplayLayout layout);
Result<ReplayLayout> parseReplayLayout(std::string_view s);

/// A fault injected into one batch (decided by the caller: service/fault_plan.h). Several
/// combine; a dropped batch is not sent at all.
struct KvBatchFault {
  bool drop = false;           ///< not sent (still ringed unless `unhealable`)
  bool unhealable = false;     ///< with drop: left out of the ring too
  bool suppress = false;       ///< published (and ringed) without its events, seq contiguous
  bool duplicate = false;      ///< sent twice
  bool reorder = false;        ///< held; sent right after the next batch is published
  double delay_s = 0.0;        ///< > 0: held; sent by releaseDue() from ts + delay_s on
  bool truncate_ring = false;  ///< the ring forgets every batch before this one
};

struct KvEventPublisherConfig {
  std::uint32_t dp_rank = 0;
  std::string topic;  ///< frame 0; "" by default; "kv@<pod>@<model>" is validated
  protocol::KvEncodeOptions encoding;
  std::size_t buffer_steps = 10'000;  ///< replay ring capacity in batches; 0 disables the ring
  ReplayLayout replay_layout = ReplayLayout::R1;
};

/// Accepts any topic, except that one starting with "kv@" must be exactly
/// "kv@<pod>@<model>" with non-empty parts and no '@' in the model (llm-d splits on '@').
Status validateKvTopic(std::string_view topic);

class KvEventPublisher {
 public:
  /// Validates the config. `sink` must outlive the publisher.
  static Result<std::unique_ptr<KvEventPublisher>> create(KvEventPublisherConfig config,
                                                          FrameSink& sink);

  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  /// Publishes the events of one pass (in occurrence order) as one batch stamped `ts`
  /// (seconds), with `fault` done to it. Returns the batch's sequence number, or nullopt if
  /// `events` is empty.
  std::optional<std::uint64_t> publishPass(std::span<const engine::KvEvent> events, double ts,
                                           const KvBatchFault& fault = {});

  /// Sends the batches a `delay` fault held whose time (same clock as `ts`) has come; returns
  /// how many. nextRelease(): the earliest such time, if a delayed batch is held.
  std::size_t releaseDue(double now);
  std::optional<double> nextRelease() const;

  /// Same with wire-level events (e.g. AllBlocksCleared as batch 0 with clear_on_start).
  std::optional<std::uint64_t> publishEvents(std::vector<protocol::KvEvent> events, double ts);

  /// Answers one replay request as received from the ROUTER socket: [identity, "", start_seq
  /// (8 B BE)]. Returns the reply messages (each starting with [identity, ""]): every ringed
  /// batch with seq ≥ start_seq in ascending order, then the end marker. Any other shape is
  /// ignored (no reply) and counted in numMalformedReplayRequests().
  std::vector<Message> handleReplayRequest(std::span<const Frame> frames);

  /// The worker restarted (a `restart` fault, service/README.md "Failure drills"): as a new
  /// process's publisher, sequence numbers start at 0 again, the replay ring is empty and the
  /// batches a reorder or delay fault held are gone (never sent). The counters go on.
  void restart();

  std::uint64_t nextSeq() const { return next_seq_; }
  std::uint64_t numBatchesSent() const { return num_sent_; }
  std::uint64_t numBatchesDropped() const { return num_dropped_; }  ///< by the sink
  std::uint64_t numReplayRequests() const { return num_replay_requests_; }
  std::uint64_t numMalformedReplayRequests() const { return num_malformed_replay_requests_; }
  std::size_t ringSize() const { return ring_.size(); }
  std::size_t numHeld() const { return held_.size(); }  ///< held by reorder / delay faults
  const KvEventPublisherConfig& config() const { return config_; }

 private:
  KvEventPublisher(KvEventPublisherConfig config, FrameSink& sink)
      : config_(std::move(config)), sink_(&sink) {}

  std::uint64_t publishBatch(protocol::KvEventBatch batch, const KvBatchFault& fault = {});
  void send(std::uint64_t seq, std::span<const std::byte> payload, int copies);

  /// A batch held by a reorder (until the next batch) or delay (until `release`) fault.
  struct Held {
    std::uint64_t seq = 0;
    std::vector<std::byte> payload;
    std::optional<double> release;  ///< nullopt: after the next batch
    int copies = 1;                 ///< 2 when also duplicated
  };

  KvEventPublisherConfig config_;
  FrameSink* sink_;
  std::uint64_t next_seq_ = 0;
  std::deque<std::pair<std::uint64_t, std::vector<std::byte>>> ring_;  ///< ascending seqs
  std::vector<Held> held_;
  std::uint64_t num_sent_ = 0;
  std::uint64_t num_dropped_ = 0;
  std::uint64_t num_replay_requests_ = 0;
  std::uint64_t num_malformed_replay_requests_ = 0;
};

/// engine → wire event conversion (medium as the engine says; lora_id and lora_name nil for a
/// block without an adapter).
protocol::KvEvent toWireEvent(const engine::KvEvent& event);

}  // namespace mocker::publishers
