#include "engine/gpu_spec.h"

#include <array>
#include <cctype>
#include <cmath>

namespace mocker::engine {
namespace {

// Memory: what CUDA reports as total memory (torch.cuda.get_device_properties().total_memory),
// which is a little less than the marketing figure; where no measurement is at hand the nominal
// capacity in GiB less 1 % is used. Interconnect: per-direction bandwidth of the GPU-to-GPU link
// an all-reduce crosses (NVLink for SXM parts, PCIe x16 for PCIe cards without NVLink).
constexpr std::array<std::string_view, 3> kH100{"h100-sxm", "h100", "h100sxm5"};
constexpr std::array<std::string_view, 2> kH200{"h200", "h200-sxm"};
constexpr std::array<std::string_view, 2> kA100_40{"a100-40gb", "a100-sxm4-40gb"};
constexpr std::array<std::string_view, 3> kA100_80{"a100-80gb", "a100", "a100-sxm4-80gb"};
constexpr std::array<std::string_view, 1> kL40S{"l40s"};
constexpr std::array<std::string_view, 3> kRtx4090{"rtx4090", "geforce-rtx-4090", "4090"};
constexpr std::array<std::string_view, 4> kRtxPro6000{"rtxpro6000", "rtx-pro-6000-blackwell",
                                                      "rtx-pro-6000-blackwell-server-edition",
                                                      "rtxpro6000-blackwell"};
constexpr std::array<std::string_view, 2> kB200{"b200", "hgx-b200"};

const std::array<GpuTableEntry, 8> kTable{{
    {{"H100-SXM", 989.4, 3350.0, 79.19, 450.0, 132, 1.0, 1.0, 1.12},
     kH100,
     "NVIDIA H100 Tensor Core GPU datasheet (SXM5: BF16 1,979 TFLOPS with sparsity = 989.4 "
     "dense, 3.35 TB/s HBM3, 80 GB, NVLink 900 GB/s bidirectional; 132 SMs: H100 whitepaper). "
     "Memory efficiency scale 1.12: memory-bound dense GEMMs in the vidur H100 profiles reach "
     "0.955 of the bandwidth (0.85 is the default)"},
    {{"H200", 989.4, 4800.0, 139.8, 450.0, 132, 1.0},
     kH200,
     "NVIDIA H200 Tensor Core GPU datasheet (SXM: BF16 1,979 TFLOPS with sparsity, 4.8 TB/s "
     "HBM3e, 141 GB, NVLink 900 GB/s bidirectional; 132 SMs as H100 SXM)"},
    {{"A100-40GB", 312.0, 1555.0, 39.59, 300.0, 108, 1.0},
     kA100_40,
     "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40 GB: BF16 312 TFLOPS dense, 1,555 GB/s "
     "HBM2, NVLink 600 GB/s bidirectional; 108 SMs: A100 whitepaper)"},
    {{"A100-80GB", 312.0, 2039.0, 79.35, 300.0, 108, 1.0},
     kA100_80,
     "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80 GB: BF16 312 TFLOPS dense, 2,039 GB/s "
     "HBM2e, NVLink 600 GB/s bidirectional; 108 SMs: A100 whitepaper)"},
    {{"L40S", 362.05, 864.0, 44.53, 32.0, 142, 1.0},
     kL40S,
     "NVIDIA L40S datasheet (BF16 733 TFLOPS with sparsity = 362 dense, 864 GB/s GDDR6, 48 GB, "
     "PCIe Gen4 x16 64 GB/s bidirectional, no NVLink; 142 SMs)"},
    {{"RTX4090", 165.2, 1008.0, 23.52, 32.0, 128, 1.3, 1.0, 1.13, 1.27},
     kRtx4090,
     "NVIDIA Ada Lovelace GPU architecture whitepaper v2.1, appendix table (GeForce RTX 4090: "
     "peak BF16 tensor TFLOPS with FP32 accumulate 165.2 dense, 1,008 GB/s GDDR6X, 24 GB; PCIe "
     "Gen4 x16, no NVLink; 128 SMs); memory 25,250,627,584 B as recorded by torch on an RTX 4090. "
     "Compute efficiency scale 1.3: in the LLMServingSim RTX 4090 kernel profiles (vLLM 0.19) "
     "dense BF16 GEMMs of >= 1,024 tokens reach a median 96 % of the datasheet peak, against "
     "68-74 % on A100, H100 (vidur) and RTX PRO 6000 (LLMServingSim). Memory efficiency scale "
     "1.13 and attention efficiency scale 1.27: in the same profiles memory-bound dense GEMMs "
     "reach 0.963 of the bandwidth (default 0.85) and decode attention 0.892 (default 0.7)"},
    {{"RTXPRO6000", 503.8, 1792.0, 94.97, 64.0, 188, 1.0, 0.5, 1.04, 1.03},
     kRtxPro6000,
     "NVIDIA RTX Blackwell GPU architecture whitepaper, RTX PRO 6000 Blackwell (peak FP16/BF16 "
     "tensor TFLOPS with FP32 accumulate 503.8 dense, 1,792 GB/s GDDR7, 96 GB; PCIe Gen5 x16 "
     "128 GB/s bidirectional, no NVLink; 188 SMs). Interconnect efficiency scale 0.5: NCCL "
     "all_reduce_perf on RTX PRO 6000 Blackwell servers without PCIe switches, default NCCL "
     "settings, 32 MB: bus bandwidth 22.2 GB/s (github.com/voipmonitor/rtx6kpro, "
     "hardware/pcie-bandwidth.md, commit 070506f; 37.6-41 GB/s only with tuned channels or "
     "PCIe switches) = 0.35 of the 64 GB/s link, half the 0.7 of the NVLink profiles "
     "allreduce_efficiency is fitted to. Memory efficiency scale 1.04 and attention efficiency "
     "scale 1.03: in the LLMServingSim RTX PRO 6000 profiles memory-bound dense GEMMs reach "
     "0.886 of the bandwidth (default 0.85) and decode attention 0.72 (default 0.7)"},
    {{"B200", 2250.0, 8000.0, 178.4, 900.0, 148, 1.0},
     kB200,
     "NVIDIA HGX B200 datasheet (per GPU: FP16/BF16 4.5 PFLOPS with sparsity = 2.25 dense, "
     "8 TB/s HBM3e, 180 GB; NVLink 5 1.8 TB/s bidirectional; 148 SMs)"},
}};

std::string normalise(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == ' ' || c == '-' || c == '_') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace

std::span<const GpuTableEntry> gpuTable() { return kTable; }

std::optional<GpuSpec> findGpu(std::string_view name) {
  const std::string key = normalise(name);
  for (const GpuTableEntry& e : kTable) {
    if (normalise(e.spec.name) == key) return e.spec;
    for (std::string_view alias : e.aliases) {
      if (normalise(alias) == key) return e.spec;
    }
  }
  return std::nullopt;
}

std::string gpuNameList(std::string_view sep) {
  std::string out;
  for (const GpuTableEntry& e : kTable) {
    if (!out.empty()) out += sep;
    out += e.spec.name;
  }
  return out;
}

std::optional<std::string> checkGpuSpec(const GpuSpec& gpu, std::string_view prefix) {
  for (const auto& [field, v] :
       {std::pair<std::string_view, double>{"bf16_tflops", gpu.bf16_tflops},
        {"memory_bandwidth_gbps", gpu.memory_bandwidth_gbps},
        {"memory_gib", gpu.memory_gib},
        {"interconnect_gbps", gpu.interconnect_gbps}}) {
    if (!(std::isfinite(v) && v > 0.0)) {
      return std::string(prefix) + std::string(field) + " must be finite and > 0 (got " +
             std::to_string(v) + ")";
    }
  }
  for (const auto& [field, v] :
       {std::pair<std::string_view, double>{"compute_efficiency_scale",
                                            gpu.compute_efficiency_scale},
        {"interconnect_efficiency_scale", gpu.interconnect_efficiency_scale},
        {"memory_efficiency_scale", gpu.memory_efficiency_scale},
        {"attention_efficiency_scale", gpu.attention_efficiency_scale}}) {
    if (!(std::isfinite(v) && v > 0.0 && v <= 4.0)) {
      return std::string(prefix) + std::string(field) + " must be in (0, 4] (got " +
             std::to_string(v) + ")";
    }
  }
  return std::nullopt;
}

}  // namespace mocker::engine
