// Metrics of the serve loop in vLLM's Prometheus names (service/README.md, "HTTP: metrics,
// health, readiness"): what the loop records (MetricsRecorder), the copy it publishes
// (MetricsSnapshot), the board the HTTP thread reads it from (MetricsBoard) and the text
// exposition (renderPrometheus).
//
// Request latencies come from the modelled timeline the loop already keeps, in engine
// milliseconds: arrival = when the loop read the submit, admission = the start of the pass that
// first scheduled it, each token = the end of the pass that produced it (OutputSignal::time_ms),
// finish = the end of the last pass (or the moment of a cancel). The loop publishes a pass's
// outputs at its modelled end, so with speedup_ratio > 0 these are also the times a client sees;
// with speedup_ratio = 0 modelled time does not advance with the wall clock and the latencies
// are the modelled ones (what a real engine of that speed would show), not the wall-clock ones.
//
// Threads: MetricsRecorder is owned and used by the loop thread only. MetricsBoard is shared:
// the loop publishes with tryPublish (try_lock: it never waits for a scrape; a missed publish is
// retried on the next loop turn) and the HTTP thread copies the snapshot out under the lock and
// renders outside it. Health and readiness are atomics, written by the loop, read by anyone.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/types.h"
#include "service/fault_plan.h"

namespace mocker::service {

/// A Prometheus histogram with fixed upper bounds (the +Inf bucket is implicit).
struct Histogram {
  std::span<const double> bounds;
  std::vector<std::uint64_t> counts;  ///< per bound, not cumulative; last = above every bound
  double sum = 0.0;
  std::uint64_t count = 0;
  explicit Histogram(std::span<const double> upper_bounds = {})
      : bounds(upper_bounds), counts(upper_bounds.size() + 1, 0) {}
  void observe(double value);

 private:
  // The last value observed and its bucket: a pass's tokens mostly share one inter-token
  // latency, so the bucket search runs once per pass rather than per token (NaN: none yet).
  double last_value_ = std::numeric_limits<double>::quiet_NaN();
  std::size_t last_bucket_ = 0;
};

/// vLLM's histogram bucket bounds in seconds (vllm/v1/metrics/loggers.py): time to first token,
/// inter-token latency, end-to-end request latency. Also used by the gateway's own histograms.
std::span<const double> ttftBucketsSeconds();
std::span<const double> itlBucketsSeconds();
std::span<const double> requestLatencyBucketsSeconds();

/// vLLM's finished_reason label values, in this order.
enum class FinishedReason : std::uint8_t { Stop, Length, Abort, Error };
inline constexpr std::size_t kNumFinishedReasons = 4;

/// Everything /metrics shows for one DP rank (the `engine` label).
struct RankMetrics {
  // Gauges (the engine's load metrics when the snapshot was taken).
  std::uint64_t num_requests_running = 0;
  std::uint64_t num_requests_waiting = 0;
  double kv_cache_usage = 0.0;  ///< fraction, 1 = full
  // Counters.
  std::uint64_t prefix_cache_queries = 0;  ///< tokens looked up
  std::uint64_t prefix_cache_hits = 0;     ///< tokens found
  std::uint64_t num_preemptions = 0;
  std::uint64_t prompt_tokens = 0;      ///< prompt length of each request, at its first token
  std::uint64_t generation_tokens = 0;  ///< tokens handed to clients
  std::array<std::uint64_t, kNumFinishedReasons> request_success{};
  /// KV offload tiers (docs/engine.md, "KV offload tiers"): the engine's counters when the rank
  /// has a host tier, else nullopt (and no offload series).
  std::optional<engine::TierMetrics> tiers;
  std::uint64_t onboarding_requests = 0;  ///< gauge: requests parked while they onboard
  // Histograms, seconds.
  Histogram time_to_first_token;
  Histogram inter_token_latency;
  Histogram e2e_request_latency;
  Histogram request_queue_time;
  Histogram request_prefill_time;
  Histogram request_decode_time;
  RankMetrics();
};

/// mocker's own counters (the `mocker:` prefix), whole process.
struct ServiceMetrics {
  std::uint64_t backpressure_cancels = 0;
  std::uint64_t disconnect_cancels = 0;
  std::uint64_t unroutable_sends = 0;
  std::uint64_t clients_gone = 0;
  std::uint64_t malformed_messages = 0;
  std::uint64_t rejected_submits = 0;
  std::uint64_t limit_rejections = 0;
  std::uint64_t kv_event_batches_published = 0;
  std::uint64_t replay_requests_served = 0;
  std::uint64_t output_messages = 0;
  std::uint64_t passes = 0;
  /// Injected faults by kind (FaultKind order): `mocker:faults_injected_total{kind}`.
  std::array<std::uint64_t, kNumFaultKinds> faults_injected{};
  /// LoRA adapters (docs/engine.md "LoRA adapters"), one entry per rank when max_loras > 0, else
  /// empty: vLLM's `vllm:lora_requests_info` gauge.
  struct LoraInfo {
    std::string running;  ///< adapter names of the running requests, comma-separated
    std::string waiting;  ///< adapter names of the waiting requests
    std::uint32_t max_lora = 0;
    double time_s = 0.0;  ///< the gauge's value: Unix time of the snapshot (vLLM's)
  };
  std::vector<LoraInfo> lora;
};

/// What the loop publishes: one copy per publish, read by the HTTP thread.
struct MetricsSnapshot {
  std::string model_name;
  std::string worker;  ///< the `worker` label on every series; "" = no such label
  std::vector<RankMetrics> ranks;
  ServiceMetrics service;
};

/// The periodic log line of one rank over an interval (vLLM's LoggingStatLogger shape).
struct StatsLine {
  std::uint32_t engine = 0;
  double seconds = 0.0;                 ///< length of the interval
  std::uint64_t prompt_tokens = 0;      ///< in the interval
  std::uint64_t generation_tokens = 0;  ///< in the interval
  std::uint64_t running = 0;
  std::uint64_t waiting = 0;
  double kv_cache_usage = 0.0;
  std::uint64_t prefix_cache_queries = 0;  ///< since start
  std::uint64_t prefix_cache_hits = 0;
};
/// "Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 3.5 tokens/s,
/// Running: 2 reqs, Waiting: 0 reqs, KV cache usage: 1.2%, Prefix cache hit rate: 50.0%".
std::string formatStatsLine(const StatsLine& line);

/// The Prometheus text exposition format 0.0.4 of `snapshot` (HELP, TYPE, one series per rank).
std::string renderPrometheus(const MetricsSnapshot& snapshot);
/// The same for several workers (a fleet): each metric family once, with one series per rank of
/// every snapshot, told apart by their `worker` labels.
std::string renderPrometheus(std::span<const MetricsSnapshot> snapshots);

/// Per-request timelines and counters. Loop thread only.
class MetricsRecorder final {
 public:
  MetricsRecorder(std::string model_name, std::uint32_t dp_size, std::string worker = {});

