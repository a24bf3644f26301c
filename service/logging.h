// Logging setup for the service and tools (spdlog). The engine and protocol never log.
//
// Call from the main thread, while no other thread logs (at start-up, or between runs).
#pragma once

#include <string_view>

#include <spdlog/common.h>

#include "base/result.h"

namespace mocker::service {

/// Parses a log level name: trace, debug, info, warn (or warning), error, critical, off.
/// Case-insensitive. An unknown name is an InvalidArgument error listing the accepted names.
Result<spdlog::level::level_enum> parseLogLevel(std::string_view name);

/// Lower-case canonical name of a level ("warn", ...).
std::string_view logLevelName(spdlog::level::level_enum level);

/// Points the default logger ("mocker") at stderr with a compact pattern and sets `level` on
/// every registered logger. May be called again (it reconfigures; it never registers twice).
void setupLogging(spdlog::level::level_enum level);

}  // namespace mocker::service
