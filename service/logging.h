// Logging setup for the service and tools (spdlog). The engine and protocol never log.
//
// Call from the main thread at start-up, before other threads exist.
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

/// Points the default logger at stderr with the given level and a compact pattern.
void setupLogging(spdlog::level::level_enum level);

}  // namespace mocker::service
