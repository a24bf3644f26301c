// Self-contained HTML replay report: the summary table plus inline SVG plots (TTFT and E2E
// CDFs, output-token throughput over time, KV usage and batch size over time from the engine
// samples). No external scripts, styles or fonts: the page reads offline in any browser.
//
// Pure function; thread-compatible. Deterministic for the same input.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tools/replay/collector.h"

namespace mocker::replay {

struct HtmlReportOptions {
  std::string title = "mocker replay report";
  std::size_t max_points_per_series = 1000;  ///< larger series are bucketed (max per bucket)
  std::size_t throughput_buckets = 100;      ///< time buckets for the throughput plot
  /// Legend names of EngineSample::dp_rank values (index = dp_rank), e.g. "worker 1 rank 0"
  /// when the replay ran several workers; missing entries read "rank N".
  std::vector<std::string> rank_labels{};
  /// With more ranks than this, the KV and batch plots show totals over all ranks (KV usage
  /// averaged, running and waiting summed) instead of one line per rank.
  std::size_t max_ranks_per_plot = 4;
};

/// Renders the page. `report` is normally collector.buildReport(...).
std::string renderHtmlReport(const Report& report, const ReplayCollector& collector,
                             const HtmlReportOptions& options = {});

}  // namespace mocker::replay
