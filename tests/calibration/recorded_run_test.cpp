// Recorded runs: the directory format and the requests JSONL, and every bad input named by file,
// line and field.
#include "tools/calibrate/recorded_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/calibration/calibrate_test_util.h"
#include "tools/calibrate/simulate.h"
#include "tools/replay/mooncake_trace.h"

namespace mocker::calibrate {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr const char* kTrace =
    "{\"timestamp\":0,\"input_length\":20,\"output_length\":3,\"hash_ids\":[1,2],"
    "\"request_id\":\"a\"}\n"
    "{\"timestamp\":5.5,\"input_length\":16,\"output_length\":4,\"hash_ids\":[3],"
    "\"request_id\":\"b\"}\n";

replay::Workload trace() {
  Result<replay::Workload> w = replay::parseMooncakeTrace(kTrace, {.trace_block_size = 16});
  EXPECT_TRUE(w.has_value());
  return *w;
}

TEST(GroundTruthCsvTest, ParsesRowsInTraceOrder) {
  const auto r = parseGroundTruthCsv(
      "request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms,extra\n"
      "a,0.0,20,3,10.5,30,x\n"
      "b,5.5,16,4,7,27.25,y\n",
      "gt.csv", trace());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].key, "request_2#0");
  EXPECT_DOUBLE_EQ((*r)[1].e2e_ms, 27.25);
  EXPECT_EQ((*r)[1].output_length, 4u);
}

struct BadCsv {
  const char* text;
  const char* expected;
};

class GroundTruthErrorTest : public ::testing::TestWithParam<BadCsv> {};

TEST_P(GroundTruthErrorTest, NamesFileLineAndField) {
  const auto r = parseGroundTruthCsv(GetParam().text, "run/ground_truth.csv", trace());
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message,
              AllOf(HasSubstr("run/ground_truth.csv"), HasSubstr(GetParam().expected)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GroundTruthErrorTest,
    ::testing::Values(BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms\n",
                             "line 1: field 'e2e_ms': missing column"},
                      BadCsv{
                          "request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                          "a,0,21,3,1,2\nb,5.5,16,4,1,2\n",
                          "line 2: field 'input_length': 21 disagrees with the trace (line 1: 20)"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,1,2\nb,5.5,16,5,1,2\n",
                             "line 3: field 'output_length': 5 disagrees with the trace"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,1,2\nb,9,16,4,1,2\n",
                             "line 3: field 'arrival_ms'"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,1,2\nc,5.5,16,4,1,2\n",
                             "line 3: field 'request_id': 'c' but the trace's line 2 is 'b'"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,abc,2\n",
                             "line 2: field 'ttft_ms': 'abc' is not a finite number"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,5,2\n",
                             "line 2: field 'e2e_ms': expected 0 <= ttft_ms <= e2e_ms"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,1,2\n",
                             "1 rows but the trace has 2 requests"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,1,2\nb,5.5,16,4,1,2\nc,6,16,4,1,2\n",
                             "line 4: more rows than the trace has requests (2)"},
                      BadCsv{"request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                             "a,0,20,3,1\n",
                             "line 2: 5 fields, the header has 6"}));

TEST(RequestsJsonlTest, KeepsCompletedRequestsAndChecksLengths) {
  const std::string ok =
      "{\"session_id\":\"request_1\",\"turn_index\":0,\"arrival_time_ms\":0,\"ttft_ms\":4,"
      "\"e2e_latency_ms\":9,\"input_length\":20,\"output_length\":3,\"terminal_status\":"
      "\"completed\"}\n"
      "{\"session_id\":\"request_2\",\"turn_index\":0,\"terminal_status\":\"rejected\"}\n";
  const auto r = parseRequestsJsonl(ok, "r.jsonl", trace());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].key, "request_1#0");

  const auto bad = parseRequestsJsonl(
      "{\"session_id\":\"request_1\",\"turn_index\":0,\"arrival_time_ms\":0,\"ttft_ms\":4,"
      "\"e2e_latency_ms\":9,\"input_length\":20,\"output_length\":7,\"terminal_status\":"
      "\"completed\"}\n",
      "r.jsonl", trace());
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message,
              HasSubstr("r.jsonl line 1: field 'output_length': 7 disagrees with the trace"));

  const auto missing = parseRequestsJsonl(
      "{\"session_id\":\"request_1\",\"turn_index\":0,\"arrival_time_ms\":0,"
      "\"e2e_latency_ms\":9,\"input_length\":20,\"output_length\":3,\"terminal_status\":"
      "\"completed\"}\n",
      "r.jsonl", trace());
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("r.jsonl line 1: field 'ttft_ms': missing"));
}

