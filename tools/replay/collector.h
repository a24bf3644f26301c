// ReplayCollector — records what happened to every replayed request and engine-level samples,
// and turns them into the Report of docs/metrics.md. The replay loop (offline,
// live or closed-loop) feeds it per-request events in time order:
//
//   RequestHandle h = collector.onArrival({session_id, turn_index, ...}, arrival_ms);
//   collector.onAdmission(h, pass_start_ms, reused_input_tokens, is_readmission);
//   collector.onToken(h, pass_end_ms);                       // once per output token
//   collector.onTerminal(h, pass_end_ms, TerminalStatus::Completed);
//   collector.onEngineSample({.time_ms = end_ms, .kv_usage = ..., .num_running = ...});
//   Report report = collector.buildReport({.slo = ..., .wall_time_ms = ...});
//
// Not thread-safe; owned by the replay loop's thread. Misuse (an unknown handle) is a broken
// invariant of the loop and aborts via MOCKER_CHECK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/replay/run_identity.h"
#include "tools/replay/stats.h"

namespace mocker::replay {

/// How a request ended. Incomplete = no terminal event was recorded.
enum class TerminalStatus : std::uint8_t { Incomplete, Completed, Rejected, Cancelled, Failed };

/// "completed", "rejected", "cancelled", "failed", "incomplete".
const char* terminalStatusName(TerminalStatus status);

/// The length limit that cut a completed stream short of its requested output, or refused a
/// prompt (docs/engine.md, Length limits); None for every other ending.
enum class StopReason : std::uint8_t { None, MaxModelLen, KvCapacity, MaxNumBatchedTokens };

/// "max_model_len", "kv_capacity", "max_num_batched_tokens"; "" for None (report key parts).
const char* stopReasonName(StopReason reason);

/// The StopReason a wire `reason` names: it starts with "max_model_len: ", "kv capacity: " or
/// "max_num_batched_tokens: " (protocol/README.md §1.2); None for any other text.
StopReason parseWireStopReason(std::string_view reason);

/// Dense index of a request inside one collector, in arrival (dispatch) order.
using RequestHandle = std::size_t;

/// Static facts about a request, known at dispatch.
struct RequestInfo {
  std::string session_id{};
  std::uint32_t turn_index = 0;  ///< 0-based position in its session
  std::optional<std::string> request_id{};
  std::uint32_t input_length = 0;             ///< prompt tokens actually submitted
  std::uint32_t requested_output_length = 0;  ///< max_output_tokens
  std::optional<std::string> lora{};          ///< its LoRA adapter (absent: the base model)
};

/// Everything recorded for one request ("Per-request record").
struct RequestRecord {
  RequestInfo info{};
  double arrival_ms = 0.0;
  std::optional<double> first_admit_ms{};
  std::uint32_t admission_count = 0;  ///< 1 + readmissions after preemption
  std::uint32_t migrations = 0;       ///< live: times re-sent to another server (its went down)
  std::uint32_t first_reused_input_tokens = 0;
  std::uint32_t last_reused_input_tokens = 0;
  std::vector<double> token_times_ms{};  ///< τ_1 ≤ … ≤ τ_n
  TerminalStatus status = TerminalStatus::Incomplete;
  StopReason stop_reason = StopReason::None;
  std::optional<double> terminal_ms{};
};

/// Latencies of one request derived from its record ("Latency"); absent when undefined.
struct RequestLatencies {
  std::optional<double> ttft_ms{};  ///< τ_1 − arrival (n ≥ 1)
  std::optional<double> ttst_ms{};  ///< τ_2 − τ_1 (n ≥ 2)
  std::optional<double> tpot_ms{};  ///< (τ_n − τ_1)/(n − 1) (n ≥ 2)
  std::optional<double> e2e_ms{};   ///< τ_n − arrival (n ≥ 1)
};
RequestLatencies latenciesOf(const RequestRecord& record);

/// One engine observation, typically after each forward pass of one rank (from LoadMetrics).
struct EngineSample {
  double time_ms = 0.0;  ///< pass end
  std::uint32_t dp_rank = 0;
  double kv_usage = 0.0;          ///< fraction of KV blocks in use, [0, 1]
  std::uint64_t num_running = 0;  ///< batch size
  std::uint64_t num_waiting = 0;
  std::uint64_t preemptions_total = 0;  ///< cumulative for this rank
};

/// Service-level objectives for goodput ("Throughput, goodput, reuse"); each bound is optional.
struct SloSpec {
  std::optional<double> ttft_ms{};
  std::optional<double> tpot_ms{};  ///< skipped for requests with n <= 1
  std::optional<double> e2e_ms{};
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};

struct ReportOptions {
  SloSpec slo{};
  std::optional<double> wall_time_ms{};  ///< real time the replay took (offline)
};

struct Goodput {
  SloSpec slo{};
  std::uint64_t completed_requests = 0;  ///< good requests
  std::optional<double> request_throughput_rps{};
  std::optional<double> output_throughput_tok_s{};
};

/// Requests per binding length limit.
struct StopReasonCounts {
  std::uint64_t max_model_len = 0;
  std::uint64_t kv_capacity = 0;
  std::uint64_t max_num_batched_tokens = 0;
  void add(StopReason reason);
};

/// The replay report (docs/metrics.md). Token totals and throughputs count completed requests only;
/// latency distributions use completed requests only. Optional fields are null when undefined
/// (no terminal yet, zero duration, no wall time, no input tokens).
/// Disaggregated runs: the prefill-to-decode handoffs. Set by the caller after buildReport.
struct HandoffReport {
  std::uint64_t handoffs = 0;       ///< delivered to a decode worker
  std::uint64_t activations = 0;    ///< activated (the source was released)
  std::uint64_t refused = 0;        ///< refused by the decode worker (counted rejected)
  std::uint64_t expired_holds = 0;  ///< prefill holds released by their timeout
  Distribution transfer_ms{};       ///< modelled KV transfer (ready − prefill end)
  Distribution queue_ms{};          ///< waiting for decode blocks (reserved − delivered)
  Distribution wait_ms{};           ///< prefill end → activation on the decode worker
};

/// Runs with KV offload tiers (docs/engine.md, "KV offload tiers"): prefix hits per tier, summed
/// over every rank. Hit rates are hit tokens / prefix-cache query tokens. Set by the caller.
struct TierReport {
  std::uint64_t query_tokens = 0;    ///< prompt tokens looked up at admissions
  std::uint64_t gpu_hit_tokens = 0;  ///< reused from the GPU pool
  std::uint64_t g2_hit_tokens = 0;   ///< onboarded from host memory
  std::uint64_t g3_hit_tokens = 0;   ///< onboarded from disk
  std::uint64_t offloaded_blocks = 0;
  std::uint64_t bytes_gpu_to_host = 0, bytes_host_to_gpu = 0;
  std::uint64_t bytes_host_to_disk = 0, bytes_disk_to_host = 0;
  std::uint64_t onboardings = 0;
  double onboard_ms_total = 0.0;  ///< Σ over onboardings of their transfer time
  double onboard_ms_max = 0.0;
};

/// Failure drills in the offline replay (tools/replay/README.md, "Failure drills offline"): what
/// the injected faults did. The survivors' latencies are the report's own (completed requests).
/// Set by the caller.
struct FaultReport {
  /// Injections by kind name, for every kind the plan holds (in service::FaultKind order).
  std::vector<std::pair<std::string, std::uint64_t>> injected{};
  std::uint64_t failed_by_crash = 0;  ///< held by a worker when it crashed
  std::uint64_t timed_out = 0;        ///< held by a hung rank: cancelled at the request timeout
  std::uint64_t error_replies = 0;    ///< answered `error` instead of accepted
  std::uint64_t aborted = 0;          ///< cut after `tokens` output tokens
  std::uint64_t no_worker = 0;        ///< dispatched while every worker was down
  std::uint64_t retried = 0;          ///< re-sent to another worker (offline: no migration, 0)
  std::uint64_t slowed_passes = 0;
  double request_timeout_ms = 0.0;
};

/// One adapter's requests in a run where some request names a LoRA adapter (docs/metrics.md,
/// "Per adapter"). Latencies and reuse over its completed requests, as the run's own.
struct AdapterReport {
  std::optional<std::string> adapter{};  ///< absent: the base model
  std::uint64_t requests = 0;            ///< every request naming it, any ending
  std::uint64_t completed_requests = 0;
  std::optional<double> ttft_p50_ms{};
  std::optional<double> e2e_p50_ms{};
  std::optional<double> prefix_cache_reused_ratio{};  ///< Σ reused (last admit) / Σ input
};

struct Report {
  std::uint64_t num_requests = 0;
  std::uint64_t completed_requests = 0;
  std::uint64_t rejected_requests = 0;
  std::uint64_t cancelled_requests = 0;
  std::uint64_t failed_requests = 0;
  std::uint64_t incomplete_requests = 0;
  std::uint64_t migrated_requests = 0;  ///< live: requests migrated at least once (any ending)
  std::uint64_t total_input_tokens = 0;
  std::uint64_t total_output_tokens = 0;  ///< actual tokens emitted
  std::optional<double> duration_ms{};    ///< last terminal − first arrival
  std::optional<double> wall_time_ms{};
  std::optional<double> request_throughput_rps{};
  std::optional<double> input_throughput_tok_s{};
  std::optional<double> output_throughput_tok_s{};
  std::optional<double> total_throughput_tok_s{};
  std::optional<double> processed_tokens_per_s{};  ///< (Σ in + Σ out) / wall seconds
  std::optional<double> prefix_cache_reused_ratio{};
  std::optional<double> first_admission_prefix_cache_reused_ratio{};
  Distribution ttft{};
  Distribution ttst{};
  Distribution tpot{};
  Distribution itl{};  ///< pooled gaps
  Distribution e2e_latency{};
  Distribution output_token_throughput_per_user{};  ///< 1000/gap for every pooled gap > 0
  std::uint64_t total_preemptions = 0;
  std::optional<double> peak_kv_usage{};  ///< null without engine samples
  StopReasonCounts cut_short_by{};        ///< completed before the requested output, per limit
  StopReasonCounts rejected_by{};         ///< rejected, per limit
  std::optional<Goodput> goodput{};       ///< only when slo.any()
  /// Who ran what, with which build and configuration (run_identity.h); set by the caller after
  /// buildReport, printed by every report writer when present.
  std::optional<RunIdentity> identity{};
  std::optional<HandoffReport> handoff{};  ///< disaggregated runs only
  std::optional<TierReport> tiers{};       ///< runs with KV offload tiers only
  std::optional<FaultReport> faults{};     ///< offline runs with a fault plan only
  /// Live: the faults the servers injected during the run, by kind (every kind of
  /// stats_reply.faults, in its order; liveServerFaults, live_stats.h); absent when no server
  /// reported fault counts.
  std::optional<std::vector<std::pair<std::string, std::uint64_t>>> server_faults{};
  /// Runs where some request names a LoRA adapter: the base model's row first (when some
  /// request names none), then each adapter in byte order of its name. Empty otherwise.
  std::vector<AdapterReport> adapters{};
};

/// What a collector keeps beyond the report's inputs.
struct CollectorOptions {
  /// Keep every EngineSample for engineSamples() (the HTML report's plots). Peak KV usage and
  /// preemptions are accumulated as samples arrive either way; a many-worker replay produces
  /// one sample per pass per rank, so a run that renders no plots can drop them.
  bool keep_engine_samples = true;
};

class ReplayCollector final {
 public:
  explicit ReplayCollector(CollectorOptions options = {}) : options_(options) {}

