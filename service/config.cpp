#include "service/config.h"

// Design: one table of keys (kKeys) drives the TOML reader, the command-line setter and the
// dumper, so the three can never disagree about a key's name, type or spelling. Values from a
// TOML node or from command-line text are first turned into a small Value variant and then
// assigned through the key's typed accessor; range and cross-field rules live in one validator
// whose messages start with the key path, which finishServiceConfig maps back to the key's
// origin (file:line:col or --flag).

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>
#include <variant>

#include "base/ascii.h"
#include "base/enum_names.h"
#include "publishers/endpoint.h"
#include "service/logging.h"

namespace mocker::service {
namespace {

// ---------------------------------------------------------------------------------------------
// Service enums.

constexpr EnumNames<KvEventLayout, 7> kLayouts{{
    {"p6", KvEventLayout::P6},
    {"p7", KvEventLayout::P7},
    {"p8", KvEventLayout::P8},
    {"p9", KvEventLayout::P9},
    {"p12", KvEventLayout::P12},
    {"map", KvEventLayout::Map},
    {"map26", KvEventLayout::Map26},
}};
constexpr EnumNames<ReplayLayout, 2> kReplayLayouts{{
    {"r1", ReplayLayout::R1},
    {"r2", ReplayLayout::R2},
}};
constexpr EnumNames<ParentRoot, 2> kParentRoots{{
    {"nil", ParentRoot::Nil},
    {"zero", ParentRoot::Zero},
}};

template <typename Enum, std::size_t N>
Result<Enum> enumParse(const EnumNames<Enum, N>& names, std::string_view what, std::string_view s) {
  if (auto v = enumFromName(names, s)) return *v;
  return invalidArgument("unknown " + std::string(what) + " '" + std::string(s) +
                         "' (expected one of " + enumNameList(names, ", ") + ")");
}

// ---------------------------------------------------------------------------------------------
// Values and typed fields.

/// A scalar from a TOML node or from command-line text.
using Value = std::variant<std::int64_t, double, bool, std::string>;

std::string describe(const Value& v) {
  switch (v.index()) {
    case 0:
      return "an integer (" + std::to_string(std::get<0>(v)) + ")";
    case 1:
      return "a float";
    case 2:
      return "a boolean";
    default:
      return "a string (\"" + std::get<3>(v) + "\")";
  }
}

bool isNone(const Value& v) {
  return std::holds_alternative<std::string>(v) && asciiLower(std::get<std::string>(v)) == "none";
}

using U32Ref = std::uint32_t& (*)(ServiceConfig&);
using OptU32Ref = std::optional<std::uint32_t>& (*)(ServiceConfig&);
using U64Ref = std::uint64_t& (*)(ServiceConfig&);
using I64Ref = std::int64_t& (*)(ServiceConfig&);
using DoubleRef = double& (*)(ServiceConfig&);
using OptDoubleRef = std::optional<double>& (*)(ServiceConfig&);
using BoolRef = bool& (*)(ServiceConfig&);
using StringRef = std::string& (*)(ServiceConfig&);
struct EnumField {
  std::string_view (*get)(const ServiceConfig&);
  Status (*set)(ServiceConfig&, std::string_view);
};
using Field = std::variant<U32Ref, OptU32Ref, U64Ref, I64Ref, DoubleRef, OptDoubleRef, BoolRef,
                           StringRef, EnumField>;

struct Key {
  std::string_view table;  ///< "engine.sglang"
  std::string_view name;   ///< "page_size"
  Field field;
  std::string path() const { return std::string(table) + "." + std::string(name); }
};

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

Result<std::uint64_t> parseU64Text(std::string_view s) {
  std::uint64_t out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    return invalidArgument("expected an unsigned 64-bit decimal integer, got \"" + std::string(s) +
                           "\"");
  }
  return out;
}

/// Assigns `v` to the key's field. Errors describe the value only (the caller adds the key).
Status assign(const Key& key, const Value& v, ServiceConfig& c) {
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
            MOCKER_TRY(f(c), parseU64Text(std::get<std::string>(v)));
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
        } else {
          if (!std::holds_alternative<std::string>(v)) return typeError("a string", v);
          return f.set(c, std::get<std::string>(v));
        }
        return {};
      },
      key.field);
}

