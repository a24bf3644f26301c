// `mocker serve`: runs the live service (service/server.h) with the shared configuration flags
// (tools/serve_flags.h), prints the endpoints it listens on, and stops cleanly on SIGINT/SIGTERM.
//
// Call from the main thread.
#pragma once

#include <ostream>
#include <string>

#include "tools/serve_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct ServeCommand {
  CLI::App* cmd = nullptr;
  ServeFlags flags;
  bool drain = false;
  std::string fleet_file;  ///< --fleet-file: the fleet manifest, written after binding
};

/// Registers the `serve` subcommand on `app`. `command` must outlive parsing.
void addServeCommand(CLI::App& app, ServeCommand& command);

/// Runs the service until a signal arrives. Exit code: 0 clean stop, 2 configuration error,
/// 1 runtime error (e.g. an endpoint cannot be bound).
int runServeCommand(const ServeCommand& command, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
