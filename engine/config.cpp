#include "engine/config.h"

#include "base/enum_names.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace mocker::engine {
namespace {

template <typename E, std::size_t N>
Result<E> parseEnum(std::string_view field, std::string_view s, const EnumNames<E, N>& table) {
  if (auto v = enumFromName(table, s)) return *v;
  return invalidArgument(std::string(field) + ": unknown value '" + std::string(s) +
                         "' (allowed: " + enumNameList(table, " | ") + ")");
}

constexpr EnumNames<EngineType, 3> kEngineTypes{
    {{"vllm", EngineType::Vllm}, {"sglang", EngineType::Sglang}, {"trtllm", EngineType::Trtllm}}};
constexpr EnumNames<PreemptionMode, 2> kPreemptionModes{
    {{"lifo", PreemptionMode::Lifo}, {"fifo", PreemptionMode::Fifo}}};
constexpr EnumNames<TimingModelKind, 4> kTimingModels{
    {{"polynomial", TimingModelKind::Polynomial},
     {"interpolated", TimingModelKind::Interpolated},
     {"fixed", TimingModelKind::Fixed},
     {"roofline", TimingModelKind::Roofline}}};
constexpr EnumNames<KvEventVisibility, 2> kVisibilities{
    {{"pass_end", KvEventVisibility::PassEnd}, {"pass_start", KvEventVisibility::PassStart}}};
constexpr EnumNames<DecodeLoad, 2> kDecodeLoads{
    {{"physical", DecodeLoad::Physical}, {"logical", DecodeLoad::Logical}}};
constexpr EnumNames<WorkerType, 3> kWorkerTypes{{{"aggregated", WorkerType::Aggregated},
                                                 {"prefill", WorkerType::Prefill},
                                                 {"decode", WorkerType::Decode}}};
constexpr EnumNames<KvTransferCharge, 2> kTransferCharges{
    {{"full_prompt", KvTransferCharge::FullPrompt},
     {"missing_blocks", KvTransferCharge::MissingBlocks}}};
constexpr EnumNames<SchedulePolicy, 3> kPolicies{
    {{"fcfs", SchedulePolicy::Fcfs}, {"fifo", SchedulePolicy::Fcfs}, {"lpm", SchedulePolicy::Lpm}}};

/// A rule about `fields` (the offending one first) with the message "<field> must be <rule> (got
/// <got>)".
ConfigError fieldError(std::vector<std::string> fields, const std::string& rule,
                       const std::string& got) {
  std::string message = fields.front() + " must be " + rule + " (got " + got + ")";
  return {std::move(fields), invalidArgument(std::move(message))};
}
ConfigError fieldError(std::string_view field, const std::string& rule, const std::string& got) {
  return fieldError(std::vector<std::string>{std::string(field)}, rule, got);
}
/// A rule about `fields` whose message (starting with fields.front()) is written out in full.
ConfigError ruleError(std::vector<std::string> fields, std::string message) {
  return {std::move(fields), invalidArgument(std::move(message))};
}

std::string num(double v) {
  std::string s = std::to_string(v);
  return s;
}

/// Integers in messages (sizes, counts, indices).
std::string num(std::integral auto v) { return std::to_string(v); }

/// Profile errors name the array in the message; their field is "timing_profile".
ConfigError profileError(const std::string& array, const std::string& rule,
                         const std::string& got) {
  return ruleError({"timing_profile"},
                   "timing_profile." + array + " must be " + rule + " (got " + got + ")");
}

std::optional<ConfigError> checkIncreasing(const std::string& array, const std::vector<double>& v) {
  if (v.empty()) return profileError(array, "a non-empty array", "an empty array");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return profileError(array, "finite", "a non-finite element");
    if (i > 0 && !(v[i] > v[i - 1])) {
      return profileError(
          array, "strictly increasing",
          "element " + std::to_string(i) + " = " + num(v[i]) + " after " + num(v[i - 1]));
    }
  }
  return std::nullopt;
}

