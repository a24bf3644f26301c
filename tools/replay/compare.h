// `mocker compare`: reads JSON reports written by `mocker replay --report-json` and puts the runs
// side by side — a text table (one column per run, then the delta and ratio of each later run
// against the first), a machine-readable JSON, and a self-contained HTML page with overlaid CDFs
// (from each report's "quantiles", report_version 2) and each run's identity.
//
// Pure functions apart from loadComparedRun (reads one file); thread-compatible. Same inputs ⇒
// byte-identical outputs.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"

namespace mocker::replay {

/// One report, as far as the comparison reads it.
struct ComparedRun {
  std::string path;   ///< as given on the command line
  std::string name;   ///< file name without directories
  std::string label;  ///< short identity: "offline, 8 workers, kv" ("no identity" if absent)
  int report_version = 1;
  std::string mode;  ///< identity.mode ("offline", "live"; empty without an identity)
  /// Model time per unit of the report's latencies: 1 offline (model time), a live run's common
  /// server speedup (identity.server_speedup_ratios; wall-clock × it = model time); nullopt when
  /// unknown (servers that differ or did not say, or no identity).
  std::optional<double> time_scale{};
  /// (field, value) of the identity and run objects, for the HTML page (empty without them).
  std::vector<std::pair<std::string, std::string>> identity{};
  /// Value of each compareMetrics() key, in that order (nullopt: null or absent in the report).
  std::vector<std::optional<double>> values{};
  /// p0..p100 of ttft_ms, tpot_ms, itl_ms, e2e_latency_ms (empty: not in the report or null).
  std::vector<std::pair<std::string, std::vector<double>>> quantiles{};
};

/// A compared row: the report key, its label in the table, decimals, and whether the stored
/// fraction is shown as a percentage.
struct CompareMetric {
  const char* key;
  const char* label;
  int decimals;
  bool percent;
};

/// The rows of the comparison, in table order.
const std::vector<CompareMetric>& compareMetrics();

/// Parses the text of one report. Errors name `path` and what is wrong: not JSON, not an object,
/// not a mocker report (no num_requests / completed_requests / mean_ttft_ms), an unsupported
/// report_version, a metric or quantile array of the wrong type.
Result<ComparedRun> parseComparedRun(const std::string& path, const std::string& text);

/// Reads and parses `path` (the error also covers a missing or unreadable file).
Result<ComparedRun> loadComparedRun(const std::string& path);

/// One sentence per later run whose mode or time scale differs from run 1's, an unknown scale
/// counting as different from a known one (their latencies are not on the same clock):
/// `mocker compare` prints them as warnings, and the JSON and HTML outputs carry them.
std::vector<std::string> compareWarnings(const std::vector<ComparedRun>& runs);

/// The side-by-side table (see the file comment); columns are separated by at least two spaces.
std::string formatCompareTable(const std::vector<ComparedRun>& runs);

/// {"compare_version": 1, "runs": [{path, name, label, report_version}], "metrics": [{key,
/// label, values[], delta_vs_first[], ratio_vs_first[]}]}; nulls where undefined.
std::string formatCompareJson(const std::vector<ComparedRun>& runs);

/// The comparison page: runs and their identities, the table, overlaid TTFT / TPOT / ITL / E2E
/// CDFs (one series per run that carries quantiles).
std::string renderCompareHtml(const std::vector<ComparedRun>& runs);

}  // namespace mocker::replay
