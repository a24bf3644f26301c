// The `mocker` command line: git-style subcommands over the service and tool libraries.
// tools/main.cpp is a one-line wrapper so that tests can drive the CLI in-process.
//
// Call from the main thread.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mocker::tools {

/// Version string printed by `mocker --version` ("mocker 0.1.0").
std::string versionString();

/// Runs the CLI with `args` (args[0] is the program name). Help, version and usage errors are
/// written to `out` / `err`; returns the process exit code (0 ok, 1 runtime error, 2 usage).
int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
