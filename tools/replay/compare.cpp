#include "tools/replay/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/replay/report_output.h"
#include "tools/replay/run_identity.h"
#include "tools/replay/stats.h"
#include "tools/replay/svg_plot.h"
#include "tools/replay/workload.h"

namespace mocker::replay {
namespace {

using nlohmann::ordered_json;
/// Reports are read in file order (the identity is shown as written).
using json = nlohmann::ordered_json;

constexpr const char* kQuantileKeys[] = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms"};

Error reportError(const std::string& path, const std::string& what) {
  return Error{ErrorCode::InvalidArgument, path + ": " + what};
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.starts_with("-") && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string padLeft(const std::string& s, std::size_t width) {
  const std::size_t w = displayWidth(s);
  return std::string(w >= width ? 0 : width - w, ' ') + s;
}

std::string padRight(const std::string& s, std::size_t width) {
  const std::size_t w = displayWidth(s);
  return s + std::string(w >= width ? 0 : width - w, ' ');
}

/// "[i]" (built by appending: GCC 12's -Wrestrict misfires on "[" + std::to_string(i)).
std::string bracket(std::size_t i) {
  std::string s = "[";
  s += std::to_string(i);
  s += ']';
  return s;
}

std::string textOf(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "none";
  return v.dump();
}

std::string shortLabel(const json& identity) {
  if (!identity.is_object()) return "no identity";
  const auto get = [&](const char* key) {
    const auto it = identity.find(key);
    return it == identity.end() ? std::string("?") : textOf(*it);
  };
  std::string workers = "?";
  if (const auto it = identity.find("num_workers"); it != identity.end() && it->is_number()) {
    const auto n = it->get<double>();
    const bool live = get("mode") == "live";
    workers = fixed(n, 0) +
              (live ? (n == 1 ? " server" : " servers") : (n == 1 ? " worker" : " workers"));
  }
  return get("mode") + ", " + workers + ", " + get("router");
}

/// ComparedRun::mode and ::time_scale from the identity (see there).
void readTimeScale(const json& identity, ComparedRun& run) {
  if (!identity.is_object()) return;
  if (const auto it = identity.find("mode"); it != identity.end() && it->is_string()) {
    run.mode = it->get<std::string>();
  }
  if (run.mode == "offline") run.time_scale = 1.0;
  const auto it = identity.find("server_speedup_ratios");
  if (run.mode != "live" || it == identity.end() || !it->is_array()) return;
  std::vector<std::optional<double>> ratios;
  for (const json& r : *it) {
    ratios.push_back(r.is_number() ? std::optional(r.get<double>()) : std::nullopt);
  }
  run.time_scale = commonSpeedupRatio(ratios);
  if (run.time_scale == 0.0) run.time_scale.reset();  // servers that do not wait: no model time
}

std::string describeScale(const ComparedRun& r) {
  if (r.mode == "offline") return "offline, model time";
  if (!r.time_scale) return (r.mode.empty() ? "no identity" : r.mode) + ", unknown time scale";
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%g", *r.time_scale);
  return r.mode + ", wall clock against servers at speedup " + ratio + ": x " + ratio +
         " = model time";
}

/// The value of a metric: the number, the percentage of a fraction, or nullopt.
std::optional<double> shown(const CompareMetric& m, const std::optional<double>& v) {
  if (!v) return std::nullopt;
  return m.percent ? 100.0 * *v : *v;
}

std::string cell(const std::optional<double>& v, int decimals) {
  return v ? fixed(*v, decimals) : std::string("–");
}

std::optional<double> delta(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

std::optional<double> ratio(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || *a == 0.0) return std::nullopt;
  return *b / *a;
}

std::string signedCell(const std::optional<double>& v, int decimals) {
  if (!v) return "–";
  std::string s = fixed(*v, decimals);
  return (s.starts_with("-") || s.find_first_not_of("0.") == std::string::npos ? "" : "+") + s;
}

}  // namespace

const std::vector<CompareMetric>& compareMetrics() {
  static const std::vector<CompareMetric> metrics = {
      {"num_requests", "Requests", 0, false},
      {"completed_requests", "Completed", 0, false},
      {"rejected_requests", "Rejected", 0, false},
      {"cancelled_requests", "Cancelled", 0, false},
      {"failed_requests", "Failed", 0, false},
      {"duration_ms", "Duration (ms)", 1, false},
      {"request_throughput_rps", "Request throughput (req/s)", 3, false},
      {"output_throughput_tok_s", "Output token throughput (tok/s)", 2, false},
      {"total_throughput_tok_s", "Total token throughput (tok/s)", 2, false},
      {"mean_ttft_ms", "TTFT mean (ms)", 2, false},
      {"median_ttft_ms", "TTFT p50 (ms)", 2, false},
      {"p90_ttft_ms", "TTFT p90 (ms)", 2, false},
      {"p99_ttft_ms", "TTFT p99 (ms)", 2, false},
      {"mean_tpot_ms", "TPOT mean (ms)", 2, false},
      {"median_tpot_ms", "TPOT p50 (ms)", 2, false},
      {"p99_tpot_ms", "TPOT p99 (ms)", 2, false},
      {"mean_itl_ms", "ITL mean, pooled (ms)", 2, false},
      {"median_itl_ms", "ITL p50, pooled (ms)", 2, false},
      {"p99_itl_ms", "ITL p99, pooled (ms)", 2, false},
      {"mean_e2e_latency_ms", "E2E latency mean (ms)", 2, false},
      {"median_e2e_latency_ms", "E2E latency p50 (ms)", 2, false},
      {"p90_e2e_latency_ms", "E2E latency p90 (ms)", 2, false},
      {"p99_e2e_latency_ms", "E2E latency p99 (ms)", 2, false},
      {"prefix_cache_reused_ratio", "Prefix cache reuse (%)", 2, true},
      {"total_preemptions", "Preemptions", 0, false},
      {"peak_kv_usage", "Peak KV usage (%)", 2, true},
      {"goodput_completed_requests", "Goodput (good requests)", 0, false},
      {"goodput_request_throughput_rps", "Goodput (req/s)", 3, false},
  };
  return metrics;
}

Result<ComparedRun> parseComparedRun(const std::string& path, const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return reportError(path, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return reportError(path, "not a mocker report (not a JSON object)");
  for (const char* key : {"num_requests", "completed_requests", "mean_ttft_ms"}) {
    if (!j.contains(key)) {
      return reportError(path, std::string("not a mocker report (no \"") + key +
                                   "\"; write one with `mocker replay --report-json`)");
    }
  }
  ComparedRun run;
  run.path = path;
  run.name = std::filesystem::path(path).filename().string();
  if (const auto it = j.find("report_version"); it != j.end()) {
    if (!it->is_number_integer()) {
      return reportError(path, "\"report_version\" is " + it->dump() + ", not an integer");
    }
    const auto v = it->get<std::int64_t>();
    if (v < 1 || v > kReportVersion) {
      return reportError(path, "report_version " + std::to_string(v) +
                                   " is not supported (this mocker reads 1 to " +
                                   std::to_string(kReportVersion) + ")");
    }
    run.report_version = static_cast<int>(v);
  }
  for (const CompareMetric& m : compareMetrics()) {
    const auto it = j.find(m.key);
    if (it == j.end() || it->is_null()) {
      run.values.emplace_back(std::nullopt);
    } else if (it->is_number() && std::isfinite(it->get<double>())) {
      run.values.emplace_back(it->get<double>());
    } else {
      return reportError(
          path, std::string("\"") + m.key + "\" is " + it->dump() + ", not a number or null");
    }
  }
  const json identity = j.value("identity", json());
  run.label = shortLabel(identity);
  readTimeScale(identity, run);
  if (identity.is_object()) {
    for (const auto& [key, value] : identity.items()) {
      if (key == "engine_config" && value.is_object()) {
        std::string words;
        for (const auto& [k, v] : value.items()) {
          words += (words.empty() ? "" : " ") + k + "=" + textOf(v);
        }
        run.identity.emplace_back(key, words);
      } else if (value.is_array()) {
        std::string words;
        for (const json& v : value) words += (words.empty() ? "" : " ") + textOf(v);
        run.identity.emplace_back(key, words);
      } else {
        run.identity.emplace_back(key, textOf(value));
      }
    }
  }
  if (const auto it = j.find("run"); it != j.end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) run.identity.emplace_back(key, textOf(value));
  }
  // The long engine configuration last.
  std::stable_partition(run.identity.begin(), run.identity.end(),
                        [](const auto& kv) { return kv.first != "engine_config"; });
  if (run.report_version >= 2) {
    const auto q = j.find("quantiles");
    if (q == j.end() || !q->is_object()) {
      return reportError(path, "report_version 2 without a \"quantiles\" object");
    }
    for (const char* key : kQuantileKeys) {
      std::vector<double> values;
      const auto it = q->find(key);
      if (it != q->end() && !it->is_null()) {
        const std::string where = std::string("\"quantiles\".\"") + key + "\"";
        if (!it->is_array() || it->size() != kQuantilePoints) {
          return reportError(
              path, where + " is not an array of " + std::to_string(kQuantilePoints) + " numbers");
        }
        for (const json& v : *it) {
          if (!v.is_number() || !std::isfinite(v.get<double>()) ||
              (!values.empty() && v.get<double>() < values.back())) {
            return reportError(path,
                               where + " holds " + v.dump() + ": not a number in ascending order");
          }
          values.push_back(v.get<double>());
        }
      }
      run.quantiles.emplace_back(key, std::move(values));
    }
  }
  return run;
}

Result<ComparedRun> loadComparedRun(const std::string& path) {
  auto text = readTextFile(path);
  if (!text) return Error{text.error().code, text.error().message};
  return parseComparedRun(path, *text);
}

std::string formatCompareTable(const std::vector<ComparedRun>& runs) {
  const auto& metrics = compareMetrics();
  std::string out = "Runs\n";
  std::size_t name_width = 0;
  for (const ComparedRun& r : runs) name_width = std::max(name_width, displayWidth(r.name));
  for (std::size_t i = 0; i < runs.size(); ++i) {
    out += "  " + bracket(i + 1) + " " + padRight(runs[i].name, name_width) + "  " + runs[i].label +
           "\n";
  }
  out += "\n";

  // Columns: label, one value per run, then per later run the delta and the ratio vs run 1.
  std::vector<std::string> header = {"Metric"};
  for (std::size_t i = 0; i < runs.size(); ++i) header.push_back(bracket(i + 1));
  for (std::size_t i = 1; i < runs.size(); ++i) {
    header.push_back(bracket(i + 1) + "-[1]");
    header.push_back(bracket(i + 1) + "/[1]");
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t m = 0; m < metrics.size(); ++m) {
    const CompareMetric& metric = metrics[m];
    bool any = false;
    for (const ComparedRun& r : runs) any = any || r.values[m].has_value();
    // Goodput rows only when some run had SLOs.
    if (!any && std::string(metric.key).starts_with("goodput_")) continue;
    std::vector<std::string> row = {metric.label};
    const std::optional<double> first = shown(metric, runs[0].values[m]);
    for (const ComparedRun& r : runs)
      row.push_back(cell(shown(metric, r.values[m]), metric.decimals));
    for (std::size_t i = 1; i < runs.size(); ++i) {
      const std::optional<double> v = shown(metric, runs[i].values[m]);
      row.push_back(signedCell(delta(first, v), metric.decimals));
      const std::optional<double> q = ratio(first, v);
      row.push_back(q ? fixed(*q, 3) + "x" : std::string("–"));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = displayWidth(header[c]);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], displayWidth(row[c]));
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string s = padRight(cells[0], width[0]);
    for (std::size_t c = 1; c < cells.size(); ++c) s += "  " + padLeft(cells[c], width[c]);
    return s + "\n";
  };
  out += line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

std::vector<std::string> compareWarnings(const std::vector<ComparedRun>& runs) {
  std::vector<std::string> out;
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const ComparedRun& a = runs[0];
    const ComparedRun& b = runs[i];
    // Same mode and scale (two unknown scales of one mode cannot be told apart: no warning).
    if (a.mode == b.mode && a.time_scale == b.time_scale) continue;
    out.push_back("run " + std::to_string(i + 1) + " (" + b.name + ": " + describeScale(b) +
                  ") and run 1 (" + a.name + ": " + describeScale(a) +
                  ") differ in mode or time scale: their latencies are not on the same clock");
  }
  return out;
}

std::string formatCompareJson(const std::vector<ComparedRun>& runs) {
  ordered_json j;
  j["compare_version"] = 1;
  j["warnings"] = compareWarnings(runs);
  ordered_json list = ordered_json::array();
  for (const ComparedRun& r : runs) {
    ordered_json o;
    o["path"] = r.path;
    o["name"] = r.name;
    o["label"] = r.label;
    o["report_version"] = r.report_version;
    list.push_back(std::move(o));
  }
  j["runs"] = std::move(list);
  const auto orNull = [](const std::optional<double>& v) {
    return v ? ordered_json(*v) : ordered_json(nullptr);
  };
  ordered_json metrics = ordered_json::array();
  const auto& defs = compareMetrics();
  for (std::size_t m = 0; m < defs.size(); ++m) {
    ordered_json o;
    o["key"] = defs[m].key;
    o["label"] = defs[m].label;
    ordered_json values = ordered_json::array(), deltas = ordered_json::array(),
                 ratios = ordered_json::array();
    for (const ComparedRun& r : runs) {
      values.push_back(orNull(r.values[m]));
      deltas.push_back(orNull(delta(runs[0].values[m], r.values[m])));
      ratios.push_back(orNull(ratio(runs[0].values[m], r.values[m])));
    }
    o["values"] = std::move(values);
    o["delta_vs_first"] = std::move(deltas);
    o["ratio_vs_first"] = std::move(ratios);
    metrics.push_back(std::move(o));
  }
  j["metrics"] = std::move(metrics);
  return j.dump(2) + "\n";
}

std::string renderCompareHtml(const std::vector<ComparedRun>& runs) {
  const std::string title = "mocker compare";
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
          title + "</title>\n" + pageHead() + "</head>\n<body>\n<h1>" + title + "</h1>\n";
  for (const std::string& w : compareWarnings(runs)) {
    html += "<p class=\"warning\">Warning: " + escapeHtml(w) + "</p>\n";
  }
  html += "<h2>Runs</h2>\n<table>\n<tr><th>run</th><th>report</th><th>identity</th></tr>\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const ComparedRun& r = runs[i];
    html += "<tr><td>" + bracket(i + 1) + "</td><td>" + escapeHtml(r.path) + "<br>" +
            escapeHtml(r.label) + ", report_version " + std::to_string(r.report_version) +
            "</td><td>";
    if (r.identity.empty()) html += "no identity in this report";
    for (const auto& [key, value] : r.identity) {
      html += "<b>" + escapeHtml(key) + "</b> " + escapeHtml(value) + "<br>";
    }
    html += "</td></tr>\n";
  }
  html += "</table>\n<h2>Metrics</h2>\n<pre>" + escapeHtml(formatCompareTable(runs)) + "</pre>\n";
  html += "<h2>Latency distributions</h2>\n";
  const std::pair<const char*, const char*> plots[] = {
      {"ttft_ms", "TTFT CDF"},
      {"tpot_ms", "TPOT CDF (per request)"},
      {"itl_ms", "Inter-token latency CDF (pooled)"},
      {"e2e_latency_ms", "End-to-end latency CDF"},
  };
  std::string missing;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].quantiles.empty()) {
      missing += (missing.empty() ? "" : ", ") + (bracket(i + 1) + " ") + runs[i].name;
    }
  }
  if (!missing.empty()) {
    html += "<p>Not plotted (report_version 1, no quantiles): " + escapeHtml(missing) + "</p>\n";
  }
  for (const auto& [key, name] : plots) {
    Plot p{.id = std::string("cmp_") + key,
           .title = std::string(name) + " (p0..p100 of each run)",
           .x_label = key == std::string("ttft_ms")          ? "time to first token"
                      : key == std::string("e2e_latency_ms") ? "request latency"
                      : key == std::string("itl_ms")         ? "gap between two tokens"
                                                             : "time per output token",
           .y_label = key == std::string("itl_ms") ? "fraction of gaps" : "fraction of requests",
           .y_max = 1.0,
           .x_is_ms = true};
    // Log x when some run's positive values span a long tail; values of 0 (ITL: tokens of one
    // pass) have no place on it, so they are counted in the legend and left out.
    bool log_x = false;
    for (const ComparedRun& r : runs) {
      for (const auto& [k, q] : r.quantiles) {
        if (k != key) continue;
        std::vector<double> positive;
        std::copy_if(q.begin(), q.end(), std::back_inserter(positive),
                     [](double v) { return v > 0.0; });
        log_x = log_x || wantsLogX(positive);
      }
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      for (const auto& [k, q] : runs[i].quantiles) {
        if (k != key || q.empty()) continue;
        const auto zeros = std::count(q.begin(), q.end(), 0.0);
        const std::string zero_note =
            log_x && zeros > 0 ? "; about " + std::to_string(std::max<long>(zeros - 1, 1)) +
                                     " % of the values are 0, not drawn on the log axis"
                               : "";
        PlotSeries s{
            .name = bracket(i + 1) + " " + runs[i].name + " (" + runs[i].label + ")" + zero_note,
            .points = {}};
        for (std::size_t k2 = 0; k2 < q.size(); ++k2) {
          s.points.emplace_back(q[k2], static_cast<double>(k2) / 100.0);
        }
        p.series.push_back(std::move(s));
      }
    }
    p.log_x = log_x;
    html += renderSvgPlot(p);
  }
  html += pageCheckScript();
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace mocker::replay
