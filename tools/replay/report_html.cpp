// Plots are hand-written SVG: a fixed-size frame, "nice" axis ticks (1/2/5 × 10^k), one
// polyline per series and a legend. Large series are reduced to at most max_points_per_series
// points (CDFs by evenly spaced ranks, time series by the maximum per bucket) so the page stays
// small for long runs.
#include "tools/replay/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/replay/report_output.h"

namespace mocker::replay {
namespace {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  std::optional<double> y_max;  // fixed upper bound (e.g. 1 for CDFs)
};

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escapeHtml(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// Tick label: compact, no trailing zeros beyond what the step needs.
std::string tickLabel(double v, double step) {
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return num(v, std::min(decimals, 6));
}

double niceStep(double range, int target_ticks) {
  if (!(range > 0.0)) return 1.0;
  const double raw = range / target_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10.0 * mag;
}

std::string renderChart(const Chart& chart) {
  constexpr double kW = 720, kH = 320, kLeft = 70, kRight = 20, kTop = 34, kBottom = 50;
  const double pw = kW - kLeft - kRight;
  const double ph = kH - kTop - kBottom;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW, 0) +
                    "\" height=\"" + num(kH, 0) + "\" viewBox=\"0 0 " + num(kW, 0) + " " +
                    num(kH, 0) + "\" role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<title>" + escapeHtml(chart.title) + "</title>\n";
  svg += "<text x=\"" + num(kW / 2) + "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" +
         escapeHtml(chart.title) + "</text>\n";

  bool any = false;
  double x0 = 0, x1 = 0, y1 = 0;
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (!any) {
        x0 = x1 = x;
        any = true;
      }
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y1 = std::max(y1, y);
    }
  }
  if (!any) {
    svg += "<text x=\"" + num(kW / 2) + "\" y=\"" + num(kH / 2) +
           "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n</svg>\n";
    return svg;
  }
  x0 = std::min(x0, 0.0);
  if (chart.y_max) y1 = *chart.y_max;
  const double x_step = niceStep(x1 - x0, 8);
  const double y_step = niceStep(y1, 5);
  x1 = x1 > x0 ? std::ceil(x1 / x_step) * x_step : x0 + x_step;
  y1 = y1 > 0 ? std::ceil(y1 / y_step - 1e-9) * y_step : y_step;
  const auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  const auto py = [&](double y) { return kTop + ph - y / y1 * ph; };

  svg += "<g stroke=\"#ddd\">\n";
  std::string labels;
  for (double y = 0; y <= y1 + y_step * 1e-6; y += y_step) {
    svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(kLeft + pw) +
           "\" y2=\"" + num(py(y)) + "\"/>\n";
    labels += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(y) + 4) +
              "\" text-anchor=\"end\">" + tickLabel(y, y_step) + "</text>\n";
  }
  for (double x = std::ceil(x0 / x_step) * x_step; x <= x1 + x_step * 1e-6; x += x_step) {
    svg += "<line x1=\"" + num(px(x)) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(px(x)) +
           "\" y2=\"" + num(kTop + ph) + "\"/>\n";
    labels += "<text x=\"" + num(px(x)) + "\" y=\"" + num(kTop + ph + 16) +
              "\" text-anchor=\"middle\">" + tickLabel(x, x_step) + "</text>\n";
  }
  svg += "</g>\n" + labels;
  svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) +
         "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kH - 10) +
         "\" text-anchor=\"middle\">" + escapeHtml(chart.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16," + num(kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escapeHtml(chart.y_label) + "</text>\n";

  // Polylines first, then the legend on a translucent box so it stays readable over data.
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    svg += "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" +
           std::string(kColors[i % std::size(kColors)]) + "\" points=\"";
    for (const auto& [x, y] : chart.series[i].points) svg += num(px(x)) + "," + num(py(y)) + " ";
    svg += "\"/>\n";
  }
  std::size_t longest = 0;
  for (const Series& s : chart.series) longest = std::max(longest, s.name.size());
  svg += "<rect x=\"" + num(kLeft + 4) + "\" y=\"" + num(kTop + 2) + "\" width=\"" +
         num(34 + 6.5 * static_cast<double>(longest)) + "\" height=\"" +
         num(6 + 14 * static_cast<double>(chart.series.size())) +
         "\" fill=\"#fff\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    const char* color = kColors[i % std::size(kColors)];
    const double ly = kTop + 12 + 14 * static_cast<double>(i);
    svg += "<line x1=\"" + num(kLeft + 10) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" +
           num(kLeft + 28) + "\" y2=\"" + num(ly - 4) + "\" stroke=\"" + color +
           "\" stroke-width=\"2\"/>\n<text x=\"" + num(kLeft + 32) + "\" y=\"" + num(ly) + "\">" +
           escapeHtml(s.name) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