TEST(RecordedRunTest, LoadsAReferenceRunDirectory) {
  const std::string dir = std::string(MOCKER_SOURCE_DIR_FOR_TEST) +
                          "/data/calibration/recorded/rtx4090-llama3.1-8b-mns256";
  const auto run = loadRecordedRun(dir, 512);
  ASSERT_TRUE(run.has_value()) << run.error().message;
  EXPECT_EQ(run->name, "rtx4090-llama3.1-8b-mns256");
  EXPECT_EQ(run->requests.size(), 300u);
  EXPECT_EQ(run->workload.trace_block_size, 16u);
  EXPECT_EQ(run->gpu_label, "RTX4090");
  EXPECT_EQ(run->tensor_parallel, 1u);
  EXPECT_TRUE(run->model_config_path.has_value());
  const auto has = [&](const std::string& key, const std::string& value) {
    for (const auto& [k, v] : run->engine_settings) {
      if (k == key) return v == value;
    }
    return false;
  };
  EXPECT_TRUE(has("num_gpu_blocks", "2588"));
  EXPECT_TRUE(has("max_num_seqs", "256"));
}

TEST(RecordedRunTest, ExpertParallelRunSpreadsTheExpertsOverBothRanks) {
  // DP 2 with enable_expert_parallel at TP 1: vLLM's expert-parallel group is 2 GPUs.
  const std::string dir = std::string(MOCKER_SOURCE_DIR_FOR_TEST) +
                          "/data/calibration/recorded/rtxpro6000-qwen3-30b-a3b-dp2-ep2";
  const auto run = loadRecordedRun(dir, 512);
  ASSERT_TRUE(run.has_value()) << run.error().message;
  EXPECT_EQ(run->tensor_parallel, 1u);
  EXPECT_EQ(run->expert_parallel, 2u);
  const auto dense = loadRecordedRun(std::string(MOCKER_SOURCE_DIR_FOR_TEST) +
                                         "/data/calibration/recorded/rtxpro6000-qwen3-32b-tp2",
                                     512);
  ASSERT_TRUE(dense.has_value()) << dense.error().message;
  EXPECT_EQ(dense->expert_parallel, std::nullopt);
}

TEST(RecordedRunTest, UnrecordedBlocksFallBackToTheEstimate) {
  const std::string dir = std::string(MOCKER_SOURCE_DIR_FOR_TEST) +
                          "/data/calibration/recorded/rtx4090-llama3.1-8b-mns128";
  const auto run = loadRecordedRun(dir, 512);
  ASSERT_TRUE(run.has_value()) << run.error().message;
  bool found = false;
  for (const auto& [k, v] : run->engine_settings)
    found = found || (k == "num_gpu_blocks" && v == "2588");
  EXPECT_TRUE(found);
}

