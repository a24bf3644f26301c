// The configuration key table, seen from the other configuration files (service/config.h is the
// public API). One table of keys (config_keys.cpp) drives the TOML reader (config_toml.cpp), the
// command-line setter and the dumper, so they can never disagree about a key's name, type or
// spelling; the validator (config_validate.cpp) uses it to name engine fields by their key paths.
//
// A value from a TOML node or from command-line text is first turned into a ConfigValue and then
// assigned through the key's typed accessor (assignValue).
//
// The table is immutable after first use; thread-safe to read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/result.h"
#include "service/config.h"

namespace mocker::service::detail {

/// A scalar from a TOML node or from command-line text, a list of strings (a TOML array of
/// strings; on the command line, comma-separated text) or a list of numbers (a TOML array of
/// numbers; on the command line, comma-separated numbers).
using ConfigValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::string>,
                                 std::vector<double>>;

/// One key of the table: its path, type and accessor. Opaque outside config_keys.cpp.
struct ConfigKey;

/// The key with path `path` ("engine.max_num_seqs"), or nullptr.
const ConfigKey* findKey(std::string_view path);

/// For a key that mocker refuses although other engines have it (vLLM's
/// kv_events.max_queue_size): why, as "not supported: <reason>". nullopt for any other path.
std::optional<std::string> unsupportedKeyError(std::string_view path);

/// " (did you mean 'engine.num_gpu_blocks'?)" for an unknown key or table path: the nearest key
/// or table path by edit distance, or "" when none is near.
std::string unknownKeySuggestion(std::string_view path);

/// Whether `path` is a table that may appear in a file: a key's table or one of its parents
/// ("engine", "engine.sglang", "endpoints").
bool isKnownTable(std::string_view path);

/// Assigns `value` to the key's field, checking its type and representable range. Errors
/// describe the value only ("expected an integer, got a string (\"many\")"); the caller adds
/// the key and its origin.
Status assignValue(const ConfigKey& key, const ConfigValue& value, ServiceConfig& config);

/// Parses decimal text as an unsigned 64-bit integer (the whole text, no sign, no spaces).
Result<std::uint64_t> parseU64Text(std::string_view text);

/// The whole file at `path` (config_toml.cpp): NotFound when it does not exist, IoError when it
/// cannot be read; the message starts with the path.
Result<std::string> readFile(const std::string& path);

/// The key path of an engine::ConfigError field: "engine." + field for the fields that have an
/// `[engine]` key of the same name, "engine.timing_profile_path" for "timing_profile" (the
/// profile is loaded from that key) and "service.allow_empty_output" for "allow_empty_output".
std::string keyOfEngineField(std::string_view field);

}  // namespace mocker::service::detail