  /// A request was accepted at engine time `now_ms` with `prompt_tokens` prompt tokens.
  void onSubmit(engine::RequestId id, std::uint32_t rank, double now_ms,
                std::uint32_t prompt_tokens);
  /// A pass of `pass.dp_rank` completed: first admissions start the prefill phase.
  void onAdmissions(const engine::PassResult& pass);
  /// One output signal of a completed pass of `rank`; `delivered` tells whether it goes to a
  /// client (its stream is still active), which is what generation_tokens counts.
  void onOutput(std::uint32_t rank, const engine::OutputSignal& s, bool delivered);
  /// A request left the engine early (cancel, backpressure, client gone, shutdown) at `now_ms`.
  void onAbort(engine::RequestId id, double now_ms);
  /// Prefill worker: request `id`'s prefill ended at `prefill_end_ms` and its handoff reached
  /// the client. Like vLLM's prefill instance (a max_tokens = 1 request), it finishes `length`
  /// there: time to first token and end-to-end latency end at the prefill, its prompt tokens
  /// count. Holding its KV until the decode side fetches it changes nothing more here.
  void onHandoff(engine::RequestId id, double prefill_end_ms);

  /// The snapshot with the gauges of `load` (one per rank) and the service counters.
  const MetricsSnapshot& snapshot(std::span<const engine::LoadMetrics> load,
                                  const ServiceMetrics& service);
  std::size_t numTracked() const { return requests_.size(); }

 private:
  struct Timeline {
    std::uint32_t rank = 0;
    std::uint32_t prompt_tokens = 0;
    double arrival_ms = 0.0;
    double admitted_ms = -1.0;     ///< start of the first pass that scheduled it; < 0: not yet
    double first_token_ms = -1.0;  ///< < 0: no token yet
    double last_token_ms = -1.0;
  };
  /// The request's first token at `time_ms`: its prompt tokens count, TTFT is observed.
  void firstToken(RankMetrics& m, Timeline& t, double time_ms);
  void finish(const Timeline& t, FinishedReason reason, double end_ms);

  MetricsSnapshot snapshot_;
  std::unordered_map<engine::RequestId, Timeline> requests_;  // looked up only, never iterated
};

/// The loop's phase, for /health and /ready.
enum class LoopPhase : int { Starting, Serving, Draining, Stopped };

/// The snapshot and the loop's liveness, shared between the loop and the HTTP thread.
class MetricsBoard final {
 public:
  using Clock = std::chrono::steady_clock;
  /// Loop: replaces the published snapshot unless a reader holds it; false then (retry later).
  bool tryPublish(const MetricsSnapshot& snapshot);
  /// HTTP thread: a copy of the last published snapshot.
  MetricsSnapshot read() const;

  /// Loop: one turn done (cheap: one relaxed store).
  void noteTurn(Clock::time_point now) {
    last_turn_ns_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }
  /// Loop: a hang fault — /health reports 503 from `from` on.
  void markUnhealthyFrom(Clock::time_point from) {
    unhealthy_from_ns_.store(from.time_since_epoch().count(), std::memory_order_relaxed);
  }
  /// Whether a hang fault has made /health fail by `now`.
  bool unhealthy(Clock::time_point now) const {
    return now.time_since_epoch().count() >= unhealthy_from_ns_.load(std::memory_order_relaxed);
  }
  void setPhase(LoopPhase phase) { phase_.store(phase, std::memory_order_release); }
  LoopPhase phase() const { return phase_.load(std::memory_order_acquire); }
  /// How long ago the loop last finished a turn.
  Clock::duration sinceLastTurn(Clock::time_point now) const {
    return now - Clock::time_point(Clock::duration(last_turn_ns_.load(std::memory_order_relaxed)));
  }

 private:
  mutable std::mutex mutex_;
  // Guarded by mutex_.
  MetricsSnapshot published_;
  std::atomic<LoopPhase> phase_{LoopPhase::Starting};
  std::atomic<Clock::rep> last_turn_ns_{Clock::now().time_since_epoch().count()};
  std::atomic<Clock::rep> unhealthy_from_ns_{std::numeric_limits<Clock::rep>::max()};
};

}  // namespace mocker::service
