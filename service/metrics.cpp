// Metrics: recording from the loop's passes, the shared board, Prometheus text (metrics.h).
#include "service/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string_view>
#include <utility>

namespace mocker::service {
namespace {

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), in seconds.
constexpr std::array<double, 22> kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
constexpr std::array<double, 19> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                7.5,  10.0,  20.0, 40.0,  80.0};
constexpr std::array<double, 21> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

constexpr std::array<std::string_view, kNumFinishedReasons> kReasonNames = {"stop", "length",
                                                                            "abort", "error"};

double seconds(double ms) { return std::max(0.0, ms) / 1000.0; }

/// Shortest text that reads back to the same double; Prometheus spellings for the specials.
void appendNumber(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void appendNumber(std::string& out, std::uint64_t v) { out += std::to_string(v); }

/// A label value escaped as the text format wants (backslash, double quote, newline).
std::string escapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char ch : v) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '"') {
      out += "\\\"";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

class Exposition {
 public:
  explicit Exposition(std::span<const MetricsSnapshot> snapshots) : snapshots_(snapshots) {
    for (const MetricsSnapshot& s : snapshots) {
      labels_.push_back("model_name=\"" + escapeLabel(s.model_name) + "\"" +
                        (s.worker.empty() ? "" : ",worker=\"" + escapeLabel(s.worker) + "\""));
    }
  }

  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  /// One series per rank (of every snapshot) of a per-rank value.
  template <typename Get>
  void perRank(std::string_view name, std::string_view type, std::string_view help, Get get) {
    header(name, type, help);
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      for (std::size_t r = 0; r < snapshots_[w].ranks.size(); ++r) {
        series(name, w, r, "");
        appendNumber(out_, get(snapshots_[w].ranks[r]));
        out_ += '\n';
      }
    }
  }

  void requestSuccess() {
    constexpr std::string_view kName = "vllm:request_success_total";
    header(kName, "counter", "Count of successfully processed requests.");
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      for (std::size_t r = 0; r < snapshots_[w].ranks.size(); ++r) {
        for (std::size_t i = 0; i < kNumFinishedReasons; ++i) {
          series(kName, w, r, ",finished_reason=\"" + std::string(kReasonNames[i]) + "\"");
          appendNumber(out_, snapshots_[w].ranks[r].request_success[i]);
          out_ += '\n';
        }
      }
    }
  }

  void histogram(std::string_view name, std::string_view help, Histogram RankMetrics::*member) {
    header(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      for (std::size_t r = 0; r < snapshots_[w].ranks.size(); ++r) {
        const Histogram& h = snapshots_[w].ranks[r].*member;
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i <= h.bounds.size(); ++i) {
          cumulative += h.counts[i];
          std::string le = ",le=\"";
          if (i < h.bounds.size()) {
            appendNumber(le, h.bounds[i]);
          } else {
            le += "+Inf";
          }
          series(bucket, w, r, le + "\"");
          appendNumber(out_, cumulative);
          out_ += '\n';
        }
        series(std::string(name) + "_sum", w, r, "");
        appendNumber(out_, h.sum);
        out_ += '\n';
        series(std::string(name) + "_count", w, r, "");
        appendNumber(out_, h.count);
        out_ += '\n';
      }
    }
  }

  /// One series per snapshot of a process-wide (per worker) counter.
  void service(std::string_view name, std::string_view help,
               std::uint64_t ServiceMetrics::*member) {
    header(name, "counter", help);
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      out_ += name;
      out_ += "{" + labels_[w] + "} ";
      appendNumber(out_, snapshots_[w].service.*member);
      out_ += '\n';
    }
  }

  /// `vllm:lora_requests_info{running_lora_adapters, waiting_lora_adapters, max_lora}` per rank of
  /// the snapshots with LoRA on (vLLM's labels; the value is the snapshot's Unix time).
  void loraInfo() {
    constexpr std::string_view kName = "vllm:lora_requests_info";
    bool any = false;
    for (const MetricsSnapshot& s : snapshots_) any = any || !s.service.lora.empty();
    if (!any) return;
    header(kName, "gauge", "Running stats on lora requests.");
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      const auto& ranks = snapshots_[w].service.lora;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        series(kName, w, r,
               ",max_lora=\"" + std::to_string(ranks[r].max_lora) + "\",running_lora_adapters=\"" +
                   escapeLabel(ranks[r].running) + "\",waiting_lora_adapters=\"" +
                   escapeLabel(ranks[r].waiting) + "\"");
        appendNumber(out_, ranks[r].time_s);
        out_ += '\n';
      }
    }
  }

  /// KV offload tiers, only when a rank has them: vLLM's OffloadingConnector counters (its
  /// CPU spec's labelled `vllm:kv_offload_total_bytes` / `_total_time` with `transfer_type`
  /// GPU_to_CPU / CPU_to_GPU, and the flat `vllm:kv_offload_store_*` / `_load_*` names newer
  /// vLLM emits beside them: the same bytes and seconds under two names), then mocker's per-tier
  /// occupancy, hits, bytes per link direction and onboarding counters.
  void offloadTiers() {
    bool any = false;
    for (const MetricsSnapshot& s : snapshots_) {
      for (const RankMetrics& r : s.ranks) any = any || r.tiers.has_value();
    }
    if (!any) return;
    using T = engine::TierMetrics;
    const auto count = [](std::uint64_t T::*m) {
      return [m](const T& t) { return static_cast<double>(t.*m); };
    };
    const auto secs = [](double T::*m) { return [m](const T& t) { return seconds(t.*m); }; };
    using Labelled = std::vector<std::pair<std::string, std::function<double(const T&)>>>;
    tierFamily("vllm:kv_offload_total_bytes_total", "counter",
               "Number of bytes offloaded by KV connector",
               Labelled{{",transfer_type=\"GPU_to_CPU\"", count(&T::bytes_gpu_to_host)},
                        {",transfer_type=\"CPU_to_GPU\"", count(&T::bytes_host_to_gpu)}});
    tierFamily("vllm:kv_offload_total_time_total", "counter",
               "Total time measured by all KV offloading operations",
               Labelled{{",transfer_type=\"GPU_to_CPU\"", secs(&T::store_ms_total)},
                        {",transfer_type=\"CPU_to_GPU\"", secs(&T::load_ms_total)}});
    tierFamily("vllm:kv_offload_store_bytes_total", "counter",
               "Total bytes stored from GPU to offload storage.",
               Labelled{{"", count(&T::bytes_gpu_to_host)}});
    tierFamily("vllm:kv_offload_store_time_total", "counter",
               "Total store time from GPU to offload storage, in seconds.",
               Labelled{{"", secs(&T::store_ms_total)}});
    tierFamily("vllm:kv_offload_load_bytes_total", "counter",
               "Total bytes loaded from offload storage to GPU.",
               Labelled{{"", count(&T::bytes_host_to_gpu)}});
    tierFamily("vllm:kv_offload_load_time_total", "counter",
               "Total load time from offload storage to GPU, in seconds.",
               Labelled{{"", secs(&T::load_ms_total)}});
    tierFamily("mocker:kv_tier_blocks", "gauge", "Blocks held in a KV offload tier.",
               Labelled{{",tier=\"CPU\"", count(&T::g2_blocks)},
                        {",tier=\"DISK\"", count(&T::g3_blocks)}});
    tierFamily("mocker:kv_tier_capacity_blocks", "gauge", "Capacity of a KV offload tier, blocks.",
               Labelled{{",tier=\"CPU\"", count(&T::g2_capacity)},
                        {",tier=\"DISK\"", count(&T::g3_capacity)}});
    tierFamily("mocker:kv_tier_hit_blocks_total", "counter",
               "Prefix blocks onboarded from a KV offload tier.",
               Labelled{{",tier=\"CPU\"", count(&T::g2_hit_blocks)},
                        {",tier=\"DISK\"", count(&T::g3_hit_blocks)}});
    tierFamily("mocker:kv_tier_offloaded_blocks_total", "counter",
               "Blocks evicted from the GPU and stored in host memory.",
               Labelled{{"", count(&T::offloaded_blocks)}});
    tierFamily("mocker:kv_tier_bytes_total", "counter", "Bytes moved per link direction.",
               Labelled{{",direction=\"gpu_to_host\"", count(&T::bytes_gpu_to_host)},
                        {",direction=\"host_to_gpu\"", count(&T::bytes_host_to_gpu)},
                        {",direction=\"host_to_disk\"", count(&T::bytes_host_to_disk)},
                        {",direction=\"disk_to_host\"", count(&T::bytes_disk_to_host)}});
    tierFamily("mocker:kv_onboardings_total", "counter",
               "Finished onboardings (a prefix brought back from host memory or disk).",
               Labelled{{"", count(&T::onboardings)}});
    tierFamily("mocker:kv_onboarding_seconds_total", "counter",
               "Sum of the finished onboardings' durations (disk leg included).",
               Labelled{{"", secs(&T::onboard_ms_total)}});
    tierFamily("mocker:kv_onboarding_max_seconds", "gauge", "Longest finished onboarding.",
               Labelled{{"", secs(&T::onboard_ms_max)}});
    header("mocker:kv_onboarding_requests", "gauge",
           "Requests parked while their prefix is onboarded.");
    forTierRanks([&](std::size_t w, std::size_t r, const RankMetrics& m) {
      series("mocker:kv_onboarding_requests", w, r, "");
      appendNumber(out_, m.onboarding_requests);
      out_ += '\n';
    });
  }

  /// `mocker:faults_injected_total{kind}`: one series per fault kind of every snapshot.
  void faults() {
    header("mocker:faults_injected_total", "counter",
           "Faults injected by failure drills ([faults]), by kind.");
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      for (std::size_t k = 0; k < kNumFaultKinds; ++k) {
        out_ += "mocker:faults_injected_total{" + labels_[w] + ",kind=\"";
        out_ += faultKindName(static_cast<FaultKind>(k));
        out_ += "\"} ";
        appendNumber(out_, snapshots_[w].service.faults_injected[k]);
        out_ += '\n';
      }
    }
  }

  std::string take() { return std::move(out_); }

 private:
  template <typename Fn>
  void forTierRanks(Fn fn) {
    for (std::size_t w = 0; w < snapshots_.size(); ++w) {
      for (std::size_t r = 0; r < snapshots_[w].ranks.size(); ++r) {
        if (snapshots_[w].ranks[r].tiers) fn(w, r, snapshots_[w].ranks[r]);
      }
    }
  }

  /// One family over the ranks with offload tiers: per rank, one series per (labels, value).
  void tierFamily(
      std::string_view name, std::string_view type, std::string_view help,
      const std::vector<std::pair<std::string, std::function<double(const engine::TierMetrics&)>>>&
          labelled) {
    header(name, type, help);
    forTierRanks([&](std::size_t w, std::size_t r, const RankMetrics& m) {
      for (const auto& [labels, get] : labelled) {
        series(name, w, r, labels);
        appendNumber(out_, get(*m.tiers));
        out_ += '\n';
      }
    });
  }

  void series(std::string_view name, std::size_t worker, std::size_t rank,
              const std::string& extra) {
    out_ += name;
    out_ += "{" + labels_[worker] + ",engine=\"" + std::to_string(rank) + "\"" + extra + "} ";
  }

  std::span<const MetricsSnapshot> snapshots_;
  std::vector<std::string> labels_;  // per snapshot: model_name, and worker when set
  std::string out_;
};

}  // namespace

