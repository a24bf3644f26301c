// The loop's metrics cadence, the stats line and the HTTP server's lifetime
// (metrics_publisher.h).
#include "service/metrics_publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "service/http_server.h"

namespace mocker::service {
namespace {

/// After something changed, /metrics sees it within this long.
constexpr auto kPublishInterval = std::chrono::milliseconds(100);
/// With HTTP on, an idle loop still turns this often, so /health sees it alive.
constexpr auto kLivenessInterval = std::chrono::milliseconds(1000);

}  // namespace

MetricsPublisher::MetricsPublisher(const ServiceConfig& config, std::shared_ptr<spdlog::logger> log,
                                   Clock::time_point start, Collect collect)
    : recorder_(config.service.served_model_name, config.engine.dp_size,
                config.service.worker_label),
      log_(std::move(log)),
      collect_(std::move(collect)),
      last_publish_(start),
      last_stats_log_(start) {
  if (config.log_stats_interval_s > 0) {
    stats_every_ = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(config.log_stats_interval_s));
  }
}

MetricsPublisher::~MetricsPublisher() = default;

Result<std::string> MetricsPublisher::startHttp(const HttpEndpointConfig& config,
                                                FaultAdmin* admin) {
  if (!config.enabled) return std::string();
  MOCKER_TRY(http_, HttpServer::start(config, board_, admin));
  return http_->url();
}

const MetricsSnapshot& MetricsPublisher::collectSnapshot() {
  load_.clear();
  ServiceMetrics service;
  collect_(load_, service);
  return recorder_.snapshot(load_, service);
}

std::optional<MetricsPublisher::Clock::time_point> MetricsPublisher::onTurn(Clock::time_point now) {
  board_.noteTurn(now);
  const bool stats_on = stats_every_ > Clock::duration::zero();
  const bool stats_due = stats_on && now - last_stats_log_ >= stats_every_;
  const bool publish_due =
      served() && !frozen_ && (changed_ || unpublished_) && now - last_publish_ >= kPublishInterval;
  if (publish_due || stats_due) {
    const MetricsSnapshot& snapshot = collectSnapshot();
    if (publish_due) {
      // try_lock: if a scrape is copying the previous snapshot, retry on a later turn.
      unpublished_ = !board_.tryPublish(snapshot);
      changed_ = false;
      last_publish_ = now;
    }
    if (stats_due) logStats(snapshot, now);
  }
  std::optional<Clock::time_point> wake;
  const auto wakeBy = [&wake](Clock::time_point t) { wake = wake ? std::min(*wake, t) : t; };
  if (served()) {
    wakeBy(now + kLivenessInterval);
    if (!frozen_ && (changed_ || unpublished_)) wakeBy(last_publish_ + kPublishInterval);
  }
  if (stats_on) wakeBy(last_stats_log_ + stats_every_);
  return wake;
}

void MetricsPublisher::freeze() {
  publishFinal();
  frozen_ = true;
}

void MetricsPublisher::publishFinal() {
  if (!served() || frozen_) return;
  // The loop is done: waiting for a scrape's copy here costs nothing.
  const MetricsSnapshot& snapshot = collectSnapshot();
  while (!board_.tryPublish(snapshot)) std::this_thread::yield();
  changed_ = unpublished_ = false;
}

void MetricsPublisher::logStats(const MetricsSnapshot& snapshot, Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - last_stats_log_).count();
  last_stats_log_ = now;
  stats_tokens_.resize(snapshot.ranks.size());
  for (std::size_t r = 0; r < snapshot.ranks.size(); ++r) {
    const RankMetrics& m = snapshot.ranks[r];
    auto& [prompt_before, generation_before] = stats_tokens_[r];
    const StatsLine line{.engine = static_cast<std::uint32_t>(r),
                         .seconds = seconds,
                         .prompt_tokens = m.prompt_tokens - prompt_before,
                         .generation_tokens = m.generation_tokens - generation_before,
                         .running = m.num_requests_running,
                         .waiting = m.num_requests_waiting,
                         .kv_cache_usage = m.kv_cache_usage,
                         .prefix_cache_queries = m.prefix_cache_queries,
                         .prefix_cache_hits = m.prefix_cache_hits};
    prompt_before = m.prompt_tokens;
    generation_before = m.generation_tokens;
    // Like vLLM: an idle engine logs at debug level only, not to fill the log.
    const bool idle = line.prompt_tokens == 0 && line.generation_tokens == 0 && line.running == 0 &&
                      line.waiting == 0;
    log_->log(idle ? spdlog::level::debug : spdlog::level::info, "{}", formatStatsLine(line));
  }
}

}  // namespace mocker::service
