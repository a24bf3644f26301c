#include "tools/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "engine/config.h"
#include "service/config.h"
#include "tools/calibrate_command.h"
#include "tools/cli_options.h"
#include "tools/compare_command.h"
#include "tools/gateway_command.h"
#include "tools/index_command.h"
#include "tools/keygen_command.h"
#include "tools/replay_command.h"
#include "tools/serve_command.h"
#include "tools/serve_flags.h"
#include "tools/stats_command.h"
#include "tools/submit_command.h"

namespace mocker::tools {

std::string versionString() { return std::string("mocker ") + MOCKER_VERSION; }

int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "mocker — a GPU-free stand-in for an LLM inference engine (vLLM / SGLang / "
      "TRT-LLM scheduling, paged KV cache, KV events) over ZeroMQ",
      "mocker"};
  // Before any subcommand is added: each copies its parent's formatter.
  app.formatter(std::make_shared<HelpFormatter>());
  app.set_version_flag("--version", versionString());
  app.require_subcommand(0, 1);
  app.footer("Run `mocker <command> --help` for a command's options.");

  // `mocker config`: resolve defaults → --config file → flags, validate, optionally dump.
  CLI::App* config_cmd = app.add_subcommand(
      "config", "Validate the effective configuration (file + flags); --dump prints it as TOML");
  bool dump = false;
  config_cmd->add_flag("--dump", dump,
                       "print the effective configuration as TOML (every key; block_size "
                       "resolved to the engine's default when it is 0)");
  ServeFlags config_flags;
  addServeFlags(*config_cmd, config_flags);

  ServeCommand serve;
  addServeCommand(app, serve);
  // `mocker replay`: trace / synthetic replay with reports (tools/replay_command.h).
  ReplayCommand replay(app);
  SubmitCommand submit;
  addSubmitCommand(app, submit);
  // `mocker index`: KV-event subscriber and prefix index (tools/index_command.h).
  IndexCommand index(app);
  KeygenCommand keygen;
  addKeygenCommand(app, keygen);
  CompareCommand compare;
  addCompareCommand(app, compare);
  // `mocker gateway`: the OpenAI HTTP API in front of workers (tools/gateway_command.h).
  GatewayCommand gateway;
  addGatewayCommand(app, gateway);
  CalibrateCommand calibrate;
  addCalibrateCommand(app, calibrate);
  StatsCommand stats;
  addStatsCommand(app, stats);

  std::vector<std::string> argv_rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  std::reverse(argv_rest.begin(), argv_rest.end());
  try {
    app.parse(argv_rest);
  } catch (const CLI::ParseError& e) {
    // Help and version exit 0; every other parse error is a usage error (2), whatever CLI11's
    // own code for it (105 for a failed validator, 109 for extras, ...).
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    err << parseErrorMessage(app, e);
    return 2;
  }
  if (app.get_subcommands().empty()) {
    out << app.help();
    return 0;
  }
  if (serve.cmd->parsed()) return runServeCommand(serve, out, err);
  if (replay.parsed()) return replay.run(out, err, args);
  if (submit.cmd->parsed()) return runSubmitCommand(submit, out, err);
  if (index.parsed()) return index.run(out, err);
  if (keygen.cmd->parsed()) return runKeygenCommand(keygen, out, err);
  if (compare.cmd->parsed()) return runCompareCommand(compare, out, err);
  if (gateway.cmd->parsed()) return runGatewayCommand(gateway, out, err);
  if (calibrate.cmd->parsed()) return runCalibrateCommand(calibrate, out, err);
  if (stats.cmd->parsed()) return runStatsCommand(stats, out, err);
  if (config_cmd->parsed()) {
    const auto config = resolveServeConfig(config_flags);
    if (!config) {
      err << "mocker: configuration error: " << config.error().message << "\n";
      return 2;
    }
    if (dump) {
      // Effective values: block_size 0 means "the engine's default", which the dump spells out
      // (the file it makes configures the same engine).
      service::ServiceConfig effective = *config;
      effective.engine.block_size = engine::effectiveBlockSize(effective.engine);
      out << service::dumpServiceConfig(effective);
    } else {
      out << "configuration OK\n";
    }
    return 0;
  }
  return 0;
}

}  // namespace mocker::tools
