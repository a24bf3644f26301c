// Recorded runs for `mocker calibrate` (docs/calibration.md, "Recorded runs"): what a real
// engine did with a trace — per-request TTFT and E2E — plus the engine settings it ran with, so
// the simulator can replay the same trace under the same settings and be scored against it.
//
// Two inputs:
//   * a run directory: trace.jsonl (Mooncake JSONL), ground_truth.csv (one row per trace line,
//     same order: request_id, arrival_ms, input_length, output_length, ttft_ms, e2e_ms, …),
//     run.json (`mocker_engine`: [engine] keys; `hardware.label`/`gpus`;
//     `engine.tensor_parallel_size`, `engine.data_parallel_size`, `engine.enable_expert_parallel`;
//     `workload.trace_block_size`) and optionally config.json
//     (the model's Hugging Face config);
//   * the per-request JSONL of `mocker replay --requests-jsonl FILE` with its FILE.run.json
//     sidecar (engine settings from identity.engine_config, the trace from identity.trace_path,
//     checked against identity.trace_sha256).
// Every error names the file, the line (for row data) and the field.
//
// Pure parsing functions plus loaders that read files; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "tools/replay/workload.h"

namespace mocker::calibrate {

/// One request as the real engine served it (engine- or client-side times, ms).
struct RecordedRequest {
  std::string key;  ///< pairs it with the simulated request (request_id, or session#turn)
  double arrival_ms = 0.0;
  std::uint32_t input_length = 0;
  std::uint32_t output_length = 0;  ///< tokens generated
  double ttft_ms = 0.0;
  double e2e_ms = 0.0;
};

/// Where a recorded run came from.
enum class RecordedRunKind : std::uint8_t { Directory, RequestsJsonl };

struct RecordedRun {
  std::string name;  ///< directory name, or the JSONL file name
  std::string path;  ///< as given
  RecordedRunKind kind = RecordedRunKind::Directory;
  replay::Workload workload{};
  /// [engine] settings of the run as (key without "engine.", value text as `mocker config
  /// --dump` spells it), applied over the defaults in this order. Unrecorded ones are absent.
  std::vector<std::pair<std::string, std::string>> engine_settings{};
  /// Keys of engine_settings whose value is run.json's estimate of an unrecorded setting
  /// ("KEY_estimate"), not what the engine resolved.
  std::vector<std::string> estimated_settings{};
  std::vector<RecordedRequest> requests{};  ///< completed requests, in trace order
  /// Deployment facts the roofline timing model needs (directory runs; absent when unknown).
  std::optional<std::string> model{};              ///< run.json "model"
  std::optional<std::string> gpu_label{};          ///< run.json hardware.label
  std::optional<std::uint32_t> tensor_parallel{};  ///< run.json engine.tensor_parallel_size
  /// GPUs the experts are spread over: TP × engine.data_parallel_size when run.json
  /// engine.enable_expert_parallel is true (vLLM's expert-parallel group), else absent.
  std::optional<std::uint32_t> expert_parallel{};
  std::optional<std::string> model_config_path{};  ///< config.json beside run.json, if present
  std::string trace_sha256;                        ///< of the replayed trace's bytes
};

/// Parses ground_truth.csv text (named `source` in errors) and checks it row by row against the
/// trace: same number of requests, same request_id, arrival (±0.001 ms) and lengths; e2e >= ttft
/// >= 0. Errors read "<source> line 12: field 'e2e_ms': …".
Result<std::vector<RecordedRequest>> parseGroundTruthCsv(std::string_view text,
                                                         std::string_view source,
                                                         const replay::Workload& trace);

/// Parses the per-request JSONL of `mocker replay --requests-jsonl` (named `source`), keeping the
/// completed requests, and pairs each with its trace turn by (session_id, turn_index): lengths
/// must agree. Errors name the line and the field.
Result<std::vector<RecordedRequest>> parseRequestsJsonl(std::string_view text,
                                                        std::string_view source,
                                                        const replay::Workload& trace);

/// Loads a recorded run: a directory (above) or a requests JSONL file. `jsonl_trace_block_size`
/// is the trace block size the requests JSONL's replay used (the sidecar does not record it).
Result<RecordedRun> loadRecordedRun(const std::string& path, std::uint32_t jsonl_trace_block_size);

}  // namespace mocker::calibrate
