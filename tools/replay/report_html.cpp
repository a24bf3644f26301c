// The page: summary table, then the plots (svg_plot.h). Large series are reduced so the page
// stays small for long runs: CDFs to evenly spaced ranks, time series to the maximum per bucket
// (a peak is never averaged away), the scatter to one request in k.
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
#include "tools/replay/svg_plot.h"

namespace mocker::replay {
namespace {

using Points = std::vector<std::pair<double, double>>;

/// Reduces a time series to at most `max_points` by keeping the maximum y per bucket of ranks.
void reduceByMax(Points& points, std::size_t max_points) {
  if (points.size() <= max_points || max_points == 0) return;
  Points out;
  const std::size_t n = points.size();
  for (std::size_t b = 0; b < max_points; ++b) {
    const std::size_t lo = b * n / max_points;
    const std::size_t hi = (b + 1) * n / max_points;
    if (lo >= hi) continue;
    double y = points[lo].second;
    for (std::size_t i = lo; i < hi; ++i) y = std::max(y, points[i].second);
    out.emplace_back(points[lo].first, y);
  }
  points = std::move(out);
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f %%", 100.0 * fraction);
  return buf;
}

Plot cdfPlot(std::string id, std::string title, std::string x_label, std::vector<double> values,
             std::size_t max_points, std::optional<double> slo, const std::string& slo_name) {
  std::sort(values.begin(), values.end());
  Plot p{.id = std::move(id),
         .title = std::move(title),
         .x_label = std::move(x_label),
         .y_label = "fraction of requests",
         .series = {{.name = "completed requests", .points = cdfPoints(values, max_points)}},
         .y_max = 1.0,
         .x_is_ms = true,
         .log_x = wantsLogX(values)};
  if (slo) p.markers.push_back({.vertical = true, .value = *slo, .label = slo_name});
  return p;
}

/// The run's time span: the first arrival and the last token or terminal.
struct Span {
  double t0 = 0.0;
  double t_end = 0.0;
  bool have_time = false;
};

Span spanOf(const std::vector<RequestRecord>& requests) {
  Span span;
  for (const RequestRecord& r : requests) {
    if (!span.have_time || r.arrival_ms < span.t0) span.t0 = r.arrival_ms;
    span.have_time = true;
  }
  for (const RequestRecord& r : requests) {
    if (!r.token_times_ms.empty()) span.t_end = std::max(span.t_end, r.token_times_ms.back());
    if (r.terminal_ms) span.t_end = std::max(span.t_end, *r.terminal_ms);
  }
  return span;
}

/// TTFT, TPOT and E2E CDFs of the completed requests, then TTFT against arrival time.
void addLatencyPlots(std::vector<Plot>& plots, const std::vector<RequestRecord>& requests,
                     double t0, const std::optional<SloSpec>& slo,
                     const HtmlReportOptions& options) {
  std::vector<double> ttft, tpot, e2e;
  Points scatter;  // (arrival since t0 ms, TTFT ms), completed requests
  for (const RequestRecord& r : requests) {
    if (r.status != TerminalStatus::Completed) continue;
    const RequestLatencies l = latenciesOf(r);
    if (l.ttft_ms) {
      ttft.push_back(*l.ttft_ms);
      scatter.emplace_back(r.arrival_ms - t0, *l.ttft_ms);
    }
    if (l.tpot_ms) tpot.push_back(*l.tpot_ms);
    if (l.e2e_ms) e2e.push_back(*l.e2e_ms);
  }
  plots.push_back(cdfPlot("ttft_cdf", "TTFT CDF (completed requests)", "time to first token",
                          std::move(ttft), options.max_points_per_series,
                          slo ? slo->ttft_ms : std::nullopt, "TTFT SLO"));
  plots.push_back(cdfPlot("tpot_cdf", "TPOT CDF (completed requests, >= 2 tokens)",
                          "time per output token", std::move(tpot), options.max_points_per_series,
                          slo ? slo->tpot_ms : std::nullopt, "TPOT SLO"));
  plots.push_back(cdfPlot("e2e_cdf", "End-to-end latency CDF (completed requests)",
                          "request latency", std::move(e2e), options.max_points_per_series,
                          slo ? slo->e2e_ms : std::nullopt, "E2E SLO"));

  const std::size_t stride =
      options.max_scatter_points == 0
          ? 1
          : std::max<std::size_t>(
                1, (scatter.size() + options.max_scatter_points - 1) / options.max_scatter_points);
  Points kept;
  for (std::size_t i = 0; i < scatter.size(); i += stride) kept.push_back(scatter[i]);
  Plot p{.id = "ttft_vs_arrival",
         .title = "TTFT against arrival time" +
                  (stride > 1 ? " (one request in " + std::to_string(stride) + ")" : std::string()),
         .x_label = "arrival since the first request",
         .y_label = "TTFT",
         .series = {{.name = "completed request",
                     .points = std::move(kept),
                     .style = PlotSeries::Style::Dots}},
         .x_is_ms = true,
         .y_is_ms = true};
  if (slo && slo->ttft_ms) {
    p.markers.push_back({.vertical = false, .value = *slo->ttft_ms, .label = "TTFT SLO"});
  }
  plots.push_back(std::move(p));
}

/// Output-token throughput (every emitted token, any outcome) and prefix-cache hit rate
/// (reused / input tokens of the requests first admitted in the bucket) per time bucket.
void addTrafficPlots(std::vector<Plot>& plots, const std::vector<RequestRecord>& requests,
                     const Span& span, const HtmlReportOptions& options) {
  Points throughput, hit_rate;
  const std::size_t buckets = std::max<std::size_t>(1, options.time_buckets);
  if (span.have_time && span.t_end > span.t0) {
    const double width = (span.t_end - span.t0) / static_cast<double>(buckets);
    const auto bucketOf = [&](double t) {
      const auto b = static_cast<std::size_t>(std::max(0.0, (t - span.t0) / width));
      return std::min(b, buckets - 1);
    };
    std::vector<std::uint64_t> counts(buckets, 0), input(buckets, 0), reused(buckets, 0);
    for (const RequestRecord& r : requests) {
      for (const double t : r.token_times_ms) counts[bucketOf(t)]++;
      if (r.first_admit_ms) {
        input[bucketOf(*r.first_admit_ms)] += r.info.input_length;
        reused[bucketOf(*r.first_admit_ms)] += r.first_reused_input_tokens;
      }
    }
    for (std::size_t b = 0; b < buckets; ++b) {
      const double rate = static_cast<double>(counts[b]) / (width / 1000.0);
      const double lo = static_cast<double>(b) * width;
      const double hi = static_cast<double>(b + 1) * width;
      throughput.emplace_back(lo, rate);
      throughput.emplace_back(hi, rate);
      if (input[b] > 0) {
        hit_rate.emplace_back(
            (lo + hi) / 2, 100.0 * static_cast<double>(reused[b]) / static_cast<double>(input[b]));
      }
    }
  }
  plots.push_back(Plot{.id = "throughput",
                       .title = "Output token throughput over time",
                       .x_label = "time since the first arrival",
                       .y_label = "tokens/s",
                       .series = {{.name = "output tokens/s", .points = std::move(throughput)}},
                       .x_is_ms = true});
  plots.push_back(Plot{.id = "prefix_hit_rate",
                       .title = "Prefix cache hit rate over time (by first admission)",
                       .x_label = "time since the first arrival",
                       .y_label = "reused input tokens (%)",
                       .series = {{.name = "reused / input tokens", .points = std::move(hit_rate)}},
                       .y_max = 100.0,
                       .x_is_ms = true});
}

/// The engine samples, grouped per rank (each in time order) and all in time order.
struct EngineSamples {
  std::map<std::uint32_t, std::vector<const EngineSample*>> by_rank;
  std::vector<const EngineSample*> order;
};

EngineSamples engineSamplesOf(const ReplayCollector& collector) {
  EngineSamples out;
  out.order.reserve(collector.engineSamples().size());
  for (const EngineSample& s : collector.engineSamples()) {
    out.by_rank[s.dp_rank].push_back(&s);
    out.order.push_back(&s);
  }
  std::stable_sort(out.order.begin(), out.order.end(),
                   [](const auto* a, const auto* b) { return a->time_ms < b->time_ms; });
  return out;
}

std::string rankLabel(const HtmlReportOptions& options, std::uint32_t rank) {
  return rank < options.rank_labels.size() ? options.rank_labels[rank]
                                           : "rank " + std::to_string(rank);
}

/// Preemptions: the cumulative count summed over ranks (each rank's last report), stepped at
/// every sample.
Plot preemptionPlot(const EngineSamples& samples, double t0, std::size_t max_points) {
  Points preempted;
  std::map<std::uint32_t, std::uint64_t> last;
  std::uint64_t total = 0;
  for (const EngineSample* s : samples.order) {
    std::uint64_t& prev = last[s->dp_rank];
    total = total - prev + s->preemptions_total;
    prev = s->preemptions_total;
    preempted.emplace_back(s->time_ms - t0, static_cast<double>(total));
  }
  reduceByMax(preempted, max_points);
  // None at all: said in the title, on a 0..1 axis (a flat line at 0 reads as a missing plot).
  return Plot{.id = "preemptions",
              .title = total == 0 ? "Preemptions over time (cumulative, all ranks): none"
                                  : "Preemptions over time (cumulative, all ranks)",
              .x_label = "time since the first arrival",
              .y_label = "preemptions",
              .series = {{.name = "preemptions", .points = std::move(preempted)}},
              .y_max = total == 0 ? std::optional<double>(1.0) : std::nullopt,
              .x_is_ms = true};
}

/// Across many ranks: the largest rank value next to the mean (KV) or the total (batch), from
/// each rank's last report at every sample — a mean alone would hide a saturated rank.
void addAggregateSeries(Plot& kv_plot, Plot& batch_plot, const EngineSamples& samples, double t0,
                        std::size_t max_points) {
  const std::size_t ranks = samples.by_rank.size();
  const std::string all = " (" + std::to_string(ranks) + " ranks)";
  Points kv_max, kv_mean, run_max, run_total, wait_total;
  std::map<std::uint32_t, const EngineSample*> last;
  double kv_sum = 0.0, run_sum = 0.0, wait_sum = 0.0;
  for (const EngineSample* s : samples.order) {
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
    double kv_hi = 0.0, run_hi = 0.0;
    for (const auto& [rank, sample] : last) {
      kv_hi = std::max(kv_hi, sample->kv_usage);
      run_hi = std::max(run_hi, static_cast<double>(sample->num_running));
    }
    const double x = s->time_ms - t0;
    kv_max.emplace_back(x, 100.0 * kv_hi);
    kv_mean.emplace_back(x, 100.0 * kv_sum / static_cast<double>(ranks));
    run_max.emplace_back(x, run_hi);
    run_total.emplace_back(x, run_sum);
    wait_total.emplace_back(x, wait_sum);
  }
  for (Points* p : {&kv_max, &kv_mean, &run_max, &run_total, &wait_total}) {
    reduceByMax(*p, max_points);
  }
  kv_plot.series.push_back({.name = "KV usage %, busiest rank" + all, .points = kv_max});
  kv_plot.series.push_back({.name = "KV usage %, mean" + all, .points = kv_mean});
  batch_plot.series.push_back({.name = "running, busiest rank" + all, .points = run_max});
  batch_plot.series.push_back({.name = "running (batch size), total" + all, .points = run_total});
  batch_plot.series.push_back({.name = "waiting, total" + all, .points = wait_total});
}

/// KV usage and batch size over time: one series per rank, or aggregates across many ranks.
void addEnginePlots(std::vector<Plot>& plots, const EngineSamples& samples, double t0,
                    const HtmlReportOptions& options) {
  Plot kv_plot{.id = "kv_usage",
               .title = "KV cache usage over time (max per bucket)",
               .x_label = "time since the first arrival",
               .y_label = "KV blocks in use (%)",
               .y_max = 100.0,
               .x_is_ms = true};
  Plot batch_plot{.id = "batch",
                  .title = "Batch size and queue over time (max per bucket)",
                  .x_label = "time since the first arrival",
                  .y_label = "requests",
                  .x_is_ms = true};
  if (samples.by_rank.size() > options.max_ranks_per_plot) {
    addAggregateSeries(kv_plot, batch_plot, samples, t0, options.max_points_per_series);
  } else {
    for (const auto& [rank, of_rank] : samples.by_rank) {
      Points kv, running, waiting;
      for (const EngineSample* s : of_rank) {
        const double x = s->time_ms - t0;
        kv.emplace_back(x, 100.0 * s->kv_usage);
        running.emplace_back(x, static_cast<double>(s->num_running));
        waiting.emplace_back(x, static_cast<double>(s->num_waiting));
      }
      for (Points* p : {&kv, &running, &waiting}) reduceByMax(*p, options.max_points_per_series);
      const std::string name = " (" + rankLabel(options, rank) + ")";
      kv_plot.series.push_back({.name = "KV usage %" + name, .points = std::move(kv)});
      batch_plot.series.push_back(
          {.name = "running (batch size)" + name, .points = std::move(running)});
      batch_plot.series.push_back({.name = "waiting" + name, .points = std::move(waiting)});
    }
  }
  plots.push_back(std::move(kv_plot));
  plots.push_back(std::move(batch_plot));
}

/// One small KV plot and one small batch plot per rank with that rank's peaks in the title, on
/// shared scales (one time axis and one request axis for every rank, so ranks compare by eye).
std::string perRankGrids(const EngineSamples& samples, double t0,
                         const HtmlReportOptions& options) {
  double x_end = 0.0, batch_peak = 1.0;
  for (const auto& [rank, of_rank] : samples.by_rank) {
    for (const EngineSample* s : of_rank) {
      x_end = std::max(x_end, s->time_ms - t0);
      batch_peak = std::max(
          {batch_peak, static_cast<double>(s->num_running), static_cast<double>(s->num_waiting)});
    }
  }
  std::string kv_grid, batch_grid;
  for (const auto& [rank, of_rank] : samples.by_rank) {
    Points kv, running, waiting;
    double kv_peak = 0.0;
    std::uint64_t run_peak = 0, wait_peak = 0;
    for (const EngineSample* s : of_rank) {
      const double x = s->time_ms - t0;
      kv.emplace_back(x, 100.0 * s->kv_usage);
      running.emplace_back(x, static_cast<double>(s->num_running));
      waiting.emplace_back(x, static_cast<double>(s->num_waiting));
      kv_peak = std::max(kv_peak, s->kv_usage);
      run_peak = std::max(run_peak, s->num_running);
      wait_peak = std::max(wait_peak, s->num_waiting);
    }
    for (Points* p : {&kv, &running, &waiting}) reduceByMax(*p, options.max_points_small);
    const std::string label = rankLabel(options, rank);
    kv_grid += renderSvgPlot(Plot{.id = "kv_rank_" + std::to_string(rank),
                                  .title = label + ": KV peak " + percent(kv_peak),
                                  .x_label = "time",
                                  .y_label = "KV %",
                                  .series = {{.name = "KV usage %", .points = std::move(kv)}},
                                  .y_max = 100.0,
                                  .x_max = x_end,
                                  .x_is_ms = true,
                                  .small = true});
    batch_grid += renderSvgPlot(Plot{.id = "batch_rank_" + std::to_string(rank),
                                     .title = label + ": peak running " + std::to_string(run_peak) +
                                              ", waiting " + std::to_string(wait_peak),
                                     .x_label = "time",
                                     .y_label = "requests",
                                     .series = {{.name = "running", .points = std::move(running)},
                                                {.name = "waiting", .points = std::move(waiting)}},
                                     .y_max = batch_peak,
                                     .x_max = x_end,
                                     .x_is_ms = true,
                                     .small = true});
  }
  return "<h3>KV cache usage per rank (max per bucket)</h3>\n<div class=\"grid\">\n" + kv_grid +
         "</div>\n" +
         "<h3>Batch size and queue per rank (max per bucket)</h3>\n<div class=\"grid\">\n" +
         batch_grid + "</div>\n";
}

/// Per worker: requests dispatched, then the per-rank grids (empty for one worker and rank).
std::string perWorkerSection(const EngineSamples& samples, double t0,
                             const HtmlReportOptions& options) {
  std::string out;
  if (options.requests_per_worker.size() > 1) {
    Points counts;
    for (std::size_t w = 0; w < options.requests_per_worker.size(); ++w) {
      counts.emplace_back(static_cast<double>(w),
                          static_cast<double>(options.requests_per_worker[w]));
    }
    out += renderSvgPlot(Plot{
        .id = "requests_per_worker",
        .title = "Requests per worker",
        .x_label = "worker",
        .y_label = "requests dispatched",
        .series = {
            {.name = "requests", .points = std::move(counts), .style = PlotSeries::Style::Dots}}});
  }
  if (samples.by_rank.size() > 1) out += perRankGrids(samples, t0, options);
  return out;
}

}  // namespace

std::string renderHtmlReport(const Report& report, const ReplayCollector& collector,
                             const HtmlReportOptions& options) {
  const auto& requests = collector.requests();
  const std::optional<SloSpec> slo =
      report.goodput ? std::optional<SloSpec>(report.goodput->slo) : std::nullopt;
  const Span span = spanOf(requests);
  const EngineSamples samples = engineSamplesOf(collector);
  std::vector<Plot> plots;
  addLatencyPlots(plots, requests, span.t0, slo, options);
  addTrafficPlots(plots, requests, span, options);
  plots.push_back(preemptionPlot(samples, span.t0, options.max_points_per_series));
  addEnginePlots(plots, samples, span.t0, options);
  const std::string per_worker = perWorkerSection(samples, span.t0, options);

  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
          escapeHtml(options.title) + "</title>\n" + pageHead() + "</head>\n<body>\n";
  html += "<h1>" + escapeHtml(options.title) + "</h1>\n";
  html += "<h2>Summary</h2>\n<pre>" + escapeHtml(formatReportTable(report)) + "</pre>\n";
  html += "<h2>Latency</h2>\n";
  for (std::size_t i = 0; i < 4; ++i) html += renderSvgPlot(plots[i]);
  html += "<h2>Over time</h2>\n";
  for (std::size_t i = 4; i < plots.size(); ++i) html += renderSvgPlot(plots[i]);
  if (!per_worker.empty()) html += "<h2>Per worker</h2>\n" + per_worker;
  html += pageCheckScript();
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace mocker::replay
