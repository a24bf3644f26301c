// Log setup for the service and tools: level names and the stderr logger (logging.h).
#include "service/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "base/enum_names.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
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
  // Idempotent: a second call (another command run in the same process, a test) reuses the
  // "mocker" logger instead of registering it again, which spdlog refuses with an exception.
  std::shared_ptr<spdlog::logger> logger = spdlog::get("mocker");
  if (!logger) logger = spdlog::stderr_color_mt("mocker");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  spdlog::set_default_logger(logger);
  // Every registered logger, so component loggers cloned earlier ("serve") follow the level.
  spdlog::set_level(level);
}

}  // namespace mocker::service
