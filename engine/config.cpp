#include "engine/config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>

namespace mocker::engine {
namespace {

std::string lowerCase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

/// Shortest round-trippable text of a double for error messages.
std::string num(double v) {
  std::string s = std::to_string(v);
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

template <typename Enum, std::size_t N>
Result<Enum> parseEnum(std::string_view what, std::string_view s,
                       const std::array<std::pair<std::string_view, Enum>, N>& names,
                       std::string_view expected) {
  const std::string lower = lowerCase(s);
  for (const auto& [name, value] : names) {
    if (lower == name) return value;
  }
  return invalidArgument("unknown " + std::string(what) + " '" + std::string(s) + "' (expected " +
                         std::string(expected) + ")");
}

constexpr std::array<std::pair<std::string_view, EngineType>, 3> kEngineTypes{{
    {"vllm", EngineType::Vllm},
    {"sglang", EngineType::Sglang},
    {"trtllm", EngineType::Trtllm},
}};
constexpr std::array<std::pair<std::string_view, PreemptionMode>, 2> kPreemptionModes{{
    {"lifo", PreemptionMode::Lifo},
    {"fifo", PreemptionMode::Fifo},
}};
constexpr std::array<std::pair<std::string_view, TimingModelKind>, 3> kTimingModels{{
    {"polynomial", TimingModelKind::Polynomial},
    {"interpolated", TimingModelKind::Interpolated},
    {"fixed", TimingModelKind::Fixed},
}};
constexpr std::array<std::pair<std::string_view, KvEventVisibility>, 2> kVisibilities{{
    {"pass_end", KvEventVisibility::PassEnd},
    {"pass_start", KvEventVisibility::PassStart},
}};
constexpr std::array<std::pair<std::string_view, SchedulePolicy>, 3> kSchedulePolicies{{
    {"fcfs", SchedulePolicy::Fcfs},
    {"fifo", SchedulePolicy::Fcfs},
    {"lpm", SchedulePolicy::Lpm},
}};

Status strictlyIncreasing(const std::vector<double>& v, const std::string& field) {
  if (v.empty()) return invalidArgument(field + " must not be empty");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return invalidArgument(field + "[" + std::to_string(i) + "] must be finite");
    }
    if (i > 0 && !(v[i] > v[i - 1])) {
      return invalidArgument(field + " must be strictly increasing (element " + std::to_string(i) +
                             ": " + num(v[i]) + " after " + num(v[i - 1]) + ")");
    }
  }
  return {};
}

Status allFinite(const std::vector<double>& v, const std::string& field) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return invalidArgument(field + "[" + std::to_string(i) + "] must be finite");
    }
  }
  return {};
}

Status validateProfile(const TimingProfile& p) {
  MOCKER_TRY_VOID(strictlyIncreasing(p.prefill_isl, "timing_profile.prefill_isl"));
  if (p.prefill_ttft_ms.size() != p.prefill_isl.size()) {
    return invalidArgument(
        "timing_profile.prefill_ttft_ms must have the same length as "
        "prefill_isl (" +
        std::to_string(p.prefill_isl.size()) + "), got " +
        std::to_string(p.prefill_ttft_ms.size()));
  }
  MOCKER_TRY_VOID(allFinite(p.prefill_ttft_ms, "timing_profile.prefill_ttft_ms"));
  MOCKER_TRY_VOID(
      strictlyIncreasing(p.decode_active_kv_tokens, "timing_profile.decode_active_kv_tokens"));
  MOCKER_TRY_VOID(
      strictlyIncreasing(p.decode_context_length, "timing_profile.decode_context_length"));
  if (p.decode_itl.size() != p.decode_active_kv_tokens.size()) {
    return invalidArgument(
        "timing_profile.decode_itl must have one row per "
        "decode_active_kv_tokens entry (" +
        std::to_string(p.decode_active_kv_tokens.size()) + "), got " +
        std::to_string(p.decode_itl.size()));
  }
  for (std::size_t r = 0; r < p.decode_itl.size(); ++r) {
    const std::string row = "timing_profile.decode_itl[" + std::to_string(r) + "]";
    if (p.decode_itl[r].size() != p.decode_context_length.size()) {
      return invalidArgument(row + " must have one column per decode_context_length entry (" +
                             std::to_string(p.decode_context_length.size()) + "), got " +
                             std::to_string(p.decode_itl[r].size()));
    }
    MOCKER_TRY_VOID(allFinite(p.decode_itl[r], row));
  }
  return {};
}

}  // namespace

