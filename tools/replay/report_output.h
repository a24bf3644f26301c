// Text outputs of a replay (docs/metrics.md, Output formats): the AIPerf-style table for stdout,
// the flat JSON report (Dynamo-compatible keys) and the per-request JSONL timelines. The HTML
// page is in report_html.h.
//
// Pure functions; thread-compatible. Same input ⇒ byte-identical output: JSON numbers use
// nlohmann-json's shortest round-trip formatting, keys are in a fixed order.
#pragma once

#include <cstddef>
#include <string>

#include "tools/replay/collector.h"

namespace mocker::replay {

/// The JSON report's "report_version". 2: "quantiles" added. Reports without the key are
/// version 1 (the same keys, no quantiles).
inline constexpr int kReportVersion = 2;

/// Human-readable table: the run identity (when report.identity is set), header lines (requests,
/// tokens, durations, throughputs, reuse, preemptions, handoffs, goodput) and one row per latency
/// metric (disaggregated: also the three handoff times) with
/// columns avg, min, max, p99, p90, p75, p50, std ("–" when a metric has no samples).
std::string formatReportTable(const Report& report);

/// Display width of UTF-8 text in a terminal column: its code points (enough for "–", "Δ" and
/// ASCII). The report table and `mocker compare` align their columns with it.
std::size_t displayWidth(const std::string& s);

/// The JSON report, pretty-printed with 2-space indent and a trailing newline. Keys, in order:
/// num_requests, completed_requests, rejected_requests, cancelled_requests, total_input_tokens,
/// total_output_tokens, duration_ms, wall_time_ms, request_throughput_rps,
/// input_throughput_tok_s, output_throughput_tok_s, total_throughput_tok_s,
/// processed_tokens_per_s, prefix_cache_reused_ratio,
/// first_admission_prefix_cache_reused_ratio; for m in ttft, ttst, tpot, itl, e2e_latency:
/// {mean,min,max,median,p75,p90,p95,p99,std}_<m>_ms; the same nine for
/// output_token_throughput_per_user without "_ms"; then failed_requests, incomplete_requests,
/// total_preemptions, peak_kv_usage; then (disaggregated runs only, report.handoff) handoffs,
/// handoff_activations, handoffs_refused, expired_holds and the nine statistics of
/// kv_transfer, decode_queue and handoff_wait (…_ms); then the tier keys, lora_adapters and
/// "faults" (docs/metrics.md), each only when the run has them; then (only when SLOs were given)
/// goodput_completed_requests, goodput_request_throughput_rps, goodput_output_throughput_tok_s;
/// then `vllm bench serve`'s names: duration (s), completed, failed, request_throughput,
/// output_throughput, total_token_throughput, {mean,median,p75,p90,p95,p99,std}_e2el_ms; then,
/// when report.identity is set, the objects "identity" and "run" (run_identity.h); then
/// report_version (kReportVersion) and "quantiles": {ttft_ms, ttst_ms, tpot_ms, itl_ms,
/// e2e_latency_ms}, each the distribution's p0..p100 (101 numbers) or null when empty. Only
/// wall_time_ms, processed_tokens_per_s and "run" differ between runs of the same command.
/// Undefined values (empty distributions, zero durations) are null.
std::string formatReportJson(const Report& report);

/// The live report's time-scale line (docs/metrics.md, Live time scale): a live run's latencies
/// are wall-clock against servers that run the model `ratio` times faster; with one common ratio
/// R > 0 it gives TTFT, TPOT and E2E p50 / p99 in model time (× R). `ratios`: each server's
/// (RunIdentity::server_speedup_ratios).
std::string formatLiveTimeScale(const Report& report,
                                const std::vector<std::optional<double>>& ratios);

/// The sidecar of the per-request JSONL (`FILE.run.json`): {"identity": …, "run": …} exactly as
/// in the JSON report.
std::string formatRunIdentityJson(const RunIdentity& identity);

/// One JSON object per request, in arrival order, with keys session_id, turn_index,
/// request_id, arrival_time_ms, first_admit_ms, first_token_ms, last_token_ms,
/// terminal_time_ms, terminal_status, ttft_ms, ttst_ms, e2e_latency_ms, itl_ms (per-request
/// mean gap = TPOT), input_length, requested_output_length, output_length (tokens emitted),
/// reused_input_tokens (at the last admission), admission_count, migrations (live: times the
/// request was re-sent to another server), terminal_reason. Absent values are null.
/// `ticks_per_ms` > 0: every time rounded to the clock's resolution, 1 / ticks_per_ms ms (live
/// runs: 1e6, steady_clock's nanoseconds); 0: as recorded (offline: the virtual clock's doubles).
std::string formatRequestsJsonl(const ReplayCollector& collector, double ticks_per_ms = 0);

}  // namespace mocker::replay
