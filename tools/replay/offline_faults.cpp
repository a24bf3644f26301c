#include "tools/replay/offline_faults.h"

#include <algorithm>
#include <string>
#include <utility>

namespace mocker::replay {
namespace {

using service::FaultKind;

/// Why a spec of `kind` cannot run offline; empty when it can.
std::string needsLiveRun(FaultKind kind, bool disaggregated) {
  switch (kind) {
    case FaultKind::Slow:
    case FaultKind::Error:
    case FaultKind::Abort:
      return {};
    case FaultKind::Crash:
    case FaultKind::Hang:
      if (!disaggregated) return {};
      return "crash and hang faults in a disaggregated offline replay are not modelled (a "
             "handoff's KV source failing): run the drill live (mocker serve, --mode live)";
    case FaultKind::Drop:
    case FaultKind::DropUnhealable:
    case FaultKind::Suppress:
    case FaultKind::Duplicate:
    case FaultKind::Reorder:
    case FaultKind::Delay:
    case FaultKind::TruncateRing:
      return "kv-event faults need a live run: the offline kv routers read the engines' events "
             "directly, with no publisher, sequence numbers or replay ring to fault (mocker serve "
             "and mocker index, or --mode live)";
    case FaultKind::FetchNotFound:
    case FaultKind::FetchLate:
    case FaultKind::FetchNever:
      return "kv_fetch faults need a live run: an offline handoff reaches its decode worker "
             "without a kv_fetch (mocker serve with disaggregated workers, --mode live)";
    case FaultKind::FpmStop:
    case FaultKind::MetricsFreeze:
      return "metric faults need a live run: the offline replay publishes no forward-pass "
             "metrics and serves no /metrics (mocker serve)";
    case FaultKind::Silent:
      return "silent faults need a live run: the offline replay does not model a request "
             "acknowledged and then never answered (mocker serve, --mode live)";
    case FaultKind::Restart:
      return "restart faults need a live run: the offline replay does not model a worker coming "
             "back with a fresh engine (mocker serve, --mode live)";
    default:
      break;
  }
  return "faults of this kind need a live run: the offline replay does not model them (mocker "
         "serve, --mode live)";
}

}  // namespace

Status checkOfflineFaults(const std::vector<service::FaultSpec>& specs,
                          const std::vector<std::uint32_t>& ranks, bool disaggregated) {
  const std::uint32_t max_ranks = ranks.empty() ? 1 : *std::max_element(ranks.begin(), ranks.end());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const service::FaultSpec& s = specs[i];
    // Built by appending: GCC 12 reports a false -Wrestrict on "[" + to_string.
    std::string what;
    if (specs.size() > 1) {
      what.push_back('[');
      what.append(std::to_string(i));
      what.append("] ");
    }
    what.append("fault '");
    what.append(service::faultSpecText(s));
    what.append("': ");
    if (const std::string why = needsLiveRun(s.kind, disaggregated); !why.empty()) {
      return invalidArgument(what + why);
    }
    if (s.worker && *s.worker >= ranks.size()) {
      return invalidArgument(what + "worker " + std::to_string(*s.worker) +
                             " does not exist (the offline replay runs " +
                             std::to_string(ranks.size()) + " workers: --num-workers)");
    }
    const std::uint32_t dp = s.worker ? ranks[*s.worker] : max_ranks;
    if (s.rank && *s.rank >= dp) {
      return invalidArgument(what + "rank " + std::to_string(*s.rank) +
                             " does not exist (engine.dp_size = " + std::to_string(dp) + ")");
    }
  }
  return {};
}

FaultReport summarizeFaults(const OfflineFaultStats& stats) {
  FaultReport out{.failed_by_crash = stats.failed_by_crash,
                  .timed_out = stats.timed_out,
                  .error_replies = stats.error_replies,
                  .aborted = stats.aborted,
                  .no_worker = stats.no_worker,
                  .slowed_passes = stats.slowed_passes,
                  .request_timeout_ms = stats.request_timeout_ms};
  for (std::size_t k = 0; k < service::kNumFaultKinds; ++k) {
    if (!stats.planned_kinds[k]) continue;
    out.injected.emplace_back(service::faultKindName(static_cast<FaultKind>(k)), stats.injected[k]);
  }
  return out;
}

OfflineFaults::OfflineFaults(const OfflineFaultOptions& options,
                             const std::vector<std::uint32_t>& ranks)
    : passes_(ranks.size(), 0), empty_(options.specs.empty()) {
  for (std::uint32_t w = 0; w < ranks.size(); ++w) {
    plans_.emplace_back(options.specs, options.seed, w);
    rank_passes_.emplace_back(ranks[w], 0);
  }
  for (const service::FaultSpec& s : options.specs) {
    stats_.planned_kinds[static_cast<std::size_t>(s.kind)] = true;
  }
  stats_.request_timeout_ms = options.request_timeout_ms;
}

OfflineFaults::PassFaults OfflineFaults::beforePass(std::uint32_t worker, std::uint32_t rank,
                                                    double start_ms) {
  scratch_.clear();
  const service::FaultPlan::PassFaults f = plans_[worker].beforePass(
      rank, passes_[worker], rank_passes_[worker][rank], start_ms, scratch_);
  PassFaults out{.crash = f.crash, .hang = f.hang, .slow_factor = f.slow_factor};
  for (service::Injection& in : scratch_) {
    if (in.kind == FaultKind::Hang && !in.rank) out.hang_all_ranks = true;
    record(std::move(in));
  }
  return out;
}

void OfflineFaults::afterPass(std::uint32_t worker, std::uint32_t rank, bool slowed) {
  ++passes_[worker];
  ++rank_passes_[worker][rank];
  if (slowed) ++stats_.slowed_passes;
}

service::FaultPlan::RequestFaults OfflineFaults::onSubmit(std::uint32_t worker, std::uint32_t rank,
                                                          std::string_view request_id,
                                                          double now_ms) {
  service::FaultPlan::RequestFaults f = plans_[worker].onSubmit(rank, request_id, now_ms);
  if (f.error && f.injection) {
    ++stats_.error_replies;
    record(*f.injection);
  }
  return f;
}

void OfflineFaults::record(service::Injection injection) {
  ++stats_.injected[static_cast<std::size_t>(injection.kind)];
  stats_.injections.push_back(std::move(injection));
}

}  // namespace mocker::replay
