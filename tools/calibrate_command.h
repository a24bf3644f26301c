// `mocker calibrate RUN… [options]`: fits the timing model's coefficients (and the client-side
// overhead) to recorded runs of a real engine, scores the fit, and writes a profile that
// `mocker replay --config` / `mocker serve --config` accept (docs/calibration.md;
// tools/calibrate/README.md). Modes:
//   * fit (default): fit on every RUN but the --holdout ones, score both sets, write the profile;
//   * --leave-one-out: for each RUN, fit on the others and score it (held-out table);
//   * --evaluate PROFILE: score PROFILE on every RUN, no fit;
//   * --passes CSV --deployment CONFIG: fit the roofline coefficients to measured forward passes
//     (tools/calibrate/pass_fit.h), no RUN.
// Exit codes: 0 done, 1 bad input (an unreadable or inconsistent run, a profile the
// configuration rejects, an output that cannot be written), 2 usage error.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct CalibrateCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::string> runs;
  std::vector<std::string> holdout;
  bool leave_one_out = false;
  std::string evaluate;
  std::string output;
  std::string html;
  bool json = false;
  std::vector<std::string> params;
  std::string algorithm = "neldermead";
  std::uint32_t max_evaluations = 200;
  std::uint64_t seed = 1;
  std::uint32_t starts = 4;
  /// --prior-weight; unset = calibrate::kDefaultPriorWeight (tools/calibrate/fit.h).
  std::optional<double> prior_weight;
  std::uint32_t trace_block_size = 512;
  std::string passes;      ///< per-pass CSV (pass mode)
  std::string deployment;  ///< mocker config (TOML) naming the passes' model, GPU, TP
  bool progress = true;
};

/// Registers the `calibrate` subcommand on `app`. `command` must outlive parsing.
void addCalibrateCommand(CLI::App& app, CalibrateCommand& command);

/// Runs the parsed command: tables (or JSON) to `out`; progress (only when `err` is std::cerr on
/// a terminal), warnings and errors to `err`.
int runCalibrateCommand(const CalibrateCommand& command, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