std::optional<ConfigError> checkProfile(const TimingProfile& p) {
  if (auto e = checkIncreasing("prefill_isl", p.prefill_isl)) return e;
  if (p.prefill_ttft_ms.size() != p.prefill_isl.size()) {
    return profileError("prefill_ttft_ms",
                        "as long as prefill_isl (" + std::to_string(p.prefill_isl.size()) + ")",
                        std::to_string(p.prefill_ttft_ms.size()) + " elements");
  }
  for (double v : p.prefill_ttft_ms) {
    if (!std::isfinite(v)) return profileError("prefill_ttft_ms", "finite", num(v));
  }
  if (auto e = checkIncreasing("decode_active_kv_tokens", p.decode_active_kv_tokens)) return e;
  if (auto e = checkIncreasing("decode_context_length", p.decode_context_length)) return e;
  if (p.decode_itl.size() != p.decode_active_kv_tokens.size()) {
    return profileError("decode_itl", std::to_string(p.decode_active_kv_tokens.size()) + " rows",
                        std::to_string(p.decode_itl.size()) + " rows");
  }
  for (std::size_t r = 0; r < p.decode_itl.size(); ++r) {
    if (p.decode_itl[r].size() != p.decode_context_length.size()) {
      return profileError("decode_itl[" + std::to_string(r) + "]",
                          std::to_string(p.decode_context_length.size()) + " columns",
                          std::to_string(p.decode_itl[r].size()) + " columns");
    }
    for (double v : p.decode_itl[r]) {
      if (!std::isfinite(v)) return profileError("decode_itl", "finite", num(v));
    }
  }
  return std::nullopt;
}

// KV offload tiers (README "KV offload tiers").
std::optional<ConfigError> checkOffload(const EngineConfig& c) {
  if (c.num_g3_blocks > 0 && c.num_g2_blocks == 0) {
    return ruleError({"num_g3_blocks", "num_g2_blocks"},
                     "num_g3_blocks needs num_g2_blocks > 0 (got num_g3_blocks " +
                         std::to_string(c.num_g3_blocks) +
                         ", num_g2_blocks 0): G3 holds blocks G2 evicts");
  }
  if (c.offload_batch_size < 1) {
    return fieldError("offload_batch_size", ">= 1", std::to_string(c.offload_batch_size));
  }
  for (const auto& [name, value] :
       {std::pair{"offload_gpu_to_host_gbps", c.offload_gpu_to_host_gbps},
        std::pair{"offload_host_to_gpu_gbps", c.offload_host_to_gpu_gbps},
        std::pair{"offload_host_to_disk_gbps", c.offload_host_to_disk_gbps},
        std::pair{"offload_disk_to_host_gbps", c.offload_disk_to_host_gbps}}) {
    if (!std::isfinite(value) || value <= 0) return fieldError(name, "finite and > 0", num(value));
  }
  if (c.num_g2_blocks == 0) return std::nullopt;
  if (c.engine_type == EngineType::Sglang && c.num_g3_blocks > 0) {
    return ruleError({"num_g3_blocks", "engine_type"},
                     "num_g3_blocks must be 0 with engine_type sglang: its host tier is HiCache's "
                     "host pool; HiCache's storage layer (L3) is not modelled");
  }
  if (!c.enable_prefix_caching) {
    return ruleError({"num_g2_blocks", "enable_prefix_caching"},
                     "num_g2_blocks needs enable_prefix_caching: offloaded blocks are found by "
                     "their prefix hashes");
  }
  return std::nullopt;
}

// LoRA adapters (README "LoRA adapters").
std::optional<ConfigError> checkLora(const EngineConfig& c) {
  if (!std::isfinite(c.lora_load_ms) || c.lora_load_ms < 0) {
    return fieldError("lora_load_ms", "finite and >= 0", num(c.lora_load_ms));
  }
  if (c.max_cpu_loras && *c.max_cpu_loras < c.max_loras) {
    return fieldError(std::vector<std::string>{"max_cpu_loras", "max_loras"},
                      ">= max_loras (" + std::to_string(c.max_loras) + ")",
                      std::to_string(*c.max_cpu_loras));
  }
  if (c.max_loras == 0) return std::nullopt;
  if (c.engine_type == EngineType::Sglang) {
    return ruleError({"max_loras", "engine_type"},
                     "max_loras must be 0 with engine_type sglang: LoRA adapters are modelled for "
                     "vllm and trtllm only");
  }
  if (c.worker_type != WorkerType::Aggregated) {
    return ruleError({"max_loras", "worker_type"},
                     "max_loras must be 0 with worker_type " +
                         std::string(toString(c.worker_type)) +
                         ": LoRA adapters are modelled for aggregated workers only (a handoff "
                         "does not carry its adapter)");
  }
  return std::nullopt;
}

}  // namespace

