// MetricsPublisher: the serve loop's metrics side — records requests (MetricsRecorder), decides
// when to publish a snapshot for the HTTP thread (MetricsBoard) and when to log the stats line,
// and owns the HTTP server ([endpoints.http]); service/README.md, "HTTP: metrics, health,
// readiness".
//
// Cadence: after something changed, a snapshot is published at most every 100 ms, with
// try_lock (the loop never waits for a scrape; a busy board is retried on a later turn); with
// HTTP on the loop turns at least once a second so /health sees it alive; the stats line is
// logged every [logging] stats_interval_s. onTurn() returns when the loop must wake next.
//
// Thread affinity: owned and used by the loop thread; the HTTP server's thread reads only the
// board. Not copyable; the HTTP server stops when this is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "service/config.h"
#include "service/metrics.h"

namespace spdlog {
class logger;
}

namespace mocker::service {

class HttpServer;
class FaultAdmin;

class MetricsPublisher final {
 public:
  using Clock = std::chrono::steady_clock;
  /// Fills the gauges (one LoadMetrics per rank) and the service counters of a snapshot.
  using Collect = std::function<void(std::vector<engine::LoadMetrics>&, ServiceMetrics&)>;

  MetricsPublisher(const ServiceConfig& config, std::shared_ptr<spdlog::logger> log,
                   Clock::time_point start, Collect collect);
  ~MetricsPublisher();
  MetricsPublisher(const MetricsPublisher&) = delete;
  MetricsPublisher& operator=(const MetricsPublisher&) = delete;

  /// Binds [endpoints.http] when enabled; "" or the bound "http://HOST:PORT". `admin` (may be
  /// null) serves /admin/faults and must outlive this.
  Result<std::string> startHttp(const HttpEndpointConfig& config, FaultAdmin* admin = nullptr);
  /// The process serves HTTP for this loop elsewhere (a fleet's one endpoint reads board()):
  /// publish snapshots and turn at least once a second as with HTTP on, but bind nothing.
  void serveExternally() { external_ = true; }
  /// The board the HTTP thread reads; lives as long as this publisher.
  const MetricsBoard& board() const { return board_; }
  /// A hang fault: /health fails from `from` on.
  void markUnhealthyFrom(Clock::time_point from) { board_.markUnhealthyFrom(from); }

  // What the loop saw (each marks the metrics changed).
  void onSubmit(engine::RequestId id, std::uint32_t rank, double now_ms,
                std::uint32_t prompt_tokens) {
    recorder_.onSubmit(id, rank, now_ms, prompt_tokens);
    changed_ = true;
  }
  void onAdmissions(const engine::PassResult& pass) {
    recorder_.onAdmissions(pass);
    changed_ = true;
  }
  void onOutput(std::uint32_t rank, const engine::OutputSignal& s, bool delivered) {
    recorder_.onOutput(rank, s, delivered);
  }
  void onAbort(engine::RequestId id, double now_ms) {
    recorder_.onAbort(id, now_ms);
    changed_ = true;
  }
  void onHandoff(engine::RequestId id, double prefill_end_ms) {
    recorder_.onHandoff(id, prefill_end_ms);
    changed_ = true;
  }
  void setPhase(LoopPhase phase) { board_.setPhase(phase); }

  /// One loop turn at `now`: publishes and logs what is due; the next time the loop must wake
  /// for it (nullopt: never).
  std::optional<Clock::time_point> onTurn(Clock::time_point now);
  /// At shutdown: publishes the final snapshot (waiting for the board if a scrape holds it),
  /// unless frozen.
  void publishFinal();
  /// A `metrics_freeze` fault: publishes the snapshot of now (waiting for the board if a scrape
  /// holds it) and no other after it, so /metrics serves that one for good. /health and /ready
  /// are not snapshots: they go on telling the truth. The stats log line goes on too.
  void freeze();

 private:
  const MetricsSnapshot& collectSnapshot();
  void logStats(const MetricsSnapshot& snapshot, Clock::time_point now);
  /// Whether anyone reads the board (own HTTP server, or the fleet's).
  bool served() const { return http_ != nullptr || external_; }

  MetricsRecorder recorder_;
  MetricsBoard board_;  // shared with the HTTP thread: declared before http_, outlives it
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<spdlog::logger> log_;
  Collect collect_;
  bool external_ = false;          // serveExternally()
  bool frozen_ = false;            // freeze(): nothing is published any more
  Clock::duration stats_every_{};  // zero: no stats line
  bool changed_ = true;            // since the last publish
  bool unpublished_ = false;       // a publish found the board busy: retry soon
  Clock::time_point last_publish_;
  Clock::time_point last_stats_log_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> stats_tokens_;  // prompt, generation
  std::vector<engine::LoadMetrics> load_;                              // scratch
};

}  // namespace mocker::service