/// Command-line text → Value of the type the key expects.
Result<Value> textValue(const Key& key, std::string_view text) {
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
    default:
      return Value{std::string(text)};
  }
}

// Fixed-value keys of engine.md §1.1/§1.4 that have no EngineConfig field yet.
Status setWorkerType(ServiceConfig&, std::string_view s) {
  if (asciiLower(s) == "aggregated") return {};
  return invalidArgument("unsupported worker_type '" + std::string(s) +
                         "' (only aggregated is implemented)");
}
Status setCapacityPolicy(ServiceConfig&, std::string_view s) {
  if (asciiLower(s) == "guaranteed_no_evict") return {};
  return invalidArgument("unsupported capacity_scheduler_policy '" + std::string(s) +
                         "' (only guaranteed_no_evict is accepted)");
}

template <typename E, Result<E> (*Parse)(std::string_view)>
Status setVia(E& out, std::string_view s) {
  MOCKER_TRY(out, Parse(s));
  return {};
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

const std::vector<Key>& keys() {
  static const std::vector<Key> kKeys = {
      {"engine", "engine_type",
       MOCKER_ENUM(engine.engine_type, engine::toString, engine::parseEngineType)},
      {"engine", "num_gpu_blocks", MOCKER_REF(U32Ref, engine.num_gpu_blocks)},
      {"engine", "block_size", MOCKER_REF(U32Ref, engine.block_size)},
      {"engine", "max_model_len", MOCKER_REF(OptU32Ref, engine.max_model_len)},
      {"engine", "max_num_seqs", MOCKER_REF(OptU32Ref, engine.max_num_seqs)},
      {"engine", "max_num_batched_tokens", MOCKER_REF(OptU32Ref, engine.max_num_batched_tokens)},
      {"engine", "enable_prefix_caching", MOCKER_REF(BoolRef, engine.enable_prefix_caching)},
      {"engine", "enable_chunked_prefill", MOCKER_REF(BoolRef, engine.enable_chunked_prefill)},
      {"engine", "preemption_mode",
       MOCKER_ENUM(engine.preemption_mode, engine::toString, engine::parsePreemptionMode)},
      {"engine", "dp_size", MOCKER_REF(U32Ref, engine.dp_size)},
      {"engine", "hash_seed", MOCKER_REF(U64Ref, engine.hash_seed)},
      {"engine", "chain_seed", MOCKER_REF(U64Ref, engine.chain_seed)},
      {"engine", "token_seed", MOCKER_REF(U64Ref, engine.token_seed)},
      {"engine", "kv_event_visibility",
       MOCKER_ENUM(engine.kv_event_visibility, engine::toString, engine::parseKvEventVisibility)},
      {"engine", "worker_type",
       EnumField{[](const ServiceConfig&) -> std::string_view { return "aggregated"; },
                 setWorkerType}},
      {"engine", "timing_model",
       MOCKER_ENUM(engine.timing_model, engine::toString, engine::parseTimingModelKind)},
      {"engine", "timing_profile_path", MOCKER_REF(StringRef, timing_profile_path)},
      {"engine", "fixed_prefill_ms", MOCKER_REF(OptDoubleRef, engine.fixed_prefill_ms)},
      {"engine", "fixed_decode_ms", MOCKER_REF(OptDoubleRef, engine.fixed_decode_ms)},
      {"engine", "speedup_ratio", MOCKER_REF(DoubleRef, engine.speedup_ratio)},
      {"engine", "decode_speedup_ratio", MOCKER_REF(DoubleRef, engine.decode_speedup_ratio)},
      {"engine", "startup_time_s", MOCKER_REF(OptDoubleRef, service.startup_time_s)},
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
      {"kv_events", "enabled", MOCKER_REF(BoolRef, kv_events.enabled)},
      {"kv_events", "replay_enabled", MOCKER_REF(BoolRef, kv_events.replay_enabled)},
      {"kv_events", "topic", MOCKER_REF(StringRef, kv_events.topic)},
      {"kv_events", "hwm", MOCKER_REF(U32Ref, kv_events.hwm)},
      {"kv_events", "max_queue_size", MOCKER_REF(U32Ref, kv_events.max_queue_size)},
      {"kv_events", "buffer_steps", MOCKER_REF(U32Ref, kv_events.buffer_steps)},
      {"kv_events", "layout", MOCKER_ENUM(kv_events.layout, toString, parseKvEventLayout)},
      {"kv_events", "replay_layout",
       MOCKER_ENUM(kv_events.replay_layout, toString, parseReplayLayout)},
      {"kv_events", "parent_root", MOCKER_ENUM(kv_events.parent_root, toString, parseParentRoot)},
      {"kv_events", "force_uint64_hashes", MOCKER_REF(BoolRef, kv_events.force_uint64_hashes)},
      {"kv_events", "clear_on_start", MOCKER_REF(BoolRef, kv_events.clear_on_start)},
      {"fpm", "enabled", MOCKER_REF(BoolRef, fpm.enabled)},
      {"fpm", "worker_id", MOCKER_REF(StringRef, fpm.worker_id)},
      {"logging", "level", MOCKER_ENUM(log_level, levelName, parseLogLevel)},
  };
  return kKeys;
}

#undef MOCKER_REF
#undef MOCKER_ENUM

const Key* findKey(std::string_view path) {
  for (const Key& k : keys()) {
    if (k.path() == path) return &k;
  }
  return nullptr;
}

/// Tables that may appear in a file: every key's table and its parents.
bool isKnownTable(std::string_view path) {
  for (const Key& k : keys()) {
    if (k.table == path) return true;
    if (k.table.size() > path.size() && k.table.starts_with(path) && k.table[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// TOML reading.

struct Located {
  std::uint32_t line = 0;
  std::uint32_t column = 0;
  Error error;
};

class TomlReader {
 public:
  TomlReader(std::string source, ServiceConfig& config, KeyOrigins& origins)
      : source_(std::move(source)), config_(config), origins_(origins) {}

  void readTable(const toml::table& table, const std::string& path) {
    for (const auto& [raw_key, node] : table) {
      const std::string name(raw_key.str());
      const std::string key_path = path.empty() ? name : path + "." + name;
      if (const toml::table* sub = node.as_table()) {
        if (isKnownTable(key_path)) {
          readTable(*sub, key_path);
        } else if (findKey(key_path) != nullptr) {
          fail(node, key_path, "expected a value, got a table");
        } else {
          fail(raw_key.source(), key_path, "unknown table");
        }
        continue;
      }
      const Key* key = findKey(key_path);
      if (key == nullptr) {
        fail(raw_key.source(), key_path,
             isKnownTable(key_path) ? "expected a table, got a value" : "unknown key");
        continue;
      }
      auto value = toValue(node);
      if (!value) {
        fail(node, key_path, value.error().message);
        continue;
      }
      if (auto st = assign(*key, *value, config_); !st) {
        fail(node, key_path, st.error().message);
        continue;
      }
      origins_[key_path] = locate(node);
    }
  }

  /// The earliest error in the file, if any.
  std::optional<Error> firstError() const {
    if (errors_.empty()) return std::nullopt;
    const auto it =
        std::min_element(errors_.begin(), errors_.end(), [](const auto& a, const auto& b) {
          return std::tie(a.line, a.column) < std::tie(b.line, b.column);
        });
    return it->error;
  }

 private:
  std::string locate(const toml::source_region& region) const {
    const auto& b = region.begin;
    return source_ + ":" + std::to_string(b.line) + ":" + std::to_string(b.column);
  }
  std::string locate(const toml::node& node) const { return locate(node.source()); }

  void fail(const toml::source_region& region, const std::string& key_path,
            const std::string& what) {
    errors_.push_back({region.begin.line, region.begin.column,
                       invalidArgument(locate(region) + ": " + key_path + ": " + what)});
  }
  void fail(const toml::node& node, const std::string& key_path, const std::string& what) {
    fail(node.source(), key_path, what);
  }

  static Result<Value> toValue(const toml::node& node) {
    if (auto v = node.value_exact<std::int64_t>()) return Value{*v};
    if (auto v = node.value_exact<double>()) return Value{*v};
    if (auto v = node.value_exact<bool>()) return Value{*v};
    if (auto v = node.value_exact<std::string>()) return Value{*v};
    switch (node.type()) {
      case toml::node_type::array:
        return invalidArgument("expected a scalar, got an array");
      case toml::node_type::date:
      case toml::node_type::time:
      case toml::node_type::date_time:
        return invalidArgument("expected a scalar, got a date/time");
      default:
        return invalidArgument("unsupported value type");
    }
  }

  std::string source_;
  ServiceConfig& config_;
  KeyOrigins& origins_;
  std::vector<Located> errors_;
};

// ---------------------------------------------------------------------------------------------
// Validation.

struct Issue {
  /// Key paths the error is about, most specific first; the first one with a known origin
  /// locates the error.
  std::vector<std::string> keys;
  Error error;  ///< message starts with the key path
};

Issue issue(const std::string& key, const std::string& what,
            std::vector<std::string> related = {}) {
  related.insert(related.begin(), key);
  return {std::move(related), invalidArgument(key + " " + what)};
}

/// Maps an engine::validateEngineConfig message to the key paths it names, in order of
/// appearance: every engine key name that appears in the message as a whole word.
std::vector<std::string> engineKeysOf(const std::string& message) {
  std::vector<std::pair<std::size_t, std::string>> found;  // (position, key path)
  const auto word = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_';
  };
  const auto consider = [&](const std::string& needle, const std::string& key_path) {
    for (std::size_t pos = message.find(needle); pos != std::string::npos;
         pos = message.find(needle, pos + 1)) {
      const std::size_t end = pos + needle.size();
      const bool left_ok = pos == 0 || !(word(message[pos - 1]) || message[pos - 1] == '.');
      const bool right_ok = end == message.size() || !word(message[end]);
      if (left_ok && right_ok) {
        found.emplace_back(pos, key_path);
        return;
      }
    }
  };
  for (const Key& k : keys()) {
    if (k.table == "engine") consider(std::string(k.name), k.path());
    if (k.table == "engine.sglang") consider("sglang." + std::string(k.name), k.path());
  }
  consider("timing_profile", "engine.timing_profile_path");
  consider("allow_empty_output", "service.allow_empty_output");
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& [pos, key] : found) out.push_back(std::move(key));
  return out;
}

bool isWildcardTcp(std::string_view endpoint) {
  return endpoint.starts_with("tcp://") && endpoint.ends_with(":*");
}

/// (host, port) of a tcp endpoint; nullopt for other schemes.
std::optional<std::pair<std::string, std::string>> tcpHostPort(std::string_view endpoint) {
  if (!endpoint.starts_with("tcp://")) return std::nullopt;
  const auto colon = endpoint.rfind(':');
  if (colon < 6) return std::nullopt;
  return std::pair{std::string(endpoint.substr(6, colon - 6)),
                   std::string(endpoint.substr(colon + 1))};
}

/// Whether two bound endpoints would fight over the same address.
bool collide(std::string_view a, std::string_view b) {
  if (isWildcardTcp(a) || isWildcardTcp(b)) return false;  // ephemeral ports never collide
  const auto ta = tcpHostPort(a);
  const auto tb = tcpHostPort(b);
  if (ta && tb) {
    if (ta->second != tb->second) return false;
    const auto any = [](const std::string& h) { return h == "*" || h == "0.0.0.0"; };
    return ta->first == tb->first || any(ta->first) || any(tb->first);
  }
  return a == b;
}

std::optional<Issue> findIssue(const ServiceConfig& c) {
  using engine::TimingModelKind;
  if (c.engine.timing_model == TimingModelKind::Interpolated && c.timing_profile_path.empty() &&
      !c.engine.timing_profile) {
    return issue("engine.timing_profile_path", "is required when timing_model = interpolated",
                 {"engine.timing_model"});
  }
  if (auto st = engine::validateEngineConfig(c.engine); !st) {
    const std::string& msg = st.error().message;
    std::vector<std::string> named = engineKeysOf(msg);
    if (!named.empty() && msg.starts_with(named.front().substr(7))) {
      return Issue{std::move(named), invalidArgument("engine." + msg)};
    }
    return Issue{std::move(named), invalidArgument("engine: " + msg)};
  }

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
  if (s.linger_ms > 60000) {
    return issue("service.linger_ms",
                 "must be in [0, 60000] (got " + std::to_string(s.linger_ms) + ")");
  }
  if (s.startup_time_s && (!std::isfinite(*s.startup_time_s) || *s.startup_time_s < 0)) {
    return issue("engine.startup_time_s", "must be finite and >= 0 or \"none\" (got " +
                                              std::to_string(*s.startup_time_s) + ")");
  }

  const KvEventsConfig& kv = c.kv_events;
  if (kv.max_queue_size < 1) return issue("kv_events.max_queue_size", "must be >= 1 (got 0)");
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
      !parseU64Text(c.fpm.worker_id)) {
    return issue("fpm.worker_id",
                 "must be a decimal unsigned 64-bit integer (got \"" + c.fpm.worker_id + "\")");
  }

  // Endpoints: scheme and DP offsets per socket, then no two bound sockets on one address.
  struct Socket {
    std::string key;
    const EndpointConfig* endpoint;
    bool per_rank;
    bool enabled;
  };
  const std::vector<Socket> sockets = {
      {"endpoints.submit", &c.endpoints.submit, false, true},
      {"endpoints.cancel", &c.endpoints.cancel, false, true},
      {"endpoints.kv_events", &c.endpoints.kv_events, true, kv.enabled},
      {"endpoints.kv_replay", &c.endpoints.kv_replay, true, kv.enabled && kv.replay_enabled},
      {"endpoints.fpm", &c.endpoints.fpm, true, c.fpm.enabled},
  };
  struct Bound {
    std::string key;
    std::string address;
    std::uint32_t rank;
  };
  std::vector<Bound> bound;
  for (const Socket& sock : sockets) {
    if (!sock.enabled) continue;
    const std::string key = sock.key + ".endpoint";
    if (sock.endpoint->endpoint.empty()) return issue(key, "must not be empty");
    const std::uint32_t ranks = sock.per_rank ? c.engine.dp_size : 1;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      auto address = rankEndpoint(*sock.endpoint, r);
      if (!address) {
        return Issue{{key, "engine.dp_size"},
                     invalidArgument(key + ": " + address.error().message)};
      }
      if (sock.endpoint->connect) continue;
      for (const Bound& other : bound) {
        if (collide(*address, other.address)) {
          return issue(key,
                       "(" + *address + " for dp_rank " + std::to_string(r) + ") collides with " +
                           other.key + " (" + other.address + " for dp_rank " +
                           std::to_string(other.rank) +
                           "); per-rank endpoints use port + dp_rank, so space the base "
                           "ports at least dp_size (" +
                           std::to_string(c.engine.dp_size) + ") apart",
                       {other.key, "engine.dp_size"});
        }
      }
      bound.push_back({key, *address, r});
    }
  }
  return std::nullopt;
}

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

std::string formatValue(const Key& key, ServiceConfig& c) {
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

Result<std::string> readFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Error{ErrorCode::NotFound, path + ": file not found"};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::IoError, path + ": cannot open for reading"};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{ErrorCode::IoError, path + ": read error"};
  return text.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API.

std::string_view toString(KvEventLayout v) { return enumName(kLayouts, v); }
std::string_view toString(ReplayLayout v) { return enumName(kReplayLayouts, v); }
std::string_view toString(ParentRoot v) { return enumName(kParentRoots, v); }
Result<KvEventLayout> parseKvEventLayout(std::string_view s) {
  return enumParse(kLayouts, "kv_events.layout", s);
}
Result<ReplayLayout> parseReplayLayout(std::string_view s) {
  return enumParse(kReplayLayouts, "kv_events.replay_layout", s);
}
Result<ParentRoot> parseParentRoot(std::string_view s) {
  return enumParse(kParentRoots, "kv_events.parent_root", s);
}

bool operator==(const ServiceConfig& a, const ServiceConfig& b) {
  // Every dumped key compares equal, and so does the loaded profile.
  ServiceConfig ca = a;
  ServiceConfig cb = b;
  for (const Key& k : keys()) {
    if (formatValue(k, ca) != formatValue(k, cb)) return false;
  }
  return sameProfile(a.engine.timing_profile, b.engine.timing_profile);
}

Result<std::string> rankEndpoint(const EndpointConfig& endpoint, std::uint32_t dp_rank) {
  if (isWildcardTcp(endpoint.endpoint)) {
    if (!tcpHostPort(endpoint.endpoint)) {
      return invalidArgument("endpoint '" + endpoint.endpoint + "': expected tcp://host:port");
    }
    return endpoint.endpoint;
  }
  return publishers::offsetEndpoint(endpoint.endpoint, dp_rank);
}

Status validateServiceConfig(const ServiceConfig& config) {
  if (auto found = findIssue(config)) return found->error;
  return {};
}

Result<ServiceConfig> parseServiceConfigOver(ServiceConfig base, std::string_view text,
                                             std::string_view source_name, KeyOrigins& origins) {
  const std::string source(source_name);
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return invalidArgument(source + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                           ": TOML syntax error: " + std::string(e.description()));
  }
  KeyOrigins file_origins;
  TomlReader reader(source, base, file_origins);
  reader.readTable(root, "");
  if (auto err = reader.firstError()) return *err;

  // A relative profile path in a file is relative to the file's directory.
  if (file_origins.contains("engine.timing_profile_path") && !base.timing_profile_path.empty()) {
    const std::filesystem::path profile(base.timing_profile_path);
    if (profile.is_relative()) {
      base.timing_profile_path =
          (std::filesystem::path(source).parent_path() / profile).lexically_normal().string();
    }
  }
  for (auto& [k, v] : file_origins) origins[k] = v;
  return base;
}