std::string_view toString(EngineType v) { return enumName(kEngineTypes, v); }
std::string_view toString(PreemptionMode v) { return enumName(kPreemptionModes, v); }
std::string_view toString(TimingModelKind v) { return enumName(kTimingModels, v); }
std::string_view toString(KvEventVisibility v) { return enumName(kVisibilities, v); }
std::string_view toString(SchedulePolicy v) { return enumName(kPolicies, v); }
std::string_view toString(DecodeLoad v) { return enumName(kDecodeLoads, v); }
std::string_view toString(WorkerType v) { return enumName(kWorkerTypes, v); }
std::string_view toString(KvTransferCharge v) { return enumName(kTransferCharges, v); }

Result<EngineType> parseEngineType(std::string_view s) {
  return parseEnum("engine_type", s, kEngineTypes);
}
Result<PreemptionMode> parsePreemptionMode(std::string_view s) {
  return parseEnum("preemption_mode", s, kPreemptionModes);
}
Result<TimingModelKind> parseTimingModelKind(std::string_view s) {
  return parseEnum("timing_model", s, kTimingModels);
}
Result<KvEventVisibility> parseKvEventVisibility(std::string_view s) {
  return parseEnum("kv_event_visibility", s, kVisibilities);
}
Result<SchedulePolicy> parseSchedulePolicy(std::string_view s) {
  return parseEnum("sglang.schedule_policy", s, kPolicies);
}

Result<DecodeLoad> parseDecodeLoad(std::string_view s) {
  return parseEnum("decode_load", s, kDecodeLoads);
}

Result<WorkerType> parseWorkerType(std::string_view s) {
  return parseEnum("worker_type", s, kWorkerTypes);
}

Result<KvTransferCharge> parseKvTransferCharge(std::string_view s) {
  return parseEnum("kv_transfer_charge", s, kTransferCharges);
}

double kvTransferMs(const EngineConfig& config, std::uint64_t tokens) {
  const double speedup = config.speedup_ratio > 0.0 ? config.speedup_ratio : 1.0;
  const double bytes = static_cast<double>(tokens) * static_cast<double>(config.kv_bytes_per_token);
  return bytes / (config.kv_transfer_bandwidth_gbps * 1e9) * 1000.0 / speedup;
}

std::uint32_t effectiveBlockSize(const EngineConfig& config) {
  if (config.block_size != 0) return config.block_size;
  switch (config.engine_type) {
    case EngineType::Vllm:
      return 64;
    case EngineType::Trtllm:
      return 32;
    case EngineType::Sglang:
      return config.sglang.page_size == 0 ? 1 : config.sglang.page_size;  // page_size wins
  }
  return 64;
}

Result<KvCapacity> engineKvCapacity(const EngineConfig& config) {
  const std::uint32_t budget = config.engine_type == EngineType::Sglang
                                   ? config.sglang.chunked_prefill_size
                                   : config.max_num_batched_tokens.value_or(8192);
  return rooflineKvCapacity(*config.roofline, effectiveBlockSize(config), budget,
                            config.max_num_seqs.value_or(256));
}

std::uint32_t engineCudaGraphMaxTokens(const EngineConfig& config) {
  if (config.engine_type != EngineType::Vllm || config.enforce_eager) return 0;
  const std::uint64_t decode_query_len =
      1 + std::uint64_t{config.spec_num_draft_tokens.value_or(0)};
  const std::uint64_t seqs = std::uint64_t{config.max_num_seqs.value_or(256)} * decode_query_len;
  return vllmCudaGraphMaxTokens(static_cast<std::uint32_t>(std::min<std::uint64_t>(seqs, 1u << 20)),
                                config.max_num_batched_tokens.value_or(8192));
}

std::uint32_t effectiveNumGpuBlocks(const EngineConfig& config) {
  if (config.num_gpu_blocks) return *config.num_gpu_blocks;
  if (config.timing_model == TimingModelKind::Roofline && config.roofline) {
    auto kv = engineKvCapacity(config);
    if (kv.has_value()) {
      return static_cast<std::uint32_t>(std::min<std::uint64_t>(
          kv.value().num_blocks, std::numeric_limits<std::uint32_t>::max()));
    }
  }
  const std::uint64_t block_size = std::max<std::uint32_t>(effectiveBlockSize(config), 1);
  return static_cast<std::uint32_t>((kDefaultKvCapacityTokens + block_size - 1) / block_size);
}

