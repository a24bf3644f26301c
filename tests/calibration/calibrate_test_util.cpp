#include "tests/calibration/calibrate_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "base/check.h"
#include "service/config.h"
#include "tools/calibrate/simulate.h"
#include "tools/cli.h"
#include "tools/replay/collector.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/offline_replay.h"

namespace mocker::calibrate::testing {

TempDir::TempDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "mocker-calibrate-XXXXXX").string();
  MOCKER_CHECK(::mkdtemp(pattern.data()) != nullptr);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  MOCKER_CHECK(static_cast<bool>(out));
}

namespace {

/// A trace of single-turn requests with 16-token hash blocks, Poisson arrivals.
std::string makeTrace(const GeneratedRun& spec) {
  std::mt19937_64 rng(spec.workload_seed);
  std::uniform_int_distribution<std::uint32_t> input(spec.input_min, spec.input_max);
  std::uniform_int_distribution<std::uint32_t> output(spec.output_min, spec.output_max);
  std::exponential_distribution<double> gap(spec.request_rate_per_s / 1000.0);
  std::string text;
  double t = 0.0;
  std::uint64_t next_hash = 1;
  for (std::uint32_t i = 0; i < spec.num_requests; ++i) {
    if (i > 0) t += std::round(gap(rng) * 1000.0) / 1000.0;
    const std::uint32_t in = input(rng);
    const std::uint32_t out = output(rng);
    std::ostringstream line;
    line.precision(17);
    line << "{\"timestamp\":" << t << ",\"input_length\":" << in << ",\"output_length\":" << out
         << ",\"hash_ids\":[";
    for (std::uint32_t b = 0; b < (in + 15) / 16; ++b) line << (b ? "," : "") << next_hash++;
    line << "],\"request_id\":\"r" << i << "\"}\n";
    text += line.str();
  }
  return text;
}

}  // namespace

std::filesystem::path writeGeneratedRun(const std::filesystem::path& dir, const std::string& name,
                                        const GeneratedRun& spec) {
  const std::filesystem::path run = dir / name;
  std::filesystem::create_directories(run);
  const std::string trace = makeTrace(spec);
  writeFile(run / "trace.jsonl", trace);
  Result<replay::Workload> workload = replay::parseMooncakeTrace(trace, {.trace_block_size = 16});
  MOCKER_CHECK(workload.has_value());
  service::ServiceConfig config;
  std::string engine_json;
  for (const auto& [key, text] : spec.engine) {
    MOCKER_CHECK(service::setConfigValue(config, "engine." + key, text).has_value());
    const bool quoted = !text.empty() && !std::isdigit(static_cast<unsigned char>(text[0])) &&
                        text != "true" && text != "false";
    if (!engine_json.empty()) engine_json += ',';
    engine_json += '"';
    engine_json += key;
    engine_json += "\":";
    if (quoted) engine_json += '"';
    engine_json += text;
    if (quoted) engine_json += '"';
  }
  std::string hardware;
  if (!spec.roofline.empty()) {
    const std::string llama = std::string(MOCKER_SOURCE_DIR_FOR_TEST) +
                              "/data/calibration/recorded/rtx4090-llama3.1-8b-mns256/config.json";
    std::filesystem::copy_file(llama, run / "config.json");
    RecordedRun recorded{.name = name,
                         .path = run.string(),
                         .gpu_label = "RTX4090",
                         .tensor_parallel = 1,
                         .model_config_path = (run / "config.json").string()};
    Result<std::optional<engine::RooflineConfig>> deployment = loadDeployment(recorded);
    MOCKER_CHECK(deployment.has_value() && deployment->has_value());
    for (const auto& [coefficient, value] : spec.roofline) {
      const engine::RooflineCoefficientInfo* info = engine::findRooflineCoefficient(coefficient);
      MOCKER_CHECK(info != nullptr);
      (*deployment)->coefficients.*(info->member) = value;
    }
    config.engine.timing_model = engine::TimingModelKind::Roofline;
    config.engine.roofline = **deployment;
    hardware = ",\"hardware\":{\"label\":\"RTX4090\"}";
  }
  replay::ReplayCollector collector({.keep_engine_samples = false});
  MOCKER_CHECK(runOfflineReplay(*workload, {.engine = config.engine}, collector).has_value());
  std::map<std::string, const replay::RequestRecord*> by_session;
  for (const replay::RequestRecord& r : collector.requests()) by_session[r.info.session_id] = &r;
  std::mt19937_64 rng(spec.noise_seed);
  std::normal_distribution<double> noise(0.0, spec.noise_sigma);
  std::string csv = "request_id,arrival_ms,input_length,output_length,ttft_ms,e2e_ms\n";
  std::size_t line = 0;
  for (const replay::Session& s : workload->sessions) {
    ++line;
    const replay::RequestRecord* r = by_session.at(s.session_id);
    const replay::RequestLatencies l = replay::latenciesOf(*r);
    MOCKER_CHECK(r->status == replay::TerminalStatus::Completed);
    const double c = spec.client_per_request_ms;
    const double ttft = (*l.ttft_ms + c) * (1.0 + (spec.noise_sigma > 0 ? noise(rng) : 0.0));
    const double e2e =
        std::max(ttft, (*l.e2e_ms + c) * (1.0 + (spec.noise_sigma > 0 ? noise(rng) : 0.0)));
    std::ostringstream row;
    row.precision(17);
    row << *s.turns[0].request_id << "," << *s.first_arrival_ms << "," << s.turns[0].input_length
        << "," << s.turns[0].output_length << "," << ttft << "," << e2e << "\n";
    csv += row.str();
  }
  writeFile(run / "ground_truth.csv", csv);
  writeFile(run / "run.json", "{\"run\":\"" + name + "\",\"mocker_engine\":{" + engine_json +
                                  "},\"engine\":{\"tensor_parallel_size\":1}" + hardware + "}\n");
  return run;
}

CliResult runCalibrate(std::vector<std::string> args) {
  args.insert(args.begin(), {"mocker", "calibrate", "--no-progress"});
  std::ostringstream out, err;
  const int code = tools::runCli(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace mocker::calibrate::testing
