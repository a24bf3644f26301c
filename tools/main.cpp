#include <iostream>
#include <string>
#include <vector>

#include "tools/cli.h"

int main(int argc, char** argv) {
  return mocker::tools::runCli(std::vector<std::string>(argv, argv + argc), std::cout, std::cerr);
}
