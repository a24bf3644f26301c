// `mocker compare A.json B.json [C.json …] [--html FILE] [--json FILE]`: puts the JSON reports of
// `mocker replay --report-json` side by side (tools/replay/compare.h): the table on stdout, the
// comparison page and a machine-readable comparison on request. Exit codes: 0 written, 1 a
// report that cannot be read or is not a supported mocker report, or an output that cannot be
// written, 2 usage error (fewer than two reports).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct CompareCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::string> reports;
  std::string html;
  std::string json;
};

/// Registers the `compare` subcommand on `app`. `command` must outlive parsing.
void addCompareCommand(CLI::App& app, CompareCommand& command);

/// Reads the reports and writes the outputs; the table to `out`, errors to `err`.
int runCompareCommand(const CompareCommand& command, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
