// Log setup for the service and tools: level names and the stderr logger (logging.h).
#include "service/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "base/enum_names.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace mocker::service {
namespace {

constexpr EnumNames<spdlog::level::level_enum, 8> kLevels{{
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
  if (auto level = enumFromName(kLevels, name)) return *level;
  return invalidArgument("unknown log level '" + std::string(name) +
                         "' (expected trace, debug, info, warn, error, critical or off)");
}

std::string_view logLevelName(spdlog::level::level_enum level) {
  const std::string_view name = enumName(kLevels, level);
  return name == "?" ? "info" : name;
}

void setupLogging(spdlog::level::level_enum level) {
  auto logger = spdlog::stderr_color_mt("mocker");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace mocker::service
