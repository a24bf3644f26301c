// Calibration profiles (docs/calibration.md, "Profiles"): the TOML file `mocker calibrate`
// writes — a comment header with what it was fitted on, then the fitted [engine] keys
// ([engine] and [engine.roofline] tables) — which `mocker replay --config` and `mocker serve
// --config` accept as is. The client-overhead terms are not engine settings: they are written as
// comment lines "# client.overhead_per_request_ms = 12.5" that the engine's configuration
// ignores and `mocker calibrate --evaluate` reads back.
//
// Pure functions; thread-compatible; byte-identical output for the same input.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "service/config.h"
#include "tools/calibrate/fit.h"

namespace mocker::calibrate {

/// What the header says about the fit.
struct ProfileHeader {
  std::string generator;  ///< "mocker calibrate 0.1.0 (git abc123)"
  /// One entry per fit run: "name (N requests, trace sha256 …)".
  std::vector<std::string> fitted_on;
  std::string fit_summary;  ///< "loss 4.21 % after 180 evaluations (sbplx, seed 1, maxeval …)"
  std::vector<std::string> notes;
};

/// The profile text. `fixed` settings ([engine] key without "engine.", value text as TOML, e.g.
/// {"timing_model", "\"roofline\""}) come first, then each parameter with its doc as a comment.
std::string formatProfile(const ProfileHeader& header,
                          std::span<const std::pair<std::string, std::string>> fixed,
                          std::span<const FitParameter> params, std::span<const double> values);

/// A profile read back: its text (for service::parseServiceConfigOver) and its client terms.
struct LoadedProfile {
  std::string path;
  std::string text;
  ClientOverhead client{};
};

/// Parses the client-overhead comment lines of a profile (a malformed one names its line).
Result<ClientOverhead> parseClientOverhead(std::string_view text, std::string_view source);

/// Reads a profile file (readTextFile + parseClientOverhead).
Result<LoadedProfile> loadProfile(const std::string& path);

/// Applies a profile's [engine] keys over `config` (its errors name path:line:col).
Status applyProfile(const LoadedProfile& profile, service::ServiceConfig& config);

}  // namespace mocker::calibrate
