// Layout: title, frame with "nice" ticks (1/2/5 × 10^k; decades on a log axis), axis labels,
// then the legend in rows below the axis label, so it never covers a series.
#include "tools/replay/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace mocker::replay {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// Tick label: compact, no more decimals than the step needs.
std::string tickLabel(double v, double step) {
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  std::string s = num(v, std::min(decimals, 6));
  if (s == "-0") s = "0";
  return s;
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

/// Label of a log-axis tick at 10^e × m.
std::string logTickLabel(double v) {
  if (v >= 1.0) return num(v, 0);
  const int decimals = static_cast<int>(std::ceil(-std::log10(v) - 1e-9));
  return num(v, std::min(decimals, 6));
}

}  // namespace

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

bool wantsLogX(const std::vector<double>& sorted) {
  if (sorted.size() < 2 || !(sorted.front() > 0.0)) return false;
  const double median = sorted[sorted.size() / 2];
  return sorted.back() >= 50.0 * median;
}

namespace {

/// The picture's fixed geometry (two sizes).
struct Frame {
  explicit Frame(bool is_small)
      : small(is_small),
        width(small ? 340 : 760),
        left(small ? 44 : 70),
        top(small ? 24 : 34),
        plot_h(small ? 120 : 230),
        plot_w(width - left - (small ? 10 : 24)),
        font(small ? 10 : 11) {}
  bool small;
  double width, left, top, plot_h, plot_w, font;
};

/// Display units: ms axes switch to seconds from 10,000 ms on; `any` = a point to draw.
struct Units {
  bool any = false;
  double x_scale = 1.0, y_scale = 1.0;
  std::string x_label, y_label;
};

Units unitsOf(const Plot& plot) {
  double x_hi_raw = 0.0, y_hi_raw = 0.0;
  Units u;
  for (const PlotSeries& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      if (plot.log_x && !(x > 0.0)) continue;
      x_hi_raw = u.any ? std::max(x_hi_raw, x) : x;
      y_hi_raw = u.any ? std::max(y_hi_raw, y) : y;
      u.any = true;
    }
  }
  if (plot.x_max && !plot.log_x) x_hi_raw = std::max(x_hi_raw, *plot.x_max);
  u.x_scale = plot.x_is_ms && x_hi_raw >= 10000.0 ? 1e-3 : 1.0;
  u.y_scale = plot.y_is_ms && y_hi_raw >= 10000.0 ? 1e-3 : 1.0;
  u.x_label = plot.x_label + (plot.x_is_ms ? (u.x_scale < 1.0 ? " (s)" : " (ms)") : std::string()) +
              (plot.log_x ? ", log scale" : "");
  u.y_label = plot.y_label + (plot.y_is_ms ? (u.y_scale < 1.0 ? " (s)" : " (ms)") : std::string());
  return u;
}

/// Legend rows (below the frame and the x label).
struct LegendEntry {
  std::string name;
  std::string color;
  bool dots;
  bool dashed;
  double x;
  double row;
};

std::vector<LegendEntry> layoutLegend(const Plot& plot, const Frame& f) {
  std::vector<LegendEntry> legend;
  double x = f.left, row = 0;
  const auto add = [&](const std::string& name, const std::string& color, bool dots, bool dashed) {
    const double w = 30 + (f.small ? 5.6 : 6.4) * static_cast<double>(name.size()) + 14;
    if (x > f.left && x + w > f.width) {
      x = f.left;
      ++row;
    }
    legend.push_back({name, color, dots, dashed, x, row});
    x += w;
  };
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    add(plot.series[i].name, kColors[i % std::size(kColors)],
        plot.series[i].style == PlotSeries::Style::Dots, false);
  }
  for (const PlotMarker& m : plot.markers) add(m.label, "#555", false, true);
  return legend;
}

/// The axes: the data range in display units, the ticks, and the mapping to coordinates.
struct Axes {
  std::vector<std::pair<double, std::string>> x_ticks;  // (display value, label)
  std::vector<double> x_minor;                          // grid lines without labels
  bool log_x = false;
  double a0 = 0, a1 = 1;  // the x axis (log10 of the values on a log axis)
  double y1 = 0, y_step = 1;
  double x_scale = 1, y_scale = 1;
  Frame f{false};