std::span<const double> ttftBucketsSeconds() { return kTtftBuckets; }
std::span<const double> itlBucketsSeconds() { return kItlBuckets; }
std::span<const double> requestLatencyBucketsSeconds() { return kRequestLatencyBuckets; }

void Histogram::observe(double value) {
  if (value != last_value_) {
    // Prometheus buckets are "less than or equal to" their upper bound.
    const auto it = std::lower_bound(bounds.begin(), bounds.end(), value);
    last_bucket_ = static_cast<std::size_t>(it - bounds.begin());
    last_value_ = value;
  }
  ++counts[last_bucket_];
  sum += value;
  ++count;
}

RankMetrics::RankMetrics()
    : time_to_first_token(kTtftBuckets),
      inter_token_latency(kItlBuckets),
      e2e_request_latency(kRequestLatencyBuckets),
      request_queue_time(kRequestLatencyBuckets),
      request_prefill_time(kRequestLatencyBuckets),
      request_decode_time(kRequestLatencyBuckets) {}

MetricsRecorder::MetricsRecorder(std::string model_name, std::uint32_t dp_size,
                                 std::string worker) {
  snapshot_.model_name = std::move(model_name);
  snapshot_.worker = std::move(worker);
  snapshot_.ranks.resize(dp_size);
}

