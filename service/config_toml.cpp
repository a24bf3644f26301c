// TOML reading: a configuration file's tables and keys applied over a base configuration through
// the key table (service/detail/config_keys.h), recording where each key was set
// ("file.toml:12:5") so that later errors can point at it. Unknown keys and tables, wrong types
// and syntax errors are errors; of several, the earliest in the file is reported.

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "service/config.h"
#include "service/detail/config_keys.h"

namespace mocker::service {
namespace {

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
        if (detail::isKnownTable(key_path)) {
          readTable(*sub, key_path);
        } else if (detail::findKey(key_path) != nullptr) {
          fail(node, key_path, "expected a value, got a table");
        } else {
          fail(raw_key.source(), key_path,
               "unknown table" + detail::unknownKeySuggestion(key_path));
        }
        continue;
      }
      const detail::ConfigKey* key = detail::findKey(key_path);
      if (key == nullptr) {
        if (auto why = detail::unsupportedKeyError(key_path)) {
          fail(raw_key.source(), key_path, *why);
        } else {
          fail(raw_key.source(), key_path,
               detail::isKnownTable(key_path)
                   ? "expected a table, got a value"
                   : "unknown key" + detail::unknownKeySuggestion(key_path));
        }
        continue;
      }
      auto value = toValue(node);
      if (!value) {
        fail(node, key_path, value.error().message);
        continue;
      }
      if (auto st = detail::assignValue(*key, *value, config_); !st) {
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

  static Result<detail::ConfigValue> toValue(const toml::node& node) {
    if (auto v = node.value_exact<std::int64_t>()) return detail::ConfigValue{*v};
    if (auto v = node.value_exact<double>()) return detail::ConfigValue{*v};
    if (auto v = node.value_exact<bool>()) return detail::ConfigValue{*v};
    if (auto v = node.value_exact<std::string>()) return detail::ConfigValue{*v};
    switch (node.type()) {
      case toml::node_type::array: {
        const toml::array& array = *node.as_array();
        if (!array.empty() && array.front().is_number()) {
          std::vector<double> numbers;
          for (const toml::node& item : array) {
            auto number = item.value<double>();
            if (!item.is_number() || !number) {
              return invalidArgument("expected an array of numbers, element " +
                                     std::to_string(numbers.size()) + " is not a number");
            }
            numbers.push_back(*number);
          }
          return detail::ConfigValue{std::move(numbers)};
        }
        std::vector<std::string> items;
        for (const toml::node& item : array) {
          auto text = item.value_exact<std::string>();
          if (!text) {
            return invalidArgument("expected an array of strings, element " +
                                   std::to_string(items.size()) + " is not a string");
          }
          items.push_back(*text);
        }
        return detail::ConfigValue{std::move(items)};
      }
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

}  // namespace

namespace detail {

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

}  // namespace detail

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
  // Key files likewise.
  const auto relativeToFile = [&](std::string& path) {
    if (!path.empty() && std::filesystem::path(path).is_relative()) {
      path = (std::filesystem::path(source).parent_path() / path).lexically_normal().string();
    }
  };
  if (file_origins.contains("engine.model_config_path")) {
    relativeToFile(base.roofline.model_config_path);
  }
  if (file_origins.contains("security.server_secret_key_file")) {
    relativeToFile(base.security.server_secret_key_file);
  }
  if (file_origins.contains("security.client_public_key_files")) {
    for (std::string& f : base.security.client_public_key_files) relativeToFile(f);
  }
  for (auto& [k, v] : file_origins) origins[k] = v;
  return base;
}

Result<ServiceConfig> loadServiceConfigOver(ServiceConfig base, const std::string& path,
                                            KeyOrigins& origins) {
  MOCKER_TRY(const std::string text, detail::readFile(path));
  return parseServiceConfigOver(std::move(base), text, path, origins);
}

Result<ServiceConfig> parseServiceConfig(std::string_view text, std::string_view source_name) {
  KeyOrigins origins;
  MOCKER_TRY(ServiceConfig config,
             parseServiceConfigOver(ServiceConfig{}, text, source_name, origins));
  return finishServiceConfig(std::move(config), origins);
}

Result<ServiceConfig> loadServiceConfig(const std::string& path) {
  MOCKER_TRY(const std::string text, detail::readFile(path));
  return parseServiceConfig(text, path);
}

}  // namespace mocker::service
