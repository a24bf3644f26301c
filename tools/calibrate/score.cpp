#include "tools/calibrate/score.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "base/enum_names.h"
#include "tools/replay/stats.h"

namespace mocker::calibrate {

std::string_view metricName(Metric m) {
  static constexpr EnumNames<Metric, kNumMetrics> kNames{{
      {"e2e_mean", Metric::E2eMean},
      {"e2e_p90", Metric::E2eP90},
      {"e2e_p99", Metric::E2eP99},
      {"ttft_mean", Metric::TtftMean},
      {"ttft_p90", Metric::TtftP90},
      {"ttft_p99", Metric::TtftP99},
      {"itl", Metric::Itl},
  }};
  return enumName(kNames, m);
}

MetricValues summarizeLatencies(const LatencySamples& samples) {
  MOCKER_CHECK(!samples.ttft_ms.empty());
  MOCKER_CHECK(samples.ttft_ms.size() == samples.e2e_ms.size() &&
               samples.e2e_ms.size() == samples.output_tokens.size());
  const replay::Distribution e2e = replay::summarize(samples.e2e_ms);
  const replay::Distribution ttft = replay::summarize(samples.ttft_ms);
  std::vector<double> out = samples.output_tokens;
  replay::sortSamples(out);
  const double mean_out =
      std::accumulate(out.begin(), out.end(), 0.0) / static_cast<double>(out.size());
  MetricValues v{};
  v[static_cast<std::size_t>(Metric::E2eMean)] = e2e.mean;
  v[static_cast<std::size_t>(Metric::E2eP90)] = e2e.p90;
  v[static_cast<std::size_t>(Metric::E2eP99)] = e2e.p99;
  v[static_cast<std::size_t>(Metric::TtftMean)] = ttft.mean;
  v[static_cast<std::size_t>(Metric::TtftP90)] = ttft.p90;
  v[static_cast<std::size_t>(Metric::TtftP99)] = ttft.p99;
  v[static_cast<std::size_t>(Metric::Itl)] =
      mean_out > 1.0 ? (e2e.mean - ttft.mean) / (mean_out - 1.0) : 0.0;
  return v;
}

double absolutePercentageError(double predicted, double recorded) {
  if (recorded == 0.0) {
    return predicted == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::abs(predicted - recorded) / std::abs(recorded) * 100.0;
}

RunScore scoreRun(std::string run, const MetricValues& recorded, const MetricValues& predicted,
                  std::size_t recorded_requests, std::size_t predicted_completed) {
  RunScore s{.run = std::move(run),
             .recorded = recorded,
             .predicted = predicted,
             .recorded_requests = recorded_requests,
             .predicted_completed = predicted_completed};
  for (std::size_t i = 0; i < kNumMetrics; ++i) {
    s.error_pct[i] = absolutePercentageError(predicted[i], recorded[i]);
  }
  return s;
}

double median(std::vector<double> values) {
  MOCKER_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

ScoreTable makeScoreTable(std::string title, std::vector<RunScore> runs) {
  MOCKER_CHECK(!runs.empty());
  ScoreTable t{.title = std::move(title), .runs = std::move(runs)};
  for (std::size_t m = 0; m < kNumMetrics; ++m) {
    std::vector<double> errors;
    for (const RunScore& r : t.runs) errors.push_back(r.error_pct[m]);
    t.median_error_pct[m] = median(std::move(errors));
  }
  return t;
}

namespace {

std::string fixed(double v, int decimals, int width) {
  char buf[64];
  if (std::isinf(v)) {
    std::snprintf(buf, sizeof buf, "%*s", width, "inf");
  } else {
    std::snprintf(buf, sizeof buf, "%*.*f", width, decimals, v);
  }
  return buf;
}

std::string padded(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string formatScoreTable(const ScoreTable& table) {
  std::size_t name_width = 8;
  for (const RunScore& r : table.runs) name_width = std::max(name_width, r.run.size());
  std::string out = table.title + ": absolute percentage error (%)\n";
  out += padded("run", name_width);
  for (std::size_t m = 0; m < kNumMetrics; ++m) {
    const std::string name(metricName(static_cast<Metric>(m)));
    out += "  " + std::string(10 - std::min<std::size_t>(10, name.size()), ' ') + name;
  }
  out += '\n';
  const auto row = [&](const std::string& name, const MetricValues& v) {
    out += padded(name, name_width);
    for (double x : v) out += "  " + fixed(x, 1, 10);
    out += '\n';
  };
  for (const RunScore& r : table.runs) row(r.run, r.error_pct);
  row("median", table.median_error_pct);
  out += "recorded → predicted (ms): E2E mean, TTFT mean, ITL; completed requests\n";
  for (const RunScore& r : table.runs) {
    const auto pair = [&](Metric m, int d) {
      const std::size_t i = static_cast<std::size_t>(m);
      return fixed(r.recorded[i], d, 0) + " → " + fixed(r.predicted[i], d, 0);
    };
    out += "  " + padded(r.run, name_width) + "  " + pair(Metric::E2eMean, 1) + ", " +
           pair(Metric::TtftMean, 1) + ", " + pair(Metric::Itl, 2) + "; " +
           std::to_string(r.predicted_completed) + "/" + std::to_string(r.recorded_requests) + "\n";
    if (r.predicted_engine) {
      const auto at = [&](Metric m, int d) {
        return fixed((*r.predicted_engine)[static_cast<std::size_t>(m)], d, 0);
      };
      out += "  " + padded("", name_width) +
             "  engine-side (without the client overhead): " + at(Metric::E2eMean, 1) + ", " +
             at(Metric::TtftMean, 1) + ", " + at(Metric::Itl, 2) + "\n";
    }
  }
  return out;
}

namespace {

nlohmann::ordered_json metricsJson(const MetricValues& v) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t m = 0; m < kNumMetrics; ++m) {
    const std::string name(metricName(static_cast<Metric>(m)));
    j[name] = std::isfinite(v[m]) ? nlohmann::ordered_json(v[m]) : nlohmann::ordered_json();
  }
  return j;
}

}  // namespace

nlohmann::ordered_json scoreTableJson(const ScoreTable& t) {
  nlohmann::ordered_json jt;
  jt["title"] = t.title;
  jt["runs"] = nlohmann::ordered_json::array();
  for (const RunScore& r : t.runs) {
    nlohmann::ordered_json jr;
    jr["run"] = r.run;
    jr["recorded_requests"] = r.recorded_requests;
    jr["predicted_completed"] = r.predicted_completed;
    jr["recorded"] = metricsJson(r.recorded);
    jr["predicted"] = metricsJson(r.predicted);
    jr["error_pct"] = metricsJson(r.error_pct);
    if (r.predicted_engine) jr["predicted_engine_side"] = metricsJson(*r.predicted_engine);
    jt["runs"].push_back(std::move(jr));
  }
  jt["median_error_pct"] = metricsJson(t.median_error_pct);
  return jt;
}

}  // namespace mocker::calibrate