Result<ServiceConfig> loadServiceConfigOver(ServiceConfig base, const std::string& path,
                                            KeyOrigins& origins) {
  MOCKER_TRY(const std::string text, readFile(path));
  return parseServiceConfigOver(std::move(base), text, path, origins);
}

Status setConfigValue(ServiceConfig& config, std::string_view key_path, std::string_view text) {
  const Key* key = findKey(key_path);
  if (key == nullptr) return invalidArgument("unknown key '" + std::string(key_path) + "'");
  MOCKER_TRY(const Value value, textValue(*key, text));
  return assign(*key, value, config);
}

Result<ServiceConfig> finishServiceConfig(ServiceConfig config, const KeyOrigins& origins) {
  const auto origin = [&](const std::string& key) -> std::string {
    const auto it = origins.find(key);
    return it == origins.end() ? std::string() : it->second + ": ";
  };
  if (!config.timing_profile_path.empty()) {
    auto profile = loadTimingProfile(config.timing_profile_path);
    if (!profile) {
      const Error& e = profile.error();
      return Error{e.code, origin("engine.timing_profile_path") +
                               "engine.timing_profile_path: " + e.message};
    }
    config.engine.timing_profile = std::move(*profile);
  }
  if (auto found = findIssue(config)) {
    for (const std::string& key : found->keys) {
      if (origins.contains(key)) {
        return Error{found->error.code, origin(key) + found->error.message};
      }
    }
    return found->error;
  }
  return config;
}

Result<ServiceConfig> parseServiceConfig(std::string_view text, std::string_view source_name) {
  KeyOrigins origins;
  MOCKER_TRY(ServiceConfig config,
             parseServiceConfigOver(ServiceConfig{}, text, source_name, origins));
  return finishServiceConfig(std::move(config), origins);
}

Result<ServiceConfig> loadServiceConfig(const std::string& path) {
  MOCKER_TRY(const std::string text, readFile(path));
  return parseServiceConfig(text, path);
}

std::vector<std::string> configKeys() {
  std::vector<std::string> out;
  for (const Key& k : keys()) out.push_back(k.path());
  return out;
}

std::string dumpServiceConfig(const ServiceConfig& config) {
  ServiceConfig c = config;  // accessors take a mutable config
  std::string out =
      "# mocker effective configuration (every key; \"none\" = null). See service/README.md.\n";
  std::string_view table;
  for (const Key& k : keys()) {
    if (k.table != table) {
      table = k.table;
      out += "\n[" + std::string(table) + "]\n";
    }
    out += std::string(k.name) + " = " + formatValue(k, c) + "\n";
  }
  return out;
}

}  // namespace mocker::service
