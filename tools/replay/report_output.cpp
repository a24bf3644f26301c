#include "tools/replay/report_output.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mocker::replay {
namespace {

using nlohmann::ordered_json;

ordered_json orNull(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

void addDistribution(ordered_json& j, const std::string& metric, const std::string& suffix,
                     const Distribution& d) {
  const auto put = [&](const char* stat, double value) {
    j[std::string(stat) + "_" + metric + suffix] =
        d.count == 0 ? ordered_json(nullptr) : ordered_json(value);
  };
  put("mean", d.mean);
  put("min", d.min);
  put("max", d.max);
  put("median", d.p50);
  put("p75", d.p75);
  put("p90", d.p90);
  put("p95", d.p95);
  put("p99", d.p99);
  put("std", d.std);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// Mean onboarding time of a tier report; nullopt without onboardings.
std::optional<double> onboardMean(const TierReport& t) {
  if (t.onboardings == 0) return std::nullopt;
  return t.onboard_ms_total / static_cast<double>(t.onboardings);
}

std::string fixedOr(const std::optional<double>& v, int decimals, const char* unit = "") {
  return v ? fixed(*v, decimals) + unit : std::string("–");
}

/// The report lines of a run with a fault plan: injections by kind, what they did, and the
/// survivors' (completed requests') latency.
template <typename Line>
void addFaultLines(const FaultReport& f, const Report& r, const Line& line) {
  std::string kinds;
  for (const auto& [kind, n] : f.injected) {
    kinds += (kinds.empty() ? "" : ", ") + kind + " " + std::to_string(n);
  }
  line("Faults injected", kinds);
  line("Fault effects (requests)",
       std::to_string(f.failed_by_crash) + " failed with a crashed worker, " +
           std::to_string(f.timed_out) + " timed out on a hung worker (" +
           fixed(f.request_timeout_ms / 1000.0, 3) + " s), " + std::to_string(f.error_replies) +
           " error replies, " + std::to_string(f.aborted) + " aborted, " +
           std::to_string(f.no_worker) + " failed with no worker up, " + std::to_string(f.retried) +
           " retried");
  line("Slowed passes", std::to_string(f.slowed_passes));
  line("Survivors (completed)",
       std::to_string(r.completed_requests) + ": TTFT p50 " +
           (r.ttft.count > 0 ? fixed(r.ttft.p50, 3) : std::string("–")) + " ms, E2E p50 " +
           (r.e2e_latency.count > 0 ? fixed(r.e2e_latency.p50, 3) : std::string("–")) +
           " ms, p99 " +
           (r.e2e_latency.count > 0 ? fixed(r.e2e_latency.p99, 3) : std::string("–")) + " ms");
}

/// The report's "faults" object (formatReportJson).
ordered_json faultsJson(const FaultReport& f, const Report& r) {
  ordered_json injected = ordered_json::object();
  for (const auto& [kind, n] : f.injected) injected[kind] = n;
  const auto stat = [](const Distribution& d, double v) {
    return d.count == 0 ? ordered_json(nullptr) : ordered_json(v);
  };
  ordered_json j;
  j["injected"] = std::move(injected);
  j["failed_by_crash"] = f.failed_by_crash;
  j["timed_out"] = f.timed_out;
  j["error_replies"] = f.error_replies;
  j["aborted"] = f.aborted;
  j["no_worker"] = f.no_worker;
  j["retried"] = f.retried;
  j["slowed_passes"] = f.slowed_passes;
  j["request_timeout_ms"] = f.request_timeout_ms;
  j["survivors"] = r.completed_requests;
  j["survivor_ttft_p50_ms"] = stat(r.ttft, r.ttft.p50);
  j["survivor_e2e_p50_ms"] = stat(r.e2e_latency, r.e2e_latency.p50);
  j["survivor_e2e_p99_ms"] = stat(r.e2e_latency, r.e2e_latency.p99);
  return j;
}

/// `s` right-aligned in a column of `width`; a value as wide as the column or wider still gets
/// one leading space, so that it never runs into the column before it.
std::string padLeft(const std::string& s, std::size_t width) {
  const std::size_t w = displayWidth(s);
  std::string out(w >= width ? 1 : width - w, ' ');
  out += s;
  return out;
}

/// `s` left-aligned in a column of `width`; a label as wide as the column or wider still gets one
/// trailing space before the value that follows it.
std::string padRight(const std::string& s, std::size_t width) {
  const std::size_t w = displayWidth(s);
  std::string out = s;
  out.append(w >= width ? 1 : width - w, ' ');
  return out;
}

ordered_json settingJson(const ConfigSetting& c) {
  switch (c.kind) {
    case ConfigSetting::Kind::Null:
      return nullptr;
    case ConfigSetting::Kind::Bool:
      return c.text == "true";
    case ConfigSetting::Kind::Number: {
      // The dump prints integers without a point; keep them integers in the JSON.
      const ordered_json n = ordered_json::parse(c.text, nullptr, /*allow_exceptions=*/false);
      return n.is_number() ? n : ordered_json(c.text);
    }
    case ConfigSetting::Kind::Text:
      break;
  }
  return c.text;
}

/// The shortest text that reads back as `v` ("10", "2.5").
std::string shortNumber(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// The identity table's "Time scale" for a live run: latencies are wall-clock.
std::string liveTimeScale(const std::vector<std::optional<double>>& ratios) {
  const std::optional<double> common = commonSpeedupRatio(ratios);
  if (!common) {
    std::string words;
    for (const std::optional<double>& r : ratios) {
      if (!words.empty()) words += ' ';
      words += r ? shortNumber(*r) : std::string("?");
    }
    return "wall clock; the servers run at different or unknown speedups (" + words + ")";
  }
  if (*common == 0) return "wall clock; the servers do not wait (speedup 0): no model time";
  return "wall clock against servers at speedup " + shortNumber(*common) +
         ": model time = wall time x " + shortNumber(*common);
}

ordered_json identityJson(const RunIdentity& id) {
  ordered_json j;
  j["mocker_version"] = id.mocker_version;
  j["git_revision"] = id.git_revision;
  j["mode"] = id.mode;
  j["format"] = id.format;
  j["trace_path"] = id.trace_path ? ordered_json(*id.trace_path) : ordered_json(nullptr);
  j["trace_sha256"] = id.trace_sha256 ? ordered_json(*id.trace_sha256) : ordered_json(nullptr);
  j["num_workers"] = id.num_workers;
  j["router"] = id.router;
  j["servers"] = id.servers;
  if (id.mode == "live") {
    ordered_json ratios = ordered_json::array();
    for (const std::optional<double>& r : id.server_speedup_ratios) {
      ratios.push_back(r ? ordered_json(*r) : ordered_json(nullptr));
    }
    j["server_speedup_ratios"] = std::move(ratios);
  }
  if (id.engine_config.empty()) {
    j["engine_config"] = nullptr;
  } else {
    ordered_json engine = ordered_json::object();
    for (const ConfigSetting& c : id.engine_config) engine[c.key] = settingJson(c);
    j["engine_config"] = std::move(engine);
  }
  if (id.gpu_kv_cache_tokens) j["gpu_kv_cache_tokens"] = *id.gpu_kv_cache_tokens;
  return j;
}

ordered_json runJson(const RunIdentity& id) {
  ordered_json j;
  j["date_utc"] = id.date_utc;
  j["command_line"] = id.command_line;
  return j;
}

constexpr std::size_t kLabel = 38;
constexpr std::size_t kTableWidth = 110;

/// "key=value" words after a label, wrapped to kTableWidth with continuation lines indented.
std::string wrappedWords(const std::string& label, const std::vector<std::string>& words) {
  std::string out = padRight(label, kLabel);
  std::size_t column = displayWidth(out);
  bool first = true;
  for (const std::string& w : words) {
    const std::size_t width = displayWidth(w);
    if (!first && column + 1 + width > kTableWidth) {
      out += '\n';
      out.append(kLabel, ' ');
      column = kLabel;
      first = true;
    }
    if (!first) {
      out += ' ';
      ++column;
    }
    out += w;
    column += width;
    first = false;
  }
  return out + "\n";
}

std::string identityTable(const RunIdentity& id) {
  std::string out;
  const auto line = [&](const std::string& label, const std::string& value) {
    out += padRight(label, kLabel) + value + "\n";
  };
  line("mocker", id.mocker_version + " (git " + id.git_revision + ")");
  line("Date (UTC)", id.date_utc);
  line("Command", id.command_line);
  line("Workload", id.format + (id.trace_path ? " " + *id.trace_path : std::string()));
  if (id.trace_sha256) line("Trace SHA-256", *id.trace_sha256);
  if (id.mode == "live") {
    std::string servers;
    for (const std::string& s : id.servers) servers += (servers.empty() ? "" : " ") + s;
    line("Mode", "live, " + std::to_string(id.servers.size()) + " server(s), router " + id.router);
    line("Servers", servers);
    line("Engine config", "each server's own");
    line("Time scale", liveTimeScale(id.server_speedup_ratios));
  } else {
    line("Mode",
         id.mode + ", " + std::to_string(id.num_workers) + " worker(s), router " + id.router);
    std::vector<std::string> words;
    words.reserve(id.engine_config.size());
    for (const ConfigSetting& c : id.engine_config) words.push_back(c.key + "=" + c.text);
    out += wrappedWords("Engine config", words);
    if (id.gpu_kv_cache_tokens) {
      line("GPU KV cache size",
           std::to_string(*id.gpu_kv_cache_tokens) + " tokens per rank (from the deployment)");
    }
  }
  return out;
}

}  // namespace

std::size_t displayWidth(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string formatReportTable(const Report& r) {
  std::string out;
  const auto line = [&](const std::string& label, const std::string& value) {
    out += padRight(label, kLabel) + value + "\n";
  };
  out += "Replay report\n";
  if (r.identity) out += identityTable(*r.identity) + "\n";
  line("Requests",
       std::to_string(r.num_requests) + " (completed " + std::to_string(r.completed_requests) +
           ", rejected " + std::to_string(r.rejected_requests) + ", cancelled " +
           std::to_string(r.cancelled_requests) + ", failed " + std::to_string(r.failed_requests) +
           ", incomplete " + std::to_string(r.incomplete_requests) + ")");
  if (r.migrated_requests > 0) line("Migrated requests", std::to_string(r.migrated_requests));
  line("Input tokens (completed)", std::to_string(r.total_input_tokens));
  line("Output tokens (completed)", std::to_string(r.total_output_tokens));
  line("Duration (ms)", fixedOr(r.duration_ms, 3));
  line("Wall time (ms)", fixedOr(r.wall_time_ms, 3));
  if (r.duration_ms && r.wall_time_ms && *r.wall_time_ms > 0.0) {
    line("Speedup vs real time", fixed(*r.duration_ms / *r.wall_time_ms, 1) + "x");
  }
  line("Request throughput (req/s)", fixedOr(r.request_throughput_rps, 3));
  line("Input token throughput (tok/s)", fixedOr(r.input_throughput_tok_s, 2));
  line("Output token throughput (tok/s)", fixedOr(r.output_throughput_tok_s, 2));
  line("Total token throughput (tok/s)", fixedOr(r.total_throughput_tok_s, 2));
  line("Simulator speed (tok/s wall)", fixedOr(r.processed_tokens_per_s, 0));
  line("Prefix cache reuse (last admit)",
       r.prefix_cache_reused_ratio ? fixed(100.0 * *r.prefix_cache_reused_ratio, 2) + " %"
                                   : std::string("–"));
  line("Prefix cache reuse (first admit)",
       r.first_admission_prefix_cache_reused_ratio
           ? fixed(100.0 * *r.first_admission_prefix_cache_reused_ratio, 2) + " %"
           : std::string("–"));
  const auto by_limit = [](const StopReasonCounts& c) {
    return "max_model_len " + std::to_string(c.max_model_len) + ", kv capacity " +
           std::to_string(c.kv_capacity) + ", max_num_batched_tokens " +
           std::to_string(c.max_num_batched_tokens);
  };
  line("Cut short by a length limit", by_limit(r.cut_short_by));
  line("Rejected by a length limit", by_limit(r.rejected_by));
  line("Preemptions", std::to_string(r.total_preemptions));
  line("Peak KV usage",
       r.peak_kv_usage ? fixed(100.0 * *r.peak_kv_usage, 2) + " %" : std::string("–"));
  if (r.handoff) {
    const HandoffReport& h = *r.handoff;
    line("Handoffs (prefill to decode)",
         std::to_string(h.handoffs) + " (activated " + std::to_string(h.activations) +
             ", refused by decode " + std::to_string(h.refused) + ", expired holds " +
             std::to_string(h.expired_holds) + ")");
  }
  if (r.tiers) {
    const TierReport& t = *r.tiers;
    const auto rate = [&](std::uint64_t hits) {
      return t.query_tokens == 0
                 ? std::string("–")
                 : fixed(100.0 * static_cast<double>(hits) / static_cast<double>(t.query_tokens),
                         2) +
                       " %";
    };
    line("Prefix hit rate GPU / CPU / DISK",
         rate(t.gpu_hit_tokens) + " / " + rate(t.g2_hit_tokens) + " / " + rate(t.g3_hit_tokens));
    line("Offloaded blocks (GPU to host)", std::to_string(t.offloaded_blocks));
    line("Onboardings (mean / max ms)", std::to_string(t.onboardings) + " (" +
                                            fixedOr(onboardMean(t), 2) + " / " +
                                            fixed(t.onboard_ms_max, 2) + ")");
    line("KV bytes moved (GPU>host, host>GPU, host>disk, disk>host)",
         std::to_string(t.bytes_gpu_to_host) + ", " + std::to_string(t.bytes_host_to_gpu) + ", " +
             std::to_string(t.bytes_host_to_disk) + ", " + std::to_string(t.bytes_disk_to_host));
  }
  if (r.faults) addFaultLines(*r.faults, r, line);
  if (r.server_faults) {
    // Live: what the servers injected (only the kinds that fired; "none" when none did).
    std::string kinds;
    for (const auto& [kind, n] : *r.server_faults) {
      if (n > 0) kinds += (kinds.empty() ? "" : ", ") + kind + " " + std::to_string(n);
    }
    line("Faults injected (servers)", kinds.empty() ? std::string("none") : kinds);
  }
  for (const AdapterReport& a : r.adapters) {
    line("LoRA " + (a.adapter ? "'" + *a.adapter + "'" : std::string("(base model)")),
         std::to_string(a.requests) + " requests (completed " +
             std::to_string(a.completed_requests) + "), TTFT p50 " + fixedOr(a.ttft_p50_ms, 3) +
             " ms, E2E p50 " + fixedOr(a.e2e_p50_ms, 3) + " ms, prefix reuse " +
             (a.prefix_cache_reused_ratio ? fixed(100.0 * *a.prefix_cache_reused_ratio, 2) + " %"
                                          : std::string("–")));
  }
  if (r.goodput) {
    line("Goodput (good requests)", std::to_string(r.goodput->completed_requests));
    line("Goodput request throughput (req/s)", fixedOr(r.goodput->request_throughput_rps, 3));
    line("Goodput output throughput (tok/s)", fixedOr(r.goodput->output_throughput_tok_s, 2));
  }
  out += "\n";

  constexpr std::size_t kCol = 11;
  out += padRight("Metric", kLabel);
  for (const char* c : {"avg", "min", "max", "p99", "p90", "p75", "p50", "std"}) {
    out += padLeft(c, kCol);
  }
  out += "\n";
  std::vector<std::pair<const char*, const Distribution*>> rows = {
      {"Time to first token (ms)", &r.ttft},
      {"Time to second token (ms)", &r.ttst},
      {"Time per output token, per req (ms)", &r.tpot},
      {"Inter-token latency, pooled (ms)", &r.itl},
      {"Request latency (ms)", &r.e2e_latency},
      {"Output tok/s per user (pooled)", &r.output_token_throughput_per_user},
  };
  if (r.handoff) {
    rows.emplace_back("KV transfer (ms)", &r.handoff->transfer_ms);
    rows.emplace_back("Decode queueing (ms)", &r.handoff->queue_ms);
    rows.emplace_back("Prefill end to decode start (ms)", &r.handoff->wait_ms);
  }
  for (const auto& [name, d] : rows) {
    out += padRight(name, kLabel);
    for (const double v : {d->mean, d->min, d->max, d->p99, d->p90, d->p75, d->p50, d->std}) {
      out += padLeft(d->count == 0 ? std::string("–") : fixed(v, 2), kCol);
    }
    out += "\n";
  }
  return out;
}

std::string formatReportJson(const Report& r) {
  ordered_json j;
  j["num_requests"] = r.num_requests;
  j["completed_requests"] = r.completed_requests;
  j["rejected_requests"] = r.rejected_requests;
  j["cancelled_requests"] = r.cancelled_requests;
  j["total_input_tokens"] = r.total_input_tokens;
  j["total_output_tokens"] = r.total_output_tokens;
  j["duration_ms"] = orNull(r.duration_ms);
  j["wall_time_ms"] = orNull(r.wall_time_ms);
  j["request_throughput_rps"] = orNull(r.request_throughput_rps);
  j["input_throughput_tok_s"] = orNull(r.input_throughput_tok_s);
  j["output_throughput_tok_s"] = orNull(r.output_throughput_tok_s);
  j["total_throughput_tok_s"] = orNull(r.total_throughput_tok_s);
  j["processed_tokens_per_s"] = orNull(r.processed_tokens_per_s);
  j["prefix_cache_reused_ratio"] = orNull(r.prefix_cache_reused_ratio);
  j["first_admission_prefix_cache_reused_ratio"] =
      orNull(r.first_admission_prefix_cache_reused_ratio);
  addDistribution(j, "ttft", "_ms", r.ttft);
  addDistribution(j, "ttst", "_ms", r.ttst);
  addDistribution(j, "tpot", "_ms", r.tpot);
  addDistribution(j, "itl", "_ms", r.itl);
  addDistribution(j, "e2e_latency", "_ms", r.e2e_latency);
  addDistribution(j, "output_token_throughput_per_user", "", r.output_token_throughput_per_user);
  j["failed_requests"] = r.failed_requests;
  j["incomplete_requests"] = r.incomplete_requests;
  j["migrated_requests"] = r.migrated_requests;
  j["total_preemptions"] = r.total_preemptions;
  j["peak_kv_usage"] = orNull(r.peak_kv_usage);
  for (const auto& [prefix, counts] :
       {std::pair{"cut_short_by_", &r.cut_short_by}, std::pair{"rejected_by_", &r.rejected_by}}) {
    j[std::string(prefix) + "max_model_len_requests"] = counts->max_model_len;
    j[std::string(prefix) + "kv_capacity_requests"] = counts->kv_capacity;
    j[std::string(prefix) + "max_num_batched_tokens_requests"] = counts->max_num_batched_tokens;
  }
  if (r.handoff) {
    j["handoffs"] = r.handoff->handoffs;
    j["handoff_activations"] = r.handoff->activations;
    j["handoffs_refused"] = r.handoff->refused;
    j["expired_holds"] = r.handoff->expired_holds;
    addDistribution(j, "kv_transfer", "_ms", r.handoff->transfer_ms);
    addDistribution(j, "decode_queue", "_ms", r.handoff->queue_ms);
    addDistribution(j, "handoff_wait", "_ms", r.handoff->wait_ms);
  }
  if (r.tiers) {
    const TierReport& t = *r.tiers;
    const auto rate = [&](std::uint64_t hits) -> ordered_json {
      if (t.query_tokens == 0) return nullptr;
      return static_cast<double>(hits) / static_cast<double>(t.query_tokens);
    };
    j["prefix_hit_rate_gpu"] = rate(t.gpu_hit_tokens);
    j["prefix_hit_rate_cpu"] = rate(t.g2_hit_tokens);
    j["prefix_hit_rate_disk"] = rate(t.g3_hit_tokens);
    j["offloaded_blocks"] = t.offloaded_blocks;
    j["offload_bytes_gpu_to_host"] = t.bytes_gpu_to_host;
    j["offload_bytes_host_to_gpu"] = t.bytes_host_to_gpu;
    j["offload_bytes_host_to_disk"] = t.bytes_host_to_disk;
    j["offload_bytes_disk_to_host"] = t.bytes_disk_to_host;
    j["onboardings"] = t.onboardings;
    j["onboard_mean_ms"] = orNull(onboardMean(t));
    j["onboard_max_ms"] = t.onboard_ms_max;
  }
  if (!r.adapters.empty()) {
    ordered_json rows = ordered_json::array();
    for (const AdapterReport& a : r.adapters) {
      rows.push_back({{"adapter", a.adapter ? ordered_json(*a.adapter) : ordered_json(nullptr)},
                      {"requests", a.requests},
                      {"completed_requests", a.completed_requests},
                      {"ttft_p50_ms", orNull(a.ttft_p50_ms)},
                      {"e2e_p50_ms", orNull(a.e2e_p50_ms)},
                      {"prefix_cache_reused_ratio", orNull(a.prefix_cache_reused_ratio)}});
    }
    j["lora_adapters"] = std::move(rows);
  }
  if (r.faults) j["faults"] = faultsJson(*r.faults, r);
  if (r.server_faults) {
    ordered_json injected = ordered_json::object();
    for (const auto& [kind, n] : *r.server_faults) injected[kind] = n;
    j["server_faults_injected"] = std::move(injected);
  }
  if (r.goodput) {
    j["goodput_completed_requests"] = r.goodput->completed_requests;
    j["goodput_request_throughput_rps"] = orNull(r.goodput->request_throughput_rps);
    j["goodput_output_throughput_tok_s"] = orNull(r.goodput->output_throughput_tok_s);
  }
  // `vllm bench serve --save-result` names for the same quantities (docs/metrics.md). Its
  // total_input_tokens, total_output_tokens and {mean,median,std,p99}_{ttft,tpot,itl}_ms are the
  // keys above already.
  j["duration"] = r.duration_ms ? ordered_json(*r.duration_ms / 1000.0) : ordered_json(nullptr);
  j["completed"] = r.completed_requests;
  j["failed"] = r.num_requests - r.completed_requests;
  j["request_throughput"] = orNull(r.request_throughput_rps);
  j["output_throughput"] = orNull(r.output_throughput_tok_s);
  j["total_token_throughput"] = orNull(r.total_throughput_tok_s);
  {
    ordered_json e2el;
    addDistribution(e2el, "e2el", "_ms", r.e2e_latency);
    for (auto& [key, value] : e2el.items()) {
      if (!key.starts_with("min_") && !key.starts_with("max_")) j[key] = value;
    }
  }
  if (r.identity) {
    j["identity"] = identityJson(*r.identity);
    j["run"] = runJson(*r.identity);
  }
  // Added in report version 2, after every older key: the shape of each latency distribution
  // (p0..p100), which `mocker compare` plots as CDFs.
  j["report_version"] = kReportVersion;
  ordered_json quantiles = ordered_json::object();
  for (const auto& [key, d] :
       {std::pair{"ttft_ms", &r.ttft}, std::pair{"ttst_ms", &r.ttst}, std::pair{"tpot_ms", &r.tpot},
        std::pair{"itl_ms", &r.itl}, std::pair{"e2e_latency_ms", &r.e2e_latency}}) {
    quantiles[key] = d->count == 0 ? ordered_json(nullptr) : ordered_json(d->quantiles);
  }
  j["quantiles"] = std::move(quantiles);
  return j.dump(2) + "\n";
}

std::string formatLiveTimeScale(const Report& report,
                                const std::vector<std::optional<double>>& ratios) {
  std::string out = "Live time scale: " + liveTimeScale(ratios);
  const std::optional<double> ratio = commonSpeedupRatio(ratios);
  if (!ratio || *ratio == 0 || *ratio == 1) return out + "\n";
  const auto row = [&](const char* name, const Distribution& d) {
    return std::string(name) + " p50 " + fixed(d.p50 * *ratio, 3) + " / p99 " +
           fixed(d.p99 * *ratio, 3) + " ms";
  };
  return out + "; in model time: " + row("TTFT", report.ttft) + ", " + row("TPOT", report.tpot) +
         ", " + row("E2E", report.e2e_latency) + "\n";
}

std::string formatRunIdentityJson(const RunIdentity& identity) {
  ordered_json j;
  j["identity"] = identityJson(identity);
  j["run"] = runJson(identity);
  return j.dump(2) + "\n";
}

std::string formatRequestsJsonl(const ReplayCollector& collector, double ticks_per_ms) {
  // A time to the clock's resolution: a wall-clock difference prints as 25.028411, not as
  // 25.028411000000002 (dividing the whole ticks gives the double nearest the decimal).
  const auto at = [ticks_per_ms](double v) -> ordered_json {
    return ticks_per_ms > 0 ? std::round(v * ticks_per_ms) / ticks_per_ms : v;
  };
  const auto t = [&at](const std::optional<double>& v) -> ordered_json {
    return v ? at(*v) : ordered_json(nullptr);
  };
  std::string out;
  for (const RequestRecord& r : collector.requests()) {
    const RequestLatencies l = latenciesOf(r);
    const auto& tau = r.token_times_ms;
    ordered_json j;
    j["session_id"] = r.info.session_id;
    j["turn_index"] = r.info.turn_index;
    j["request_id"] = r.info.request_id ? ordered_json(*r.info.request_id) : nullptr;
    j["arrival_time_ms"] = at(r.arrival_ms);
    j["first_admit_ms"] = t(r.first_admit_ms);
    j["first_token_ms"] = tau.empty() ? ordered_json(nullptr) : at(tau.front());
    j["last_token_ms"] = tau.empty() ? ordered_json(nullptr) : at(tau.back());
    j["terminal_time_ms"] = t(r.terminal_ms);
    j["terminal_status"] = terminalStatusName(r.status);
    j["ttft_ms"] = t(l.ttft_ms);
    j["ttst_ms"] = t(l.ttst_ms);
    j["e2e_latency_ms"] = t(l.e2e_ms);
    j["itl_ms"] = t(l.tpot_ms);
    j["input_length"] = r.info.input_length;
    j["requested_output_length"] = r.info.requested_output_length;
    j["output_length"] = tau.size();
    j["reused_input_tokens"] = r.last_reused_input_tokens;
    j["admission_count"] = r.admission_count;
    j["migrations"] = r.migrations;
    j["terminal_reason"] = r.stop_reason == StopReason::None
                               ? ordered_json(nullptr)
                               : ordered_json(stopReasonName(r.stop_reason));
    out += j.dump();
    out += '\n';
  }
  return out;
}

}  // namespace mocker::replay