void MetricsRecorder::onSubmit(engine::RequestId id, std::uint32_t rank, double now_ms,
                               std::uint32_t prompt_tokens) {
  requests_[id] = Timeline{.rank = rank, .prompt_tokens = prompt_tokens, .arrival_ms = now_ms};
}

void MetricsRecorder::onAdmissions(const engine::PassResult& pass) {
  for (const engine::Admission& a : pass.admissions) {
    const auto it = requests_.find(a.id);
    if (it != requests_.end() && it->second.admitted_ms < 0) it->second.admitted_ms = pass.start_ms;
  }
}

void MetricsRecorder::onOutput(std::uint32_t rank, const engine::OutputSignal& s, bool delivered) {
  RankMetrics& m = snapshot_.ranks[rank];
  const auto it = requests_.find(s.id);
  if (it == requests_.end()) return;  // cancelled before this pass completed: counted as abort
  Timeline& t = it->second;
  if (s.token) {
    if (delivered) ++m.generation_tokens;
    if (t.first_token_ms < 0) {
      firstToken(m, t, s.time_ms);
    } else {
      m.inter_token_latency.observe(seconds(s.time_ms - t.last_token_ms));
    }
    t.last_token_ms = s.time_ms;
  }
  switch (s.terminal) {
    case engine::Terminal::None:
      return;
    case engine::Terminal::Completed:
      // mocker has no stop strings or EOS: a stream ends at its length (max_tokens, the planned
      // output, or a model-length limit), which vLLM reports as "length".
      finish(t, FinishedReason::Length, s.time_ms);
      break;
    case engine::Terminal::Cancelled:
      finish(t, FinishedReason::Abort, s.time_ms);
      break;
    case engine::Terminal::Rejected:
    case engine::Terminal::Failed:
      finish(t, FinishedReason::Error, s.time_ms);
      break;
  }
  requests_.erase(it);
}

