// ServiceConfig: everything `mocker serve` is configured with — the engine (engine/config.h),
// the ZeroMQ endpoints, the KV-event and forward-pass-metrics publishers, logging and the
// live-boundary limits — plus its TOML loader, validator and dumper. The file layout, every key,
// its default and its range are documented in service/README.md.
//
//   loadServiceConfig(path)              file → validated config (errors: "file:line:col: key …")
//   parseServiceConfig(text, name)       same, from text
//   checkServiceConfig(config, use)      every range and cross-field rule; the broken one as data
//   validateServiceConfig(config, use)   same, as a Status
//   dumpServiceConfig(config)            TOML with every key; parses back to an equal config
//
// Implementation, one file per concern: config_keys.cpp (the key table, typed assignment, the
// dump), config_toml.cpp (TOML reading with file:line:col origins), config_validate.cpp (range
// and cross-field rules, origin-prefixed errors), timing_profile.cpp (the JSON profile loader).
//
// Conventions: keys that may be "unset" (max_model_len, max_num_seqs, max_num_batched_tokens,
// startup_time_s, fixed_prefill_ms, fixed_decode_ms) take the string "none" for null; u64 seeds
// above 2^63-1 are written as decimal strings; enum strings are case-insensitive.
//
// Plain value types and pure functions (apart from file reads); thread-compatible. Call from
// the main thread at start-up.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/common.h>

#include "base/result.h"
#include "engine/config.h"
#include "protocol/kv_events.h"
#include "publishers/kv_event_publisher.h"

