// `mocker stats [ENDPOINT]`: one `stats` round trip to a running `mocker serve` (the submit
// socket; protocol/README.md, `stats_reply`) printed for a human — what the service runs, each
// DP rank's queue and KV cache, routes, pass timing — or, with --json, as one JSON object with the
// reply's fields. Exit codes: 0 answered, 1 nothing listening / no answer within --timeout-s /
// an error reply, 2 usage error.
#pragma once

#include <ostream>
#include <string>

#include "protocol/client.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct StatsCommand {
  CLI::App* cmd = nullptr;
  std::string endpoint = "tcp://127.0.0.1:5555";  ///< the service's submit ROUTER
  bool json = false;
  double timeout_s = 5.0;
  std::string curve_server_key_file;
  std::string curve_secret_key_file;
};

/// Registers the `stats` subcommand on `app`. `command` must outlive parsing.
void addStatsCommand(CLI::App& app, StatsCommand& command);

/// Asks, prints the reply on `out` (diagnostics to `err`). Exit code as above.
int runStatsCommand(const StatsCommand& command, std::ostream& out, std::ostream& err);

/// The human form: one line for the engine, one per rank, one for routes, one for timing.
std::string formatStatsText(const protocol::StatsReply& reply);

/// The JSON form: {"engine": {…}|null, "ranks": [{…}], "routes", "client_entries"|null,
/// "timing": {…}|null} (the reply's own field names; `clients`, the sender's own routes, left
/// out: a one-shot client has none).
std::string formatStatsJson(const protocol::StatsReply& reply);

}  // namespace mocker::tools
