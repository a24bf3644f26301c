// Replays the checked-in fuzz corpora through the fuzz checks in the ordinary build, so every
// crash the fuzzers ever found (and every seed) stays a regression test without clang or
// libFuzzer. A check that fails aborts this test with the property it broke.
//
// MOCKER_FUZZ_CORPUS_ROOT=DIR replays DIR/<target>/ instead (e.g. a fuzzer's working corpora
// through the ASan build: tests/fuzz/README.md).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fuzz/fuzz_checks.h"

namespace mocker::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzCorpusTest : public ::testing::TestWithParam<FuzzTarget> {};

TEST_P(FuzzCorpusTest, EveryCorpusInputPassesTheCheck) {
  const char* root = std::getenv("MOCKER_FUZZ_CORPUS_ROOT");
  const fs::path dir =
      (root != nullptr ? fs::path(root)
                       : fs::path(MOCKER_SOURCE_DIR_FOR_TEST) / "tests/fuzz/corpus") /
      std::string(GetParam().name);
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing (every target keeps its seeds)";
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " has no inputs";
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const std::vector<std::uint8_t> bytes = readFile(file);
    GetParam().check(bytes);
  }
}

/// "client_fuzz" → "client".
std::string testName(const ::testing::TestParamInfo<FuzzTarget>& target) {
  std::string name(target.param.name);
  return name.substr(0, name.rfind("_fuzz"));
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpusTest,
                         ::testing::ValuesIn(fuzzTargets().begin(), fuzzTargets().end()), testName);

}  // namespace
}  // namespace mocker::fuzz
