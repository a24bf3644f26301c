// GpuSpec: the hardware numbers the roofline timing model needs (docs/engine.md, "Roofline
// timing"), and a built-in table of GPUs with the vendor datasheet each number comes from.
//
// Plain value type and an immutable table; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mocker::engine {

struct GpuSpec {
  std::string name;
  double bf16_tflops =
      0.0;  ///< dense (no sparsity) BF16 tensor-core peak, FP32 accumulate, TFLOP/s
  double memory_bandwidth_gbps = 0.0;  ///< device memory bandwidth, decimal GB/s (1e9 B/s)
  double memory_gib = 0.0;  ///< device memory as the driver reports it (torch total_memory), GiB
  double interconnect_gbps = 0.0;  ///< per-direction GPU-to-GPU bandwidth for all-reduce, GB/s
  /// Streaming multiprocessors (datasheet). Prompt-chunk attention runs one thread block per
  /// (query head, 64-query tile), in waves of sm_count blocks; a partly filled last wave costs a
  /// whole one. 0 = unknown: no wave quantisation.
  std::uint32_t sm_count = 0;
  /// Multiplies the GEMM compute efficiencies (dense and expert) on this GPU: its measured
  /// dense-GEMM throughput relative to the datasheet peak, over the typical data-centre ratio
  /// the default efficiencies are fitted to (1 = typical; docs/engine.md, GPU table).
  double compute_efficiency_scale = 1.0;
  /// Multiplies the collective bandwidth (allreduce_efficiency × interconnect_gbps) on this GPU:
  /// its measured NCCL all-reduce bus bandwidth relative to the link bandwidth, over the
  /// NVLink ratio allreduce_efficiency is fitted to (1 = NVLink-like; docs/engine.md, GPU table).
  double interconnect_efficiency_scale = 1.0;
  /// Multiplies the memory efficiency of the dense GEMMs and elementwise kernels on this GPU:
  /// the bandwidth fraction its memory-bound dense GEMMs (1-16 tokens, >= 50 MB of weights)
  /// reach in kernel profiles, over the default gemm_memory_efficiency (1 = no profile;
  /// docs/engine.md, GPU table; scripts/roofline_profile_check.py --measure-scales).
  double memory_efficiency_scale = 1.0;
  /// Multiplies attention_decode_efficiency (the KV reads of attention) on this GPU: the peak
  /// bandwidth fraction of its decode-only attention kernels in kernel profiles (least squares
  /// of launch + per-sequence + bytes / bandwidth), over the default (1 = no profile).
  double attention_efficiency_scale = 1.0;
};

/// One built-in GPU: its spec, the accepted names (first = canonical) and the datasheet.
struct GpuTableEntry {
  GpuSpec spec;
  std::span<const std::string_view> aliases;
  std::string_view source;  ///< vendor datasheet / whitepaper the numbers come from
};

/// Every built-in GPU, in a fixed order.
std::span<const GpuTableEntry> gpuTable();

/// The built-in GPU named `name` (case-insensitive; spaces, '-' and '_' ignored, so "H100 SXM",
/// "h100-sxm" and "h100" match), or nullopt.
std::optional<GpuSpec> findGpu(std::string_view name);

/// The canonical names of the built-in GPUs, joined by `sep` (for error messages and --help).
std::string gpuNameList(std::string_view sep);

/// The first broken rule of `gpu` as a message naming the field (prefix prepended), or nullopt.
std::optional<std::string> checkGpuSpec(const GpuSpec& gpu, std::string_view prefix);

}  // namespace mocker::engine