  double tx(double v) const { return log_x ? std::log10(v) : v; }
  double pxd(double dx) const { return f.left + (tx(dx) - a0) / (a1 - a0) * f.plot_w; }
  double px(double x) const { return pxd(x * x_scale); }
  double pyd(double dy) const { return f.top + f.plot_h - dy / y1 * f.plot_h; }
  double py(double y) const { return pyd(y * y_scale); }
};

Axes axesOf(const Plot& plot, const Units& u, const Frame& f) {
  Axes ax;
  ax.f = f;
  ax.log_x = plot.log_x;
  ax.x_scale = u.x_scale;
  ax.y_scale = u.y_scale;
  double x0 = 0, x1 = 0, y1 = 0;
  bool first = true;
  for (const PlotSeries& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      if (plot.log_x && !(x > 0.0)) continue;
      const double dx = x * u.x_scale;
      x0 = first ? dx : std::min(x0, dx);
      x1 = first ? dx : std::max(x1, dx);
      y1 = first ? y * u.y_scale : std::max(y1, y * u.y_scale);
      first = false;
    }
  }
  for (const PlotMarker& m : plot.markers) {
    if (m.vertical && (!plot.log_x || m.value > 0.0)) x1 = std::max(x1, m.value * u.x_scale);
    if (!m.vertical) y1 = std::max(y1, m.value * u.y_scale);
  }
  if (plot.y_max) y1 = *plot.y_max;
  if (plot.x_max && !plot.log_x) x1 = std::max(x1, *plot.x_max * u.x_scale);
  if (plot.log_x) {
    ax.a0 = std::floor(std::log10(x0));
    ax.a1 = std::ceil(std::log10(x1));
    if (ax.a1 <= ax.a0) ax.a1 = ax.a0 + 1;
    const bool few = ax.a1 - ax.a0 <= 2;
    for (double e = ax.a0; e <= ax.a1 + 1e-9; e += 1) {
      const double base = std::pow(10.0, e);
      ax.x_ticks.emplace_back(base, logTickLabel(base));
      if (e >= ax.a1) break;
      for (const double m : {2.0, 5.0}) {
        if (few) {
          ax.x_ticks.emplace_back(base * m, logTickLabel(base * m));
        } else {
          ax.x_minor.push_back(base * m);
        }
      }
    }
  } else {
    x0 = std::min(x0, 0.0);
    const double step = niceStep(x1 - x0, f.small ? 4 : 8);
    ax.a0 = std::floor(x0 / step + 1e-9) * step;
    ax.a1 = x1 > ax.a0 ? std::ceil(x1 / step - 1e-9) * step : ax.a0 + step;
    if (ax.a1 <= ax.a0) ax.a1 = ax.a0 + step;
    for (double x = ax.a0; x <= ax.a1 + step * 1e-6; x += step)
      ax.x_ticks.emplace_back(x, tickLabel(x, step));
  }
  ax.y_step = niceStep(y1, f.small ? 3 : 5);
  ax.y1 = y1 > 0 ? std::ceil(y1 / ax.y_step - 1e-9) * ax.y_step : ax.y_step;
  return ax;
}