  /// Registers a request dispatched at `arrival_ms`; returns its handle (0, 1, 2, …).
  RequestHandle onArrival(RequestInfo info, double arrival_ms);
  /// The prompt length the server counted (an HTTP server's usage.prompt_tokens), replacing
  /// RequestInfo::input_length.
  void onInputLength(RequestHandle request, std::uint32_t input_length);
  /// A move from waiting to running at `time_ms` (pass start). The first admission sets
  /// first_admit_ms and first_reused_input_tokens; every one sets last_reused_input_tokens.
  void onAdmission(RequestHandle request, double time_ms, std::uint32_t reused_input_tokens,
                   bool is_readmission);
  /// Live: the request was migrated (re-sent to another server when its server went down).
  void onMigration(RequestHandle request);
  /// One output token emitted at `time_ms`. REQUIRES: time order per request.
  void onToken(RequestHandle request, double time_ms);
  /// The terminal signal, with the limit that bound it (Completed short of the requested output,
  /// Rejected). Only the first terminal event of a request counts.
  void onTerminal(RequestHandle request, double time_ms, TerminalStatus status,
                  StopReason reason = StopReason::None);
  /// Engine-level observation (feeds peak KV usage and preemptions; kept for plots when
  /// CollectorOptions::keep_engine_samples).
  void onEngineSample(const EngineSample& sample);

  const std::vector<RequestRecord>& requests() const { return requests_; }
  /// Every sample in arrival order; empty unless CollectorOptions::keep_engine_samples.
  const std::vector<EngineSample>& engineSamples() const { return samples_; }

  /// Computes every metric of docs/metrics.md from what was recorded so far.
  Report buildReport(const ReportOptions& options) const;

 private:
  RequestRecord& record(RequestHandle request);

  CollectorOptions options_;
  std::vector<RequestRecord> requests_;
  std::vector<EngineSample> samples_;
  std::optional<double> peak_kv_usage_;  // max kv_usage over every sample
  // (dp_rank, max cumulative preemptions), sorted by rank; ranks are usually dense, so rank r
  // is usually at index r.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> preemptions_by_rank_;
};

}  // namespace mocker::replay
