#include "service/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/base/ascii.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace mocker::service {
namespace {

constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 8> kLevels{{
    {"trace", spdlog::level::trace},
    {"debug", spdlog::level::debug},
    {"info", spdlog::level::info},
    {"warn", spdlog::level::warn},
    {"warning", spdlog::level::warn},
    {"error", spdlog::level::err},
    {"critical", spdlog::level::critical},
    {"off", spdlog::level::off},
}};

}  // namespace

Result<spdlog::level::level_enum> parseLogLevel(std::string_view name) {
  const std::string lower = asciiLower(name);
  for (const auto& [level_name, level] : kLevels) {
    if (lower == level_name) return level;
  }
  return invalidArgument("unknown log level '" + std::string(name) +
                         "' (expected trace, debug, info, warn, error, critical or off)");
}

std::string_view logLevelName(spdlog::level::level_enum level) {
  for (const auto& [level_name, value] : kLevels) {
    if (value == level) return level_name;
  }
  return "info";
}

void setupLogging(spdlog::level::level_enum level) {
  auto logger = spdlog::stderr_color_mt("mocker");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace mocker::service
