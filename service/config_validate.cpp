// Validation: every range and cross-field rule of a ServiceConfig, the engine's included
// (engine::checkEngineConfig, whose field names are mapped to key paths), returned as data — the
// key paths a broken rule is about plus the error — so that finishServiceConfig can prefix the
// error with where the first of those keys was set (file:line:col or --flag).

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"
#include "net/security.h"
#include "service/config.h"
#include "service/detail/config_check.h"
#include "service/detail/config_keys.h"
#include "service/fault_plan.h"
#include "service/fleet.h"

namespace mocker::service {
namespace {

using detail::issue;

/// An engine rule in key terms. The engine's message starts with its field name; when the key
/// path is that name under "engine." it replaces it ("num_gpu_blocks must …" →
/// "engine.num_gpu_blocks must …"), otherwise the section prefixes the message
/// ("engine: timing_profile.prefill_isl must …").
ConfigError fromEngine(engine::ConfigError e) {
  MOCKER_CHECK(!e.fields.empty());
  std::vector<std::string> keys;
  keys.reserve(e.fields.size());
  for (const std::string& field : e.fields) keys.push_back(detail::keyOfEngineField(field));
  const bool same_name = keys.front() == "engine." + e.fields.front();
  std::string message = (same_name ? "engine." : "engine: ") + e.error.message;
  return {std::move(keys), Error{e.error.code, std::move(message)}};
}

/// ZeroMQ high-water marks are C ints; 0 means no limit.
std::optional<ConfigError> checkHwm(const std::string& key, std::uint32_t hwm) {
  constexpr auto kMax = static_cast<std::uint32_t>(std::numeric_limits<int>::max());
  if (hwm <= kMax) return std::nullopt;
  return issue(key, "must be in [0, " + std::to_string(kMax) + "] (0 = unlimited) (got " +
                        std::to_string(hwm) + ")");
}

/// Keys that act only under one timing model or engine type: set for another one they would be
/// accepted and ignored, so they are refused (their defaults are "none" / "" / lifo, which a
/// dump of any configuration writes, so a dump still loads back).
/// The first roofline deployment key (model or GPU) that is set, or nullopt. The coefficient
/// keys and tensor_parallel_size / gpu_memory_utilization always have a value (their defaults).
std::optional<std::string> rooflineKeySet(const RooflineSettings& r) {
  if (!r.model_config_path.empty()) return "engine.model_config_path";
  if (!r.gpu.empty()) return "engine.gpu";
  if (r.enable_expert_parallel) return "engine.enable_expert_parallel";
  const std::pair<const char*, const std::optional<std::uint32_t>*> counts[] = {
      {"num_layers", &r.num_layers},
      {"hidden_size", &r.hidden_size},
      {"num_heads", &r.num_heads},
      {"num_kv_heads", &r.num_kv_heads},
      {"head_dim", &r.head_dim},
      {"intermediate_size", &r.intermediate_size},
      {"vocab_size", &r.vocab_size},
      {"num_experts", &r.num_experts},
      {"experts_per_token", &r.experts_per_token},
      {"moe_intermediate_size", &r.moe_intermediate_size}};
  for (const auto& [name, v] : counts) {
    if (*v) return "engine.model." + std::string(name);
  }
  const std::pair<const char*, const std::optional<double>*> gpu[] = {
      {"tflops", &r.gpu_tflops},
      {"memory_bandwidth_gbps", &r.gpu_memory_bandwidth_gbps},
      {"memory_gib", &r.gpu_memory_gib},
      {"interconnect_gbps", &r.gpu_interconnect_gbps},
      {"compute_efficiency_scale", &r.gpu_compute_efficiency_scale},
      {"interconnect_efficiency_scale", &r.gpu_interconnect_efficiency_scale},
      {"memory_efficiency_scale", &r.gpu_memory_efficiency_scale},
      {"attention_efficiency_scale", &r.gpu_attention_efficiency_scale}};
  for (const auto& [name, v] : gpu) {
    if (*v) return "engine.gpu_spec." + std::string(name);
  }
  if (r.gpu_sm_count) return "engine.gpu_spec.sm_count";
  return std::nullopt;
}

std::optional<ConfigError> checkKeysApply(const ServiceConfig& c) {
  using engine::TimingModelKind;
  const engine::EngineConfig& e = c.engine;
  const auto only = [](const std::string& key, const std::string& other, std::string_view want,
                       std::string_view got, const std::string& unset) {
    return issue(key,
                 "applies only to " + other + " = " + std::string(want) + " (" + other + " is " +
                     std::string(got) + "); remove it or set it to " + unset,
                 {"engine." + other});
  };
  if (e.timing_model != TimingModelKind::Fixed) {
    const std::string_view model = engine::toString(e.timing_model);
    if (e.fixed_prefill_ms) {
      return only("engine.fixed_prefill_ms", "timing_model", "fixed", model, "\"none\"");
    }
    if (e.fixed_decode_ms) {
      return only("engine.fixed_decode_ms", "timing_model", "fixed", model, "\"none\"");
    }
  }
  if (e.timing_model != TimingModelKind::Interpolated && !c.timing_profile_path.empty()) {
    return only("engine.timing_profile_path", "timing_model", "interpolated",
                engine::toString(e.timing_model), "\"\"");
  }
  if (e.timing_model != TimingModelKind::Roofline) {
    if (auto key = rooflineKeySet(c.roofline)) {
      return only(*key, "timing_model", "roofline", engine::toString(e.timing_model),
                  key->starts_with("engine.model.") || key->starts_with("engine.gpu_spec.")
                      ? "\"none\""
                      : "\"\"");
    }
  }
  return std::nullopt;
}

/// The same for keys of one engine type. Checked after the engine's own rules, so an
/// out-of-range value is reported as such first.
std::optional<ConfigError> checkEngineTypeKeysApply(const engine::EngineConfig& e) {
  const std::string_view type = engine::toString(e.engine_type);
  const auto only = [&](const std::string& key, std::string_view want, const std::string& unset) {
    return issue(key,
                 "applies only to engine_type = " + std::string(want) + " (engine_type is " +
                     std::string(type) + "); remove it or set it to " + unset,
                 {"engine.engine_type"});
  };
  // Only the vLLM scheduler preempts by recency; SGLang retracts by its own rule and TRT-LLM's
  // guaranteed_no_evict never preempts.
  if (e.preemption_mode != engine::PreemptionMode::Lifo &&
      e.engine_type != engine::EngineType::Vllm) {
    return only("engine.preemption_mode", "vllm", "\"lifo\"");
  }
  if (e.engine_type != engine::EngineType::Sglang) {
    const engine::SglangConfig d;
    const engine::SglangConfig& g = e.sglang;
    const auto num = [](auto v) { return std::to_string(v); };
    if (g.schedule_policy != d.schedule_policy) {
      std::string quoted = "\"";  // appended: g++ 12 -O3 warns (-Wrestrict) on literal + string
      quoted.append(engine::toString(d.schedule_policy)).append("\"");
      return only("engine.sglang.schedule_policy", "sglang", quoted);
    }
    if (g.page_size != d.page_size)
      return only("engine.sglang.page_size", "sglang", num(d.page_size));
    if (g.max_prefill_tokens != d.max_prefill_tokens) {
      return only("engine.sglang.max_prefill_tokens", "sglang", num(d.max_prefill_tokens));
    }
    if (g.chunked_prefill_size != d.chunked_prefill_size) {
      return only("engine.sglang.chunked_prefill_size", "sglang", num(d.chunked_prefill_size));
    }
    if (g.clip_max_new_tokens != d.clip_max_new_tokens) {
      return only("engine.sglang.clip_max_new_tokens", "sglang", num(d.clip_max_new_tokens));
    }
    if (g.schedule_conservativeness != d.schedule_conservativeness) {
      return only("engine.sglang.schedule_conservativeness", "sglang", "1.0");
    }
  }
  return std::nullopt;
}

/// [service], [fleet], [faults], [kv_events], [fpm], [logging] and [limits] values.
/// The fault admin interface: on the HTTP endpoint, and behind a bearer key unless loopback.
std::optional<ConfigError> checkFaultAdmin(const ServiceConfig& c) {
  const FaultsConfig& f = c.faults;
  if (!f.admin_key_file.empty() && !f.admin) {
    return issue("faults.admin_key_file", "needs faults.admin = true", {"faults.admin"});
  }
  if (!f.admin) return std::nullopt;
  if (!c.endpoints.http.enabled) {
    return issue("faults.admin", "needs the HTTP endpoint (endpoints.http.enabled = true)",
                 {"endpoints.http.enabled"});
  }
  const auto hp = parseHttpEndpoint(c.endpoints.http.endpoint);
  const bool loopback =
      hp && (hp->host == "localhost" || hp->host.starts_with("127.") || hp->host == "::1");
  if (hp && !loopback && f.admin_key_file.empty()) {
    return issue("faults.admin",
                 "on a non-loopback HTTP endpoint (" + c.endpoints.http.endpoint +
                     ") needs a bearer key: set faults.admin_key_file (--faults-admin-key-file)",
                 {"endpoints.http.endpoint", "faults.admin_key_file"});
  }
  return std::nullopt;
}

std::optional<ConfigError> checkServiceValues(const ServiceConfig& c, ConfigUse use) {
  const LiveConfig& s = c.service;
  if (s.max_buffered_outputs < 1) {
    return issue("service.max_buffered_outputs", "must be >= 1 (got 0)");
  }
  if (!std::isfinite(s.fpm_heartbeat_interval_s) || s.fpm_heartbeat_interval_s <= 0) {
    return issue("service.fpm_heartbeat_interval_s",
                 "must be finite and > 0 (got " + std::to_string(s.fpm_heartbeat_interval_s) + ")");
  }
  if (s.max_message_size < 1) {
    return issue("service.max_message_size",
                 "must be >= 1 byte (got " + std::to_string(s.max_message_size) + ")");
  }
  if (s.max_submit_backlog < 1) {
    return issue("service.max_submit_backlog", "must be >= 1 (got 0)");
  }
  if (c.fleet.num_workers < 1 || c.fleet.num_workers > kMaxFleetWorkers) {
    return issue("fleet.num_workers", "must be in [1, " + std::to_string(kMaxFleetWorkers) +
                                          "] (got " + std::to_string(c.fleet.num_workers) + ")");
  }
  // An engine-only user (the offline replay) runs its own number of workers and checks the
  // `worker` scopes against it.
  const std::uint32_t workers =
      use == ConfigUse::EngineOnly ? kMaxFleetWorkers : c.fleet.num_workers;
  if (auto faults = parseFaultSpecs(c.faults.inject, workers, c.engine.dp_size); !faults) {
    return issue("faults.inject", faults.error().message);
  }
  if (auto e = checkFaultAdmin(c)) return e;
  if (s.linger_ms > 60000) {
    return issue("service.linger_ms",
                 "must be in [0, 60000] (got " + std::to_string(s.linger_ms) + ")");
  }
  if (auto e = checkHwm("service.submit_sndhwm", s.submit_sndhwm)) return e;
  if (auto e = checkHwm("service.submit_rcvhwm", s.submit_rcvhwm)) return e;
  if (s.startup_time_s && (!std::isfinite(*s.startup_time_s) || *s.startup_time_s < 0)) {
    return issue("engine.startup_time_s", "must be finite and >= 0 or \"none\" (got " +
                                              std::to_string(*s.startup_time_s) + ")");
  }

  const KvEventsConfig& kv = c.kv_events;
  if (auto e = checkHwm("kv_events.hwm", kv.hwm)) return e;
  if (kv.buffer_steps < 1) return issue("kv_events.buffer_steps", "must be >= 1 (got 0)");
  if (kv.topic.starts_with("kv@")) {
    const auto parts = std::count(kv.topic.begin(), kv.topic.end(), '@') + 1;
    const auto second = kv.topic.find('@', 3);
    if (parts != 3 || second == 3 || second + 1 == kv.topic.size()) {
      return issue("kv_events.topic",
                   "'" + kv.topic +
                       "' must have the llm-d form kv@<pod>@<model>: exactly 3 non-empty "
                       "'@'-separated parts (the model name must not contain '@')");
    }
  }
  if (c.fpm.worker_id.empty() ||
      !std::all_of(c.fpm.worker_id.begin(), c.fpm.worker_id.end(),
                   [](unsigned char ch) { return std::isdigit(ch) != 0; }) ||
      !detail::parseU64Text(c.fpm.worker_id)) {
    return issue("fpm.worker_id",
                 "must be a decimal unsigned 64-bit integer (got \"" + c.fpm.worker_id + "\")");
  }

  if (c.service.served_model_name.empty()) {
    return issue("service.served_model_name", "must not be empty");
  }
  if (!std::isfinite(c.log_stats_interval_s) || c.log_stats_interval_s < 0) {
    return issue("logging.stats_interval_s", "must be finite and >= 0 (0 = off; got " +
                                                 std::to_string(c.log_stats_interval_s) + ")");
  }

  const LimitsConfig& lim = c.limits;
  for (const auto& [key, value] :
       {std::pair{"limits.max_requests_per_client", lim.max_requests_per_client},
        std::pair{"limits.max_requests", lim.max_requests},
        std::pair{"limits.max_clients", lim.max_clients},
        std::pair{"limits.max_request_tokens", lim.max_request_tokens}}) {
    if (value < 1) return issue(key, "must be >= 1 (got 0)");
  }

  return std::nullopt;
}

/// [security]: CURVE between clients and the service, and between workers (handoffs).
std::optional<ConfigError> checkSecurity(const ServiceConfig& c) {
  // CURVE: key material is checked here as far as it is inline; key files are read when the
  // service starts (loadCurveServerKeys), and their errors name the file.
  const SecurityConfig& sec = c.security;
  if (sec.curve_publishers && !sec.curve) {
    return issue("security.curve_publishers", "needs security.curve = true", {"security.curve"});
  }
  if (sec.curve) {
    if (sec.server_secret_key.empty() == sec.server_secret_key_file.empty()) {
      return issue("security.server_secret_key",
                   "or security.server_secret_key_file: give exactly one when security.curve = "
                   "true (`mocker keygen NAME` writes a key pair)",
                   {"security.server_secret_key_file", "security.curve"});
    }
    if (!sec.server_secret_key.empty() && !net::isZ85Key(sec.server_secret_key)) {
      return issue("security.server_secret_key", "is not a Z85 key (40 characters)");
    }
    for (std::size_t i = 0; i < sec.client_public_keys.size(); ++i) {
      if (!net::isZ85Key(sec.client_public_keys[i])) {
        return issue("security.client_public_keys",
                     "element " + std::to_string(i) + " is not a Z85 key (40 characters)");
      }
    }
    if (sec.client_public_keys.empty() && sec.client_public_key_files.empty()) {
      return issue("security.client_public_keys",
                   "and security.client_public_key_files are both empty: with security.curve = "
                   "true no client could connect",
                   {"security.client_public_key_files", "security.curve"});
    }
  }

  // Worker-to-worker CURVE (the handoff sockets of disaggregated serving).
  if (sec.worker_secret_key_file.empty() != sec.handoff_server_key_file.empty()) {
    return issue("security.worker_secret_key_file",
                 "and security.handoff_server_key_file: give both or neither (a decode worker's "
                 "CURVE client side toward prefill workers' handoff sockets)",
                 {"security.handoff_server_key_file"});
  }
  if (sec.curve && c.engine.worker_type == engine::WorkerType::Prefill &&
      sec.worker_public_key_files.empty()) {
    return issue("security.worker_public_key_files",
                 "is empty: with security.curve = true a prefill worker's handoff socket needs the "
                 "decode workers' public keys, or no decode worker could fetch",
                 {"security.curve", "engine.worker_type"});
  }

  return std::nullopt;
}

}  // namespace

std::optional<ConfigError> checkServiceConfig(const ServiceConfig& c, ConfigUse use) {
  using engine::TimingModelKind;
  if (auto e = checkKeysApply(c)) return e;
  // finishServiceConfig loads the profile from timing_profile_path; without one there is nothing
  // for the engine to check.
  if (c.engine.timing_model == TimingModelKind::Interpolated && !c.engine.timing_profile) {
    return issue("engine.timing_profile_path", "is required when timing_model = interpolated",
                 {"engine.timing_model"});
  }
  if (auto e = engine::checkEngineConfig(c.engine)) return fromEngine(std::move(*e));
  if (auto e = checkEngineTypeKeysApply(c.engine)) return e;

  if (auto e = checkServiceValues(c, use)) return e;
  if (auto e = checkSecurity(c)) return e;
  // Endpoints: scheme and DP offsets per socket, then no two bound sockets on one address. Only
  // for a service: an engine-only user opens no socket.
  if (use == ConfigUse::EngineOnly) return std::nullopt;
  const LiveConfig& s = c.service;
  if (!std::isfinite(s.handoff_fetch_timeout_ms) || s.handoff_fetch_timeout_ms <= 0) {
    return issue("service.handoff_fetch_timeout_ms",
                 "must be finite and > 0 (got " + std::to_string(s.handoff_fetch_timeout_ms) + ")");
  }
  if (s.max_handoff_sources < 1)
    return issue("service.max_handoff_sources", "must be >= 1 (got 0)");
  return detail::checkEndpoints(c);
}

Status validateServiceConfig(const ServiceConfig& config, ConfigUse use) {
  if (auto found = checkServiceConfig(config, use)) return std::move(found->error);
  return {};
}

namespace {

/// `path` made absolute against the working directory; empty, absolute or unresolvable (no
/// working directory) paths are returned as they are.
std::string absolutePath(const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.string();
}

}  // namespace

Result<ServiceConfig> finishServiceConfig(ServiceConfig config, const KeyOrigins& origins,
                                          ConfigUse use) {
  const auto origin = [&](const std::string& key) -> std::string {
    const auto it = origins.find(key);
    return it == origins.end() ? std::string() : it->second + ": ";
  };
  const auto located = [&](ConfigError found) -> Error {
    for (const std::string& key : found.keys) {
      if (origins.contains(key)) return Error{found.error.code, origin(key) + found.error.message};
    }
    return std::move(found.error);
  };
  // Before the profile is loaded: a profile path with another timing model is refused, not read.
  if (auto found = checkKeysApply(config)) return located(std::move(*found));
  // File paths become absolute (against the working directory; a file's relative paths are
  // already relative to that file): the effective configuration, and `config --dump` of it,
  // then names the same files wherever it is loaded from.
  for (std::string* path :
       {&config.timing_profile_path, &config.security.server_secret_key_file,
        &config.security.worker_secret_key_file, &config.security.handoff_server_key_file}) {
    *path = absolutePath(*path);
  }
  for (std::string& path : config.security.client_public_key_files) path = absolutePath(path);
  for (std::string& path : config.security.worker_public_key_files) path = absolutePath(path);
  if (!config.timing_profile_path.empty()) {
    auto profile = loadTimingProfile(config.timing_profile_path);
    if (!profile) {
      const Error& e = profile.error();
      return Error{e.code, origin("engine.timing_profile_path") +
                               "engine.timing_profile_path: " + e.message};
    }
    config.engine.timing_profile = std::move(*profile);
  }
  config.roofline.model_config_path = absolutePath(config.roofline.model_config_path);
  if (config.engine.timing_model == engine::TimingModelKind::Roofline) {
    std::string text;
    if (!config.roofline.model_config_path.empty()) {
      auto read = detail::readFile(config.roofline.model_config_path);
      if (!read) {
        return Error{read.error().code, origin("engine.model_config_path") +
                                            "engine.model_config_path: " + read.error().message};
      }
      text = std::move(*read);
    }
    auto built = buildRooflineConfig(config.roofline, text);
    if (!built) {
      // The message starts with the key it is about ("engine.gpu: …", "engine.model.x is …").
      const std::string& message = built.error().message;
      const std::string key = message.substr(0, message.find_first_of(": ("));
      return Error{built.error().code,
                   origin(origins.contains(key) ? key : "engine.model_config_path") + message};
    }
    // vLLM's expert-parallel group spans every GPU of every DP rank.
    if (config.roofline.enable_expert_parallel) {
      const std::uint64_t ep =
          std::uint64_t{built->tensor_parallel_size} * std::uint64_t{config.engine.dp_size};
      built->expert_parallel_size =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(ep, 1u << 20));
    }
    config.engine.roofline = std::move(*built);
    // A handoff moves every layer's K and V of the model unless the key says otherwise.
    if (!origins.contains("engine.kv_bytes_per_token")) {
      config.engine.kv_bytes_per_token =
          static_cast<std::uint64_t>(engine::kvBytesPerToken(config.engine.roofline->model));
    }
  }
  // The default port plan: with every ZeroMQ endpoint key left at its default, dp_size ranks
  // get ports that do not collide (dp_size 1 keeps 5555..5559; service/README.md, "Port plan").
  if (use == ConfigUse::Serve && endpointsLeftAtDefaults(origins) && config.engine.dp_size > 1 &&
      config.engine.dp_size <= 1024) {
    std::uint16_t http_port = kDefaultHttpPort;
    if (auto hp = parseHttpEndpoint(config.endpoints.http.endpoint); hp && hp->port != 0) {
      http_port = hp->port;
    }
    if (auto planned = defaultEndpoints(config.engine.dp_size, http_port)) {
      const HttpEndpointConfig http = config.endpoints.http;
      config.endpoints = *planned;
      config.endpoints.http = http;
    }
  }
  if (auto found = checkServiceConfig(config, use)) return located(std::move(*found));
  return config;
}

}  // namespace mocker::service
