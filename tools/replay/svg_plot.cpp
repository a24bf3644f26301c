// Layout: title, frame with "nice" ticks (1/2/5 × 10^k; decades on a log axis), axis labels,
// then the legend in rows below the axis label, so it never covers a series.
#include "tools/replay/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
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

std::string renderSvgPlot(const Plot& plot) {
  const bool small = plot.small;
  const double kW = small ? 340 : 760;
  const double kLeft = small ? 44 : 70, kRight = small ? 10 : 24, kTop = small ? 24 : 34;
  const double ph = small ? 120 : 230;
  const double pw = kW - kLeft - kRight;
  const double font = small ? 10 : 11;

  // Units: ms axes switch to seconds from 10,000 ms on.
  double x_hi_raw = 0.0, y_hi_raw = 0.0;
  bool any = false;
  for (const PlotSeries& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      if (plot.log_x && !(x > 0.0)) continue;
      x_hi_raw = any ? std::max(x_hi_raw, x) : x;
      y_hi_raw = any ? std::max(y_hi_raw, y) : y;
      any = true;
    }
  }
  if (plot.x_max && !plot.log_x) x_hi_raw = std::max(x_hi_raw, *plot.x_max);
  const double x_scale = plot.x_is_ms && x_hi_raw >= 10000.0 ? 1e-3 : 1.0;
  const double y_scale = plot.y_is_ms && y_hi_raw >= 10000.0 ? 1e-3 : 1.0;
  const std::string x_label = plot.x_label +
                              (plot.x_is_ms ? (x_scale < 1.0 ? " (s)" : " (ms)") : std::string()) +
                              (plot.log_x ? ", log scale" : "");
  const std::string y_label =
      plot.y_label + (plot.y_is_ms ? (y_scale < 1.0 ? " (s)" : " (ms)") : std::string());

  // Legend rows (below the frame and the x label).
  struct Entry {
    std::string name;
    std::string color;
    bool dots;
    bool dashed;
    double x;
    double row;
  };
  std::vector<Entry> legend;
  {
    double x = kLeft, row = 0;
    const auto add = [&](const std::string& name, const std::string& color, bool dots,
                         bool dashed) {
      const double w = 30 + (small ? 5.6 : 6.4) * static_cast<double>(name.size()) + 14;
      if (x > kLeft && x + w > kW) {
        x = kLeft;
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
  }
  const double legend_rows = legend.empty() ? 0 : legend.back().row + 1;
  const double legend_top = kTop + ph + (small ? 34 : 44);
  const double kH = legend_top + legend_rows * (small ? 14 : 16) + 6;

  std::string svg = "<svg class=\"chart\" data-chart=\"" + escapeHtml(plot.id) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" viewBox=\"0 0 " +
                    num(kW, 0) + " " + num(kH, 0) + "\" role=\"img\" font-family=\"sans-serif\"" +
                    " font-size=\"" + num(font, 0) + "\"" + (any ? "" : " data-empty=\"1\"") +
                    ">\n";
  svg += "<title>" + escapeHtml(plot.title) + "</title>\n";
  svg += "<text x=\"" + num(kW / 2) + "\" y=\"" + num(small ? 14 : 18) +
         "\" text-anchor=\"middle\" font-size=\"" + num(small ? 11 : 14, 0) + "\">" +
         escapeHtml(plot.title) + "</text>\n";
  if (!any) {
    svg += "<text x=\"" + num(kW / 2) + "\" y=\"" + num(kTop + ph / 2) +
           "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n</svg>\n";
    return svg;
  }

  // Data range in display units.
  double x0 = 0, x1 = 0, y1 = 0;
  bool first = true;
  for (const PlotSeries& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      if (plot.log_x && !(x > 0.0)) continue;
      const double dx = x * x_scale;
      x0 = first ? dx : std::min(x0, dx);
      x1 = first ? dx : std::max(x1, dx);
      y1 = first ? y * y_scale : std::max(y1, y * y_scale);
      first = false;
    }
  }
  for (const PlotMarker& m : plot.markers) {
    if (m.vertical && (!plot.log_x || m.value > 0.0)) x1 = std::max(x1, m.value * x_scale);
    if (!m.vertical) y1 = std::max(y1, m.value * y_scale);
  }
  if (plot.y_max) y1 = *plot.y_max;
  if (plot.x_max && !plot.log_x) x1 = std::max(x1, *plot.x_max * x_scale);

  std::vector<std::pair<double, std::string>> x_ticks;  // (display value, label)
  std::vector<double> x_minor;                          // grid lines without labels
  std::function<double(double)> tx;                     // display value -> axis coordinate
  double a0 = 0, a1 = 1;
  if (plot.log_x) {
    a0 = std::floor(std::log10(x0));
    a1 = std::ceil(std::log10(x1));
    if (a1 <= a0) a1 = a0 + 1;
    const bool few = a1 - a0 <= 2;
    for (double e = a0; e <= a1 + 1e-9; e += 1) {
      const double base = std::pow(10.0, e);
      x_ticks.emplace_back(base, logTickLabel(base));
      if (e >= a1) break;
      for (const double m : {2.0, 5.0}) {
        if (few) {
          x_ticks.emplace_back(base * m, logTickLabel(base * m));
        } else {
          x_minor.push_back(base * m);
        }
      }
    }
    tx = [](double v) { return std::log10(v); };
  } else {
    x0 = std::min(x0, 0.0);
    const double step = niceStep(x1 - x0, small ? 4 : 8);
    a0 = std::floor(x0 / step + 1e-9) * step;
    a1 = x1 > a0 ? std::ceil(x1 / step - 1e-9) * step : a0 + step;
    if (a1 <= a0) a1 = a0 + step;
    for (double x = a0; x <= a1 + step * 1e-6; x += step)
      x_ticks.emplace_back(x, tickLabel(x, step));
    tx = [](double v) { return v; };
  }
  const double y_step = niceStep(y1, small ? 3 : 5);
  y1 = y1 > 0 ? std::ceil(y1 / y_step - 1e-9) * y_step : y_step;
  const auto px = [&](double x) { return kLeft + (tx(x * x_scale) - a0) / (a1 - a0) * pw; };
  const auto pxd = [&](double dx) { return kLeft + (tx(dx) - a0) / (a1 - a0) * pw; };
  const auto py = [&](double y) { return kTop + ph - y * y_scale / y1 * ph; };
  const auto pyd = [&](double dy) { return kTop + ph - dy / y1 * ph; };

  svg += "<g stroke=\"#e3e3e3\">\n";
  std::string labels;
  for (double y = 0; y <= y1 + y_step * 1e-6; y += y_step) {
    svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(pyd(y)) + "\" x2=\"" + num(kLeft + pw) +
           "\" y2=\"" + num(pyd(y)) + "\"/>\n";
    labels += "<text x=\"" + num(kLeft - 5) + "\" y=\"" + num(pyd(y) + 4) +
              "\" text-anchor=\"end\">" + tickLabel(y, y_step) + "</text>\n";
  }
  for (const double x : x_minor) {
    svg += "<line x1=\"" + num(pxd(x)) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(pxd(x)) +
           "\" y2=\"" + num(kTop + ph) + "\" stroke=\"#f1f1f1\"/>\n";
  }
  for (const auto& [x, label] : x_ticks) {
    svg += "<line x1=\"" + num(pxd(x)) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(pxd(x)) +
           "\" y2=\"" + num(kTop + ph) + "\"/>\n";
    // The last label ends at the frame's right edge instead of running past the picture.
    const bool at_right = pxd(x) > kLeft + pw - 1;
    labels += "<text x=\"" + num(pxd(x)) + "\" y=\"" + num(kTop + ph + 14) + "\" text-anchor=\"" +
              (at_right ? "end" : "middle") + "\">" + label + "</text>\n";
  }
  svg += "</g>\n" + labels;
  svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) +
         "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kTop + ph + (small ? 27 : 32)) +
         "\" text-anchor=\"middle\">" + escapeHtml(x_label) + "</text>\n";
  svg += "<text transform=\"translate(" + num(small ? 11 : 16) + "," + num(kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escapeHtml(y_label) + "</text>\n";

  // Series, clipped to the frame.
  svg += "<g>\n";
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    const std::string color = kColors[i % std::size(kColors)];
    std::string coords;
    for (const auto& [x, y] : s.points) {
      if (plot.log_x && !(x > 0.0)) continue;
      if (s.style == PlotSeries::Style::Dots) {
        coords += 'M';
        coords += num(px(x));
        coords += ' ';
        coords += num(py(y));
        coords += "h0.1";
      } else {
        coords += num(px(x)) + "," + num(py(y)) + " ";
      }
    }
    if (coords.empty()) continue;
    if (s.style == PlotSeries::Style::Dots) {
      svg += "<path class=\"series\" fill=\"none\" stroke=\"" + color +
             "\" stroke-opacity=\"0.6\" stroke-width=\"" + num(small ? 3 : 4, 0) +
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
      svg += "<line class=\"marker\" x1=\"" + num(px(m.value)) + "\" y1=\"" + num(kTop) +
             "\" x2=\"" + num(px(m.value)) + "\" y2=\"" + num(kTop + ph) +
             "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n";
    } else {
      svg += "<line class=\"marker\" x1=\"" + num(kLeft) + "\" y1=\"" + num(py(m.value)) +
             "\" x2=\"" + num(kLeft + pw) + "\" y2=\"" + num(py(m.value)) +
             "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n";
    }
  }
  for (const Entry& e : legend) {
    const double ly = legend_top + e.row * (small ? 14 : 16);
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