/// Empirical CDF (x = value, y = fraction ≤ x), reduced to at most `max_points` ranks.
Series cdfSeries(std::string name, std::vector<double> values, std::size_t max_points) {
  Series s{std::move(name), {}};
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return s;
  const std::size_t m = std::max<std::size_t>(2, std::min(n, max_points));
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t i = n == 1 ? 0 : (k * (n - 1) + (m - 1) / 2) / (m - 1);
    s.points.emplace_back(values[i], static_cast<double>(i + 1) / static_cast<double>(n));
    if (n == 1) break;
  }
  return s;
}

/// Reduces a time series to at most `max_points` by keeping the maximum y per bucket of ranks.
void reduceByMax(Series& s, std::size_t max_points) {
  if (s.points.size() <= max_points || max_points == 0) return;
  std::vector<std::pair<double, double>> out;
  const std::size_t n = s.points.size();
  for (std::size_t b = 0; b < max_points; ++b) {
    const std::size_t lo = b * n / max_points;
    const std::size_t hi = (b + 1) * n / max_points;
    if (lo >= hi) continue;
    double y = s.points[lo].second;
    for (std::size_t i = lo; i < hi; ++i) y = std::max(y, s.points[i].second);
    out.emplace_back(s.points[lo].first, y);
  }
  s.points = std::move(out);
}

}  // namespace

