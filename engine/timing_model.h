// Forward-pass timing model (docs/engine.md, Timing model): a pure function of the batch shape to
// a duration in milliseconds. Four kinds: polynomial (default, aisimulate's coefficients),
// interpolated (a measured profile), fixed (tests, calibration) and roofline (roofline.h: from the
// model, the GPU and the pass's actual sequences, via passMs). Scaling by
// speedup_ratio / decode_speedup_ratio is applied by the scheduler, not here.
//
// Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "engine/config.h"

namespace mocker::engine {

class TimingModel {
 public:
  /// REQUIRES: config validated (profile present for interpolated, fixed values for fixed).
  explicit TimingModel(const EngineConfig& config);

  /// Prefill time of a batch: `batch` requests with integer-mean input length `isl` and
  /// integer-mean cached prefix `prefix`. 0 when nothing is computed. May be non-finite only for
  /// a pathological interpolated profile; the caller treats that as a failed pass.
  double prefillMs(std::uint64_t batch, std::uint64_t isl, std::uint64_t prefix) const;

  /// Decode time of one step for `batch` requests, `active_kv` KV tokens in use, integer-mean
  /// context length `ctx`, pool capacity `total_kv` tokens. 0 when batch = 0.
  double decodeMs(std::uint64_t batch, std::uint64_t active_kv, std::uint64_t ctx,
                  std::uint64_t total_kv) const;

  /// True for the roofline kind: the schedulers then time passes with passMs, not with
  /// prefillMs/decodeMs (which return 0 for it).
  bool isRoofline() const { return roofline_ != nullptr; }

  /// Roofline: modelled duration of a pass over `sequences` (rooflinePass().total_ms, padded to
  /// the engine's CUDA-graph capture sizes: engineCudaGraphMaxTokens); 0 when empty.
  /// REQUIRES: isRoofline().
  double passMs(std::span<const PassSequence> sequences) const;

 private:
  TimingModelKind kind_;
  const TimingProfile* profile_ = nullptr;    // points into the engine-owned config
  const RooflineConfig* roofline_ = nullptr;  // likewise; set iff kind_ = Roofline
  std::uint32_t cuda_graph_max_tokens_ = 0;   // engineCudaGraphMaxTokens
  double fixed_prefill_ms_ = 0.0;
  double fixed_decode_ms_ = 0.0;
};

}  // namespace mocker::engine
