// The configuration key table: every key's path, type and accessor into ServiceConfig, with the
// typed assignment used by the TOML reader and the command-line setter, the enum name tables, and
// the dumper (dumpServiceConfig) and field-by-field equality built on the same table.
//
// Design: one table of keys (keys()) drives reading, setting and dumping, so the three can never
// disagree about a key's name, type or spelling. Values from a TOML node or from command-line
// text are first turned into a ConfigValue and then assigned through the key's typed accessor.

#include "service/detail/config_keys.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/ascii.h"
#include "base/closest_name.h"
#include "base/enum_names.h"
#include "protocol/detail/utf8.h"
#include "service/logging.h"

namespace mocker::service {
namespace detail {

// Typed accessors: each key maps a config to a reference to its field.
using U32Ref = std::uint32_t& (*)(ServiceConfig&);
using OptU32Ref = std::optional<std::uint32_t>& (*)(ServiceConfig&);
using U64Ref = std::uint64_t& (*)(ServiceConfig&);
using I64Ref = std::int64_t& (*)(ServiceConfig&);
using DoubleRef = double& (*)(ServiceConfig&);
using OptDoubleRef = std::optional<double>& (*)(ServiceConfig&);
using BoolRef = bool& (*)(ServiceConfig&);
using StringRef = std::string& (*)(ServiceConfig&);
using StringListRef = std::vector<std::string>& (*)(ServiceConfig&);
using DoubleListRef = std::vector<double>& (*)(ServiceConfig&);
/// An enum (or fixed-value) key: read and written by name.
struct EnumField {
  std::string_view (*get)(const ServiceConfig&);
  Status (*set)(ServiceConfig&, std::string_view);
};
using Field = std::variant<U32Ref, OptU32Ref, U64Ref, I64Ref, DoubleRef, OptDoubleRef, BoolRef,
                           StringRef, EnumField, StringListRef, DoubleListRef>;

struct ConfigKey {
  std::string_view table;  ///< "engine.sglang"
  std::string_view name;   ///< "page_size"
  Field field;
  std::string path() const { return std::string(table) + "." + std::string(name); }
};

}  // namespace detail

namespace {

using detail::BoolRef;
using detail::ConfigKey;
using detail::DoubleListRef;
using detail::DoubleRef;
using detail::EnumField;
using detail::I64Ref;
using detail::OptDoubleRef;
using detail::OptU32Ref;
using detail::StringListRef;
using detail::StringRef;
using detail::U32Ref;
using detail::U64Ref;
using Value = detail::ConfigValue;

// ---------------------------------------------------------------------------------------------
// Enum names (case-insensitive; the first name of a value is the one dumped).

// The wire enums' tables belong to their modules (protocol::kKvLayoutNames,
// publishers::kReplayLayoutNames, protocol::kParentRootNames).
constexpr const auto& kLayouts = protocol::kKvLayoutNames;
constexpr const auto& kReplayLayouts = publishers::kReplayLayoutNames;
constexpr const auto& kParentRoots = protocol::kParentRootNames;

template <typename Enum, std::size_t N>
Result<Enum> enumParse(const EnumNames<Enum, N>& names, std::string_view what, std::string_view s) {
  if (auto v = enumFromName(names, s)) return *v;
  return invalidArgument("unknown " + std::string(what) + " '" + std::string(s) +
                         "' (expected one of " + enumNameList(names, ", ") + ")");
}

std::string_view layoutName(protocol::KvLayout v) { return enumName(kLayouts, v); }
std::string_view replayLayoutName(publishers::ReplayLayout v) {
  return enumName(kReplayLayouts, v);
}
std::string_view parentRootName(protocol::ParentRoot v) { return enumName(kParentRoots, v); }
Result<protocol::KvLayout> parseLayout(std::string_view s) {
  return enumParse(kLayouts, "kv_events.layout", s);
}
Result<publishers::ReplayLayout> parseReplayLayout(std::string_view s) {
  return enumParse(kReplayLayouts, "kv_events.replay_layout", s);
}
Result<protocol::ParentRoot> parseParentRoot(std::string_view s) {
  return enumParse(kParentRoots, "kv_events.parent_root", s);
}

constexpr EnumNames<LogFormat, 2> kLogFormats{
    {{"text", LogFormat::Text}, {"json", LogFormat::Json}}};
std::string_view logFormatName(LogFormat v) { return enumName(kLogFormats, v); }
Result<LogFormat> parseLogFormat(std::string_view s) {
  return enumParse(kLogFormats, "logging.format", s);
}

// ---------------------------------------------------------------------------------------------
// Values.

std::string describe(const Value& v) {
  switch (v.index()) {
    case 0:
      return "an integer (" + std::to_string(std::get<0>(v)) + ")";
    case 1:
      return "a float";
    case 2:
      return "a boolean";
    case 3:
      return "a string (\"" + std::get<3>(v) + "\")";
    default:
      return "an array";
  }
}

bool isNone(const Value& v) {
  return std::holds_alternative<std::string>(v) && asciiLower(std::get<std::string>(v)) == "none";
}

Error typeError(std::string_view expected, const Value& got) {
  return invalidArgument("expected " + std::string(expected) + ", got " + describe(got));
}

Result<std::uint32_t> toU32(const Value& v) {
  if (!std::holds_alternative<std::int64_t>(v)) return typeError("an integer", v);
  const std::int64_t i = std::get<std::int64_t>(v);
  if (i < 0 || i > std::numeric_limits<std::uint32_t>::max()) {
    return invalidArgument("must be an integer in [0, 4294967295] (got " + std::to_string(i) + ")");
  }
  return static_cast<std::uint32_t>(i);
}

Result<double> toDouble(const Value& v) {
  if (std::holds_alternative<double>(v)) return std::get<double>(v);
  if (std::holds_alternative<std::int64_t>(v)) {
    return static_cast<double>(std::get<std::int64_t>(v));
  }
  return typeError("a number", v);
}

Status assignTo(const ConfigKey& key, const Value& v, ServiceConfig& c) {
  return std::visit(
      [&](const auto& f) -> Status {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, U32Ref>) {
          MOCKER_TRY(f(c), toU32(v));
        } else if constexpr (std::is_same_v<F, OptU32Ref>) {
          if (isNone(v)) {
            f(c).reset();
          } else if (std::holds_alternative<std::string>(v)) {
            return typeError("an integer or \"none\"", v);
          } else {
            MOCKER_TRY(f(c), toU32(v));
          }
        } else if constexpr (std::is_same_v<F, U64Ref>) {
          if (std::holds_alternative<std::string>(v)) {
            MOCKER_TRY(f(c), detail::parseU64Text(std::get<std::string>(v)));
          } else if (std::holds_alternative<std::int64_t>(v)) {
            const std::int64_t i = std::get<std::int64_t>(v);
            if (i < 0) {
              return invalidArgument("must be >= 0 (got " + std::to_string(i) + ")");
            }
            f(c) = static_cast<std::uint64_t>(i);
          } else {
            return typeError("an unsigned integer (or a decimal string)", v);
          }
        } else if constexpr (std::is_same_v<F, I64Ref>) {
          if (!std::holds_alternative<std::int64_t>(v)) return typeError("an integer", v);
          f(c) = std::get<std::int64_t>(v);
        } else if constexpr (std::is_same_v<F, DoubleRef>) {
          MOCKER_TRY(f(c), toDouble(v));
        } else if constexpr (std::is_same_v<F, OptDoubleRef>) {
          if (isNone(v)) {
            f(c).reset();
          } else if (std::holds_alternative<std::string>(v)) {
            return typeError("a number or \"none\"", v);
          } else {
            MOCKER_TRY(f(c), toDouble(v));
          }
        } else if constexpr (std::is_same_v<F, BoolRef>) {
          if (!std::holds_alternative<bool>(v)) return typeError("a boolean", v);
          f(c) = std::get<bool>(v);
        } else if constexpr (std::is_same_v<F, StringRef>) {
          if (!std::holds_alternative<std::string>(v)) return typeError("a string", v);
          f(c) = std::get<std::string>(v);
        } else if constexpr (std::is_same_v<F, StringListRef>) {
          if (!std::holds_alternative<std::vector<std::string>>(v)) {
            return typeError("an array of strings", v);
          }
          f(c) = std::get<std::vector<std::string>>(v);
        } else if constexpr (std::is_same_v<F, DoubleListRef>) {
          if (const auto* items = std::get_if<std::vector<std::string>>(&v);
              items != nullptr && items->empty()) {
            f(c).clear();  // `[]` reads as an empty list of strings
          } else if (const auto* numbers = std::get_if<std::vector<double>>(&v)) {
            f(c) = *numbers;
          } else {
            return typeError("an array of numbers", v);
          }
        } else {
          if (!std::holds_alternative<std::string>(v)) return typeError("a string", v);
          return f.set(c, std::get<std::string>(v));
        }
        return {};
      },
      key.field);
}

/// Command-line text → Value of the type the key expects.
Result<Value> textValue(const ConfigKey& key, std::string_view text) {
  const auto integer = [&]() -> Result<Value> {
    std::int64_t i = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
      return invalidArgument("expected an integer, got \"" + std::string(text) + "\"");
    }
    return Value{i};
  };
  const auto number = [&]() -> Result<Value> {
    double d = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
      return invalidArgument("expected a number, got \"" + std::string(text) + "\"");
    }
    return Value{d};
  };
  const bool none = asciiLower(text) == "none";
  switch (key.field.index()) {
    case 0:  // U32
    case 3:  // I64
      return integer();
    case 1:  // OptU32
      return none ? Value{std::string(text)} : integer();
    case 2:  // U64: decimal text keeps the full u64 range
      return Value{std::string(text)};
    case 4:  // Double
      return number();
    case 5:  // OptDouble
      return none ? Value{std::string(text)} : number();
    case 6: {  // Bool
      const std::string lower = asciiLower(text);
      if (lower == "true" || lower == "1" || lower == "yes") return Value{true};
      if (lower == "false" || lower == "0" || lower == "no") return Value{false};
      return invalidArgument("expected true or false, got \"" + std::string(text) + "\"");
    }
    case 9: {  // StringList: comma-separated, empty text = empty list
      std::vector<std::string> items;
      std::size_t start = 0;
      while (!text.empty() && start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        items.emplace_back(text.substr(start, comma - start));
        start = comma + 1;
      }
      return Value{std::move(items)};
    }
    case 10: {  // DoubleList: comma-separated numbers, empty text = empty list
      std::vector<double> numbers;
      std::size_t start = 0;
      while (!text.empty() && start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string_view item = text.substr(start, comma - start);
        double d = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
        if (item.empty() || ec != std::errc{} || end != item.data() + item.size()) {
          return invalidArgument("expected comma-separated numbers, element " +
                                 std::to_string(numbers.size()) + " is \"" + std::string(item) +
                                 "\"");
        }
        numbers.push_back(d);
        start = comma + 1;
      }
      return Value{std::move(numbers)};
    }
    default:
      return Value{std::string(text)};
  }
}

