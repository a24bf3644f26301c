// `mocker keygen NAME [--force]`: writes a new CURVE key pair for `mocker serve` or one of its
// clients (service/README.md, "Security"): NAME.key holds the Z85 secret key (mode 0600),
// NAME.pub the Z85 public key (0644), one line each. Existing files are never overwritten
// unless --force. Prints the public key. Exit codes: 0 written, 1 error (file exists, I/O),
// 2 usage error.
#pragma once

#include <ostream>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct KeygenCommand {
  CLI::App* cmd = nullptr;
  std::string name;  ///< path prefix: NAME.key, NAME.pub
  bool force = false;
};

/// Registers the `keygen` subcommand on `app`. `command` must outlive parsing.
void addKeygenCommand(CLI::App& app, KeygenCommand& command);

/// Writes the key pair; the public key (and the file names) to `out`, errors to `err`.
int runKeygenCommand(const KeygenCommand& command, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
