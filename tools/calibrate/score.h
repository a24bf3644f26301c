// Scoring of simulated against recorded latencies (docs/calibration.md, "Score"): per run, the
// absolute percentage error of E2E mean/p90/p99, TTFT mean/p90/p99 and ITL, where
// ITL = (mean E2E − mean TTFT) / (mean output tokens − 1); then the median of each error across
// runs — the scoring of published sim-to-real comparisons of LLM serving simulators.
// Percentiles interpolate linearly between order statistics (numpy's default, stats.h).
//
// Pure functions; thread-compatible. Deterministic (sums in sorted order).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mocker::calibrate {

/// The seven scored metrics, in table order.
enum class Metric : std::size_t { E2eMean, E2eP90, E2eP99, TtftMean, TtftP90, TtftP99, Itl };
inline constexpr std::size_t kNumMetrics = 7;
/// "e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl".
std::string_view metricName(Metric m);

using MetricValues = std::array<double, kNumMetrics>;

/// Per-request latencies of one run (the same requests, any order): ms, and tokens generated.
struct LatencySamples {
  std::vector<double> ttft_ms;
  std::vector<double> e2e_ms;
  std::vector<double> output_tokens;
};

/// The seven metrics of `samples` (ms). ITL is 0 when the mean output is <= 1 token.
/// REQUIRES: the three vectors have the same, non-zero size.
MetricValues summarizeLatencies(const LatencySamples& samples);

/// |predicted − recorded| / recorded × 100; 0 when both are 0, +inf when only recorded is 0.
double absolutePercentageError(double predicted, double recorded);

struct RunScore {
  std::string run;
  MetricValues recorded{};
  MetricValues predicted{};
  MetricValues error_pct{};  ///< absolutePercentageError per metric
  /// With a client overhead: the predicted metrics at the engine, without it (predicted is
  /// client-side, as the recorded ones are scored); nullopt when the overhead is zero.
  std::optional<MetricValues> predicted_engine{};
  std::size_t recorded_requests = 0;
  std::size_t predicted_completed = 0;  ///< simulated requests that completed
};

/// Fills error_pct from recorded and predicted.
RunScore scoreRun(std::string run, const MetricValues& recorded, const MetricValues& predicted,
                  std::size_t recorded_requests, std::size_t predicted_completed);

struct ScoreTable {
  std::string title;  ///< e.g. "held-out runs"
  std::vector<RunScore> runs;
  MetricValues median_error_pct{};  ///< per metric, median across runs (mean of the middle two)
};

/// Builds the table and its medians. REQUIRES: runs non-empty.
ScoreTable makeScoreTable(std::string title, std::vector<RunScore> runs);

/// Median of values (mean of the two middle ones for an even count). REQUIRES: non-empty.
double median(std::vector<double> values);

/// Fixed-width text: one line per run with the seven errors (%), then the median line; below it,
/// recorded vs predicted means per run (and the engine-side prediction when it differs).
std::string formatScoreTable(const ScoreTable& table);

/// JSON object {"title", "runs": [{run, recorded_requests, predicted_completed, recorded:{…},
/// predicted:{…}, error_pct:{…}, predicted_engine_side:{…} when set}], "median_error_pct": {…}},
/// keys in metric order; an infinite error is null.
nlohmann::ordered_json scoreTableJson(const ScoreTable& table);

}  // namespace mocker::calibrate
