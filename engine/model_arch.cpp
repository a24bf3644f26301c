#include "engine/model_arch.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace mocker::engine {
namespace {

using Json = nlohmann::json;

Error fieldProblem(std::string_view key, std::string_view what) {
  return invalidArgument("config.json: field '" + std::string(key) + "' " + std::string(what));
}

/// A positive integer field that fits in 32 bits; nullopt when absent (or null).
Result<std::optional<std::uint32_t>> optionalCount(const Json& j, std::string_view key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::uint32_t>{};
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    return fieldProblem(key, "must be an integer");
  }
  const auto v = it->get<std::int64_t>();
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    return fieldProblem(key, "is out of range (got " + std::to_string(v) + ")");
  }
  return std::optional<std::uint32_t>{static_cast<std::uint32_t>(v)};
}

Result<std::uint32_t> requiredCount(const Json& j, std::string_view key) {
  auto v = optionalCount(j, key);
  if (!v.has_value()) return v.error();
  if (!v.value()) return invalidArgument("config.json: missing field '" + std::string(key) + "'");
  return *v.value();
}

/// The first present of `keys`, or nullopt.
Result<std::optional<std::uint32_t>> firstCount(const Json& j,
                                                std::initializer_list<std::string_view> keys) {
  for (std::string_view k : keys) {
    auto v = optionalCount(j, k);
    if (!v.has_value() || v.value()) return v;
  }
  return std::optional<std::uint32_t>{};
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Result<ModelArch> parseObject(const Json& j) {
  ModelArch a;
  if (const auto it = j.find("_name_or_path"); it != j.end() && it->is_string()) {
    a.name = it->get<std::string>();
  }
  MOCKER_TRY(a.num_layers, requiredCount(j, "num_hidden_layers"));
  MOCKER_TRY(a.hidden_size, requiredCount(j, "hidden_size"));
  MOCKER_TRY(a.num_heads, requiredCount(j, "num_attention_heads"));
  MOCKER_TRY(a.vocab_size, requiredCount(j, "vocab_size"));
  MOCKER_TRY(const std::optional<std::uint32_t> kv_heads, optionalCount(j, "num_key_value_heads"));
  MOCKER_TRY(const std::optional<std::uint32_t> head_dim, optionalCount(j, "head_dim"));
  MOCKER_TRY(const std::optional<std::uint32_t> intermediate,
             optionalCount(j, "intermediate_size"));
  MOCKER_TRY(const std::optional<std::uint32_t> experts,
             firstCount(j, {"num_experts", "num_local_experts", "n_routed_experts"}));
  MOCKER_TRY(const std::optional<std::uint32_t> topk, optionalCount(j, "num_experts_per_tok"));
  MOCKER_TRY(const std::optional<std::uint32_t> moe_inter,
             optionalCount(j, "moe_intermediate_size"));
  if (a.num_heads == 0) return fieldProblem("num_attention_heads", "must be >= 1 (got 0)");
  a.num_kv_heads = kv_heads.value_or(a.num_heads);
  a.head_dim = head_dim.value_or(a.hidden_size / a.num_heads);
  a.num_experts = experts.value_or(0);
  if (a.num_experts > 0) {
    if (!topk) return invalidArgument("config.json: missing field 'num_experts_per_tok'");
    a.experts_per_token = *topk;
    if (!moe_inter && !intermediate) {
      return invalidArgument("config.json: missing field 'moe_intermediate_size'");
    }
    a.moe_intermediate_size = moe_inter.value_or(intermediate.value_or(0));
    a.intermediate_size = intermediate.value_or(0);
  } else {
    if (!intermediate) return invalidArgument("config.json: missing field 'intermediate_size'");
    a.intermediate_size = *intermediate;
  }
  if (const auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return fieldProblem("tie_word_embeddings", "must be true or false");
    a.tie_word_embeddings = it->get<bool>();
  }
  if (const auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    auto bytes = parseDtypeBytes("config.json: field 'torch_dtype'", it->get<std::string>());
    if (!bytes.has_value()) return bytes.error();
    a.weight_bytes = bytes.value();
  }
  if (const auto it = j.find("hidden_act"); it != j.end() && it->is_string()) {
    const std::string act = lower(it->get<std::string>());
    // Llama, Qwen, Mixtral (silu) and Gemma (gelu_pytorch_tanh) gate their MLP; GPT-2, Phi-2 and
    // Falcon-style MLPs (gelu_new, gelu, relu) do not.
    a.gated_mlp = !(act == "gelu_new" || act == "gelu" || act == "relu" || act == "gelu_fast");
  }
  if (auto problem = checkModelArch(a, "config.json: ")) return invalidArgument(*problem);
  return a;
}

}  // namespace

