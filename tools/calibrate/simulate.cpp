#include "tools/calibrate/simulate.h"

#include <algorithm>
#include <map>

#include "engine/gpu_spec.h"
#include "engine/model_arch.h"
#include "tools/replay/collector.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/workload.h"

namespace mocker::calibrate {

Result<PreparedRun> prepareRun(const RecordedRun& run) {
  PreparedRun prepared{.run = &run};
  const std::string settings_file =
      run.kind == RecordedRunKind::Directory ? run.path + "/run.json" : run.path + ".run.json";
  for (const auto& [key, text] : run.engine_settings) {
    Status s = service::setConfigValue(prepared.base, "engine." + key, text);
    if (!s) return s.error().withContext(settings_file + ": field 'mocker_engine." + key + "'");
  }
  Result<std::optional<engine::RooflineConfig>> deployment = loadDeployment(run);
  if (!deployment) return deployment.error();
  prepared.deployment = std::move(*deployment);
  LatencySamples recorded;
  for (const RecordedRequest& r : run.requests) {
    recorded.ttft_ms.push_back(r.ttft_ms);
    recorded.e2e_ms.push_back(r.e2e_ms);
    recorded.output_tokens.push_back(r.output_length);
  }
  prepared.recorded = summarizeLatencies(recorded);
  return prepared;
}

Result<Prediction> simulateRun(const RecordedRun& run, const service::ServiceConfig& config,
                               const ClientOverhead& client) {
  if (Status s = service::validateServiceConfig(config, service::ConfigUse::EngineOnly); !s) {
    return s.error().withContext(run.name);
  }
  replay::ReplayCollector collector({.keep_engine_samples = false});
  const replay::OfflineReplayOptions options{.engine = config.engine};
  const Result<replay::OfflineReplayStats> stats =
      replay::runOfflineReplay(run.workload, options, collector);
  if (!stats) return stats.error().withContext(run.name);
  std::map<std::string, double, std::less<>> e2e_by_key;
  Prediction p;
  for (const replay::RequestRecord& r : collector.requests()) {
    if (r.status != replay::TerminalStatus::Completed || r.token_times_ms.empty()) continue;
    const replay::RequestLatencies l = replay::latenciesOf(r);
    const double n = static_cast<double>(r.token_times_ms.size());
    const double ttft = *l.ttft_ms + client.per_request_ms + client.per_token_ms;
    const double e2e = *l.e2e_ms + client.per_request_ms + client.per_token_ms * n;
    p.samples.ttft_ms.push_back(ttft);
    p.samples.e2e_ms.push_back(e2e);
    p.samples.output_tokens.push_back(n);
    p.engine_samples.ttft_ms.push_back(*l.ttft_ms);
    p.engine_samples.e2e_ms.push_back(*l.e2e_ms);
    p.engine_samples.output_tokens.push_back(n);
    e2e_by_key.emplace(r.info.session_id + "#" + std::to_string(r.info.turn_index), e2e);
  }
  p.completed = p.samples.e2e_ms.size();
  p.client_overhead = client.per_request_ms != 0.0 || client.per_token_ms != 0.0;
  for (const RecordedRequest& r : run.requests) {
    const auto it = e2e_by_key.find(r.key);
    if (it != e2e_by_key.end()) p.e2e_pairs.emplace_back(r.e2e_ms, it->second);
  }
  return p;
}

RunScore scorePrediction(const PreparedRun& run, const Prediction& p) {
  MetricValues predicted{};
  if (p.completed > 0) predicted = summarizeLatencies(p.samples);
  RunScore score =
      scoreRun(run.run->name, run.recorded, predicted, run.run->requests.size(), p.completed);
  if (p.client_overhead && p.completed > 0) {
    score.predicted_engine = summarizeLatencies(p.engine_samples);
  }
  return score;
}

Result<std::optional<engine::RooflineConfig>> loadDeployment(const RecordedRun& run) {
  if (!run.model_config_path || !run.gpu_label) return std::optional<engine::RooflineConfig>{};
  const Result<std::string> text = replay::readTextFile(*run.model_config_path);
  if (!text) return text.error();
  Result<engine::ModelArch> model = engine::parseHfModelConfig(*text);
  if (!model) return model.error().withContext(*run.model_config_path);
  if (run.model) model->name = *run.model;
  const std::optional<engine::GpuSpec> gpu = engine::findGpu(*run.gpu_label);
  if (!gpu) {
    return invalidArgument(run.path + "/run.json: field 'hardware.label': unknown GPU '" +
                           *run.gpu_label + "' (known: " + engine::gpuNameList(", ") + ")");
  }
  engine::RooflineConfig config{.model = std::move(*model),
                                .gpu = *gpu,
                                .tensor_parallel_size = run.tensor_parallel.value_or(1),
                                .expert_parallel_size = run.expert_parallel.value_or(1)};
  return std::optional<engine::RooflineConfig>(std::move(config));
}

Status useRoofline(const PreparedRun& run, service::ServiceConfig& config) {
  if (!run.deployment) {
    return invalidArgument(run.run->name +
                           ": the roofline timing model needs the run's model "
                           "(config.json) and GPU (run.json hardware.label)");
  }
  config.engine.timing_model = engine::TimingModelKind::Roofline;
  if (!config.engine.roofline) config.engine.roofline = run.deployment;
  // An unrecorded KV cache size (still run.json's estimate, which may come from a run with
  // other settings) is computed from the deployment instead, as vLLM sizes it.
  const std::vector<std::string>& estimated = run.run->estimated_settings;
  if (std::find(estimated.begin(), estimated.end(), "num_gpu_blocks") != estimated.end() &&
      config.engine.num_gpu_blocks == run.base.engine.num_gpu_blocks) {
    config.engine.num_gpu_blocks.reset();
  }
  return {};
}

}  // namespace mocker::calibrate
