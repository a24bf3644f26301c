// The runs of `mocker replay` (tools/replay_command.h): a plan's offline or live replay of a
// workload into a collector, and what the command prints and draws about it besides the report
// (the footer lines under the table, the warnings, the HTML report's per-rank legend names).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "tools/replay/collector.h"
#include "tools/replay/report_html.h"
#include "tools/replay/workload.h"
#include "tools/replay_plan.h"

namespace mocker::tools {

/// What a run leaves for the report besides the collector's contents.
struct RunSummary {
  double wall_ms = 0.0;  ///< offline: the replay's own wall time; live: the run's (stats.wall_ms)
  std::string footer;    ///< lines printed under the report table, each ending in "\n"
  std::vector<std::string> warnings{};             ///< printed on stderr, in order
  std::optional<replay::HandoffReport> handoff{};  ///< disaggregated runs
  std::optional<replay::TierReport> tiers{};       ///< runs with KV offload tiers
  std::optional<replay::FaultReport> faults{};     ///< offline runs with a fault plan
  /// Live: the faults the servers injected during the run, by kind (replay::liveServerFaults).
  std::optional<std::vector<std::pair<std::string, std::uint64_t>>> server_faults{};
  /// Offline runs with a fault plan: the fault log's lines (service::faultLogLine, no newline),
  /// in the order the faults were injected.
  std::vector<std::string> fault_log{};
  replay::HtmlReportOptions html{};  ///< rank_labels and requests_per_worker filled in
  /// Live: each server's speedup_ratio as it reported it (nullopt: not reported).
  std::vector<std::optional<double>> server_speedup_ratios{};
};

/// A progress report: `ended` of `total` requests, `seconds` of simulated (offline) or elapsed
/// (live) time, `what` names which ("simulated" / "elapsed"). Called on the replay thread.
using RunProgress =
    std::function<void(std::uint64_t ended, std::uint64_t total, double seconds, const char* what)>;

/// Runs `plan` (either mode) over `workload` into `collector`; `progress` may be empty. Errors:
/// those of runOfflineReplay (the engine configuration: exit 2) and runLiveReplay (a server
/// that cannot be reached: exit 1); see runExitCode.
Result<RunSummary> runPlan(const ReplayPlan& plan, const replay::Workload& workload,
                           replay::ReplayCollector& collector, const RunProgress& progress);

/// The exit code of a failed run of `plan`: 2 offline (the configuration), 1 live.
int runExitCode(const ReplayPlan& plan);

/// One group of ranks in the global rank order of the engine samples: a worker or server named
/// `name` ("worker 2", "prefill 0"; "" for the only server) with `ranks` DP ranks.
struct RankGroup {
  std::string name;
  std::uint32_t ranks = 1;
};

/// The HTML legend name of every global rank, group by group: "NAME rank R", or "NAME" alone
/// when the group has one rank and `rank_always` is false, or "rank R" when NAME is empty.
std::vector<std::string> rankLabels(const std::vector<RankGroup>& groups, bool rank_always);

}  // namespace mocker::tools
