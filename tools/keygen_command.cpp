#include "tools/keygen_command.h"

#include <CLI/CLI.hpp>

#include "net/security.h"

namespace mocker::tools {

void addKeygenCommand(CLI::App& app, KeygenCommand& command) {
  command.cmd = app.add_subcommand(
      "keygen", "Write a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub (public)");
  command.cmd->add_option("NAME", command.name, "path prefix of the two files")->required();
  command.cmd->add_flag("--force", command.force, "overwrite existing files");
  command.cmd->footer(
      "Give the server NAME.key ([security] server_secret_key_file) and its clients NAME.pub "
      "(--curve-server-key-file); put each client's .pub on the server's allow-list "
      "([security] client_public_key_files).");
}

int runKeygenCommand(const KeygenCommand& command, std::ostream& out, std::ostream& err) {
  auto written = net::writeKeyPair(command.name, command.force);
  if (!written) {
    err << "mocker keygen: " << written.error().message << "\n";
    return 1;
  }
  out << "public key " << *written << "\n"
      << "wrote " << command.name << ".key (secret, mode 0600) and " << command.name << ".pub\n";
  return 0;
}

}  // namespace mocker::tools
