// The worked LoRA schedule of docs/engine.md ("A worked LoRA schedule"): the documented
// `mocker replay` command on data/traces/lora_schedule_sample.jsonl, and every request's admission,
// first-token and end times as the table there derives them pass by pass.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "replay_test_util.h"
#include "tests/tools/cli_run.h"

namespace mocker::tools {
namespace {

namespace fs = std::filesystem;
using cli_test::runMocker;
using replay::testing::sampleTrace;

/// (first admission, first token, end) of one request, ms.
struct Times {
  double admit = 0.0;
  double first_token = 0.0;
  double end = 0.0;
  friend bool operator==(const Times&, const Times&) = default;
};

void PrintTo(const Times& t, std::ostream* os) {
  *os << "{admit " << t.admit << ", first token " << t.first_token << ", end " << t.end << "}";
}

/// Runs the documented command with `max_loras` / `max_cpu_loras` and returns each request's
/// times in trace order (A1, B, A2, C, A3).
std::vector<Times> runSchedule(const std::string& max_loras, const std::string& max_cpu_loras) {
  const std::string trace = sampleTrace("lora_schedule_sample.jsonl");
  const fs::path out =
      fs::temp_directory_path() / ("mocker_lora_schedule_" + max_loras + "_" + max_cpu_loras + "_" +
                                   std::to_string(::getpid()) + ".jsonl");
  const auto r = runMocker({"replay",
                            trace,
                            "--trace-block-size",
                            "16",
                            "--block-size",
                            "16",
                            "--num-gpu-blocks",
                            "64",
                            "--timing-model",
                            "fixed",
                            "--fixed-prefill-ms",
                            "10",
                            "--fixed-decode-ms",
                            "5",
                            "--max-loras",
                            max_loras,
                            "--max-cpu-loras",
                            max_cpu_loras,
                            "--lora-load-ms",
                            "7",
                            "--no-progress",
                            "--requests-jsonl",
                            out.string()});
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<Times> times;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["terminal_status"], "completed") << line;
    times.push_back({j["first_admit_ms"].get<double>(), j["first_token_ms"].get<double>(),
                     j["terminal_time_ms"].get<double>()});
  }
  fs::remove(out);
  fs::remove(out.string() + ".run.json");
  return times;
}

TEST(ReplayLoraTest, MaxLorasOneFollowsTheDocumentedPasses) {
  MOCKER_SKIP_UNLESS_SAMPLE_TRACE(sampleTrace("lora_schedule_sample.jsonl"));
  // Pass 1 (0 → 22: 10 prefill + 5 sampling + 7 loading a): A1, A2, C; B skipped. Pass 2 (→ 27)
  // decodes them. Pass 3 (27 → 49): B, loading b (evicts a). Pass 4 (→ 54): B decodes, A3 skipped.
  // Pass 5 (54 → 76): A3, loading a again. Pass 6 (→ 81).
  EXPECT_EQ(
      runSchedule("1", "none"),
      (std::vector<Times>{{0, 22, 27}, {27, 49, 54}, {0, 22, 27}, {0, 22, 27}, {54, 76, 81}}));
}

TEST(ReplayLoraTest, TwoResidentAdaptersSpareTheReload) {
  MOCKER_SKIP_UNLESS_SAMPLE_TRACE(sampleTrace("lora_schedule_sample.jsonl"));
  // As above, but a stays resident while b loads: pass 5 is 54 → 69.
  EXPECT_EQ(
      runSchedule("1", "2"),
      (std::vector<Times>{{0, 22, 27}, {27, 49, 54}, {0, 22, 27}, {0, 22, 27}, {54, 69, 74}}));
}

TEST(ReplayLoraTest, MaxLorasTwoRunsBothAdaptersInTheFirstPass) {
  MOCKER_SKIP_UNLESS_SAMPLE_TRACE(sampleTrace("lora_schedule_sample.jsonl"));
  // Pass 1 (0 → 29: two loads), pass 2 (→ 34); A3 at 34 → 49 with a resident.
  EXPECT_EQ(runSchedule("2", "none"),
            (std::vector<Times>{{0, 29, 34}, {0, 29, 34}, {0, 29, 34}, {0, 29, 34}, {34, 49, 54}}));
}

}  // namespace
}  // namespace mocker::tools
