// Inline SVG plots for the self-contained HTML pages (`--report-html`, `mocker compare --html`):
// line, step and dot series, optional log-scale x, time axes whose unit (ms or s) follows the
// magnitude, reference lines (SLOs) and a legend laid out below the frame, never over the data.
// Each plot scales to the width of the page (viewBox, width 100 %).
//
// Every drawn series element carries class "series"; every plot is an <svg class="chart"
// data-chart="ID">. pageHead() records script errors; pageCheckScript() returns a script that, once
// the page has rendered, counts the drawn series elements of every chart (non-empty geometry from
// getBBox), writes the count to the chart's data-drawn attribute, records script errors, and marks
// the page
// (<html data-render-check="ok"> or "failed: …") — what the headless-browser test reads.
//
// Pure functions; thread-compatible. Deterministic for the same input.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mocker::replay {

struct PlotSeries {
  enum class Style { Line, Dots };
  std::string name;
  std::vector<std::pair<double, double>> points;  ///< (x, y); x ascending for Line
  Style style = Style::Line;
};

/// A reference line across the frame, e.g. an SLO bound: vertical at x = value, or horizontal at
/// y = value (in the series' units, before any ms → s scaling).
struct PlotMarker {
  bool vertical = true;
  double value = 0.0;
  std::string label;
};

struct Plot {
  std::string id;  ///< data-chart attribute (unique on the page)
  std::string title;
  std::string x_label;  ///< without unit when x_is_ms (the unit is appended)
  std::string y_label;  ///< without unit when y_is_ms
  std::vector<PlotSeries> series;
  std::vector<PlotMarker> markers;
  std::optional<double> y_max;  ///< fixed upper bound (1 for CDFs, 100 for %)
  /// Linear x: the axis reaches at least this far (small multiples share one time axis).
  std::optional<double> x_max;
  bool x_is_ms = false;  ///< x in ms: shown in s when the axis reaches 10,000 ms
  bool y_is_ms = false;
  bool log_x = false;  ///< log10 x axis (points with x <= 0 are left out)
  bool small = false;  ///< small multiple: compact frame and fonts
};

/// The plot as an <svg> element (with a trailing newline). A plot without any point reads
/// "no data" and has data-empty="1".
std::string renderSvgPlot(const Plot& plot);

/// Empirical CDF (x = value, y = fraction of values <= x) of ascending `sorted` values: the exact
/// step function from 0 when it fits in `max_points` points, else reduced to at most `max_points`
/// evenly spaced ranks (at least 2; one point for a single value).
std::vector<std::pair<double, double>> cdfPoints(const std::vector<double>& sorted,
                                                 std::size_t max_points);

/// Whether a CDF of these values reads better on a log x axis: every value positive and the
/// largest at least 50 times the median.
bool wantsLogX(const std::vector<double>& sorted_values);

/// `&`, `<`, `>`, `"` escaped for HTML text and attributes.
std::string escapeHtml(const std::string& s);

/// The <style> (frame, grid of small multiples, tables) and a <script> that records script
/// errors from then on, for <head>.
std::string pageHead();

/// The <script> element described above; put it at the end of <body>.
std::string pageCheckScript();

}  // namespace mocker::replay
