// Failure drills in the offline replay (tools/replay/README.md, "Failure drills offline"): the
// `[faults]` plan (service/fault_plan.h) applied to the simulated workers on the virtual clock.
//
//   Status s = checkOfflineFaults(specs, ranks, disaggregated);  // before the run
//   OfflineFaults faults(options, ranks);                        // ranks: each worker's dp_size
//   faults.beforePass(worker, rank, start_ms)   crash / hang / slow for the pass about to run
//   faults.afterPass(worker, rank)              the pass did work: the pass counts advance
//   faults.onSubmit(worker, rank, id, now_ms)   error / abort for a request routed there
//   faults.record(injection)                    an abort that reached its token count
//
// What offline honours: crash, hang, slow (worker faults, by pass count or model time) and
// error, abort (request faults, by seeded rate and id match). Everything else the plan can hold
// needs a live run and is refused by checkOfflineFaults with the kind named: the KV-event faults
// (the offline kv routers read the engines' events directly — no publisher, sequence numbers or
// replay ring to fault), the kv_fetch faults (an offline handoff has no kv_fetch), the metric
// faults (no FPM or /metrics offline), and kinds this build does not model offline.
//
// Deterministic: the decisions are the FaultPlan's (pass counts, model time, a hash of seed,
// fault index and request id), so the same workload, options and seed inject the same faults.
// Not thread-safe; one per offline run.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "service/fault_plan.h"
#include "tools/replay/collector.h"

namespace mocker::replay {

/// The fault plan of an offline run.
struct OfflineFaultOptions {
  std::vector<service::FaultSpec> specs{};  ///< `[faults] inject`, then every `--fault`
  std::uint64_t seed = 0;                   ///< `[faults] seed` / `--fault-seed`
  /// A request held by a hung rank ends `cancelled` at its arrival + this (model ms): the
  /// client's own timeout, `--request-timeout-s`.
  double request_timeout_ms = 600'000.0;
};

/// Refuses, naming the kind (or the scope), a spec offline cannot honour: see the file comment;
/// also `crash` / `hang` in a disaggregated run (a handoff's KV source is not modelled failing),
/// and a `worker` or `rank` scope that does not exist (`ranks`: each worker's dp_size).
Status checkOfflineFaults(const std::vector<service::FaultSpec>& specs,
                          const std::vector<std::uint32_t>& ranks, bool disaggregated);

/// What the faults did in one run.
struct OfflineFaultStats {
  std::vector<service::Injection> injections{};                   ///< in the order injected
  std::array<std::uint64_t, service::kNumFaultKinds> injected{};  ///< by FaultKind
  std::vector<bool> planned_kinds = std::vector<bool>(service::kNumFaultKinds);  ///< in the plan
  std::uint64_t failed_by_crash = 0;  ///< held by a worker when it crashed: failed then
  std::uint64_t timed_out = 0;        ///< held by a hung rank: cancelled at arrival + timeout
  std::uint64_t error_replies = 0;    ///< answered `error` instead of accepted
  std::uint64_t aborted = 0;          ///< cut after `tokens` output tokens: failed
  std::uint64_t no_worker = 0;        ///< dispatched while every worker was down: failed
  std::uint64_t slowed_passes = 0;    ///< passes a `slow` fault stretched
  double request_timeout_ms = 0.0;
};

/// The report's view of `stats` (FaultReport, collector.h).
FaultReport summarizeFaults(const OfflineFaultStats& stats);

/// The workers' fault plans and pass counters of one offline run.
class OfflineFaults {
 public:
  /// `ranks` = each worker's dp_size.
  OfflineFaults(const OfflineFaultOptions& options, const std::vector<std::uint32_t>& ranks);

  bool empty() const { return empty_; }

  /// What the next pass of (worker, rank), starting at `start_ms`, suffers; its injections are
  /// recorded. `crash_all_ranks` / `hang_all_ranks`: the fault has no `rank` scope (the whole
  /// worker stops now, not each rank at its next pass: the offline router knows at once).
  struct PassFaults {
    bool crash = false;
    bool hang = false;
    bool hang_all_ranks = false;
    double slow_factor = 1.0;
  };
  PassFaults beforePass(std::uint32_t worker, std::uint32_t rank, double start_ms);
  /// The pass did work: the worker's and the rank's pass counts advance.
  void afterPass(std::uint32_t worker, std::uint32_t rank, bool slowed);

  /// What a request routed to (worker, rank) suffers; an error's injection is recorded now, an
  /// abort's is returned in `injection` for record() when the stream reaches its tokens.
  service::FaultPlan::RequestFaults onSubmit(std::uint32_t worker, std::uint32_t rank,
                                             std::string_view request_id, double now_ms);
  void record(service::Injection injection);

  OfflineFaultStats& stats() { return stats_; }

 private:
  std::vector<service::FaultPlan> plans_;                // per worker
  std::vector<std::uint64_t> passes_;                    // per worker
  std::vector<std::vector<std::uint64_t>> rank_passes_;  // per worker, per rank
  std::vector<service::Injection> scratch_;
  OfflineFaultStats stats_;
  bool empty_ = true;
};

}  // namespace mocker::replay
