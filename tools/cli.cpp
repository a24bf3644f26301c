#include "tools/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>

namespace mocker::tools {

std::string versionString() { return std::string("mocker ") + MOCKER_VERSION; }

int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "mocker — a GPU-free stand-in for an LLM inference engine (vLLM / SGLang / "
      "TRT-LLM scheduling, paged KV cache, KV events) over ZeroMQ",
      "mocker"};
  app.set_version_flag("--version", versionString());
  app.require_subcommand(0, 1);
  app.footer("Run `mocker <command> --help` for a command's options.");

  std::vector<std::string> argv_rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  std::reverse(argv_rest.begin(), argv_rest.end());
  try {
    app.parse(argv_rest);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err);
  }
  if (app.get_subcommands().empty()) {
    out << app.help();
    return 0;
  }
  return 0;
}

}  // namespace mocker::tools
