// Scoring pinned by a hand-computed case: the seven metrics of a small run, their absolute
// percentage errors, the median across runs, and the text and JSON forms.
#include "tools/calibrate/score.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mocker::calibrate {
namespace {

// Recorded: TTFT 10, 20, 30, 40; E2E 110 … 140; 11 tokens each.
//   E2E mean 125, p90 = 130 + 0.7·10 = 137, p99 = 130 + 0.97·10 = 139.7
//   TTFT mean 25, p90 37, p99 39.7; ITL = (125 − 25) / (11 − 1) = 10.
LatencySamples recordedSamples() {
  return {{10, 20, 30, 40}, {140, 110, 130, 120}, {11, 11, 11, 11}};
}
// Predicted: TTFT 20 and E2E 150 for every request ⇒ ITL (150 − 20) / 10 = 13.
LatencySamples predictedSamples() {
  return {{20, 20, 20, 20}, {150, 150, 150, 150}, {11, 11, 11, 11}};
}

TEST(ScoreTest, MetricsOfASmallRunByHand) {
  const MetricValues v = summarizeLatencies(recordedSamples());
  EXPECT_DOUBLE_EQ(v[0], 125.0);
  EXPECT_DOUBLE_EQ(v[1], 137.0);
  EXPECT_NEAR(v[2], 139.7, 1e-9);
  EXPECT_DOUBLE_EQ(v[3], 25.0);
  EXPECT_DOUBLE_EQ(v[4], 37.0);
  EXPECT_NEAR(v[5], 39.7, 1e-9);
  EXPECT_DOUBLE_EQ(v[6], 10.0);
}

TEST(ScoreTest, AbsolutePercentageErrorsByHand) {
  const RunScore s = scoreRun("a", summarizeLatencies(recordedSamples()),
                              summarizeLatencies(predictedSamples()), 4, 4);
  EXPECT_DOUBLE_EQ(s.error_pct[0], 20.0);                 // |150 − 125| / 125
  EXPECT_NEAR(s.error_pct[1], 13.0 / 137.0 * 100, 1e-9);  // 9.489 %
  EXPECT_NEAR(s.error_pct[2], 10.3 / 139.7 * 100, 1e-9);  // 7.373 %
  EXPECT_DOUBLE_EQ(s.error_pct[3], 20.0);                 // |20 − 25| / 25
  EXPECT_NEAR(s.error_pct[4], 17.0 / 37.0 * 100, 1e-9);   // 45.946 %
  EXPECT_NEAR(s.error_pct[5], 19.7 / 39.7 * 100, 1e-9);   // 49.622 %
  EXPECT_NEAR(s.error_pct[6], 30.0, 1e-9);                // |13 − 10| / 10
}

TEST(ScoreTest, ErrorOfZeroRecordedValue) {
  EXPECT_EQ(absolutePercentageError(0.0, 0.0), 0.0);
  EXPECT_TRUE(std::isinf(absolutePercentageError(1.0, 0.0)));
  EXPECT_DOUBLE_EQ(absolutePercentageError(90.0, 100.0), 10.0);
}

TEST(ScoreTest, ItlIsZeroForSingleTokenOutputs) {
  const MetricValues v = summarizeLatencies({{5}, {5}, {1}});
  EXPECT_EQ(v[6], 0.0);
}

TEST(ScoreTest, MedianAcrossRuns) {
  EXPECT_DOUBLE_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 2.0, 3.0}), 2.5);
  MetricValues r{}, p1{}, p2{}, p3{};
  r.fill(100.0);
  p1.fill(110.0);  // 10 %
  p2.fill(70.0);   // 30 %
  p3.fill(120.0);  // 20 %
  const ScoreTable t = makeScoreTable(
      "t", {scoreRun("a", r, p1, 1, 1), scoreRun("b", r, p2, 1, 1), scoreRun("c", r, p3, 1, 1)});
  for (double m : t.median_error_pct) EXPECT_NEAR(m, 20.0, 1e-9);
}

TEST(ScoreTest, TableAndJsonShowEveryMetric) {
  const ScoreTable t =
      makeScoreTable("held-out runs", {scoreRun("run-a", summarizeLatencies(recordedSamples()),
                                                summarizeLatencies(predictedSamples()), 4, 3)});
  const std::string text = formatScoreTable(t);
  for (const char* name : {"e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99",
                           "itl", "run-a", "median", "held-out runs", "3/4"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  EXPECT_NE(text.find("45.9"), std::string::npos) << text;
  const nlohmann::ordered_json j = scoreTableJson(t);
  EXPECT_EQ(j["title"], "held-out runs");
  EXPECT_DOUBLE_EQ(j["runs"][0]["error_pct"]["e2e_mean"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["runs"][0]["predicted"]["itl"].get<double>(), 13.0);
  EXPECT_DOUBLE_EQ(j["median_error_pct"]["ttft_mean"].get<double>(), 20.0);
  EXPECT_EQ(j["runs"][0]["predicted_completed"], 3);
}

}  // namespace
}  // namespace mocker::calibrate