/// Grid, tick labels, the frame and the axis labels.
void drawFrame(std::string& svg, const Axes& ax, const Units& u) {
  const Frame& f = ax.f;
  svg += "<g stroke=\"#e3e3e3\">\n";
  std::string labels;
  for (double y = 0; y <= ax.y1 + ax.y_step * 1e-6; y += ax.y_step) {
    svg += "<line x1=\"" + num(f.left) + "\" y1=\"" + num(ax.pyd(y)) + "\" x2=\"" +
           num(f.left + f.plot_w) + "\" y2=\"" + num(ax.pyd(y)) + "\"/>\n";
    labels += "<text x=\"" + num(f.left - 5) + "\" y=\"" + num(ax.pyd(y) + 4) +
              "\" text-anchor=\"end\">" + tickLabel(y, ax.y_step) + "</text>\n";
  }
  for (const double x : ax.x_minor) {
    svg += "<line x1=\"" + num(ax.pxd(x)) + "\" y1=\"" + num(f.top) + "\" x2=\"" + num(ax.pxd(x)) +
           "\" y2=\"" + num(f.top + f.plot_h) + "\" stroke=\"#f1f1f1\"/>\n";
  }
  for (const auto& [x, label] : ax.x_ticks) {
    svg += "<line x1=\"" + num(ax.pxd(x)) + "\" y1=\"" + num(f.top) + "\" x2=\"" + num(ax.pxd(x)) +
           "\" y2=\"" + num(f.top + f.plot_h) + "\"/>\n";
    // The last label ends at the frame's right edge instead of running past the picture.
    const bool at_right = ax.pxd(x) > f.left + f.plot_w - 1;
    labels += "<text x=\"" + num(ax.pxd(x)) + "\" y=\"" + num(f.top + f.plot_h + 14) +
              "\" text-anchor=\"" + (at_right ? "end" : "middle") + "\">" + label + "</text>\n";
  }
  svg += "</g>\n" + labels;
  svg += "<rect x=\"" + num(f.left) + "\" y=\"" + num(f.top) + "\" width=\"" + num(f.plot_w) +
         "\" height=\"" + num(f.plot_h) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num(f.left + f.plot_w / 2) + "\" y=\"" +
         num(f.top + f.plot_h + (f.small ? 27 : 32)) + "\" text-anchor=\"middle\">" +
         escapeHtml(u.x_label) + "</text>\n";
  svg += "<text transform=\"translate(" + num(f.small ? 11 : 16) + "," + num(f.top + f.plot_h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escapeHtml(u.y_label) + "</text>\n";
}

/// The series (lines or dots), then the dashed markers.
void drawSeries(std::string& svg, const Plot& plot, const Axes& ax) {
  const Frame& f = ax.f;
  svg += "<g>\n";
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    const std::string color = kColors[i % std::size(kColors)];
    std::string coords;
    for (const auto& [x, y] : s.points) {
      if (plot.log_x && !(x > 0.0)) continue;
      if (s.style == PlotSeries::Style::Dots) {
        coords += 'M';
        coords += num(ax.px(x));
        coords += ' ';
        coords += num(ax.py(y));
        coords += "h0.1";
      } else {
        coords += num(ax.px(x)) + "," + num(ax.py(y)) + " ";
      }
    }
    if (coords.empty()) continue;
    if (s.style == PlotSeries::Style::Dots) {
      svg += "<path class=\"series\" fill=\"none\" stroke=\"" + color +
             "\" stroke-opacity=\"0.6\" stroke-width=\"" + num(f.small ? 3 : 4, 0) +
             "\" stroke-linecap=\"round\" d=\"" + coords + "\"/>\n";
    } else {
      svg += "<polyline class=\"series\" fill=\"none\" stroke-width=\"1.5\" stroke=\"" + color +
             "\" points=\"" + coords + "\"/>\n";
    }
  }
  svg += "</g>\n";
  for (const PlotMarker& m : plot.markers) {
    if (m.vertical) {
      if (plot.log_x && !(m.value > 0.0)) continue;
      svg += "<line class=\"marker\" x1=\"" + num(ax.px(m.value)) + "\" y1=\"" + num(f.top) +
             "\" x2=\"" + num(ax.px(m.value)) + "\" y2=\"" + num(f.top + f.plot_h) +
             "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n";
    } else {
      svg += "<line class=\"marker\" x1=\"" + num(f.left) + "\" y1=\"" + num(ax.py(m.value)) +
             "\" x2=\"" + num(f.left + f.plot_w) + "\" y2=\"" + num(ax.py(m.value)) +
             "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n";
    }
  }
}

void drawLegend(std::string& svg, const std::vector<LegendEntry>& legend, double top,
                const Frame& f) {
  for (const LegendEntry& e : legend) {
    const double ly = top + e.row * (f.small ? 14 : 16);
    if (e.dots) {
      svg += "<circle cx=\"" + num(e.x + 9) + "\" cy=\"" + num(ly - 4) + "\" r=\"3\" fill=\"" +
             e.color + "\"/>\n";
    } else {
      svg += "<line x1=\"" + num(e.x) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(e.x + 22) +
             "\" y2=\"" + num(ly - 4) + "\" stroke=\"" + e.color + "\" stroke-width=\"2\"" +
             (e.dashed ? " stroke-dasharray=\"5,4\"" : "") + "/>\n";
    }
    svg += "<text x=\"" + num(e.x + 28) + "\" y=\"" + num(ly) + "\">" + escapeHtml(e.name) +
           "</text>\n";
  }
}

}  // namespace