std::string renderHtmlReport(const Report& report, const ReplayCollector& collector,
                             const HtmlReportOptions& options) {
  const auto& requests = collector.requests();
  std::vector<double> ttft, e2e;
  double t0 = 0.0;
  double t_end = 0.0;
  bool have_time = false;
  for (const RequestRecord& r : requests) {
    if (!have_time || r.arrival_ms < t0) t0 = r.arrival_ms;
    have_time = true;
    if (r.status != TerminalStatus::Completed) continue;
    const RequestLatencies l = latenciesOf(r);
    if (l.ttft_ms) ttft.push_back(*l.ttft_ms);
    if (l.e2e_ms) e2e.push_back(*l.e2e_ms);
  }
  for (const RequestRecord& r : requests) {
    if (!r.token_times_ms.empty()) t_end = std::max(t_end, r.token_times_ms.back());
    if (r.terminal_ms) t_end = std::max(t_end, *r.terminal_ms);
  }

  std::vector<Chart> charts;
  charts.push_back(Chart{"TTFT CDF (completed requests)",
                         "time to first token (ms)",
                         "fraction of requests",
                         {cdfSeries("TTFT", std::move(ttft), options.max_points_per_series)},
                         1.0});
  charts.push_back(Chart{"End-to-end latency CDF (completed requests)",
                         "request latency (ms)",
                         "fraction of requests",
                         {cdfSeries("E2E", std::move(e2e), options.max_points_per_series)},
                         1.0});

  // Output-token throughput: all emitted tokens (any outcome) counted per time bucket.
  Series throughput{"output tokens/s", {}};
  const std::size_t buckets = std::max<std::size_t>(1, options.throughput_buckets);
  if (have_time && t_end > t0) {
    const double width = (t_end - t0) / static_cast<double>(buckets);
    std::vector<std::uint64_t> counts(buckets, 0);
    for (const RequestRecord& r : requests) {
      for (const double t : r.token_times_ms) {
        auto b = static_cast<std::size_t>(std::max(0.0, (t - t0) / width));
        counts[std::min(b, buckets - 1)]++;
      }
    }
    for (std::size_t b = 0; b < buckets; ++b) {
      const double rate = static_cast<double>(counts[b]) / (width / 1000.0);
      throughput.points.emplace_back((static_cast<double>(b) * width) / 1000.0, rate);
      throughput.points.emplace_back((static_cast<double>(b + 1) * width) / 1000.0, rate);
    }
  }
  charts.push_back(Chart{"Output token throughput over time",
                         "time since first arrival (s)",
                         "tokens/s",
                         {std::move(throughput)},
                         std::nullopt});

  // Engine samples: one series per rank, or — beyond max_ranks_per_plot ranks, where per-rank
  // lines and legends would bury the plot — totals over every rank (the value each rank last
  // reported, summed; KV usage averaged), stepped at every sample in time order.
  std::map<std::uint32_t, Series> kv, running, waiting;
  std::map<std::uint32_t, bool> ranks;
  for (const EngineSample& s : collector.engineSamples()) ranks[s.dp_rank] = true;
  if (ranks.size() > options.max_ranks_per_plot) {
    std::vector<const EngineSample*> order;
    order.reserve(collector.engineSamples().size());
    for (const EngineSample& s : collector.engineSamples()) order.push_back(&s);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto* a, const auto* b) { return a->time_ms < b->time_ms; });
    const std::string all = " (" + std::to_string(ranks.size()) + " ranks)";
    Series& k = kv[0];
    k.name = "KV usage %, mean" + all;
    running[0].name = "running (batch size), total" + all;
    waiting[0].name = "waiting, total" + all;
    std::map<std::uint32_t, const EngineSample*> last;
    double kv_sum = 0.0, run_sum = 0.0, wait_sum = 0.0;
    for (const EngineSample* s : order) {
      const EngineSample*& prev = last[s->dp_rank];
      if (prev != nullptr) {
        kv_sum -= prev->kv_usage;
        run_sum -= static_cast<double>(prev->num_running);
        wait_sum -= static_cast<double>(prev->num_waiting);
      }
      prev = s;
      kv_sum += s->kv_usage;
      run_sum += static_cast<double>(s->num_running);
      wait_sum += static_cast<double>(s->num_waiting);
      const double x = (s->time_ms - t0) / 1000.0;
      k.points.emplace_back(x, 100.0 * kv_sum / static_cast<double>(ranks.size()));
      running[0].points.emplace_back(x, run_sum);
      waiting[0].points.emplace_back(x, wait_sum);
    }
  } else {
    for (const EngineSample& s : collector.engineSamples()) {
      const double x = (s.time_ms - t0) / 1000.0;
      auto& k = kv[s.dp_rank];
      if (k.name.empty()) {
        const std::string rank =
            " (" +
            (s.dp_rank < options.rank_labels.size() ? options.rank_labels[s.dp_rank]
                                                    : "rank " + std::to_string(s.dp_rank)) +
            ")";
        k.name = "KV usage %" + rank;
        running[s.dp_rank].name = "running (batch size)" + rank;
        waiting[s.dp_rank].name = "waiting" + rank;
      }
      k.points.emplace_back(x, 100.0 * s.kv_usage);
      running[s.dp_rank].points.emplace_back(x, static_cast<double>(s.num_running));
      waiting[s.dp_rank].points.emplace_back(x, static_cast<double>(s.num_waiting));
    }
  }
  Chart kv_chart{"KV cache usage over time (max per bucket)",
                 "time since first arrival (s)",
                 "KV blocks in use (%)",
                 {},
                 100.0};
  Chart batch_chart{"Batch size and queue over time (max per bucket)",
                    "time since first arrival (s)",
                    "requests",
                    {},
                    std::nullopt};
  for (auto& [rank, s] : kv) {
    reduceByMax(s, options.max_points_per_series);
    kv_chart.series.push_back(std::move(s));
  }
  for (auto& [rank, s] : running) {
    reduceByMax(s, options.max_points_per_series);
    batch_chart.series.push_back(std::move(s));
  }
  for (auto& [rank, s] : waiting) {
    reduceByMax(s, options.max_points_per_series);
    batch_chart.series.push_back(std::move(s));
  }
  charts.push_back(std::move(kv_chart));
  charts.push_back(std::move(batch_chart));

  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
          escapeHtml(options.title) + "</title>\n";
  html +=
      "<style>body{font-family:sans-serif;margin:24px;color:#222}pre{background:#f6f6f6;"
      "padding:12px;overflow-x:auto}svg{display:block;margin:16px 0;border:1px solid #eee}"
      "</style>\n</head>\n<body>\n";
  html += "<h1>" + escapeHtml(options.title) + "</h1>\n";
  html += "<h2>Summary</h2>\n<pre>" + escapeHtml(formatReportTable(report)) + "</pre>\n";
  html += "<h2>Plots</h2>\n";
  for (const Chart& c : charts) html += renderChart(c);
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace mocker::replay