namespace mocker::service {

/// A ZeroMQ endpoint. Every socket binds unless `connect` is true (our rule: we do not copy
/// vLLM's "bind iff the address contains * or ::" guess; see service/README.md).
struct EndpointConfig {
  std::string endpoint;
  bool connect = false;
  friend bool operator==(const EndpointConfig&, const EndpointConfig&) = default;
};

/// `[endpoints.http]`: the HTTP server for /metrics, /health and /ready (service/README.md,
/// "HTTP: metrics, health, readiness"). Not a ZeroMQ endpoint: plain HOST:PORT, always bound.
struct HttpEndpointConfig {
  std::string endpoint = "127.0.0.1:8000";  ///< HOST:PORT; port 0 = ephemeral
  bool enabled = true;
  friend bool operator==(const HttpEndpointConfig&, const HttpEndpointConfig&) = default;
};

/// `[endpoints.*]`. kv_events, kv_replay and fpm are per DP rank (offset by the rank).
struct EndpointsConfig {
  EndpointConfig submit{"tcp://127.0.0.1:5555"};     ///< ROUTER
  EndpointConfig cancel{"tcp://127.0.0.1:5556"};     ///< ROUTER
  EndpointConfig kv_events{"tcp://127.0.0.1:5557"};  ///< PUB
  EndpointConfig kv_replay{"tcp://127.0.0.1:5558"};  ///< ROUTER
  EndpointConfig fpm{"tcp://127.0.0.1:5559"};        ///< PUB
  /// ROUTER of a prefill worker (engine.worker_type = prefill): kv_fetch / kv_release from
  /// decode workers. Not opened by other worker types.
  EndpointConfig handoff{"tcp://127.0.0.1:5561"};  ///< (5560 is `mocker index`'s query port)
  /// `[endpoints.handoff] advertise`: the endpoint put into handoff tickets instead of the bound
  /// one ("" = the bound endpoint); required when the handoff endpoint binds a wildcard host.
  std::string handoff_advertise;
  HttpEndpointConfig http;  ///< HTTP (metrics, health, readiness)
  friend bool operator==(const EndpointsConfig&, const EndpointsConfig&) = default;
};

/// `[kv_events]`: the KV-event PUB socket, its replay ROUTER and the payload encoding. The
/// encoding fields use the wire types directly (names "p8", "r1", "nil" in files and flags).
struct KvEventsConfig {
  bool enabled = true;                 ///< PUB socket on endpoints.kv_events
  bool replay_enabled = true;          ///< replay ROUTER on endpoints.kv_replay (needs enabled)
  std::string topic;                   ///< frame 0; "kv@<pod>@<model>" form checked
  std::uint32_t hwm = 100000;          ///< PUB ZMQ_SNDHWM; 0 = unlimited, <= INT_MAX
  std::uint32_t buffer_steps = 10000;  ///< replay ring, batches, >= 1
  protocol::KvLayout layout = protocol::KvLayout::P8;
  publishers::ReplayLayout replay_layout = publishers::ReplayLayout::R1;
  protocol::ParentRoot parent_root = protocol::ParentRoot::Nil;
  bool force_uint64_hashes = false;
  bool clear_on_start = false;
  friend bool operator==(const KvEventsConfig&, const KvEventsConfig&) = default;
};

/// `[fpm]`: the forward-pass-metrics PUB socket.
struct FpmConfig {
  bool enabled = true;
  std::string worker_id = "0";  ///< decimal u64
  friend bool operator==(const FpmConfig&, const FpmConfig&) = default;
};

/// `[service]`: the live boundary and socket limits.
struct LiveConfig {
  std::uint32_t submit_sndhwm = 1000;  ///< submit ROUTER ZMQ_SNDHWM; 0 = unlimited, <= INT_MAX
  std::uint32_t submit_rcvhwm = 1000;  ///< submit ROUTER ZMQ_RCVHWM; 0 = unlimited, <= INT_MAX
  std::int64_t max_message_size = 64 * 1024 * 1024;  ///< ZMQ_MAXMSGSIZE bytes, >= 1
  std::uint32_t max_submit_backlog = 10000;          ///< engine waiting requests before reads pause
  std::uint32_t linger_ms = 1000;                    ///< ZMQ_LINGER on close, <= 60000
  std::uint32_t max_buffered_outputs = 8;            ///< >= 1
  double fpm_heartbeat_interval_s = 1.0;             ///< finite, > 0
  std::optional<double> startup_time_s;              ///< null or finite >= 0
  std::string served_model_name = "mocker";          ///< `model_name` label of the metrics
  std::string worker_label;  ///< `worker` label of the metrics (a fleet); "" = no such label
  /// Decode worker: wall ms a kv_fetch may wait for its kv_fetch_reply before the request ends
  /// with a `handoff:` error; finite, > 0.
  double handoff_fetch_timeout_ms = 30000.0;
  /// Decode worker: distinct prefill workers (ticket sources) it keeps a DEALER to, >= 1; a
  /// handoff naming one more is refused.
  std::uint32_t max_handoff_sources = 64;
  friend bool operator==(const LiveConfig&, const LiveConfig&) = default;
};

/// `[limits]`: what one client, and all clients together, may hold in the service. A submit
/// over a limit is answered with an `error` naming the limit (protocol/README.md).
struct LimitsConfig {
  std::uint32_t max_requests_per_client =
      100000;  ///< in-flight requests of one client (routing id; with CURVE its key), >= 1
  std::uint32_t max_requests = 1000000;         ///< in-flight requests in total, >= 1
  std::uint32_t max_clients = 10000;            ///< clients with live state, >= 1
  std::uint32_t max_request_tokens = 16777216;  ///< prompt + output tokens per request, >= 1
  friend bool operator==(const LimitsConfig&, const LimitsConfig&) = default;
};

/// `[security]`: CURVE authentication and encryption (service/README.md, "Security").
struct SecurityConfig {
  bool curve = false;  ///< CURVE on submit, cancel and kv_replay; identity = client public key
  std::string server_secret_key;                     ///< Z85 (40 characters), or
  std::string server_secret_key_file;                ///< a file holding it (`mocker keygen`)
  std::vector<std::string> client_public_keys;       ///< the allow-list, Z85
  std::vector<std::string> client_public_key_files;  ///< more of it: one Z85 key per file
  bool curve_publishers = false;  ///< also CURVE on the kv_events and fpm PUB sockets
  /// Prefill worker: public key files of the decode workers allowed on its handoff ROUTER (a
  /// separate allow-list: these keys cannot submit).
  std::vector<std::string> worker_public_key_files;
  /// Decode worker: its secret key file for the CURVE client side of its handoff DEALERs, and
  /// the public key file of the prefill workers' handoff sockets; both or neither.
  std::string worker_secret_key_file;
  std::string handoff_server_key_file;
  friend bool operator==(const SecurityConfig&, const SecurityConfig&) = default;
};

/// `[fleet]`: how many simulated workers one `mocker serve` process runs (service/fleet.h).
struct FleetConfig {
  std::uint32_t num_workers = 1;  ///< >= 1, <= kMaxFleetWorkers
  friend bool operator==(const FleetConfig&, const FleetConfig&) = default;
};
inline constexpr std::uint32_t kMaxFleetWorkers = 4096;

/// `[faults]`: failure drills (service/README.md "Failure drills"; service/fault_plan.h).
struct FaultsConfig {
  std::vector<std::string> inject;  ///< fault specs, `KIND[:KEY=VALUE]...` (`--fault`)
  std::uint64_t seed = 0;           ///< seed of the rate draws
  std::string log;                  ///< JSONL fault log (`--fault-log`); "" = none
  /// The admin interface on the HTTP endpoint: GET/POST /admin/faults, DELETE
  /// /admin/faults/{id} (`--faults-admin`); service/README.md "Failure drills".
  bool admin = false;
  /// Its bearer key (a file holding it; `--faults-admin-key-file`): required when the HTTP
  /// endpoint is not loopback; "" = no key asked for.
  std::string admin_key_file;
  friend bool operator==(const FaultsConfig&, const FaultsConfig&) = default;
};

/// `[logging] format`: human-readable text lines or one JSON object per line.
enum class LogFormat { Text, Json };

/// The roofline deployment as configured (`[engine]` model_config_path, gpu,
/// tensor_parallel_size, enable_expert_parallel, gpu_memory_utilization; `[engine.model]`,
/// `[engine.gpu]`,
/// `[engine.roofline]`): finishServiceConfig turns it into engine.roofline when timing_model =
/// roofline (buildRooflineConfig). Unset overrides (none / "") take the config.json's value.
struct RooflineSettings {
  std::string model_config_path;  ///< Hugging Face config.json; "" = only [engine.model] keys
  std::string model_name;
  std::optional<std::uint32_t> num_layers, hidden_size, num_heads, num_kv_heads, head_dim,
      intermediate_size, vocab_size, num_experts, experts_per_token, moe_intermediate_size;
  std::string weight_dtype;  ///< "" = config.json torch_dtype, else bfloat16
  std::string kv_dtype;      ///< "" = bfloat16
  std::string gpu;           ///< built-in GPU name (engine::gpuTable); "" = explicit values only
  std::optional<double> gpu_tflops, gpu_memory_bandwidth_gbps, gpu_memory_gib,
      gpu_interconnect_gbps;
  /// Optional for every GPU (a custom one: SM count unknown = no wave quantisation, scale 1).
  std::optional<std::uint32_t> gpu_sm_count;
  std::optional<double> gpu_compute_efficiency_scale;
  std::optional<double> gpu_interconnect_efficiency_scale;
  std::optional<double> gpu_memory_efficiency_scale;
  std::optional<double> gpu_attention_efficiency_scale;
  std::uint32_t tensor_parallel_size = 1;
  /// vLLM's --enable-expert-parallel: experts spread over TP × dp_size GPUs
  /// (engine::RooflineConfig::expert_parallel_size).
  bool enable_expert_parallel = false;
  double gpu_memory_utilization = 0.9;
  double non_torch_memory_gib = engine::kDefaultNonTorchMemoryGib;
  engine::RooflineCoefficients coefficients;
};

/// True for the keys of RooflineSettings (they apply only to timing_model = roofline).
bool isRooflineKey(std::string_view key_path);

/// The engine's RooflineConfig from the settings and the text of the config.json they name
/// ("" when model_config_path is empty). Errors name the key ("engine.model.hidden_size is
/// required …", "engine.gpu: unknown GPU 'X' (known: …)").
Result<engine::RooflineConfig> buildRooflineConfig(const RooflineSettings& settings,
                                                   std::string_view model_config_text);

struct ServiceConfig {
  /// `[engine]`, `[engine.sglang]`. engine.allow_empty_output is the `[service]` key
  /// allow_empty_output; engine.timing_profile is loaded from timing_profile_path.
  engine::EngineConfig engine;
  /// `[engine] timing_profile_path`: JSON profile (loadTimingProfile); "" = none.
  std::string timing_profile_path;
  RooflineSettings roofline;  ///< → engine.roofline when timing_model = roofline
  LiveConfig service;
  EndpointsConfig endpoints;
  KvEventsConfig kv_events;
  FpmConfig fpm;
  LimitsConfig limits;
  SecurityConfig security;
  spdlog::level::level_enum log_level = spdlog::level::info;  ///< `[logging] level`
  LogFormat log_format = LogFormat::Text;                     ///< `[logging] format`
  /// `[logging] stats_interval_s`: the periodic "Running: N reqs, …" line; 0 = off.
  double log_stats_interval_s = 10.0;
  FleetConfig fleet;    ///< `[fleet]`
  FaultsConfig faults;  ///< `[faults]`
};

/// Splits an HTTP endpoint "HOST:PORT" (IPv6 as "[::1]:PORT") into host and port; errors say
/// what is wrong. Port 0 asks for an ephemeral port.
struct HttpHostPort {
  std::string host;
  std::uint16_t port = 0;
};
Result<HttpHostPort> parseHttpEndpoint(std::string_view endpoint);

/// Field-by-field equality (EngineConfig has no operator==).
bool operator==(const ServiceConfig& a, const ServiceConfig& b);

/// The endpoint a per-rank socket of `dp_rank` uses: publishers::offsetEndpoint, except that a
/// wildcard tcp port ("tcp://host:*", an ephemeral port) stays a wildcard for every rank.
Result<std::string> rankEndpoint(const EndpointConfig& endpoint, std::uint32_t dp_rank);

/// What a configuration is for. EngineOnly (offline tools such as `mocker replay`, which build
/// engines but open no socket) skips the socket-address rules (endpoints.*: scheme, per-rank
/// offsets, collisions); every other rule, the engine's included, applies to both.
enum class ConfigUse { Serve, EngineOnly };

/// A broken rule, as data: the key paths it is about and the error.
struct ConfigError {
  /// Key paths ("engine.num_gpu_blocks"), the offending key first, then the keys it was checked
  /// against; the first one with a known origin locates the error (finishServiceConfig).
  std::vector<std::string> keys;
  Error error;  ///< message starts with the key path ("engine.num_gpu_blocks must be >= 1 …")
};

/// Every range and cross-field rule that applies to `use`, in a fixed order; the first one the
/// config breaks, or nullopt. Engine rules are engine::checkEngineConfig's, with the engine's
/// field names mapped to key paths. Does not read files.
std::optional<ConfigError> checkServiceConfig(const ServiceConfig& config,
                                              ConfigUse use = ConfigUse::Serve);

/// checkServiceConfig as a Status; the error message starts with the key path
/// ("engine.num_gpu_blocks must be >= 1 (got 0)").
Status validateServiceConfig(const ServiceConfig& config, ConfigUse use = ConfigUse::Serve);

/// Where each key's value came from: "file.toml:12:5" for file keys, "--flag" for CLI flags.
using KeyOrigins = std::map<std::string, std::string, std::less<>>;

/// Parses TOML `text` (named `source_name` in errors), loads the timing profile (a relative
/// timing_profile_path is resolved against the directory of source_name) and validates.
/// Errors read "<source_name>:<line>:<col>: <key> …".
Result<ServiceConfig> parseServiceConfig(std::string_view text, std::string_view source_name);

/// Reads `path` and parses it (parseServiceConfig). A missing file is NotFound.
Result<ServiceConfig> loadServiceConfig(const std::string& path);

/// The layering steps behind parseServiceConfig, for the CLI (defaults → file → flags):
/// applies the file's keys over `base` without validating, recording each key's origin.
Result<ServiceConfig> parseServiceConfigOver(ServiceConfig base, std::string_view text,
                                             std::string_view source_name, KeyOrigins& origins);
Result<ServiceConfig> loadServiceConfigOver(ServiceConfig base, const std::string& path,
                                            KeyOrigins& origins);

/// Sets one key (TOML path, e.g. "engine.max_num_seqs") from command-line text, with the same
/// types and spellings as the file ("none", true/false, enum names). Unknown key → error.
Status setConfigValue(ServiceConfig& config, std::string_view key, std::string_view text);

/// Final step: loads engine.timing_profile from timing_profile_path (if set) and validates for
/// `use`; errors are prefixed with the origin of the first of their keys that has one.
Result<ServiceConfig> finishServiceConfig(ServiceConfig config, const KeyOrigins& origins,
                                          ConfigUse use = ConfigUse::Serve);

/// Every key path, in dump order ("engine.engine_type", …, "logging.level").
std::vector<std::string> configKeys();

/// The kind of value a key takes, as `--help` shows it: "UINT", "INT", "UINT|none", "FLOAT",
/// "FLOAT|none", "BOOL", "TEXT", "LIST" (comma-separated on the command line) or "NAME" (one of
/// a set of names). nullopt for an unknown key.
std::optional<std::string> configKeyType(std::string_view key);

/// A key's value in `config` as the dump writes it, without the quotes of a string
/// ("tcp://127.0.0.1:5555", "none", "true", "64"). nullopt for an unknown key.
std::optional<std::string> configValueText(const ServiceConfig& config, std::string_view key);

/// Loads an interpolated timing profile (JSON object with the arrays prefill_isl, prefill_ttft_ms,
/// decode_active_kv_tokens, decode_context_length, decode_itl). Errors name the file and what is
/// wrong (missing array, wrong type, lengths, ordering).
Result<engine::TimingProfile> loadTimingProfile(const std::string& path);
Result<engine::TimingProfile> parseTimingProfile(std::string_view json_text,
                                                 std::string_view source_name);

/// The effective configuration as TOML, every key present (null spelled "none").
std::string dumpServiceConfig(const ServiceConfig& config);

}  // namespace mocker::service
