// GatewayMetrics: the gateway's own Prometheus metrics (gateway/README.md "Metrics"), in
// Dynamo's frontend names (`dynamo_frontend_*`) with vLLM's histogram buckets:
//   dynamo_frontend_requests_total{endpoint, status}     counter, every HTTP request answered
//   dynamo_frontend_inflight_requests                    gauge, generation requests in flight
//   dynamo_frontend_time_to_first_token_seconds          histogram (vLLM TTFT buckets)
//   dynamo_frontend_inter_token_latency_seconds          histogram (vLLM ITL buckets)
//   dynamo_frontend_request_duration_seconds             histogram (vLLM e2e buckets)
//   dynamo_frontend_input_sequence_tokens_total, dynamo_frontend_output_sequence_tokens_total
//   dynamo_frontend_cached_tokens_total                  prompt tokens the workers found cached
//   dynamo_frontend_disconnects_total                    streams cancelled by their client
// With --router kv (KvRoutingFigures): dynamo_frontend_kv_routed_total,
// dynamo_frontend_kv_routed_cached_prefix_total (to a worker holding a prefix of the prompt),
// dynamo_frontend_kv_query_failures_total, and the live KV index's
// dynamo_frontend_kv_index_blocks (gauge), _batches_applied_total, _gaps_detected_total,
// _gaps_healed_total, _resyncs_total.
// Per LoRA adapter (vLLM's frontend labels none of its series by adapter; Dynamo's frontend
// labels by model): mocker_gateway:lora_requests_total{lora, status},
// mocker_gateway:lora_time_to_first_token_seconds{lora} and
// mocker_gateway:lora_request_duration_seconds{lora} (histograms, the same buckets), for the
// adapters the gateway serves: an unloaded adapter's series go with it.
// Why not vLLM's `vllm:` names: the workers behind the gateway already export those for the
// engine's view; a scrape of both would mix two measurements under one name.
//
// Not thread-safe: owned and used by the gateway's I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "gateway/kv_routing.h"
#include "service/metrics.h"

namespace mocker::gateway {

class GatewayMetrics {
 public:
  GatewayMetrics();

  void countRequest(const std::string& endpoint, int status) { ++requests_[{endpoint, status}]; }
  void observeTtft(double seconds) { ttft_.observe(seconds); }
  void observeItl(double seconds) { itl_.observe(seconds); }
  void observeDuration(double seconds) { duration_.observe(seconds); }
  void addTokens(std::uint64_t input, std::uint64_t output, std::uint64_t cached) {
    input_tokens_ += input;
    output_tokens_ += output;
    cached_tokens_ += cached;
  }
  void countDisconnect() { ++disconnects_; }
  /// Per LoRA adapter `lora` (one the gateway serves): a first token after `seconds`; a request
  /// answered with `status` after `seconds`.
  void observeLoraTtft(const std::string& lora, double seconds);
  void finishLoraRequest(const std::string& lora, int status, double seconds);
  /// Adapter `lora` is no longer served: its series go.
  void forgetLora(const std::string& lora) { lora_.erase(lora); }
  void setInflight(std::uint64_t n) { inflight_ = n; }
  void setKvRouting(const KvRoutingFigures& figures) { kv_ = figures; }

  /// Requests answered with `status` on `endpoint` so far (tests).
  std::uint64_t requests(const std::string& endpoint, int status) const;

  /// The Prometheus text exposition (format 0.0.4).
  std::string render() const;

 private:
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  service::Histogram ttft_;
  service::Histogram itl_;
  service::Histogram duration_;
  std::uint64_t input_tokens_ = 0;
  std::uint64_t output_tokens_ = 0;
  std::uint64_t cached_tokens_ = 0;
  std::uint64_t disconnects_ = 0;
  std::uint64_t inflight_ = 0;
  std::optional<KvRoutingFigures> kv_;
  struct LoraSeries {
    LoraSeries();
    std::map<int, std::uint64_t> requests;  // by HTTP status
    service::Histogram ttft;
    service::Histogram duration;
  };
  std::map<std::string, LoraSeries> lora_;  // by adapter name
  void renderLora(std::string& out) const;
};

}  // namespace mocker::gateway
