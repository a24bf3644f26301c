// buildRooflineConfig (declared in service/config.h): the roofline deployment from the
// configured keys and the text of a Hugging Face config.json. The file itself is read by
// finishServiceConfig; this unit only combines values, so it is testable without files.
#include <utility>

#include "engine/gpu_spec.h"
#include "engine/model_arch.h"
#include "service/config.h"

namespace mocker::service {
namespace {

using Count = std::optional<std::uint32_t>;

struct CountKey {
  const char* key;
  Count RooflineSettings::*setting;
  std::uint32_t engine::ModelArch::*field;
  bool required;  ///< needed without a config.json (dense models)
};

constexpr CountKey kCountKeys[] = {
    {"num_layers", &RooflineSettings::num_layers, &engine::ModelArch::num_layers, true},
    {"hidden_size", &RooflineSettings::hidden_size, &engine::ModelArch::hidden_size, true},
    {"num_heads", &RooflineSettings::num_heads, &engine::ModelArch::num_heads, true},
    {"num_kv_heads", &RooflineSettings::num_kv_heads, &engine::ModelArch::num_kv_heads, false},
    {"head_dim", &RooflineSettings::head_dim, &engine::ModelArch::head_dim, false},
    {"intermediate_size", &RooflineSettings::intermediate_size,
     &engine::ModelArch::intermediate_size, false},
    {"vocab_size", &RooflineSettings::vocab_size, &engine::ModelArch::vocab_size, true},
    {"num_experts", &RooflineSettings::num_experts, &engine::ModelArch::num_experts, false},
    {"experts_per_token", &RooflineSettings::experts_per_token,
     &engine::ModelArch::experts_per_token, false},
    {"moe_intermediate_size", &RooflineSettings::moe_intermediate_size,
     &engine::ModelArch::moe_intermediate_size, false},
};

Result<engine::ModelArch> buildModel(const RooflineSettings& s, std::string_view config_text) {
  engine::ModelArch m;
  const bool from_file = !s.model_config_path.empty();
  if (from_file) {
    auto parsed = engine::parseHfModelConfig(config_text);
    if (!parsed) {
      return invalidArgument("engine.model_config_path (" + s.model_config_path +
                             "): " + parsed.error().message);
    }
    m = std::move(*parsed);
  } else {
    for (const CountKey& k : kCountKeys) {
      if (k.required && !(s.*k.setting)) {
        return invalidArgument("engine.model." + std::string(k.key) +
                               " is required when timing_model = roofline and "
                               "engine.model_config_path is not set");
      }
    }
  }
  for (const CountKey& k : kCountKeys) {
    if (s.*k.setting) m.*k.field = *(s.*k.setting);
  }
  if (!from_file) {
    // The config.json defaults: MHA, head_dim = hidden / heads.
    if (!s.num_kv_heads) m.num_kv_heads = m.num_heads;
    if (!s.head_dim && m.num_heads > 0) m.head_dim = m.hidden_size / m.num_heads;
  }
  if (!s.model_name.empty()) m.name = s.model_name;
  if (!s.weight_dtype.empty()) {
    MOCKER_TRY(m.weight_bytes,
               engine::parseDtypeBytes("engine.model.weight_dtype", s.weight_dtype));
  }
  if (!s.kv_dtype.empty()) {
    MOCKER_TRY(m.kv_bytes, engine::parseDtypeBytes("engine.model.kv_dtype", s.kv_dtype));
  }
  if (auto problem = engine::checkModelArch(m, "engine.model.")) return invalidArgument(*problem);
  return m;
}

Result<engine::GpuSpec> buildGpu(const RooflineSettings& s) {
  engine::GpuSpec g;
  if (!s.gpu.empty()) {
    auto found = engine::findGpu(s.gpu);
    if (!found) {
      return invalidArgument("engine.gpu: unknown GPU '" + s.gpu + "' (known: " +
                             engine::gpuNameList(", ") + "; or give engine.gpu_spec.* values)");
    }
    g = *found;
  } else {
    g.name = "custom";
  }
  const std::pair<const char*, std::pair<const std::optional<double>*, double*>> values[] = {
      {"tflops", {&s.gpu_tflops, &g.bf16_tflops}},
      {"memory_bandwidth_gbps", {&s.gpu_memory_bandwidth_gbps, &g.memory_bandwidth_gbps}},
      {"memory_gib", {&s.gpu_memory_gib, &g.memory_gib}},
      {"interconnect_gbps", {&s.gpu_interconnect_gbps, &g.interconnect_gbps}},
  };
  for (const auto& [key, refs] : values) {
    if (*refs.first) {
      *refs.second = **refs.first;
    } else if (s.gpu.empty()) {
      return invalidArgument("engine.gpu_spec." + std::string(key) +
                             " is required when timing_model = roofline and engine.gpu is not "
                             "set (or name a built-in GPU: " +
                             engine::gpuNameList(", ") + ")");
    }
  }
  if (s.gpu_sm_count) g.sm_count = *s.gpu_sm_count;
  if (s.gpu_compute_efficiency_scale) g.compute_efficiency_scale = *s.gpu_compute_efficiency_scale;
  if (s.gpu_interconnect_efficiency_scale) {
    g.interconnect_efficiency_scale = *s.gpu_interconnect_efficiency_scale;
  }
  if (s.gpu_memory_efficiency_scale) g.memory_efficiency_scale = *s.gpu_memory_efficiency_scale;
  if (s.gpu_attention_efficiency_scale) {
    g.attention_efficiency_scale = *s.gpu_attention_efficiency_scale;
  }
  if (auto problem = engine::checkGpuSpec(g, "engine.gpu_spec.")) return invalidArgument(*problem);
  return g;
}

}  // namespace

bool isRooflineKey(std::string_view key) {
  return key.starts_with("engine.model.") || key.starts_with("engine.gpu_spec.") ||
         key.starts_with("engine.roofline.") || key == "engine.model_config_path" ||
         key == "engine.gpu" || key == "engine.tensor_parallel_size" ||
         key == "engine.enable_expert_parallel" || key == "engine.gpu_memory_utilization";
}

Result<engine::RooflineConfig> buildRooflineConfig(const RooflineSettings& s,
                                                   std::string_view model_config_text) {
  engine::RooflineConfig c;
  MOCKER_TRY(c.model, buildModel(s, model_config_text));
  MOCKER_TRY(c.gpu, buildGpu(s));
  c.tensor_parallel_size = s.tensor_parallel_size;
  c.gpu_memory_utilization = s.gpu_memory_utilization;
  c.non_torch_memory_gib = s.non_torch_memory_gib;
  c.coefficients = s.coefficients;
  return c;
}

}  // namespace mocker::service
