#include "tools/cli.h"

#include <gtest/gtest.h>

#include <sstream>

namespace mocker::tools {
namespace {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

CliRun run(std::vector<std::string> args) {
  args.insert(args.begin(), "mocker");
  std::ostringstream out, err;
  const int code = runCli(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(CliTest, VersionPrintsProjectVersion) {
  const auto r = run({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, versionString() + "\n");
  EXPECT_EQ(versionString(), std::string("mocker ") + MOCKER_VERSION_FOR_TEST);
}

TEST(CliTest, HelpListsUsage) {
  const auto r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Usage: mocker"), std::string::npos);
}

TEST(CliTest, UnknownOptionIsAUsageError) {
  const auto r = run({"--no-such-flag"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos);
}

}  // namespace
}  // namespace mocker::tools
