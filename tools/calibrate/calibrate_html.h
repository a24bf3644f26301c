// The calibration report page (`mocker calibrate --html FILE`): the score tables and, per run,
// predicted against recorded per-request E2E (dots, with the y = x line) and the recorded and
// predicted E2E and TTFT CDFs — in the style of the replay report (tools/replay/svg_plot.h: no
// external resources, plots without JavaScript, one check script for the browser test).
//
// Pure function; thread-compatible. Deterministic for the same input.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tools/calibrate/fit.h"
#include "tools/calibrate/score.h"

namespace mocker::calibrate {

/// One scored run with its simulation, as the page shows it.
struct PlottedRun {
  const RecordedRun* run = nullptr;
  RunEvaluation evaluation;
  std::string role;  ///< "fit", "held out", "evaluated"
};

std::string renderCalibrationHtml(const std::string& title, std::span<const ScoreTable> tables,
                                  std::span<const PlottedRun> runs,
                                  const std::string& profile_text);

}  // namespace mocker::calibrate