Result<ModelArch> parseHfModelConfig(std::string_view json_text) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalidArgument("config.json: not valid JSON");
  if (!j.is_object()) return invalidArgument("config.json: top level must be a JSON object");
  if (const auto it = j.find("text_config");
      it != j.end() && it->is_object() && !j.contains("num_hidden_layers")) {
    return parseObject(*it);
  }
  return parseObject(j);
}

std::optional<std::string> checkModelArch(const ModelArch& a, std::string_view prefix) {
  const auto positive = [&](std::string_view field, std::uint32_t v) -> std::optional<std::string> {
    if (v >= 1) return std::nullopt;
    return std::string(prefix) + std::string(field) + " must be >= 1 (got 0)";
  };
  for (const auto& [field, v] :
       {std::pair<std::string_view, std::uint32_t>{"num_layers", a.num_layers},
        {"hidden_size", a.hidden_size},
        {"num_heads", a.num_heads},
        {"num_kv_heads", a.num_kv_heads},
        {"head_dim", a.head_dim},
        {"vocab_size", a.vocab_size}}) {
    if (auto p = positive(field, v)) return p;
  }
  if (a.num_heads % a.num_kv_heads != 0) {
    return std::string(prefix) + "num_heads must be a multiple of num_kv_heads (got " +
           std::to_string(a.num_heads) + " and " + std::to_string(a.num_kv_heads) + ")";
  }
  if (a.num_experts == 0) {
    if (auto p = positive("intermediate_size", a.intermediate_size)) return p;
    if (a.experts_per_token != 0) {
      return std::string(prefix) + "experts_per_token must be 0 for a dense model (got " +
             std::to_string(a.experts_per_token) + ")";
    }
  } else {
    if (auto p = positive("moe_intermediate_size", a.moe_intermediate_size)) return p;
    if (a.experts_per_token < 1 || a.experts_per_token > a.num_experts) {
      return std::string(prefix) + "experts_per_token must be in 1..=num_experts (" +
             std::to_string(a.num_experts) + ") (got " + std::to_string(a.experts_per_token) + ")";
    }
  }
  for (const auto& [field, v] :
       {std::pair<std::string_view, double>{"weight_bytes", a.weight_bytes},
        {"kv_bytes", a.kv_bytes}}) {
    if (!(std::isfinite(v) && v > 0.0 && v <= 8.0)) {
      return std::string(prefix) + std::string(field) + " must be in (0, 8] (got " +
             std::to_string(v) + ")";
    }
  }
  return std::nullopt;
}

double modelParameters(const ModelArch& a) {
  const double h = a.hidden_size;
  const double q = static_cast<double>(a.num_heads) * a.head_dim;
  const double kv = static_cast<double>(a.num_kv_heads) * a.head_dim;
  const double attn = h * (q + 2.0 * kv) + q * h;
  const double mlp_mats = a.gated_mlp ? 3.0 : 2.0;
  const double mlp = a.num_experts == 0 ? mlp_mats * h * a.intermediate_size
                                        : static_cast<double>(a.num_experts) * mlp_mats * h *
                                                  a.moe_intermediate_size +
                                              h * a.num_experts;  // experts + router
  const double norms = 2.0 * h;
  const double embed = static_cast<double>(a.vocab_size) * h;
  return a.num_layers * (attn + mlp + norms) + h + embed * (a.tie_word_embeddings ? 1.0 : 2.0);
}

double kvBytesPerToken(const ModelArch& a) {
  return 2.0 * a.num_layers * a.num_kv_heads * a.head_dim * a.kv_bytes;
}

Result<double> parseDtypeBytes(std::string_view field, std::string_view dtype) {
  const std::string d = lower(dtype);
  if (d == "bfloat16" || d == "bf16" || d == "float16" || d == "fp16" || d == "half" ||
      d == "auto" || d == "float32" || d == "float" || d == "fp32") {
    return 2.0;
  }
  if (d == "fp8" || d == "fp8_e4m3" || d == "fp8_e5m2" || d.starts_with("float8")) return 1.0;
  return invalidArgument(std::string(field) + ": unknown dtype '" + std::string(dtype) +
                         "' (allowed: bfloat16 | float16 | float32 | auto | fp8)");
}

}  // namespace mocker::engine
