// LogSink: how net/ reports what happens where no caller can be handed an error — on a thread of
// its own (the ZAP handler) — without depending on a logging library: the owner passes a function
// that writes the line to its log (service/logging.h: defaultLoggerSink). net/ never logs itself.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace mocker::net {

enum class LogLevel : std::uint8_t { Warn, Error };

/// Called from whichever thread has something to report: must be thread-safe. Empty: the report
/// is dropped.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

}  // namespace mocker::net
