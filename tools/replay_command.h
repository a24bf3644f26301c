// `mocker replay TRACE [options]`: loads a Mooncake JSONL or Azure CSV trace (or generates a
// synthetic workload), replays it and prints the AIPerf-style report; optionally writes the JSON
// report, per-request JSONL timelines and a self-contained HTML page
// (docs/traces.md, docs/metrics.md; tools/replay/README.md).
//
// Modes: `offline` (default; in-process engines on a virtual clock, tools/replay/offline_replay.h)
// and `live` (`--mode live --connect tcp://HOST:PORT …`: a wall-clock load driver against running
// `mocker serve` instances, tools/replay/live_replay.h). Offline engine settings come from the
// shared serve flags (--config FILE and one flag per [engine] key); live mode ignores them (the
// servers have their own configuration).
//
//   ReplayCommand replay(app);            // registers the subcommand before app.parse()
//   if (replay.parsed()) return replay.run(out, err);
//
// The pieces: tools/replay_flags.h (the flags and their registration), tools/replay_aliases.h
// (the other spellings folded into them), tools/replay_plan.h (flags → offline plan | live plan |
// usage error), tools/replay_run.h (a plan's run → the footer, warnings and legend the report
// prints); this file reads the workload, prints the report and writes the output files.
//
// Call from the main thread. Not copyable or movable: CLI11 holds pointers into it.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/result.h"
#include "tools/replay_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

class ReplayCommand final {
 public:
  /// Registers the `replay` subcommand and all its flags on `app`.
  explicit ReplayCommand(CLI::App& app);
  ReplayCommand(const ReplayCommand&) = delete;
  ReplayCommand& operator=(const ReplayCommand&) = delete;

  /// True when the command line selected `replay`.
  bool parsed() const;

  /// Runs the parsed command. Returns the exit code: 0 ok, 1 bad input or runtime error
  /// (unreadable/malformed trace, an output path that cannot be written — checked before the
  /// run —, or a run in which every request was rejected), 2 configuration/usage error. The
  /// report table goes to `out`; errors, warnings and the progress bar (only when `err` is
  /// std::cerr on a terminal and the run lasts more than a second) go to `err`. `command_line`
  /// (argv, program name first) is recorded in the reports' run identity.
  int run(std::ostream& out, std::ostream& err, const std::vector<std::string>& command_line = {});

 private:
  CLI::App* cmd_ = nullptr;
  ReplayFlags flags_;
};

}  // namespace mocker::tools