void MetricsRecorder::onAbort(engine::RequestId id, double now_ms) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  finish(it->second, FinishedReason::Abort, now_ms);
  requests_.erase(it);
}

void MetricsRecorder::onHandoff(engine::RequestId id, double prefill_end_ms) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Timeline& t = it->second;
  if (t.first_token_ms < 0) firstToken(snapshot_.ranks[t.rank], t, prefill_end_ms);
  finish(t, FinishedReason::Length, prefill_end_ms);
  requests_.erase(it);
}

void MetricsRecorder::firstToken(RankMetrics& m, Timeline& t, double time_ms) {
  t.first_token_ms = time_ms;
  m.prompt_tokens += t.prompt_tokens;
  m.time_to_first_token.observe(seconds(time_ms - t.arrival_ms));
}

void MetricsRecorder::finish(const Timeline& t, FinishedReason reason, double end_ms) {
  RankMetrics& m = snapshot_.ranks[t.rank];
  ++m.request_success[static_cast<std::size_t>(reason)];
  m.e2e_request_latency.observe(seconds(end_ms - t.arrival_ms));
  // vLLM's phases: queued = arrival → first scheduled; prefill = scheduled → first token;
  // decode = first token → last token. A request that never got that far has 0 for the rest.
  const double admitted = t.admitted_ms < 0 ? end_ms : t.admitted_ms;
  const double first = t.first_token_ms < 0 ? end_ms : t.first_token_ms;
  const double last = t.last_token_ms < 0 ? first : t.last_token_ms;
  m.request_queue_time.observe(seconds(admitted - t.arrival_ms));
  m.request_prefill_time.observe(seconds(first - admitted));
  m.request_decode_time.observe(seconds(last - first));
}

const MetricsSnapshot& MetricsRecorder::snapshot(std::span<const engine::LoadMetrics> load,
                                                 const ServiceMetrics& service) {
  for (std::size_t r = 0; r < load.size() && r < snapshot_.ranks.size(); ++r) {
    RankMetrics& m = snapshot_.ranks[r];
    const engine::LoadMetrics& l = load[r];
    m.num_requests_running = l.running_requests;
    m.num_requests_waiting = l.waiting_requests;
    m.kv_cache_usage = l.kv_usage;
    m.num_preemptions = l.preemptions_total;
    m.prefix_cache_queries = l.prefix_cache_queries_tokens;
    m.prefix_cache_hits = l.prefix_cache_hits_tokens;
    if (l.tiers.g2_capacity > 0) {
      m.tiers = l.tiers;
      m.onboarding_requests = l.onboarding_requests;
    }
  }
  snapshot_.service = service;
  return snapshot_;
}