// Fixed-value keys that have no EngineConfig field yet: one accepted value each.
Status setCapacityPolicy(ServiceConfig&, std::string_view s) {
  if (asciiLower(s) == "guaranteed_no_evict") return {};
  return invalidArgument("unsupported capacity_scheduler_policy '" + std::string(s) +
                         "' (only guaranteed_no_evict is accepted)");
}

#define MOCKER_REF(T, expr) static_cast<T>([](ServiceConfig & c) -> auto& { return c.expr; })
#define MOCKER_ENUM(expr, name_of, parse)                                       \
  EnumField {                                                                   \
    [](const ServiceConfig& c) -> std::string_view { return name_of(c.expr); }, \
        [](ServiceConfig& c, std::string_view s) -> Status {                    \
          auto parsed = parse(s);                                               \
          if (!parsed) return parsed.error();                                   \
          c.expr = *parsed;                                                     \
          return {};                                                            \
        }                                                                       \
  }

std::string_view levelName(spdlog::level::level_enum l) { return logLevelName(l); }

/// The roofline coefficient of table entry I (a plain function, as the key table needs).
template <std::size_t I>
double& coefficientRef(ServiceConfig& c) {
  return c.roofline.coefficients.*(engine::rooflineCoefficientTable()[I].member);
}

const std::vector<ConfigKey>& keys() {
  static const std::vector<ConfigKey> kKeys = {
      {"engine", "engine_type",
       MOCKER_ENUM(engine.engine_type, engine::toString, engine::parseEngineType)},
      {"engine", "num_gpu_blocks", MOCKER_REF(OptU32Ref, engine.num_gpu_blocks)},
      {"engine", "block_size", MOCKER_REF(U32Ref, engine.block_size)},
      {"engine", "max_model_len", MOCKER_REF(OptU32Ref, engine.max_model_len)},
      {"engine", "max_num_seqs", MOCKER_REF(OptU32Ref, engine.max_num_seqs)},
      {"engine", "max_num_batched_tokens", MOCKER_REF(OptU32Ref, engine.max_num_batched_tokens)},
      {"engine", "enable_prefix_caching", MOCKER_REF(BoolRef, engine.enable_prefix_caching)},
      {"engine", "enable_chunked_prefill", MOCKER_REF(BoolRef, engine.enable_chunked_prefill)},
      {"engine", "enforce_eager", MOCKER_REF(BoolRef, engine.enforce_eager)},
      {"engine", "preemption_mode",
       MOCKER_ENUM(engine.preemption_mode, engine::toString, engine::parsePreemptionMode)},
      {"engine", "dp_size", MOCKER_REF(U32Ref, engine.dp_size)},
      {"engine", "hash_seed", MOCKER_REF(U64Ref, engine.hash_seed)},
      {"engine", "chain_seed", MOCKER_REF(U64Ref, engine.chain_seed)},
      {"engine", "token_seed", MOCKER_REF(U64Ref, engine.token_seed)},
      {"engine", "kv_event_visibility",
       MOCKER_ENUM(engine.kv_event_visibility, engine::toString, engine::parseKvEventVisibility)},
      {"engine", "worker_type",
       MOCKER_ENUM(engine.worker_type, engine::toString, engine::parseWorkerType)},
      {"engine", "timing_model",
       MOCKER_ENUM(engine.timing_model, engine::toString, engine::parseTimingModelKind)},
      {"engine", "timing_profile_path", MOCKER_REF(StringRef, timing_profile_path)},
      {"engine", "fixed_prefill_ms", MOCKER_REF(OptDoubleRef, engine.fixed_prefill_ms)},
      {"engine", "fixed_decode_ms", MOCKER_REF(OptDoubleRef, engine.fixed_decode_ms)},
      {"engine", "speedup_ratio", MOCKER_REF(DoubleRef, engine.speedup_ratio)},
      {"engine", "decode_speedup_ratio", MOCKER_REF(DoubleRef, engine.decode_speedup_ratio)},
      {"engine", "decode_load",
       MOCKER_ENUM(engine.decode_load, engine::toString, engine::parseDecodeLoad)},
      {"engine", "spec_num_draft_tokens", MOCKER_REF(OptU32Ref, engine.spec_num_draft_tokens)},
      {"engine", "spec_accept_rates", MOCKER_REF(DoubleListRef, engine.spec_accept_rates)},
      {"engine", "spec_seed", MOCKER_REF(U64Ref, engine.spec_seed)},
      {"engine", "kv_bytes_per_token", MOCKER_REF(U64Ref, engine.kv_bytes_per_token)},
      {"engine", "kv_transfer_bandwidth_gbps",
       MOCKER_REF(DoubleRef, engine.kv_transfer_bandwidth_gbps)},
      {"engine", "kv_transfer_charge",
       MOCKER_ENUM(engine.kv_transfer_charge, engine::toString, engine::parseKvTransferCharge)},
      {"engine", "kv_hold_timeout_ms", MOCKER_REF(OptDoubleRef, engine.kv_hold_timeout_ms)},
      {"engine", "num_g2_blocks", MOCKER_REF(U32Ref, engine.num_g2_blocks)},
      {"engine", "num_g3_blocks", MOCKER_REF(U32Ref, engine.num_g3_blocks)},
      {"engine", "offload_batch_size", MOCKER_REF(U32Ref, engine.offload_batch_size)},
      {"engine", "offload_gpu_to_host_gbps",
       MOCKER_REF(DoubleRef, engine.offload_gpu_to_host_gbps)},
      {"engine", "offload_host_to_gpu_gbps",
       MOCKER_REF(DoubleRef, engine.offload_host_to_gpu_gbps)},
      {"engine", "offload_host_to_disk_gbps",
       MOCKER_REF(DoubleRef, engine.offload_host_to_disk_gbps)},
      {"engine", "offload_disk_to_host_gbps",
       MOCKER_REF(DoubleRef, engine.offload_disk_to_host_gbps)},
      {"engine", "max_loras", MOCKER_REF(U32Ref, engine.max_loras)},
      {"engine", "max_cpu_loras", MOCKER_REF(OptU32Ref, engine.max_cpu_loras)},
      {"engine", "lora_load_ms", MOCKER_REF(DoubleRef, engine.lora_load_ms)},
      {"engine", "startup_time_s", MOCKER_REF(OptDoubleRef, service.startup_time_s)},
      {"engine", "model_config_path", MOCKER_REF(StringRef, roofline.model_config_path)},
      {"engine", "gpu", MOCKER_REF(StringRef, roofline.gpu)},
      {"engine", "tensor_parallel_size", MOCKER_REF(U32Ref, roofline.tensor_parallel_size)},
      {"engine", "enable_expert_parallel", MOCKER_REF(BoolRef, roofline.enable_expert_parallel)},
      {"engine", "gpu_memory_utilization", MOCKER_REF(DoubleRef, roofline.gpu_memory_utilization)},
      {"engine.model", "name", MOCKER_REF(StringRef, roofline.model_name)},
      {"engine.model", "num_layers", MOCKER_REF(OptU32Ref, roofline.num_layers)},
      {"engine.model", "hidden_size", MOCKER_REF(OptU32Ref, roofline.hidden_size)},
      {"engine.model", "num_heads", MOCKER_REF(OptU32Ref, roofline.num_heads)},
      {"engine.model", "num_kv_heads", MOCKER_REF(OptU32Ref, roofline.num_kv_heads)},
      {"engine.model", "head_dim", MOCKER_REF(OptU32Ref, roofline.head_dim)},
      {"engine.model", "intermediate_size", MOCKER_REF(OptU32Ref, roofline.intermediate_size)},
      {"engine.model", "vocab_size", MOCKER_REF(OptU32Ref, roofline.vocab_size)},
      {"engine.model", "num_experts", MOCKER_REF(OptU32Ref, roofline.num_experts)},
      {"engine.model", "experts_per_token", MOCKER_REF(OptU32Ref, roofline.experts_per_token)},
      {"engine.model", "moe_intermediate_size",
       MOCKER_REF(OptU32Ref, roofline.moe_intermediate_size)},
      {"engine.model", "weight_dtype", MOCKER_REF(StringRef, roofline.weight_dtype)},
      {"engine.model", "kv_dtype", MOCKER_REF(StringRef, roofline.kv_dtype)},
      {"engine.gpu_spec", "tflops", MOCKER_REF(OptDoubleRef, roofline.gpu_tflops)},
      {"engine.gpu_spec", "memory_bandwidth_gbps",
       MOCKER_REF(OptDoubleRef, roofline.gpu_memory_bandwidth_gbps)},
      {"engine.gpu_spec", "memory_gib", MOCKER_REF(OptDoubleRef, roofline.gpu_memory_gib)},
      {"engine.gpu_spec", "interconnect_gbps",
       MOCKER_REF(OptDoubleRef, roofline.gpu_interconnect_gbps)},
      {"engine.gpu_spec", "sm_count", MOCKER_REF(OptU32Ref, roofline.gpu_sm_count)},
      {"engine.gpu_spec", "compute_efficiency_scale",
       MOCKER_REF(OptDoubleRef, roofline.gpu_compute_efficiency_scale)},
      {"engine.gpu_spec", "interconnect_efficiency_scale",
       MOCKER_REF(OptDoubleRef, roofline.gpu_interconnect_efficiency_scale)},
      {"engine.gpu_spec", "memory_efficiency_scale",
       MOCKER_REF(OptDoubleRef, roofline.gpu_memory_efficiency_scale)},
      {"engine.gpu_spec", "attention_efficiency_scale",
       MOCKER_REF(OptDoubleRef, roofline.gpu_attention_efficiency_scale)},
      {"engine.roofline", "non_torch_memory_gib",
       MOCKER_REF(DoubleRef, roofline.non_torch_memory_gib)},
      {"engine.sglang", "schedule_policy",
       MOCKER_ENUM(engine.sglang.schedule_policy, engine::toString, engine::parseSchedulePolicy)},
      {"engine.sglang", "page_size", MOCKER_REF(U32Ref, engine.sglang.page_size)},
      {"engine.sglang", "max_prefill_tokens", MOCKER_REF(U32Ref, engine.sglang.max_prefill_tokens)},
      {"engine.sglang", "chunked_prefill_size",
       MOCKER_REF(U32Ref, engine.sglang.chunked_prefill_size)},
      {"engine.sglang", "clip_max_new_tokens",
       MOCKER_REF(U32Ref, engine.sglang.clip_max_new_tokens)},
      {"engine.sglang", "schedule_conservativeness",
       MOCKER_REF(DoubleRef, engine.sglang.schedule_conservativeness)},
      {"engine.trtllm", "capacity_scheduler_policy",
       EnumField{[](const ServiceConfig&) -> std::string_view { return "guaranteed_no_evict"; },
                 setCapacityPolicy}},
      {"service", "allow_empty_output", MOCKER_REF(BoolRef, engine.allow_empty_output)},
      {"service", "max_buffered_outputs", MOCKER_REF(U32Ref, service.max_buffered_outputs)},
      {"service", "fpm_heartbeat_interval_s",
       MOCKER_REF(DoubleRef, service.fpm_heartbeat_interval_s)},
      {"service", "submit_sndhwm", MOCKER_REF(U32Ref, service.submit_sndhwm)},
      {"service", "submit_rcvhwm", MOCKER_REF(U32Ref, service.submit_rcvhwm)},
      {"service", "max_message_size", MOCKER_REF(I64Ref, service.max_message_size)},
      {"service", "max_submit_backlog", MOCKER_REF(U32Ref, service.max_submit_backlog)},
      {"service", "linger_ms", MOCKER_REF(U32Ref, service.linger_ms)},
      {"service", "served_model_name", MOCKER_REF(StringRef, service.served_model_name)},
      {"service", "worker_label", MOCKER_REF(StringRef, service.worker_label)},
      {"service", "handoff_fetch_timeout_ms",
       MOCKER_REF(DoubleRef, service.handoff_fetch_timeout_ms)},
      {"service", "max_handoff_sources", MOCKER_REF(U32Ref, service.max_handoff_sources)},
      {"limits", "max_requests_per_client", MOCKER_REF(U32Ref, limits.max_requests_per_client)},
      {"limits", "max_requests", MOCKER_REF(U32Ref, limits.max_requests)},
      {"limits", "max_clients", MOCKER_REF(U32Ref, limits.max_clients)},
      {"limits", "max_request_tokens", MOCKER_REF(U32Ref, limits.max_request_tokens)},
      {"endpoints.submit", "endpoint", MOCKER_REF(StringRef, endpoints.submit.endpoint)},
      {"endpoints.submit", "connect", MOCKER_REF(BoolRef, endpoints.submit.connect)},
      {"endpoints.cancel", "endpoint", MOCKER_REF(StringRef, endpoints.cancel.endpoint)},
      {"endpoints.cancel", "connect", MOCKER_REF(BoolRef, endpoints.cancel.connect)},
      {"endpoints.kv_events", "endpoint", MOCKER_REF(StringRef, endpoints.kv_events.endpoint)},
      {"endpoints.kv_events", "connect", MOCKER_REF(BoolRef, endpoints.kv_events.connect)},
      {"endpoints.kv_replay", "endpoint", MOCKER_REF(StringRef, endpoints.kv_replay.endpoint)},
      {"endpoints.kv_replay", "connect", MOCKER_REF(BoolRef, endpoints.kv_replay.connect)},
      {"endpoints.fpm", "endpoint", MOCKER_REF(StringRef, endpoints.fpm.endpoint)},
      {"endpoints.fpm", "connect", MOCKER_REF(BoolRef, endpoints.fpm.connect)},
      {"endpoints.handoff", "endpoint", MOCKER_REF(StringRef, endpoints.handoff.endpoint)},
      {"endpoints.handoff", "connect", MOCKER_REF(BoolRef, endpoints.handoff.connect)},
      {"endpoints.handoff", "advertise", MOCKER_REF(StringRef, endpoints.handoff_advertise)},
      {"endpoints.http", "endpoint", MOCKER_REF(StringRef, endpoints.http.endpoint)},
      {"endpoints.http", "enabled", MOCKER_REF(BoolRef, endpoints.http.enabled)},
      {"kv_events", "enabled", MOCKER_REF(BoolRef, kv_events.enabled)},
      {"kv_events", "replay_enabled", MOCKER_REF(BoolRef, kv_events.replay_enabled)},
      {"kv_events", "topic", MOCKER_REF(StringRef, kv_events.topic)},
      {"kv_events", "hwm", MOCKER_REF(U32Ref, kv_events.hwm)},
      {"kv_events", "buffer_steps", MOCKER_REF(U32Ref, kv_events.buffer_steps)},
      {"kv_events", "layout", MOCKER_ENUM(kv_events.layout, layoutName, parseLayout)},
      {"kv_events", "replay_layout",
       MOCKER_ENUM(kv_events.replay_layout, replayLayoutName, parseReplayLayout)},
      {"kv_events", "parent_root",
       MOCKER_ENUM(kv_events.parent_root, parentRootName, parseParentRoot)},
      {"kv_events", "force_uint64_hashes", MOCKER_REF(BoolRef, kv_events.force_uint64_hashes)},
      {"kv_events", "clear_on_start", MOCKER_REF(BoolRef, kv_events.clear_on_start)},
      {"fpm", "enabled", MOCKER_REF(BoolRef, fpm.enabled)},
      {"fpm", "worker_id", MOCKER_REF(StringRef, fpm.worker_id)},
      {"security", "curve", MOCKER_REF(BoolRef, security.curve)},
      {"security", "server_secret_key", MOCKER_REF(StringRef, security.server_secret_key)},
      {"security", "server_secret_key_file",
       MOCKER_REF(StringRef, security.server_secret_key_file)},
      {"security", "client_public_keys", MOCKER_REF(StringListRef, security.client_public_keys)},
      {"security", "client_public_key_files",
       MOCKER_REF(StringListRef, security.client_public_key_files)},
      {"security", "curve_publishers", MOCKER_REF(BoolRef, security.curve_publishers)},
      {"security", "worker_public_key_files",
       MOCKER_REF(StringListRef, security.worker_public_key_files)},
      {"security", "worker_secret_key_file",
       MOCKER_REF(StringRef, security.worker_secret_key_file)},
      {"security", "handoff_server_key_file",
       MOCKER_REF(StringRef, security.handoff_server_key_file)},
      {"logging", "level", MOCKER_ENUM(log_level, levelName, parseLogLevel)},
      {"logging", "format", MOCKER_ENUM(log_format, logFormatName, parseLogFormat)},
      {"logging", "stats_interval_s", MOCKER_REF(DoubleRef, log_stats_interval_s)},
      {"fleet", "num_workers", MOCKER_REF(U32Ref, fleet.num_workers)},
      {"faults", "inject", MOCKER_REF(StringListRef, faults.inject)},
      {"faults", "seed", MOCKER_REF(U64Ref, faults.seed)},
      {"faults", "log", MOCKER_REF(StringRef, faults.log)},
      {"faults", "admin", MOCKER_REF(BoolRef, faults.admin)},
      {"faults", "admin_key_file", MOCKER_REF(StringRef, faults.admin_key_file)},
  };
  static const std::vector<ConfigKey> kAll = [] {
    std::vector<ConfigKey> all = kKeys;
    // [engine.roofline]: one key per fitted coefficient, named as in the engine's table.
    const auto table = engine::rooflineCoefficientTable();
    const auto insert_at = std::find_if(
        all.begin(), all.end(), [](const ConfigKey& k) { return k.table == "engine.roofline"; });
    std::vector<ConfigKey> coefficients;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (coefficients.push_back({"engine.roofline", table[I].name, DoubleRef(&coefficientRef<I>)}),
       ...);
    }
    (std::make_index_sequence<engine::kNumRooflineCoefficients>{});
    all.insert(insert_at + 1, coefficients.begin(), coefficients.end());
    return all;
  }();
  return kAll;
}

