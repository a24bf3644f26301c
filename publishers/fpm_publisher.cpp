#include "publishers/fpm_publisher.h"

#include <array>
#include <cmath>

#include "protocol/framing.h"

namespace mocker::publishers {

Result<std::unique_ptr<FpmPublisher>> FpmPublisher::create(FpmPublisherConfig config,
                                                           FrameSink& sink) {
  if (!protocol::isDecimalU64(config.worker_id)) {
    return invalidArgument("fpm.worker_id: '" + config.worker_id +
                           "' must be a decimal u64 (Dynamo parses it as u64)");
  }
  if (!std::isfinite(config.heartbeat_interval_s) || config.heartbeat_interval_s <= 0.0) {
    return invalidArgument("fpm_heartbeat_interval_s: must be finite and > 0 (got " +
                           std::to_string(config.heartbeat_interval_s) + ")");
  }
  return std::unique_ptr<FpmPublisher>(new FpmPublisher(std::move(config), sink));
}

std::uint64_t FpmPublisher::publish(protocol::FpmRecord record) {
  record.worker_id = config_.worker_id;
  record.dp_rank = config_.dp_rank;
  record.counter_id = next_counter_++;
  const std::vector<std::byte> payload = protocol::encodeFpm(record);
  const auto seq = protocol::encodeSeqNo(record.counter_id);
  const std::array<Frame, 3> frames{Frame{}, Frame(seq), Frame(payload)};
  (sink_->send(frames) == SendResult::Sent ? num_sent_ : num_dropped_) += 1;
  return record.counter_id;
}

std::uint64_t FpmPublisher::onPass(const engine::ForwardPassMetrics& fpm, double /*now_ms*/,
                                   const protocol::FpmExtensions& extensions) {
  busy_ = true;
  const engine::ScheduledStats& s = fpm.scheduled;
  const engine::QueuedStats& q = fpm.queued;
  protocol::FpmRecord record{
      .wall_time = fpm.wall_time,
      .scheduled = {.num_prefill_requests = s.num_prefill_requests,
                    .sum_prefill_tokens = s.sum_prefill_tokens,
                    .var_prefill_length = s.var_prefill_length,
                    .sum_prefill_kv_tokens = s.sum_prefill_kv_tokens,
                    .num_decode_requests = s.num_decode_requests,
                    .sum_decode_kv_tokens = s.sum_decode_kv_tokens,
                    .var_decode_kv_tokens = s.var_decode_kv_tokens},
      .queued = {.num_prefill_requests = q.num_prefill_requests,
                 .sum_prefill_tokens = q.sum_prefill_tokens,
                 .var_prefill_length = q.var_prefill_length,
                 .num_decode_requests = q.num_decode_requests,
                 .sum_decode_kv_tokens = q.sum_decode_kv_tokens,
                 .var_decode_kv_tokens = q.var_decode_kv_tokens},
  };
  if (config_.extensions) record.extensions = extensions;
  return publish(std::move(record));
}

bool FpmPublisher::onIdle(double now_ms) {
  const double interval_ms = config_.heartbeat_interval_s * 1000.0;
  if (busy_) {
    busy_ = false;
    next_heartbeat_ms_ = now_ms + interval_ms;
  } else if (now_ms >= next_heartbeat_ms_) {
    next_heartbeat_ms_ += interval_ms;
    if (next_heartbeat_ms_ <= now_ms) next_heartbeat_ms_ = now_ms + interval_ms;  // no burst
  } else {
    return false;
  }
  ++num_heartbeats_;
  publish(protocol::FpmRecord{});
  return true;
}

std::optional<double> FpmPublisher::nextHeartbeatDue() const {
  if (busy_) return std::nullopt;
  return next_heartbeat_ms_;
}

}  // namespace mocker::publishers