std::string renderSvgPlot(const Plot& plot) {
  const Frame f(plot.small);
  const Units u = unitsOf(plot);
  const std::vector<LegendEntry> legend = layoutLegend(plot, f);
  const double legend_rows = legend.empty() ? 0 : legend.back().row + 1;
  const double legend_top = f.top + f.plot_h + (f.small ? 34 : 44);
  const double height = legend_top + legend_rows * (f.small ? 14 : 16) + 6;

  std::string svg = "<svg class=\"chart\" data-chart=\"" + escapeHtml(plot.id) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" viewBox=\"0 0 " +
                    num(f.width, 0) + " " + num(height, 0) +
                    "\" role=\"img\" font-family=\"sans-serif\"" + " font-size=\"" +
                    num(f.font, 0) + "\"" + (u.any ? "" : " data-empty=\"1\"") + ">\n";
  svg += "<title>" + escapeHtml(plot.title) + "</title>\n";
  svg += "<text x=\"" + num(f.width / 2) + "\" y=\"" + num(f.small ? 14 : 18) +
         "\" text-anchor=\"middle\" font-size=\"" + num(f.small ? 11 : 14, 0) + "\">" +
         escapeHtml(plot.title) + "</text>\n";
  if (!u.any) {
    svg += "<text x=\"" + num(f.width / 2) + "\" y=\"" + num(f.top + f.plot_h / 2) +
           "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n</svg>\n";
    return svg;
  }
  const Axes ax = axesOf(plot, u, f);
  drawFrame(svg, ax, u);
  drawSeries(svg, plot, ax);
  drawLegend(svg, legend, legend_top, f);
  svg += "</svg>\n";
  return svg;
}

std::string pageHead() {
  return "<style>body{font-family:sans-serif;margin:16px 24px;color:#222}"
         "pre{background:#f6f6f6;padding:12px;white-space:pre-wrap;overflow-wrap:anywhere}"
         "svg.chart{display:block;margin:12px 0;border:1px solid #eee;max-width:100%}"
         ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:8px}"
         ".grid svg.chart{margin:0}"
         "table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left;"
         "border-bottom:1px solid #eee;vertical-align:top}</style>\n"
         "<script>window.mockerErrors=[];window.addEventListener('error',function(e){"
         "window.mockerErrors.push(String(e.message||e));});</script>\n";
}

std::string pageCheckScript() {
  return "<script>\n"
         "(function(){\n"
         "function check(){\n"
         "  var bad=[];var charts=document.querySelectorAll('svg.chart');\n"
         "  charts.forEach(function(svg){\n"
         "    var n=0;\n"
         "    svg.querySelectorAll('.series').forEach(function(el){\n"
         "      var b=el.getBBox();if(b.width>0||b.height>0)n++;});\n"
         "    svg.setAttribute('data-drawn',String(n));\n"
         "    if(n===0&&svg.getAttribute('data-empty')!=='1')bad.push(svg.getAttribute("
         "'data-chart'));\n"
         "  });\n"
         "  var errors=window.mockerErrors||['error recorder missing'];\n"
         "  var root=document.documentElement;\n"
         "  root.setAttribute('data-charts',String(charts.length));\n"
         "  root.setAttribute('data-errors',errors.join(' | '));\n"
         "  root.setAttribute('data-render-check',errors.length===0&&bad.length===0?'ok':"
         "'failed: '+bad.concat(errors).join(', '));\n"
         "}\n"
         "if(document.readyState==='complete'){check();}"
         "else{window.addEventListener('load',check);}\n"
         "})();\n"
         "</script>\n";
}

std::vector<std::pair<double, double>> cdfPoints(const std::vector<double>& sorted,
                                                 std::size_t max_points) {
  std::vector<std::pair<double, double>> out;
  const std::size_t n = sorted.size();
  if (n == 0) return out;
  if (2 * n + 1 <= max_points) {  // few values: the exact step function, from 0
    out.emplace_back(sorted[0], 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      if (i > 0) out.emplace_back(sorted[i], static_cast<double>(i) / static_cast<double>(n));
      out.emplace_back(sorted[i], static_cast<double>(i + 1) / static_cast<double>(n));
    }
    return out;
  }
  const std::size_t m = std::max<std::size_t>(2, std::min(n, max_points));
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t i = n == 1 ? 0 : (k * (n - 1) + (m - 1) / 2) / (m - 1);
    out.emplace_back(sorted[i], static_cast<double>(i + 1) / static_cast<double>(n));
    if (n == 1) break;
  }
  return out;
}

}  // namespace mocker::replay
