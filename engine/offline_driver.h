// OfflineDriver: runs one Engine on a virtual clock. Feed timed
// arrivals, run until every request has ended, and collect per-request timelines. Used by the
// engine benchmarks in tests/bench/ (engine_benchmark, engine_workload_bench, sglang_benchmark).
// `mocker replay` does not use it: tools/replay/offline_replay.{h,cpp} has its own event loop
// over several workers with routing, multi-turn sessions and closed-loop concurrency.
//
// Each DP rank has its own pass clock. The driver repeatedly takes the earliest event: an arrival
// (submitted to its rank, which wakes up at the arrival time if idle) or the pass of the busy
// rank whose clock is earliest (ties: lowest rank). Arrivals at the same instant are submitted
// in the order they were added; an arrival during a pass waits for the pass boundary.
//
// Not thread-safe. Borrows the engine for its lifetime.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace mocker::engine {

/// What happened to one request, in virtual milliseconds.
struct RequestTimeline {
  RequestId id;
  std::uint64_t tag = 0;  ///< caller's label (e.g. trace row), copied from the arrival
  double arrival_ms = 0.0;
  std::uint32_t input_length = 0;
  std::uint32_t requested_output_length = 0;
  std::optional<double> first_admit_ms;
  std::uint32_t admission_count = 0;
  std::uint32_t reused_first = 0;  ///< reused_input_tokens at first admission
  std::uint32_t reused_last = 0;   ///< ... at the last admission
  std::vector<double> token_ms;
  std::vector<std::uint32_t> tokens;
  Terminal terminal = Terminal::None;  ///< None = never ended (should not happen)
  double terminal_ms = 0.0;
};

struct TimedArrival {
  double arrival_ms = 0.0;
  Request request;
  std::uint64_t tag = 0;
};

class OfflineDriver final {
 public:
  /// Called after every pass that did work; may add() follow-up arrivals (at >= pass end).
  using PassObserver = std::function<void(const PassResult&, OfflineDriver&)>;

  explicit OfflineDriver(Engine& engine);
  OfflineDriver(const OfflineDriver&) = delete;
  OfflineDriver& operator=(const OfflineDriver&) = delete;

  /// Queues an arrival. A request the engine refuses at submit is recorded with terminal
  /// Rejected at its arrival time and its error in refusals().
  void add(TimedArrival arrival);

  /// Runs until no arrivals are pending and no rank has work. Returns the number of passes.
  std::uint64_t run(const PassObserver& observer = {});

  /// Timelines in submission order.
  const std::vector<RequestTimeline>& timelines() const { return timelines_; }
  /// Submit errors, by timeline index.
  const std::vector<std::pair<std::size_t, Error>>& refusals() const { return refusals_; }
  /// Latest virtual time reached.
  double nowMs() const { return now_ms_; }

 private:
  struct Pending {
    double arrival_ms;
    std::uint64_t seq;
    bool operator>(const Pending& o) const {
      return arrival_ms != o.arrival_ms ? arrival_ms > o.arrival_ms : seq > o.seq;
    }
  };

  void submitNext();
  void record(const PassResult& pass);

  Engine& engine_;
  std::vector<double> rank_clock_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending_;
  std::unordered_map<std::uint64_t, TimedArrival> pending_arrivals_;  // by seq
  std::uint64_t next_seq_ = 0;
  std::vector<RequestTimeline> timelines_;
  std::unordered_map<RequestId, std::size_t> index_;  // id → timelines_ index
  std::vector<std::pair<std::size_t, Error>> refusals_;
  double now_ms_ = 0.0;
};

}  // namespace mocker::engine
