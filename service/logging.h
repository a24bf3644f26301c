// Logging setup for the service and tools (spdlog). The engine and protocol never log.
//
// Call from the main thread, while no other thread logs (at start-up, or between runs).
#pragma once

#include <string>
#include <string_view>

#include <spdlog/common.h>

#include "base/result.h"
#include "net/log_sink.h"
#include "service/config.h"

namespace mocker::service {

/// Parses a log level name: trace, debug, info, warn (or warning), error, critical, off.
/// Case-insensitive. An unknown name is an InvalidArgument error listing the accepted names.
Result<spdlog::level::level_enum> parseLogLevel(std::string_view name);

/// Lower-case canonical name of a level ("warn", ...).
std::string_view logLevelName(spdlog::level::level_enum level);

/// Points the default logger ("mocker") at stderr and sets `level` on every registered logger.
/// LogFormat::Text is a compact line ("2026-01-02T03:04:05.678 info [serve] message");
/// LogFormat::Json one object per line: {"time":"2026-01-02T03:04:05.678+00:00","level":"info",
/// "logger":"serve","message":"…"} (the message JSON-escaped). May be called again (it
/// reconfigures every registered logger; it never registers twice).
void setupLogging(spdlog::level::level_enum level, LogFormat format = LogFormat::Text);

/// A net::LogSink writing to spdlog's default logger at the time of each report (warn, error);
/// thread-safe, like spdlog's loggers. What the ZAP handler's thread reports goes there.
net::LogSink defaultLoggerSink();

/// `text` as the inside of a JSON string (quotes, backslashes and control characters escaped).
std::string jsonEscape(std::string_view text);

}  // namespace mocker::service
