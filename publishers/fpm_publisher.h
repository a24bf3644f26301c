// FpmPublisher: forward-pass metrics of one DP rank as Dynamo-compatible FPM messages
// (docs/wire.md, Forward-pass metrics): frames [<empty topic>, seq (8 B BE), payload] where the
// payload's counter_id equals seq, per rank from 0.
//
// Emission rules, driven entirely by time parameters (milliseconds on the caller's clock):
//   * onPass(): one record per pass with scheduled work; the rank is now busy;
//   * onIdle(now): when the rank went busy → idle, one all-zero heartbeat immediately, then
//     one each `heartbeat_interval_s` while it stays idle. A fresh publisher counts as "just
//     went idle", so its first onIdle() announces the worker. A late call emits one heartbeat
//     (no catch-up burst) and schedules the next one interval later;
//   * nextHeartbeatDue(): when the service loop should call onIdle() next (nullopt while busy).
//
// Not thread-safe: owned and used by the service loop thread. Never starts threads, never reads
// a clock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "engine/types.h"
#include "protocol/fpm.h"
#include "publishers/frame_sink.h"

namespace mocker::publishers {

struct FpmPublisherConfig {
  std::string worker_id = "0";  ///< decimal u64 (fpm.worker_id)
  std::uint32_t dp_rank = 0;
  double heartbeat_interval_s = 1.0;  ///< > 0 (fpm_heartbeat_interval_s)
  bool extensions = false;            ///< write the x_ keys passed to onPass (docs/wire.md)
};

class FpmPublisher {
 public:
  /// Validates the config (worker_id decimal u64, interval finite and > 0). `sink` must outlive
  /// the publisher.
  static Result<std::unique_ptr<FpmPublisher>> create(FpmPublisherConfig config, FrameSink& sink);

  FpmPublisher(const FpmPublisher&) = delete;
  FpmPublisher& operator=(const FpmPublisher&) = delete;

  /// Publishes the record of a pass with scheduled work, finished at `now_ms`. `extensions` are
  /// written only when the config enables them. Returns the counter_id used.
  std::uint64_t onPass(const engine::ForwardPassMetrics& fpm, double now_ms,
                       const protocol::FpmExtensions& extensions = {});

  /// The rank is idle at `now_ms`: publishes a heartbeat if one is due. Returns whether it did.
  bool onIdle(double now_ms);

  /// When the next heartbeat is due: nullopt while busy (onIdle must be called once the rank
  /// goes idle), else the time at which onIdle() will publish.
  std::optional<double> nextHeartbeatDue() const;

  /// The worker restarted (a `restart` fault): counter_id starts at 0 again, as a new process's
  /// publisher's, and the rank counts as busy until its next onIdle. The counters go on.
  void restart() {
    next_counter_ = 0;
    busy_ = true;
  }

  std::uint64_t numSent() const { return num_sent_; }
  std::uint64_t numDropped() const { return num_dropped_; }
  std::uint64_t numHeartbeats() const { return num_heartbeats_; }

 private:
  FpmPublisher(FpmPublisherConfig config, FrameSink& sink)
      : config_(std::move(config)), sink_(&sink) {}

  std::uint64_t publish(protocol::FpmRecord record);

  FpmPublisherConfig config_;
  FrameSink* sink_;
  std::uint64_t next_counter_ = 0;
  bool busy_ = true;                ///< "just went idle" on the first onIdle
  double next_heartbeat_ms_ = 0.0;  ///< meaningful only while !busy_
  std::uint64_t num_sent_ = 0;
  std::uint64_t num_dropped_ = 0;
  std::uint64_t num_heartbeats_ = 0;
};

}  // namespace mocker::publishers
