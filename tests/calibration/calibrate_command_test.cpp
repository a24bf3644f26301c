// `mocker calibrate` end to end, in-process: recovery of known coefficients from runs mocker
// generated (with seeded noise), held-out scoring, --evaluate, --leave-one-out, the profile being
// accepted by the configuration of replay/serve, determinism, the page, and usage errors.
#include "tools/calibrate_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>

#include "tests/calibration/calibrate_test_util.h"
#include "tools/calibrate/fit.h"
#include "tools/cli.h"

namespace mocker::calibrate {
namespace {

using testing::GeneratedRun;
using ::testing::HasSubstr;
using testing::readFile;
using testing::runCalibrate;
using testing::TempDir;

/// The "real" engine of the recovery tests: the polynomial model at known speed ratios.
constexpr double kTrueSpeedup = 2.5;
constexpr double kTrueDecodeSpeedup = 0.6;
constexpr double kTrueClientMs = 40.0;
constexpr double kNoise = 0.01;

GeneratedRun truthRun(std::uint64_t workload_seed, std::uint64_t noise_seed) {
  return GeneratedRun{
      .num_requests = 80,
      .workload_seed = workload_seed,
      .request_rate_per_s = 4.0,
      // Long prompts and short outputs: prefill shapes TTFT, decode shapes ITL, so the two speed
      // ratios are separately identifiable (with outputs much longer than prompts only their
      // product would be).
      .input_min = 1500,
      .input_max = 4000,
      .output_min = 8,
      .output_max = 40,
      .engine = {{"block_size", "16"},
                 {"num_gpu_blocks", "4096"},
                 {"max_num_seqs", "16"},
                 {"speedup_ratio", "2.5"},
                 {"decode_speedup_ratio", "0.6"}},
      .client_per_request_ms = kTrueClientMs,
      .noise_sigma = kNoise,
      .noise_seed = noise_seed,
  };
}

/// The "real" engine of the roofline recovery test: Llama-3.1-8B on an RTX 4090 at known GEMM
/// efficiencies (defaults 0.7 / 0.8), latencies engine-side (no client overhead).
constexpr double kTrueGemmCompute = 0.45;
constexpr double kTrueGemmMemory = 0.55;

GeneratedRun rooflineTruth(std::uint64_t workload_seed, std::uint64_t noise_seed) {
  GeneratedRun run = truthRun(workload_seed, noise_seed);
  run.engine = {{"block_size", "16"}, {"num_gpu_blocks", "4096"}, {"max_num_seqs", "16"}};
  run.roofline = {{"gemm_compute_efficiency", kTrueGemmCompute},
                  {"gemm_memory_efficiency", kTrueGemmMemory}};
  run.request_rate_per_s = 1.0;  // a 4,000-token prefill takes about 0.9 s
  run.client_per_request_ms = 0.0;
  return run;
}

/// `key = value` of a profile.
double profileValue(const std::string& profile, const std::string& key) {
  const std::regex re("(^|\\n)(# )?" + std::regex_replace(key, std::regex("\\."), "\\.") +
                      " = ([-+0-9.eE]+)");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(profile, m, re)) << key << " not in\n" << profile;
  return m.empty() ? 0.0 : std::stod(m[3].str());
}

// The recovery tests fit without the prior (--prior-weight 0): their truths lie several prior
// widths from the defaults on purpose, and what they test is the search.
TEST(CalibrateCommandTest, RecoversRooflineCoefficientsAndScoresHeldOutNearTheNoiseFloor) {
  TempDir tmp;
  const auto fit = testing::writeGeneratedRun(tmp.path(), "fit", rooflineTruth(1, 11));
  const auto held = testing::writeGeneratedRun(tmp.path(), "held", rooflineTruth(2, 12));
  const std::string profile = (tmp.path() / "profile.toml").string();
  const auto r =
      runCalibrate({fit.string(), "--holdout", held.string(), "--params",
                    "roofline.gemm_compute_efficiency,roofline.gemm_memory_efficiency",
                    "--max-evals", "300", "--prior-weight", "0", "-o", profile, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = readFile(profile);
  EXPECT_THAT(text, HasSubstr("timing_model = \"roofline\""));
  EXPECT_THAT(text, HasSubstr("[engine.roofline]"));
  // Tolerance: 10 % on each efficiency (1 % noise on 80 requests; a first run recovered both
  // within 2.5 %).
  EXPECT_NEAR(profileValue(text, "gemm_compute_efficiency"), kTrueGemmCompute,
              0.10 * kTrueGemmCompute)
      << text;
  EXPECT_NEAR(profileValue(text, "gemm_memory_efficiency"), kTrueGemmMemory, 0.10 * kTrueGemmMemory)
      << text;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tables"].size(), 2u);
  EXPECT_EQ(j["tables"][1]["title"], "held-out runs");
  // Noise floor: the truth itself scores about 0.1 % (means) to 1 % (p99) on such runs.
  const auto& held_err = j["tables"][1]["median_error_pct"];
  EXPECT_LT(held_err["e2e_mean"].get<double>(), 3.0) << r.out;
  EXPECT_LT(held_err["ttft_mean"].get<double>(), 5.0) << r.out;
  EXPECT_LT(held_err["itl"].get<double>(), 3.0) << r.out;
  EXPECT_THAT(text, HasSubstr("# Fitted on:\n#   fit (80 requests, trace sha256 "));

  // The profile scores the held-out run as the fit did, and `mocker config` accepts it with the
  // deployment given on the command line.
  const auto e = runCalibrate({held.string(), "--evaluate", profile, "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json ej = nlohmann::json::parse(e.out);
  EXPECT_EQ(ej["tables"][0]["runs"][0]["error_pct"], j["tables"][1]["runs"][0]["error_pct"]);
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli({"mocker", "config", "--config", profile, "--model-config",
                           (held / "config.json").string(), "--gpu", "RTX4090"},
                          out, err),
            0)
      << err.str();
}

TEST(CalibrateCommandTest, RecoversPolynomialSpeedRatios) {
  TempDir tmp;
  const auto fit = testing::writeGeneratedRun(tmp.path(), "fit", truthRun(1, 11));
  const std::string profile = (tmp.path() / "profile.toml").string();
  const auto r = runCalibrate({fit.string(), "--params",
                               "speedup_ratio,decode_speedup_ratio,client.overhead_per_request_ms",
                               "--max-evals", "300", "--prior-weight", "0", "-o", profile});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = readFile(profile);
  // The decode speed (speedup_ratio × decode_speedup_ratio, what the ITL measures) within 5 %;
  // the prefill ratio alone within 15 % (it trades against the client term); the 40 ms client
  // term within 15 ms.
  EXPECT_NEAR(profileValue(text, "client.overhead_per_request_ms"), kTrueClientMs, 15.0) << text;
  const double speedup = profileValue(text, "speedup_ratio");
  const double decode = profileValue(text, "decode_speedup_ratio");
  EXPECT_NEAR(speedup, kTrueSpeedup, 0.15 * kTrueSpeedup) << text;
  EXPECT_NEAR(speedup * decode, kTrueSpeedup * kTrueDecodeSpeedup,
              0.05 * kTrueSpeedup * kTrueDecodeSpeedup)
      << text;
  // With a client term the reports show the engine-side latencies beside the client-side ones.
  EXPECT_THAT(r.out, HasSubstr("engine-side (without the client overhead)"));
  const auto e = runCalibrate({fit.string(), "--evaluate", profile, "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json run = nlohmann::json::parse(e.out)["tables"][0]["runs"][0];
  const double client = profileValue(text, "client.overhead_per_request_ms");
  for (const char* m : {"e2e_mean", "ttft_mean", "ttft_p99"}) {
    EXPECT_NEAR(run["predicted_engine_side"][m].get<double>(),
                run["predicted"][m].get<double>() - client, 1e-6)
        << m;
  }
  EXPECT_NEAR(run["predicted_engine_side"]["itl"].get<double>(),
              run["predicted"]["itl"].get<double>(), 1e-9);
}

TEST(CalibrateCommandTest, ProfileIsAcceptedByTheConfigurationAndEvaluates) {
  TempDir tmp;
  const auto run = testing::writeGeneratedRun(tmp.path(), "run", truthRun(3, 13));
  const std::string profile = (tmp.path() / "p.toml").string();
  auto r =
      runCalibrate({run.string(), "--params", "speedup_ratio", "--max-evals", "30", "-o", profile});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit runs: absolute percentage error"));
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli({"mocker", "config", "--config", profile}, out, err), 0) << err.str();

  const std::string html = (tmp.path() / "page.html").string();
  r = runCalibrate({run.string(), "--evaluate", profile, "--html", html});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("profile " + profile));
  const std::string page = readFile(html);
  EXPECT_THAT(page, HasSubstr("data-chart=\"run0_e2e_scatter\""));
  EXPECT_THAT(page, HasSubstr("data-chart=\"run0_ttft_cdf\""));
}

TEST(CalibrateCommandTest, SameSeedSameProfile) {
  TempDir tmp;
  const auto run = testing::writeGeneratedRun(tmp.path(), "run", truthRun(4, 14));
  const auto once = [&] {
    return runCalibrate({run.string(), "--params", "speedup_ratio,decode_speedup_ratio",
                         "--max-evals", "25", "--seed", "5", "--json"});
  };
  const auto a = once();
  const auto b = once();
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(CalibrateCommandTest, LeaveOneOutScoresEveryRunHeldOut) {
  TempDir tmp;
  const auto a = testing::writeGeneratedRun(tmp.path(), "a", truthRun(5, 15));
  const auto b = testing::writeGeneratedRun(tmp.path(), "b", truthRun(6, 16));
  const auto r = runCalibrate({a.string(), b.string(), "--leave-one-out", "--params",
                               "speedup_ratio", "--max-evals", "20", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tables"].size(), 1u);
  EXPECT_EQ(j["tables"][0]["runs"].size(), 2u);
  EXPECT_EQ(j["fits"].size(), 2u);
  EXPECT_EQ(j["fits"][0]["fitted_on"][0], "b");
}

TEST(CalibrateCommandTest, UsageErrorsExitTwo) {
  TempDir tmp;
  const auto run = testing::writeGeneratedRun(tmp.path(), "run", truthRun(7, 17));
  const std::string p = run.string();
  auto r = runCalibrate({p, "--leave-one-out"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("at least two runs"));
  r = runCalibrate({p, "--holdout", p, "--evaluate", "x.toml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("exclude each other"));
  r = runCalibrate({p, "--params", "warp_factor"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown parameter 'warp_factor'"));
  r = runCalibrate({p, "--algorithm", "genetic"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown algorithm 'genetic'"));
  r = runCalibrate({p, "--holdout", p});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("nothing to fit on"));
  r = runCalibrate({});
  EXPECT_EQ(r.code, 2);
}

TEST(CalibrateCommandTest, BadInputExitsOneNamingTheFile) {
  TempDir tmp;
  const auto run = testing::writeGeneratedRun(tmp.path(), "run", truthRun(8, 18));
  testing::writeFile(run / "ground_truth.csv",
                     "request_id,arrival_ms,input_length,output_length,ttft_ms\n");
  auto r = runCalibrate({run.string(), "--max-evals", "1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr((run / "ground_truth.csv").string() +
                               " line 1: field 'e2e_ms': missing column"));
  const auto ok = testing::writeGeneratedRun(tmp.path(), "ok", truthRun(8, 18));
  testing::writeFile(tmp.path() / "bad.toml", "[engine]\nspeedup_ratio = -3.0\n");
  r = runCalibrate({ok.string(), "--evaluate", (tmp.path() / "bad.toml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("speedup_ratio"));
  testing::writeFile(tmp.path() / "client.toml", "# client.overhead_per_request_ms = lots\n");
  r = runCalibrate({ok.string(), "--evaluate", (tmp.path() / "client.toml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("client.toml line 1: client.overhead_per_request_ms"));
}

// The prior pulls the fit towards the kernel-profile defaults: on the same run as the recovery
// test (truth 0.45 where the default is 0.75, 3.4 prior widths away), the weight trades run
// error against distance. Weight 0 recovers the truth (above); a heavy prior keeps the default.
TEST(CalibrateCommandTest, PriorWeightPullsTheFitTowardsTheDefaults) {
  TempDir tmp;
  const auto fit = testing::writeGeneratedRun(tmp.path(), "fit", rooflineTruth(1, 11));
  const auto fitWith = [&](const std::string& weight) {
    const auto r =
        runCalibrate({fit.string(), "--params", "roofline.gemm_compute_efficiency", "--max-evals",
                      "40", "--starts", "1", "--prior-weight", weight, "--json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["fits"][0];
  };
  const nlohmann::json heavy = fitWith("1e5");
  const double value = heavy["values"]["roofline.gemm_compute_efficiency"].get<double>();
  EXPECT_NEAR(value, 0.75, 0.01) << heavy.dump();
  EXPECT_EQ(heavy["prior_weight"].get<double>(), 1e5);
  // loss = run error + prior penalty, the penalty being weight × z² at the fitted value.
  const double z = std::log(value / 0.75) / 0.15;
  EXPECT_NEAR(heavy["prior_penalty"].get<double>(), 1e5 * z * z, 1e-6 * (1.0 + 1e5 * z * z));
  EXPECT_NEAR(heavy["loss"].get<double>(),
              heavy["run_loss"].get<double>() + heavy["prior_penalty"].get<double>(), 1e-9);
  const nlohmann::json none = fitWith("0");
  EXPECT_EQ(none["prior_penalty"].get<double>(), 0.0);
  EXPECT_LT(none["values"]["roofline.gemm_compute_efficiency"].get<double>(), 0.6) << none.dump();
  EXPECT_LT(none["run_loss"].get<double>(), heavy["run_loss"].get<double>());
  const auto bad = runCalibrate({fit.string(), "--prior-weight", "-1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--prior-weight"));
}

TEST(CalibrateCommandTest, HelpListsEveryParameter) {
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli({"mocker", "calibrate", "--help"}, out, err), 0);
  for (const FitParameter& p : allFitParameters()) {
    EXPECT_THAT(out.str(), HasSubstr(p.key));
  }
  EXPECT_THAT(out.str(), HasSubstr("--leave-one-out"));
  EXPECT_THAT(out.str(), HasSubstr("--prior-weight"));
  EXPECT_THAT(out.str(),
              HasSubstr("roofline.gemm_compute_efficiency: [0.05, 1], 0.75, prior 0.15"));
}

}  // namespace
}  // namespace mocker::calibrate
