#include "gateway/gateway_metrics.h"

#include <charconv>
#include <string_view>

namespace mocker::gateway {
namespace {

void appendDouble(std::string& out, double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

/// A label value as the text format wants it: backslash and double quote escaped (an adapter
/// name holds no control characters).
std::string escapeLabel(std::string_view v) {
  std::string out;
  for (const char ch : v) {
    if (ch == '\\' || ch == '"') out += '\\';
    out += ch;
  }
  return out;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
  out.append(name).append(" ").append(type).append("\n");
}

void counter(std::string& out, std::string_view name, std::string_view help, std::uint64_t value) {
  header(out, name, "counter", help);
  out.append(name).append(" ").append(std::to_string(value)).append("\n");
}

// A histogram's samples; `labels` ("" or `lora="x",`) go first in every label set.
void histogramSamples(std::string& out, std::string_view name, std::string_view labels,
                      const service::Histogram& h) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out.append(name).append("_bucket{").append(labels).append("le=\"");
    appendDouble(out, h.bounds[i]);
    out.append("\"} ").append(std::to_string(cumulative)).append("\n");
  }
  out.append(name).append("_bucket{").append(labels).append("le=\"+Inf\"} ");
  out.append(std::to_string(h.count)).append("\n");
  // Without labels: `name_sum 1.5`; with them: `name_sum{lora="x"} 1.5`.
  const std::string_view set =
      labels.empty() ? std::string_view() : labels.substr(0, labels.size() - 1);
  const auto suffix = [&](std::string_view s) {
    out.append(name).append(s);
    if (!set.empty()) out.append("{").append(set).append("}");
    out.append(" ");
  };
  suffix("_sum");
  appendDouble(out, h.sum);
  out.append("\n");
  suffix("_count");
  out.append(std::to_string(h.count)).append("\n");
}

void histogram(std::string& out, std::string_view name, std::string_view help,
               const service::Histogram& h) {
  header(out, name, "histogram", help);
  histogramSamples(out, name, "", h);
}

void renderKv(std::string& out, const KvRoutingFigures& kv) {
  counter(out, "dynamo_frontend_kv_routed_total", "Choices routed by the kv router.", kv.routed);
  counter(out, "dynamo_frontend_kv_routed_cached_prefix_total",
          "Choices the kv router sent to a worker holding a prefix of their prompt.",
          kv.routed_cached);
  counter(out, "dynamo_frontend_kv_query_failures_total",
          "Overlap queries the KV index did not answer in time (routed as if nothing cached).",
          kv.query_failures);
  header(out, "dynamo_frontend_kv_index_blocks", "gauge",
         "(block, worker rank) pairs the live KV index holds.");
  out.append("dynamo_frontend_kv_index_blocks ")
      .append(std::to_string(kv.index.blocks_indexed))
      .append("\n");
  counter(out, "dynamo_frontend_kv_index_batches_applied_total",
          "KV-event batches the index applied.", kv.index.batches_applied);
  counter(out, "dynamo_frontend_kv_index_gaps_detected_total",
          "Gaps in a rank's KV-event sequence numbers.", kv.index.gaps_detected);
  counter(out, "dynamo_frontend_kv_index_gaps_healed_total",
          "Gaps filled from the worker's KV replay ring.", kv.index.gaps_healed);
  counter(out, "dynamo_frontend_kv_index_resyncs_total",
          "Ranks rebuilt from a kv_snapshot (gap not healable, or worker restart).",
          kv.index.resyncs);
}

}  // namespace

GatewayMetrics::LoraSeries::LoraSeries()
    : ttft(service::ttftBucketsSeconds()), duration(service::requestLatencyBucketsSeconds()) {}

void GatewayMetrics::observeLoraTtft(const std::string& lora, double seconds) {
  lora_[lora].ttft.observe(seconds);
}

void GatewayMetrics::finishLoraRequest(const std::string& lora, int status, double seconds) {
  LoraSeries& s = lora_[lora];
  ++s.requests[status];
  s.duration.observe(seconds);
}

GatewayMetrics::GatewayMetrics()
    : ttft_(service::ttftBucketsSeconds()),
      itl_(service::itlBucketsSeconds()),
      duration_(service::requestLatencyBucketsSeconds()) {}

std::uint64_t GatewayMetrics::requests(const std::string& endpoint, int status) const {
  const auto it = requests_.find({endpoint, status});
  return it == requests_.end() ? 0 : it->second;
}

std::string GatewayMetrics::render() const {
  std::string out;
  header(out, "dynamo_frontend_requests_total", "counter",
         "HTTP requests answered, by endpoint and status code.");
  for (const auto& [key, n] : requests_) {
    // Endpoint names are the gateway's own route names: nothing to escape.
    out.append("dynamo_frontend_requests_total{endpoint=\"").append(key.first);
    out.append("\",status=\"").append(std::to_string(key.second)).append("\"} ");
    out.append(std::to_string(n)).append("\n");
  }
  header(out, "dynamo_frontend_inflight_requests", "gauge",
         "Generation requests in flight (submitted to a worker, not yet finished).");
  out.append("dynamo_frontend_inflight_requests ").append(std::to_string(inflight_)).append("\n");
  histogram(out, "dynamo_frontend_time_to_first_token_seconds",
            "Time from the request's arrival to its first token, in seconds.", ttft_);
  histogram(out, "dynamo_frontend_inter_token_latency_seconds",
            "Time between consecutive output messages of a stream, per token, in seconds.", itl_);
  histogram(out, "dynamo_frontend_request_duration_seconds",
            "Time from the request's arrival to its last byte, in seconds.", duration_);
  counter(out, "dynamo_frontend_input_sequence_tokens_total", "Prompt tokens of served requests.",
          input_tokens_);
  counter(out, "dynamo_frontend_output_sequence_tokens_total", "Tokens generated for clients.",
          output_tokens_);
  counter(out, "dynamo_frontend_cached_tokens_total",
          "Prompt tokens the workers found in their prefix cache.", cached_tokens_);
  counter(out, "dynamo_frontend_disconnects_total",
          "Requests cancelled because their client went away or read too slowly.", disconnects_);
  if (kv_) renderKv(out, *kv_);
  if (!lora_.empty()) renderLora(out);
  return out;
}

void GatewayMetrics::renderLora(std::string& out) const {
  header(out, "mocker_gateway:lora_requests_total", "counter",
         "Generation requests answered, by LoRA adapter and status code.");
  for (const auto& [lora, s] : lora_) {
    for (const auto& [status, n] : s.requests) {
      out.append("mocker_gateway:lora_requests_total{lora=\"").append(escapeLabel(lora));
      out.append("\",status=\"").append(std::to_string(status)).append("\"} ");
      out.append(std::to_string(n)).append("\n");
    }
  }
  constexpr std::string_view kTtft = "mocker_gateway:lora_time_to_first_token_seconds";
  header(out, kTtft, "histogram",
         "Time from a LoRA adapter's request's arrival to its first token, in seconds.");
  for (const auto& [lora, s] : lora_) {
    histogramSamples(out, kTtft, "lora=\"" + escapeLabel(lora) + "\",", s.ttft);
  }
  constexpr std::string_view kDuration = "mocker_gateway:lora_request_duration_seconds";
  header(out, kDuration, "histogram",
         "Time from a LoRA adapter's request's arrival to its last byte, in seconds.");
  for (const auto& [lora, s] : lora_) {
    histogramSamples(out, kDuration, "lora=\"" + escapeLabel(lora) + "\",", s.duration);
  }
}

}  // namespace mocker::gateway
