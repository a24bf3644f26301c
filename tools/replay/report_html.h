// Self-contained HTML replay report: the summary table plus inline SVG plots (svg_plot.h):
// TTFT, TPOT and E2E CDFs (SLO bounds drawn when given, log x for long tails), TTFT against
// arrival time, output-token throughput, preemptions and prefix-cache hit rate over time, KV
// usage and batch size over time, and per-worker small multiples (each worker's own KV usage
// and batch size, with its peaks in the title). No external scripts, styles or fonts: the page
// reads offline in any browser, and its plots need no JavaScript (one small script only checks
// that every plot drew, for the browser test).
//
// Pure function; thread-compatible. Deterministic for the same input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/replay/collector.h"

namespace mocker::replay {

struct HtmlReportOptions {
  std::string title = "mocker replay report";
  std::size_t max_points_per_series = 1000;  ///< larger series are bucketed (max per bucket)
  std::size_t max_points_small = 200;        ///< the same for the per-worker small multiples
  std::size_t max_scatter_points = 2000;     ///< TTFT-vs-arrival: every k-th request beyond
  std::size_t time_buckets = 100;            ///< time buckets for throughput and prefix hit rate
  /// Legend names of EngineSample::dp_rank values (index = dp_rank), e.g. "worker 1 rank 0"
  /// when the replay ran several workers; missing entries read "rank N".
  std::vector<std::string> rank_labels{};
  /// With more ranks than this, the KV and batch plots show the maximum and the mean (KV) or
  /// total (batch) over all ranks instead of one line per rank; each rank keeps its own small
  /// multiple.
  std::size_t max_ranks_per_plot = 4;
  /// Requests dispatched to each worker / server (labelled "worker i"), plotted when there is
  /// more than one.
  std::vector<std::uint64_t> requests_per_worker{};
};

/// Renders the page. `report` is normally collector.buildReport(...); its goodput SLOs (when
/// set) are drawn on the latency plots.
std::string renderHtmlReport(const Report& report, const ReplayCollector& collector,
                             const HtmlReportOptions& options = {});

}  // namespace mocker::replay
