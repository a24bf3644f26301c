#include "tools/calibrate/calibrate_html.h"

#include <algorithm>

#include "tools/replay/svg_plot.h"

namespace mocker::calibrate {
namespace {

using replay::Plot;
using replay::PlotSeries;

constexpr std::size_t kMaxCdfPoints = 400;

PlotSeries cdfSeries(std::string name, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {.name = std::move(name), .points = replay::cdfPoints(values, kMaxCdfPoints)};
}

std::string runPlots(const PlottedRun& p, std::size_t index) {
  const RecordedRun& run = *p.run;
  const Prediction& pred = p.evaluation.prediction;
  const std::string id = "run" + std::to_string(index);
  std::vector<double> rec_e2e, rec_ttft;
  for (const RecordedRequest& r : run.requests) {
    rec_e2e.push_back(r.e2e_ms);
    rec_ttft.push_back(r.ttft_ms);
  }
  Plot scatter{.id = id + "_e2e_scatter",
               .title = run.name + ": predicted vs recorded E2E per request",
               .x_label = "recorded E2E",
               .y_label = "predicted E2E",
               .x_is_ms = true,
               .y_is_ms = true,
               .small = true};
  double hi = 0.0;
  PlotSeries dots{.name = "requests", .points = pred.e2e_pairs, .style = PlotSeries::Style::Dots};
  for (const auto& [x, y] : pred.e2e_pairs) hi = std::max({hi, x, y});
  scatter.series.push_back(std::move(dots));
  scatter.series.push_back({.name = "y = x", .points = {{0.0, 0.0}, {hi, hi}}});
  Plot e2e{.id = id + "_e2e_cdf",
           .title = run.name + ": E2E CDF",
           .x_label = "request latency",
           .y_label = "fraction of requests",
           .series = {cdfSeries("recorded", rec_e2e), cdfSeries("predicted", pred.samples.e2e_ms)},
           .y_max = 1.0,
           .x_is_ms = true,
           .small = true};
  Plot ttft{
      .id = id + "_ttft_cdf",
      .title = run.name + ": TTFT CDF",
      .x_label = "time to first token",
      .y_label = "fraction of requests",
      .series = {cdfSeries("recorded", rec_ttft), cdfSeries("predicted", pred.samples.ttft_ms)},
      .y_max = 1.0,
      .x_is_ms = true,
      .small = true};
  std::vector<double> sorted_ttft = rec_ttft;
  std::sort(sorted_ttft.begin(), sorted_ttft.end());
  ttft.log_x = replay::wantsLogX(sorted_ttft);
  return "<h3>" + replay::escapeHtml(run.name + " (" + p.role + ")") +
         "</h3>\n<div class=\"grid\">\n" + replay::renderSvgPlot(scatter) +
         replay::renderSvgPlot(e2e) + replay::renderSvgPlot(ttft) + "</div>\n";
}

}  // namespace

std::string renderCalibrationHtml(const std::string& title, std::span<const ScoreTable> tables,
                                  std::span<const PlottedRun> runs,
                                  const std::string& profile_text) {
  const std::string t = replay::escapeHtml(title);
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" + t +
          "</title>\n" + replay::pageHead() + "</head>\n<body>\n<h1>" + t + "</h1>\n";
  html += "<h2>Scores</h2>\n";
  for (const ScoreTable& table : tables) {
    html += "<pre>" + replay::escapeHtml(formatScoreTable(table)) + "</pre>\n";
  }
  if (!profile_text.empty()) {
    html += "<h2>Profile</h2>\n<pre>" + replay::escapeHtml(profile_text) + "</pre>\n";
  }
  html += "<h2>Runs</h2>\n";
  for (std::size_t i = 0; i < runs.size(); ++i) html += runPlots(runs[i], i);
  html += replay::pageCheckScript();
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace mocker::calibrate