#undef MOCKER_REF
#undef MOCKER_ENUM

// ---------------------------------------------------------------------------------------------
// Dump.

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string formatDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string formatValue(const ConfigKey& key, ServiceConfig& c) {
  return std::visit(
      [&](const auto& f) -> std::string {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, U32Ref> || std::is_same_v<F, I64Ref>) {
          return std::to_string(f(c));
        } else if constexpr (std::is_same_v<F, OptU32Ref>) {
          return f(c) ? std::to_string(*f(c)) : "\"none\"";
        } else if constexpr (std::is_same_v<F, U64Ref>) {
          const std::uint64_t v = f(c);
          return v <= std::numeric_limits<std::int64_t>::max() ? std::to_string(v)
                                                               : quote(std::to_string(v));
        } else if constexpr (std::is_same_v<F, DoubleRef>) {
          return formatDouble(f(c));
        } else if constexpr (std::is_same_v<F, OptDoubleRef>) {
          return f(c) ? formatDouble(*f(c)) : "\"none\"";
        } else if constexpr (std::is_same_v<F, BoolRef>) {
          return f(c) ? "true" : "false";
        } else if constexpr (std::is_same_v<F, StringRef>) {
          return quote(f(c));
        } else if constexpr (std::is_same_v<F, StringListRef>) {
          std::string out = "[";
          for (const std::string& item : f(c)) out += (out.size() > 1 ? ", " : "") + quote(item);
          return out + "]";
        } else if constexpr (std::is_same_v<F, DoubleListRef>) {
          std::string out = "[";
          for (double d : f(c)) out += (out.size() > 1 ? ", " : "") + formatDouble(d);
          return out + "]";
        } else {
          return quote(f.get(c));
        }
      },
      key.field);
}