std::string formatStatsLine(const StatsLine& l) {
  const auto per_s = [&](std::uint64_t n) {
    return l.seconds > 0 ? static_cast<double>(n) / l.seconds : 0.0;
  };
  const double hit_rate =
      l.prefix_cache_queries == 0
          ? 0.0
          : static_cast<double>(l.prefix_cache_hits) / static_cast<double>(l.prefix_cache_queries);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "Engine %03u: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: "
                "%.1f tokens/s, Running: %llu reqs, Waiting: %llu reqs, KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%",
                static_cast<unsigned>(l.engine), per_s(l.prompt_tokens), per_s(l.generation_tokens),
                static_cast<unsigned long long>(l.running),
                static_cast<unsigned long long>(l.waiting), l.kv_cache_usage * 100.0,
                hit_rate * 100.0);
  return buf;
}

bool MetricsBoard::tryPublish(const MetricsSnapshot& snapshot) {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  published_ = snapshot;
  return true;
}

MetricsSnapshot MetricsBoard::read() const {
  std::lock_guard lock(mutex_);
  return published_;
}

std::string renderPrometheus(const MetricsSnapshot& snapshot) {
  return renderPrometheus(std::span<const MetricsSnapshot>(&snapshot, 1));
}

std::string renderPrometheus(std::span<const MetricsSnapshot> snapshots) {
  Exposition e(snapshots);
  using R = RankMetrics;
  e.perRank("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
            [](const R& m) { return m.num_requests_running; });
  e.perRank("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
            [](const R& m) { return m.num_requests_waiting; });
  e.perRank("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
            [](const R& m) { return m.kv_cache_usage; });
  e.perRank("vllm:prefix_cache_queries_total", "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [](const R& m) { return m.prefix_cache_queries; });
  e.perRank("vllm:prefix_cache_hits_total", "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [](const R& m) { return m.prefix_cache_hits; });
  e.perRank("vllm:num_preemptions_total", "counter",
            "Cumulative number of preemption from the engine.",
            [](const R& m) { return m.num_preemptions; });
  e.perRank("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
            [](const R& m) { return m.prompt_tokens; });
  e.perRank("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
            [](const R& m) { return m.generation_tokens; });
  e.requestSuccess();
  e.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              &R::time_to_first_token);
  e.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              &R::inter_token_latency);
  e.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              &R::e2e_request_latency);
  e.histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", &R::request_queue_time);
  e.histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", &R::request_prefill_time);
  e.histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", &R::request_decode_time);
  using M = ServiceMetrics;
  e.service("mocker:backpressure_cancels_total",
            "Requests abandoned because their client did not read its outputs.",
            &M::backpressure_cancels);
  e.service("mocker:disconnect_cancels_total",
            "Active requests cancelled because their client's connection closed.",
            &M::disconnect_cancels);
  e.service("mocker:unroutable_sends_total",
            "Output messages a client's ROUTER refused as unroutable (EHOSTUNREACH).",
            &M::unroutable_sends);
  e.service("mocker:clients_gone_total",
            "Clients forgotten with open streams (unroutable for 1 s, or connection closed).",
            &M::clients_gone);
  e.service("mocker:malformed_messages_total", "Client messages that could not be decoded.",
            &M::malformed_messages);
  e.service("mocker:rejected_submits_total", "Submits refused (limits, validation, memory).",
            &M::rejected_submits);
  e.service("mocker:limit_rejections_total", "Submits refused by a [limits] limit.",
            &M::limit_rejections);
  e.service("mocker:kv_event_batches_published_total", "KV-event batches published.",
            &M::kv_event_batches_published);
  e.service("mocker:replay_requests_served_total", "KV-event replay requests answered.",
            &M::replay_requests_served);
  e.service("mocker:output_messages_total", "Output messages sent to clients.",
            &M::output_messages);
  e.service("mocker:passes_total", "Forward passes computed, all ranks.", &M::passes);
  e.offloadTiers();
  e.faults();
  e.loraInfo();
  return e.take();
}

}  // namespace mocker::service
