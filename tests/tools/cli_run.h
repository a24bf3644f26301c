// `mocker ARGS…` run through the in-process CLI (tools/cli.h) for the tests: the exit code and
// what it printed on stdout and stderr.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/cli.h"

namespace mocker::tools::cli_test {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

/// `args` without the program name.
inline CliRun runMocker(std::vector<std::string> args) {
  args.insert(args.begin(), "mocker");
  std::ostringstream out, err;
  const int code = runCli(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace mocker::tools::cli_test