Status validateEngineConfig(const EngineConfig& c) {
  if (c.num_gpu_blocks < 1) {
    return invalidArgument("num_gpu_blocks must be >= 1 (got 0)");
  }
  if (c.max_model_len && *c.max_model_len < 2) {
    return invalidArgument("max_model_len must be >= 2 or null (got " +
                           std::to_string(*c.max_model_len) + ")");
  }
  if (c.max_model_len && c.engine_type == EngineType::Sglang) {
    return invalidArgument("max_model_len is supported only for engine_type vllm or trtllm");
  }
  if (c.max_num_seqs && *c.max_num_seqs < 1) {
    return invalidArgument("max_num_seqs must be >= 1 or null (unbounded) (got 0)");
  }
  if (c.max_num_batched_tokens && *c.max_num_batched_tokens < 1) {
    return invalidArgument("max_num_batched_tokens must be >= 1 or null (unbounded) (got 0)");
  }
  if (c.dp_size < 1) return invalidArgument("dp_size must be >= 1 (got 0)");

  switch (c.timing_model) {
    case TimingModelKind::Polynomial:
      break;
    case TimingModelKind::Interpolated:
      if (!c.timing_profile) {
        return invalidArgument("timing_profile is required when timing_model = interpolated");
      }
      MOCKER_TRY_VOID(validateProfile(*c.timing_profile));
      break;
    case TimingModelKind::Fixed:
      for (const auto& [name, value] : {std::pair{"fixed_prefill_ms", c.fixed_prefill_ms},
                                        std::pair{"fixed_decode_ms", c.fixed_decode_ms}}) {
        if (!value) {
          return invalidArgument(std::string(name) + " is required when timing_model = fixed");
        }
        if (!std::isfinite(*value) || *value < 0) {
          return invalidArgument(std::string(name) + " must be finite and >= 0 (got " +
                                 num(*value) + ")");
        }
      }
      break;
  }
  if (!std::isfinite(c.speedup_ratio) || c.speedup_ratio < 0) {
    return invalidArgument("speedup_ratio must be finite and >= 0 (got " + num(c.speedup_ratio) +
                           ")");
  }
  if (!std::isfinite(c.decode_speedup_ratio) || c.decode_speedup_ratio <= 0) {
    return invalidArgument("decode_speedup_ratio must be finite and > 0 (got " +
                           num(c.decode_speedup_ratio) + ")");
  }

  const SglangConfig& s = c.sglang;
  if (s.page_size < 1) return invalidArgument("sglang.page_size must be >= 1 (got 0)");
  if (s.max_prefill_tokens < 1) {
    return invalidArgument("sglang.max_prefill_tokens must be >= 1 (got 0)");
  }
  if (s.chunked_prefill_size < 1) {
    return invalidArgument("sglang.chunked_prefill_size must be >= 1 (got 0)");
  }
  if (s.clip_max_new_tokens < 1) {
    return invalidArgument("sglang.clip_max_new_tokens must be >= 1 (got 0)");
  }
  if (!std::isfinite(s.schedule_conservativeness) || s.schedule_conservativeness < 0 ||
      s.schedule_conservativeness > 1) {
    return invalidArgument("sglang.schedule_conservativeness must be finite and in [0, 1] (got " +
                           num(s.schedule_conservativeness) + ")");
  }
  if (c.engine_type == EngineType::Sglang) {
    if (c.block_size != 0 && c.block_size != s.page_size) {
      return invalidArgument("sglang.page_size (" + std::to_string(s.page_size) +
                             ") must equal block_size (" + std::to_string(c.block_size) +
                             ") when both are set");
    }
    const std::uint32_t block = effectiveBlockSize(c);
    if (s.chunked_prefill_size % block != 0) {
      return invalidArgument("sglang.chunked_prefill_size (" +
                             std::to_string(s.chunked_prefill_size) +
                             ") must be divisible by block_size (" + std::to_string(block) + ")");
    }
  }
  return {};
}

std::uint32_t effectiveBlockSize(const EngineConfig& c) {
  if (c.block_size != 0) return c.block_size;
  switch (c.engine_type) {
    case EngineType::Vllm:
      return 64;
    case EngineType::Trtllm:
      return 32;
    case EngineType::Sglang:
      return c.sglang.page_size;
  }
  return 64;
}

std::string_view toString(EngineType v) {
  for (const auto& [name, value] : kEngineTypes) {
    if (value == v) return name;
  }
  return "vllm";
}
std::string_view toString(PreemptionMode v) { return v == PreemptionMode::Lifo ? "lifo" : "fifo"; }
std::string_view toString(TimingModelKind v) {
  for (const auto& [name, value] : kTimingModels) {
    if (value == v) return name;
  }
  return "polynomial";
}
std::string_view toString(KvEventVisibility v) {
  return v == KvEventVisibility::PassEnd ? "pass_end" : "pass_start";
}
std::string_view toString(SchedulePolicy v) { return v == SchedulePolicy::Fcfs ? "fcfs" : "lpm"; }

Result<EngineType> parseEngineType(std::string_view s) {
  return parseEnum("engine_type", s, kEngineTypes, "vllm, sglang or trtllm");
}
Result<PreemptionMode> parsePreemptionMode(std::string_view s) {
  return parseEnum("preemption_mode", s, kPreemptionModes, "lifo or fifo");
}
Result<TimingModelKind> parseTimingModelKind(std::string_view s) {
  return parseEnum("timing_model", s, kTimingModels, "polynomial, interpolated or fixed");
}
Result<KvEventVisibility> parseKvEventVisibility(std::string_view s) {
  return parseEnum("kv_event_visibility", s, kVisibilities, "pass_end or pass_start");
}
Result<SchedulePolicy> parseSchedulePolicy(std::string_view s) {
  return parseEnum("schedule_policy", s, kSchedulePolicies, "fcfs (alias fifo) or lpm");
}

}  // namespace mocker::engine