std::optional<std::uint64_t> deploymentKvCacheTokens(const EngineConfig& config) {
  if (config.num_gpu_blocks || config.timing_model != TimingModelKind::Roofline ||
      !config.roofline) {
    return std::nullopt;
  }
  return std::uint64_t{effectiveNumGpuBlocks(config)} * effectiveBlockSize(config);
}

std::string gpuKvCacheSizeText(std::uint64_t tokens) {
  const std::string digits = std::to_string(tokens);
  std::string grouped;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return "GPU KV cache size: " + grouped + " tokens";
}

namespace {

/// Sizes, limits and speed-ups.
std::optional<ConfigError> checkShape(const EngineConfig& c) {
  if (c.num_gpu_blocks && *c.num_gpu_blocks < 1) {
    return fieldError("num_gpu_blocks", ">= 1", num(*c.num_gpu_blocks));
  }
  const std::uint32_t block_size = effectiveBlockSize(c);
  if (block_size < 1) return fieldError("block_size", ">= 1", num(block_size));
  if (c.max_model_len && *c.max_model_len < 2) {
    return fieldError("max_model_len", ">= 2 or null", num(*c.max_model_len));
  }
  if (c.max_model_len && c.engine_type == EngineType::Sglang) {
    return ruleError({"max_model_len", "engine_type"},
                     "max_model_len applies only to engine_type vllm or trtllm");
  }
  if (c.max_num_seqs && *c.max_num_seqs < 1) {
    return fieldError("max_num_seqs", ">= 1 or null (unbounded)", num(*c.max_num_seqs));
  }
  if (c.max_num_batched_tokens && *c.max_num_batched_tokens < 1) {
    return fieldError("max_num_batched_tokens", ">= 1 or null (unbounded)",
                      num(*c.max_num_batched_tokens));
  }
  if (c.dp_size < 1) return fieldError("dp_size", ">= 1", num(c.dp_size));
  if (c.dp_size > 1024) return fieldError("dp_size", "<= 1024", num(c.dp_size));
  if (!std::isfinite(c.speedup_ratio) || c.speedup_ratio < 0) {
    return fieldError("speedup_ratio", "finite and >= 0", num(c.speedup_ratio));
  }
  if (!std::isfinite(c.decode_speedup_ratio) || c.decode_speedup_ratio <= 0) {
    return fieldError("decode_speedup_ratio", "finite and > 0", num(c.decode_speedup_ratio));
  }
  return std::nullopt;
}

/// Speculative decoding.
std::optional<ConfigError> checkSpeculative(const EngineConfig& c) {
  if (c.spec_num_draft_tokens &&
      (*c.spec_num_draft_tokens < 1 || *c.spec_num_draft_tokens > kMaxSpecDraftTokens)) {
    return fieldError("spec_num_draft_tokens", "in 1..=5 or null (off)",
                      num(*c.spec_num_draft_tokens));
  }
  if (c.spec_accept_rates.size() > kMaxSpecDraftTokens) {
    return fieldError("spec_accept_rates", "at most 5 rates",
                      num(c.spec_accept_rates.size()) + " rates");
  }
  for (std::size_t i = 0; i < c.spec_accept_rates.size(); ++i) {
    const double p = c.spec_accept_rates[i];
    if (!std::isfinite(p) || p < 0 || p > 1) {
      return fieldError("spec_accept_rates", "finite and in [0, 1] each",
                        "element " + num(i) + " = " + num(p));
    }
  }
  if (c.spec_num_draft_tokens && c.decode_speedup_ratio != 1.0) {
    return ruleError({"decode_speedup_ratio", "spec_num_draft_tokens"},
                     "decode_speedup_ratio must be 1 when spec_num_draft_tokens is set (got " +
                         num(c.decode_speedup_ratio) +
                         "): speculative decoding models the decode speedup itself");
  }
  return std::nullopt;
}

/// Disaggregated prefill/decode: KV handoff size, link and hold timeout.
std::optional<ConfigError> checkDisaggregation(const EngineConfig& c) {
  if (c.kv_bytes_per_token < 1) {
    return fieldError("kv_bytes_per_token", ">= 1", num(c.kv_bytes_per_token));
  }
  if (!std::isfinite(c.kv_transfer_bandwidth_gbps) || c.kv_transfer_bandwidth_gbps <= 0) {
    return fieldError("kv_transfer_bandwidth_gbps", "finite and > 0",
                      num(c.kv_transfer_bandwidth_gbps));
  }
  if (c.kv_hold_timeout_ms &&
      (!std::isfinite(*c.kv_hold_timeout_ms) || *c.kv_hold_timeout_ms < 0)) {
    return fieldError("kv_hold_timeout_ms", "finite and >= 0, or null (hold forever)",
                      num(*c.kv_hold_timeout_ms));
  }
  return std::nullopt;
}

/// The timing model and what it requires.
std::optional<ConfigError> checkTiming(const EngineConfig& c) {
  switch (c.timing_model) {
    case TimingModelKind::Polynomial:
      break;
    case TimingModelKind::Interpolated:
      if (!c.timing_profile) {
        return ruleError({"timing_profile", "timing_model"},
                         "timing_profile_path is required when timing_model = interpolated");
      }
      if (auto e = checkProfile(*c.timing_profile)) return e;
      break;
    case TimingModelKind::Fixed:
      for (const auto& [name, value] : {std::pair{"fixed_prefill_ms", c.fixed_prefill_ms},
                                        std::pair{"fixed_decode_ms", c.fixed_decode_ms}}) {
        if (!value) {
          return ruleError({name, "timing_model"},
                           std::string(name) + " is required when timing_model = fixed");
        }
        if (!std::isfinite(*value) || *value < 0) {
          return fieldError(name, "finite and >= 0", num(*value));
        }
      }
      break;
    case TimingModelKind::Roofline:
      if (!c.roofline) {
        return ruleError({"roofline", "timing_model"},
                         "roofline (model and gpu) is required when timing_model = roofline");
      }
      if (auto problem = checkRooflineConfig(*c.roofline)) {
        return ruleError({"roofline", "timing_model"}, std::move(*problem));
      }
      if (!c.num_gpu_blocks) {
        auto kv = engineKvCapacity(c);
        if (!kv.has_value()) return ruleError({"roofline", "num_gpu_blocks"}, kv.error().message);
      }
      break;
  }
  if (c.roofline && c.timing_model != TimingModelKind::Roofline) {
    return ruleError({"roofline", "timing_model"}, "roofline is set but timing_model is " +
                                                       std::string(toString(c.timing_model)) +
                                                       " (set timing_model = roofline)");
  }
  return std::nullopt;
}

/// SGLang settings.
std::optional<ConfigError> checkSglang(const EngineConfig& c) {
  const std::uint32_t block_size = effectiveBlockSize(c);
  // SGLang settings are range-checked whatever the engine type (a bad value is never silently
  // ignored); the cross-field rules apply only when the SGLang scheduler is selected.
  const SglangConfig& s = c.sglang;
  if (s.max_prefill_tokens < 1) {
    return fieldError("sglang.max_prefill_tokens", ">= 1", num(s.max_prefill_tokens));
  }
  if (s.clip_max_new_tokens < 1) {
    return fieldError("sglang.clip_max_new_tokens", ">= 1", num(s.clip_max_new_tokens));
  }
  if (!std::isfinite(s.schedule_conservativeness) || s.schedule_conservativeness < 0 ||
      s.schedule_conservativeness > 1) {
    return fieldError("sglang.schedule_conservativeness", "finite and in [0, 1]",
                      num(s.schedule_conservativeness));
  }
  if (s.chunked_prefill_size < 1) {
    return fieldError("sglang.chunked_prefill_size", ">= 1", num(s.chunked_prefill_size));
  }
  if (c.engine_type == EngineType::Sglang) {
    if (c.block_size != 0 && s.page_size != 0 && c.block_size != s.page_size) {
      return ruleError({"sglang.page_size", "block_size", "engine_type"},
                       "sglang.page_size (" + num(s.page_size) + ") must equal block_size (" +
                           num(c.block_size) + ") when both are set");
    }
    if (s.chunked_prefill_size % block_size != 0) {
      return fieldError(
          {"sglang.chunked_prefill_size", "block_size", "sglang.page_size", "engine_type"},
          ">= 1 and divisible by block_size " + num(block_size), num(s.chunked_prefill_size));
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ConfigError> checkEngineConfig(const EngineConfig& c) {
  for (const auto check : {checkShape, checkSpeculative, checkDisaggregation, checkOffload,
                           checkLora, checkTiming, checkSglang}) {
    if (auto e = check(c)) return e;
  }
  return std::nullopt;
}

Status validateEngineConfig(const EngineConfig& config) {
  if (auto e = checkEngineConfig(config)) return std::move(e->error);
  return {};
}

}  // namespace mocker::engine