// Under the roofline model an estimated num_gpu_blocks (run.json's, possibly from a run with other
// settings) is dropped so the engine sizes the KV cache from the deployment; a recorded one, or
// one a profile set, is kept; the polynomial model keeps the estimate.
TEST(RecordedRunTest, RooflineSizesAnEstimatedKvCacheFromTheDeployment) {
  const std::string recorded =
      std::string(MOCKER_SOURCE_DIR_FOR_TEST) + "/data/calibration/recorded/";
  const auto estimated = loadRecordedRun(recorded + "rtx4090-llama3.1-8b-mns128", 512);
  ASSERT_TRUE(estimated.has_value()) << estimated.error().message;
  const auto prepared = prepareRun(*estimated);
  ASSERT_TRUE(prepared.has_value()) << prepared.error().message;
  EXPECT_EQ(prepared->base.engine.num_gpu_blocks, std::optional<std::uint32_t>(2588));

  service::ServiceConfig roofline = prepared->base;
  ASSERT_TRUE(useRoofline(*prepared, roofline));
  EXPECT_EQ(roofline.engine.timing_model, engine::TimingModelKind::Roofline);
  EXPECT_EQ(roofline.engine.num_gpu_blocks, std::nullopt);

  service::ServiceConfig profiled = prepared->base;
  profiled.engine.num_gpu_blocks = 3000;  // set by a profile: kept
  ASSERT_TRUE(useRoofline(*prepared, profiled));
  EXPECT_EQ(profiled.engine.num_gpu_blocks, std::optional<std::uint32_t>(3000));

  const auto measured = loadRecordedRun(recorded + "rtx4090-llama3.1-8b-mns256", 512);
  ASSERT_TRUE(measured.has_value()) << measured.error().message;
  const auto measured_prepared = prepareRun(*measured);
  ASSERT_TRUE(measured_prepared.has_value()) << measured_prepared.error().message;
  service::ServiceConfig kept = measured_prepared->base;
  ASSERT_TRUE(useRoofline(*measured_prepared, kept));
  EXPECT_EQ(kept.engine.num_gpu_blocks, std::optional<std::uint32_t>(2588));
}

TEST(RecordedRunTest, MissingFilesAndBadRunJsonAreNamed) {
  TempDir tmp;
  const auto none = loadRecordedRun((tmp.path() / "nope").string(), 16);
  ASSERT_FALSE(none.has_value());
  EXPECT_THAT(none.error().message, HasSubstr("no such recorded run"));

  std::filesystem::create_directories(tmp.path() / "r");
  testing::writeFile(tmp.path() / "r" / "trace.jsonl", kTrace);
  const auto no_gt = loadRecordedRun((tmp.path() / "r").string(), 16);
  ASSERT_FALSE(no_gt.has_value());
  EXPECT_THAT(no_gt.error().message, HasSubstr("ground_truth.csv"));

  testing::writeFile(tmp.path() / "r" / "ground_truth.csv",
                     "request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n"
                     "a,0,20,3,1,2\nb,5.5,16,4,1,2\n");
  testing::writeFile(tmp.path() / "r" / "run.json", "{\"engine\":{}}");
  const auto no_engine = loadRecordedRun((tmp.path() / "r").string(), 16);
  ASSERT_FALSE(no_engine.has_value());
  EXPECT_THAT(no_engine.error().message,
              AllOf(HasSubstr("run.json"), HasSubstr("field 'mocker_engine'")));

  testing::writeFile(
      tmp.path() / "r" / "run.json",
      "{\"mocker_engine\":{\"max_num_seqs\":128},\"engine\":{\"max_num_seqs\":256}}");
  const auto conflict = loadRecordedRun((tmp.path() / "r").string(), 16);
  ASSERT_FALSE(conflict.has_value());
  EXPECT_THAT(conflict.error().message,
              HasSubstr("field 'mocker_engine.max_num_seqs' (128) conflicts with "
                        "'engine.max_num_seqs' (256)"));

  testing::writeFile(tmp.path() / "r" / "run.json",
                     "{\"mocker_engine\":{},\"engine\":{\"tensor_parallel_size\":0}}");
  const auto bad_tp = loadRecordedRun((tmp.path() / "r").string(), 16);
  ASSERT_FALSE(bad_tp.has_value());
  EXPECT_THAT(bad_tp.error().message, HasSubstr("field 'engine.tensor_parallel_size'"));

  testing::writeFile(tmp.path() / "r" / "run.json",
                     "{\"mocker_engine\":{},\"engine\":{\"enable_expert_parallel\":\"yes\"}}");
  const auto bad_ep = loadRecordedRun((tmp.path() / "r").string(), 16);
  ASSERT_FALSE(bad_ep.has_value());
  EXPECT_THAT(bad_ep.error().message, HasSubstr("field 'engine.enable_expert_parallel'"));
}

}  // namespace
}  // namespace mocker::calibrate