bool sameProfile(const std::optional<engine::TimingProfile>& a,
                 const std::optional<engine::TimingProfile>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->prefill_isl == b->prefill_isl && a->prefill_ttft_ms == b->prefill_ttft_ms &&
         a->decode_active_kv_tokens == b->decode_active_kv_tokens &&
         a->decode_context_length == b->decode_context_length && a->decode_itl == b->decode_itl;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Table queries for the reader and the validator.

namespace detail {

const ConfigKey* findKey(std::string_view path) {
  for (const ConfigKey& k : keys()) {
    if (k.path() == path) return &k;
  }
  return nullptr;
}

std::optional<std::string> unsupportedKeyError(std::string_view path) {
  // Keys a vLLM-style configuration may carry that have nothing to act on here: refused with
  // the reason instead of being accepted and ignored.
  if (path == "kv_events.max_queue_size") {
    return "not supported: mocker has no publisher queue (each batch is sent at once from the "
           "service thread, without blocking, so there is nothing to bound); kv_events.hwm "
           "bounds what the PUB holds for a slow subscriber (beyond it batches are dropped and "
           "consumers replay them) and kv_events.buffer_steps how many stay replayable";
  }
  return std::nullopt;
}

std::string unknownKeySuggestion(std::string_view path) {
  std::vector<std::string> names;
  for (const ConfigKey& k : keys()) {
    names.push_back(k.path());
    // The tables and their parents ("engine", "engine.sglang"): a misspelt table name.
    for (std::string_view table = k.table; !table.empty();) {
      if (std::find(names.begin(), names.end(), table) == names.end()) {
        names.emplace_back(table);
      }
      const std::size_t dot = table.rfind('.');
      table = dot == std::string_view::npos ? std::string_view() : table.substr(0, dot);
    }
  }
  return didYouMean(path, names);
}

bool isKnownTable(std::string_view path) {
  for (const ConfigKey& k : keys()) {
    if (k.table == path) return true;
    if (k.table.size() > path.size() && k.table.starts_with(path) && k.table[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

Status assignValue(const ConfigKey& key, const ConfigValue& value, ServiceConfig& config) {
  return assignTo(key, value, config);
}

Result<std::uint64_t> parseU64Text(std::string_view s) {
  std::uint64_t out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    return invalidArgument("expected an unsigned 64-bit decimal integer, got \"" + std::string(s) +
                           "\"");
  }
  return out;
}

std::string keyOfEngineField(std::string_view field) {
  if (field == "timing_profile") return "engine.timing_profile_path";
  if (field == "allow_empty_output") return "service.allow_empty_output";
  return "engine." + std::string(field);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Public API.

bool operator==(const ServiceConfig& a, const ServiceConfig& b) {
  // Every dumped key compares equal, and so does the loaded profile.
  ServiceConfig ca = a;
  ServiceConfig cb = b;
  for (const ConfigKey& k : keys()) {
    if (formatValue(k, ca) != formatValue(k, cb)) return false;
  }
  return sameProfile(a.engine.timing_profile, b.engine.timing_profile);
}

Status setConfigValue(ServiceConfig& config, std::string_view key_path, std::string_view text) {
  const ConfigKey* key = detail::findKey(key_path);
  if (key == nullptr) {
    if (auto why = detail::unsupportedKeyError(key_path)) return invalidArgument(*why);
    return invalidArgument("unknown key '" + std::string(key_path) + "'" +
                           detail::unknownKeySuggestion(key_path));
  }
  // A TOML file is UTF-8 by definition (toml++ refuses anything else); flag text is whatever
  // bytes the shell passed, so it is checked here — otherwise `config --dump` could write a file
  // that does not load.
  if (const std::optional<std::size_t> bad = protocol::detail::findInvalidUtf8(text)) {
    return invalidArgument(std::string(key_path) + ": the value is not valid UTF-8 (byte " +
                           std::to_string(*bad) + ")");
  }
  MOCKER_TRY(const Value value, textValue(*key, text));
  return assignTo(*key, value, config);
}

std::vector<std::string> configKeys() {
  std::vector<std::string> out;
  for (const ConfigKey& k : keys()) out.push_back(k.path());
  return out;
}

std::optional<std::string> configKeyType(std::string_view key_path) {
  const ConfigKey* key = detail::findKey(key_path);
  if (key == nullptr) return std::nullopt;
  return std::visit(
      [](const auto& f) -> std::string {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, U32Ref> || std::is_same_v<F, U64Ref>) {
          return "UINT";
        } else if constexpr (std::is_same_v<F, I64Ref>) {
          return "INT";
        } else if constexpr (std::is_same_v<F, OptU32Ref>) {
          return "UINT|none";
        } else if constexpr (std::is_same_v<F, DoubleRef>) {
          return "FLOAT";
        } else if constexpr (std::is_same_v<F, OptDoubleRef>) {
          return "FLOAT|none";
        } else if constexpr (std::is_same_v<F, BoolRef>) {
          return "BOOL";
        } else if constexpr (std::is_same_v<F, StringRef>) {
          return "TEXT";
        } else if constexpr (std::is_same_v<F, StringListRef>) {
          return "LIST";
        } else {
          return "NAME";
        }
      },
      key->field);
}

std::optional<std::string> configValueText(const ServiceConfig& config, std::string_view key_path) {
  const ConfigKey* key = detail::findKey(key_path);
  if (key == nullptr) return std::nullopt;
  ServiceConfig c = config;  // accessors take a mutable config
  std::string text = formatValue(*key, c);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    text = text.substr(1, text.size() - 2);
  }
  return text;
}

std::string dumpServiceConfig(const ServiceConfig& config) {
  ServiceConfig c = config;  // accessors take a mutable config
  std::string out =
      "# mocker effective configuration (every key; \"none\" = null). See service/README.md.\n";
  std::string_view table;
  for (const ConfigKey& k : keys()) {
    if (k.table != table) {
      table = k.table;
      out += "\n[" + std::string(table) + "]\n";
    }
    out += std::string(k.name) + " = " + formatValue(k, c) + "\n";
  }
  return out;
}

}  // namespace mocker::service
