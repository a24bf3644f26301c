// Replays a recorded run in the simulator (the offline replay of tools/replay, in-process, on a
// virtual clock) under a candidate configuration and returns the simulated per-request latencies
// as a client would see them (docs/calibration.md, "Client-visible overhead"):
//   TTFT_client = TTFT_engine + per_request_ms + per_token_ms
//   E2E_client  = E2E_engine  + per_request_ms + per_token_ms × output tokens
// so the mean ITL grows by per_token_ms. Both default to 0 (engine-side latencies).
//
// Thread-compatible; deterministic (same run and configuration ⇒ the same samples).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "engine/roofline.h"
#include "service/config.h"
#include "tools/calibrate/recorded_run.h"
#include "tools/calibrate/score.h"

namespace mocker::calibrate {

/// Latency the client adds on top of the engine's (ms).
struct ClientOverhead {
  double per_request_ms = 0.0;
  double per_token_ms = 0.0;
};

/// A recorded run made ready for repeated simulation: its engine configuration (defaults, then
/// the run's recorded [engine] settings, then its deployment) and its recorded metrics.
struct PreparedRun {
  const RecordedRun* run = nullptr;
  service::ServiceConfig base{};
  MetricValues recorded{};
  /// The run's deployment for the roofline timing model (model from config.json, GPU from
  /// hardware.label, tensor parallelism), with the default coefficients; absent when the run
  /// does not record them.
  std::optional<engine::RooflineConfig> deployment{};
};

/// Builds a PreparedRun: every recorded setting through service::setConfigValue (an unknown key
/// or a bad value names the run's settings file and key), and the deployment (loadDeployment).
/// Does not validate (a profile still has to be applied).
Result<PreparedRun> prepareRun(const RecordedRun& run);

/// The roofline deployment a run records: config.json parsed as a Hugging Face config, the GPU
/// of the built-in table named by run.json hardware.label, engine.tensor_parallel_size. nullopt
/// when the run has no config.json or no GPU label; errors name the file and field (unknown GPU,
/// a config.json without a needed field).
Result<std::optional<engine::RooflineConfig>> loadDeployment(const RecordedRun& run);

/// Selects the roofline timing model for `config` with the run's deployment (keeping
/// coefficients already set). A num_gpu_blocks that is still run.json's estimate is unset, so
/// the engine sizes the KV cache from the deployment. Error naming the run when it records no
/// deployment.
Status useRoofline(const PreparedRun& run, service::ServiceConfig& config);

/// One simulated run: samples for scoring, and (recorded, predicted) E2E per request for plots.
struct Prediction {
  LatencySamples samples;         ///< client-side: with the ClientOverhead
  LatencySamples engine_samples;  ///< the same requests at the engine (no overhead)
  bool client_overhead = false;   ///< the overhead was non-zero
  std::vector<std::pair<double, double>> e2e_pairs;  ///< ms, recorded requests that completed
  std::size_t completed = 0;
};

/// Validates `config` (its errors are prefixed with the run name) and replays the run's trace.
Result<Prediction> simulateRun(const RecordedRun& run, const service::ServiceConfig& config,
                               const ClientOverhead& client);

/// The run's score for a prediction: client-side metrics against the recorded ones, and the
/// engine-side metrics beside them when a client overhead was set.
RunScore scorePrediction(const PreparedRun& run, const Prediction& prediction);

}  // namespace mocker::calibrate
