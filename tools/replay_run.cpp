#include "tools/replay_run.h"

#include <chrono>
#include <functional>
#include <sstream>
#include <utility>

#include "tools/replay/live_replay.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/openai_replay.h"

namespace mocker::tools {
namespace {

using Clock = std::chrono::steady_clock;

/// " n0 n1 n2": a per-worker count list of the footer.
std::string counts(const std::vector<std::uint64_t>& values) {
  std::ostringstream line;
  for (const std::uint64_t n : values) line << " " << n;
  return line.str();
}

Result<RunSummary> runOffline(const replay::OfflineReplayOptions& planned,
                              const replay::Workload& workload, replay::ReplayCollector& collector,
                              const RunProgress& progress) {
  replay::OfflineReplayOptions options = planned;
  if (progress) {
    options.progress = [&progress](const replay::OfflineProgress& p) {
      progress(p.ended, p.total, p.sim_time_ms / 1000.0, "simulated");
    };
  }
  const Clock::time_point start = Clock::now();
  MOCKER_TRY(const replay::OfflineReplayStats stats,
             replay::runOfflineReplay(workload, options, collector));
  RunSummary summary;
  summary.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  summary.warnings = stats.warnings;
  summary.tiers = stats.tiers;
  if (stats.faults) {
    summary.faults = replay::summarizeFaults(*stats.faults);
    for (const service::Injection& in : stats.faults->injections) {
      summary.fault_log.push_back(service::faultLogLine(in));
    }
  }
  const std::string router(replay::toString(options.router));
  std::vector<RankGroup> groups;
  if (stats.handoff) {
    const replay::DisaggOptions& d = *options.disagg;
    summary.handoff = replay::summarizeHandoffs(*stats.handoff);
    summary.footer = "Requests per prefill worker (" + router +
                     "):" + counts(stats.handoff->per_prefill_worker) +
                     "\nHandoffs per decode worker (" +
                     std::string(replay::toString(d.decode_router)) +
                     "):" + counts(stats.handoff->per_decode_worker) + "\n";
    for (std::uint32_t w = 0; w < d.num_prefill_workers; ++w) {
      groups.push_back({"prefill " + std::to_string(w), d.prefill_engine.dp_size});
    }
    for (std::uint32_t w = 0; w < d.num_decode_workers; ++w) {
      groups.push_back({"decode " + std::to_string(w), d.decode_engine.dp_size});
    }
  } else if (options.num_workers > 1) {
    summary.footer = "Requests per worker (" + router + "):" + counts(stats.per_worker) + "\n";
    summary.html.requests_per_worker = stats.per_worker;
    for (std::uint32_t w = 0; w < options.num_workers; ++w) {
      groups.push_back({"worker " + std::to_string(w), options.engine.dp_size});
    }
  }
  summary.html.rank_labels = rankLabels(groups, false);
  return summary;
}

/// A live driver's progress callback reporting to `progress` (none when it is empty).
std::function<void(const replay::LiveProgress&)> liveProgress(const RunProgress& progress) {
  if (!progress) return {};
  return [&progress](const replay::LiveProgress& p) {
    progress(p.ended, p.total, p.elapsed_ms / 1000.0, "elapsed");
  };
}

/// The live footer's first lines: servers, requests per server, in-flight and dispatch lag, the
/// handoffs, the kv router's counters.
std::string liveServerLines(const replay::LiveReplayOptions& options,
                            const replay::LiveReplayStats& stats, bool closed_loop) {
  const std::string router(replay::toString(options.router));
  std::ostringstream line;
  if (stats.handoff) {
    line << "Live disaggregated: " << options.targets.size() << " prefill + "
         << options.decode_targets.size() << " decode server(s); requests per prefill server ("
         << router << "):" << counts(stats.per_target) << "; handoffs per decode server ("
         << replay::toString(options.decode_router)
         << "):" << counts(stats.handoff->per_decode_target);
  } else {
    line << "Live: " << options.targets.size() << " server(s)";
    if (options.targets.size() > 1) {
      line << ", requests per server (" << router << "):" << counts(stats.per_target);
    }
  }
  line << "; max in flight " << stats.max_in_flight;
  if (!closed_loop) line << "; max dispatch lag " << stats.max_dispatch_lag_ms << " ms";
  line << "\n";
  if (stats.handoff) line << replay::formatLiveHandoffs(*stats.handoff);
  if (options.router == replay::RouterKind::Kv) {
    line << "Live kv router: " << stats.kv_block_size << "-token blocks; " << stats.kv_routed_hits
         << " requests routed to a cached prefix; " << stats.kv_query_failures
         << " overlap queries unanswered; index applied " << stats.kv_batches_applied
         << " KV-event batches, " << stats.kv_gaps_detected << " gaps (" << stats.kv_gaps_healed
         << " healed by replay), " << stats.kv_resyncs << " resyncs\n";
  }
  return line.str();
}

Result<RunSummary> runLive(const replay::LiveReplayOptions& planned, bool closed_loop,
                           const replay::Workload& workload, replay::ReplayCollector& collector,
                           const RunProgress& progress) {
  replay::LiveReplayOptions options = planned;
  options.progress = liveProgress(progress);
  MOCKER_TRY(const replay::LiveReplayStats stats,
             replay::runLiveReplay(workload, options, collector));
  RunSummary summary;
  summary.wall_ms = stats.wall_ms;
  summary.server_faults = replay::liveServerFaults(stats);
  for (const auto& e : stats.engines) {
    summary.server_speedup_ratios.push_back(e ? std::optional(e->speedup_ratio) : std::nullopt);
  }
  summary.warnings = stats.warnings;
  const std::size_t num_prefill = options.targets.size();
  const replay::LiveTimingSummary timing =
      replay::summarizeLiveTiming(stats, closed_loop, stats.handoff ? num_prefill : 0);
  summary.warnings.insert(summary.warnings.end(), timing.warnings.begin(), timing.warnings.end());
  std::ostringstream line;
  line << liveServerLines(options, stats, closed_loop) << timing.text;
  if (!stats.health.empty() || !stats.decode_health.empty() ||
      stats.failed_by_down + stats.no_worker + stats.no_decode_worker + stats.migrations +
              stats.completed_when_lost >
          0) {
    line << replay::formatWorkerHealth(options.worker_health, stats.health,
                                       {.migration_limit = options.migration_limit,
                                        .migrated_requests = stats.migrated_requests,
                                        .migrations = stats.migrations,
                                        .completed_when_lost = stats.completed_when_lost,
                                        .failed_by_down = stats.failed_by_down,
                                        .no_worker = stats.no_worker,
                                        .no_decode_worker = stats.no_decode_worker},
                                       stats.decode_health);
  }
  if (stats.submit_rejects + stats.timeouts + stats.send_failures + stats.error_replies +
          stats.undecodable + stats.index_gaps >
      0) {
    line << "Live issues: " << stats.submit_rejects << " submit rejects, " << stats.timeouts
         << " timed out (cancelled), " << stats.send_failures << " send failures, "
         << stats.error_replies << " error replies, " << stats.undecodable
         << " undecodable messages, " << stats.index_gaps << " output index gaps\n";
  }
  summary.footer = line.str();
  std::vector<RankGroup> groups;
  const std::size_t num_servers =
      stats.handoff ? num_prefill + options.decode_targets.size() : num_prefill;
  for (std::size_t t = 0; t < num_servers; ++t) {
    std::string name = stats.handoff
                           ? (t < num_prefill ? "prefill " + std::to_string(t)
                                              : "decode " + std::to_string(t - num_prefill))
                       : num_prefill > 1 ? "server " + std::to_string(t)
                                         : std::string();
    groups.push_back({std::move(name), stats.ranks_per_target[t]});
  }
  if (stats.handoff) {
    summary.handoff = replay::summarizeLiveHandoffs(*stats.handoff);
  } else if (num_prefill > 1) {
    summary.html.requests_per_worker = stats.per_target;
  }
  summary.html.rank_labels = rankLabels(groups, true);
  return summary;
}

Result<RunSummary> runOpenAi(const replay::OpenAiReplayOptions& planned, bool closed_loop,
                             const replay::Workload& workload, replay::ReplayCollector& collector,
                             const RunProgress& progress) {
  replay::OpenAiReplayOptions options = planned;
  options.progress = liveProgress(progress);
  MOCKER_TRY(const replay::OpenAiReplayStats stats,
             replay::runOpenAiReplay(workload, options, collector));
  RunSummary summary;
  summary.wall_ms = stats.wall_ms;
  summary.warnings = stats.warnings;
  summary.footer = replay::formatOpenAiReplay(options, stats, closed_loop);
  summary.server_speedup_ratios = {std::nullopt};  // the HTTP API does not tell it
  return summary;
}

}  // namespace

Result<RunSummary> runPlan(const ReplayPlan& plan, const replay::Workload& workload,
                           replay::ReplayCollector& collector, const RunProgress& progress) {
  if (const auto* offline = std::get_if<replay::OfflineReplayOptions>(&plan.options)) {
    return runOffline(*offline, workload, collector, progress);
  }
  if (const auto* openai = std::get_if<replay::OpenAiReplayOptions>(&plan.options)) {
    return runOpenAi(*openai, plan.closed_loop, workload, collector, progress);
  }
  return runLive(std::get<replay::LiveReplayOptions>(plan.options), plan.closed_loop, workload,
                 collector, progress);
}

int runExitCode(const ReplayPlan& plan) { return plan.mode == ReplayMode::Offline ? 2 : 1; }

std::vector<std::string> rankLabels(const std::vector<RankGroup>& groups, bool rank_always) {
  std::vector<std::string> labels;
  for (const RankGroup& g : groups) {
    for (std::uint32_t r = 0; r < g.ranks; ++r) {
      if (!rank_always && g.ranks == 1) {
        labels.push_back(g.name);
      } else {
        labels.push_back((g.name.empty() ? std::string() : g.name + " ") + "rank " +
                         std::to_string(r));
      }
    }
  }
  return labels;
}

}  // namespace mocker::tools
