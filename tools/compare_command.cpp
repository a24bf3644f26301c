#include "tools/compare_command.h"

#include <CLI/CLI.hpp>

#include <fstream>

#include "tools/replay/compare.h"

namespace mocker::tools {

void addCompareCommand(CLI::App& app, CompareCommand& command) {
  command.cmd = app.add_subcommand(
      "compare",
      "Compare replay reports (--report-json files) side by side: metrics, deltas and ratios "
      "vs the first, overlaid latency CDFs");
  command.cmd->add_option("REPORT", command.reports, "JSON reports of `mocker replay`, 2 or more")
      ->required();
  command.cmd->add_option("--html", command.html,
                          "write a self-contained comparison page (CDFs, table, identities)");
  command.cmd->add_option("--json", command.json, "write the comparison as JSON");
  command.cmd->footer(
      "Run 1 is the baseline: for every later run the table shows value - run 1 and value / run "
      "1. Overlaid CDFs need reports with quantiles (report_version 2, mocker replay of this "
      "version); older reports are compared without them.");
}

namespace {

bool writeOutput(const std::string& path, const std::string& text, std::ostream& err) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) {
    file << text;
    file.close();
  }
  if (!file) {
    err << "mocker compare: cannot write '" << path << "'\n";
    return false;
  }
  return true;
}

}  // namespace

int runCompareCommand(const CompareCommand& command, std::ostream& out, std::ostream& err) {
  if (command.reports.size() < 2) {
    err << "mocker compare: give at least two reports (got " << command.reports.size() << ")\n";
    return 2;
  }
  std::vector<replay::ComparedRun> runs;
  for (const std::string& path : command.reports) {
    auto run = replay::loadComparedRun(path);
    if (!run) {
      err << "mocker compare: " << run.error().message << "\n";
      return 1;
    }
    runs.push_back(std::move(*run));
  }
  for (const std::string& w : replay::compareWarnings(runs)) {
    err << "mocker compare: warning: " << w << "\n";
  }
  out << replay::formatCompareTable(runs);
  bool ok = true;
  if (!command.html.empty()) {
    ok = writeOutput(command.html, replay::renderCompareHtml(runs), err) && ok;
  }
  if (!command.json.empty()) {
    ok = writeOutput(command.json, replay::formatCompareJson(runs), err) && ok;
  }
  return ok ? 0 : 1;
}

}  // namespace mocker::tools
