#include "tools/calibrate/profile.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/lines.h"
#include "tools/replay/workload.h"

namespace mocker::calibrate {
namespace {

std::string numberText(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // TOML floats need a fraction or exponent to stay floats.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

/// "roofline.gemm_efficiency" → ("engine.roofline", "gemm_efficiency").
std::pair<std::string, std::string> tableAndKey(const std::string& key) {
  const std::size_t dot = key.rfind('.');
  if (dot == std::string::npos) return {"engine", key};
  return {"engine." + key.substr(0, dot), key.substr(dot + 1)};
}

}  // namespace

std::string formatProfile(const ProfileHeader& header,
                          std::span<const std::pair<std::string, std::string>> fixed,
                          std::span<const FitParameter> params, std::span<const double> values) {
  std::string out = "# mocker calibration profile, written by " + header.generator + "\n";
  out += "# Use: mocker replay TRACE --config THIS_FILE (with the deployment's model and GPU)\n";
  out += "# Fitted on:\n";
  for (const std::string& run : header.fitted_on) out += "#   " + run + "\n";
  out += "# Fit: " + header.fit_summary + "\n";
  for (const std::string& note : header.notes) out += "# " + note + "\n";
  std::string client;
  // Tables in first-use order; [engine] first.
  std::vector<std::string> order = {"engine"};
  std::map<std::string, std::string> body;
  for (const auto& [key, text] : fixed) {
    const auto [table, name] = tableAndKey(key);
    if (!body.contains(table) && table != "engine") order.push_back(table);
    body[table] += name + " = " + text + "\n";
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const FitParameter& p = params[i];
    if (p.key == kClientPerRequestKey || p.key == kClientPerTokenKey) {
      client += "# " + p.key + " = " + numberText(values[i]) + "  # " + p.doc + "\n";
      continue;
    }
    const auto [table, name] = tableAndKey(p.key);
    if (!body.contains(table) && table != "engine") order.push_back(table);
    body[table] += "# " + p.doc + "\n" + name + " = " + numberText(values[i]) + "\n";
  }
  if (!client.empty()) {
    out += "# Client-visible overhead (not an engine setting; mocker calibrate --evaluate reads\n";
    out += "# these lines, mocker replay and serve report engine-side latencies):\n" + client;
  }
  for (const std::string& table : order) {
    if (!body.contains(table)) continue;
    out += "\n[" + table + "]\n" + body[table];
  }
  return out;
}

Result<ClientOverhead> parseClientOverhead(std::string_view text, std::string_view source) {
  ClientOverhead c;
  for (auto [line, line_no] : Lines(text)) {
    if (!line.starts_with("# client.")) continue;
    line.remove_prefix(2);
    const std::size_t eq = line.find(" = ");
    const std::string_view key = line.substr(0, eq);
    double* target = key == kClientPerRequestKey ? &c.per_request_ms
                     : key == kClientPerTokenKey ? &c.per_token_ms
                                                 : nullptr;
    const auto bad = [&](const std::string& what) {
      return invalidArgument(std::string(source) + " line " + std::to_string(line_no) + ": " +
                             std::string(key) + ": " + what);
    };
    if (target == nullptr) return bad("unknown client-overhead key");
    if (eq == std::string_view::npos) return bad("expected 'KEY = VALUE'");
    std::string_view value = line.substr(eq + 3);
    value = value.substr(0, value.find(' '));
    double v = 0.0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v) || v < 0) {
      std::string what = "'";
      what.append(value);
      what += "' is not a finite number >= 0";
      return bad(what);
    }
    *target = v;
  }
  return c;
}

Result<LoadedProfile> loadProfile(const std::string& path) {
  Result<std::string> text = replay::readTextFile(path);
  if (!text) return text.error();
  Result<ClientOverhead> client = parseClientOverhead(*text, path);
  if (!client) return client.error();
  return LoadedProfile{.path = path, .text = std::move(*text), .client = *client};
}

Status applyProfile(const LoadedProfile& profile, service::ServiceConfig& config) {
  service::KeyOrigins origins;
  Result<service::ServiceConfig> layered =
      service::parseServiceConfigOver(config, profile.text, profile.path, origins);
  if (!layered) return layered.error();
  config = std::move(*layered);
  return {};
}

}  // namespace mocker::calibrate
