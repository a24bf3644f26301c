// Log setup for the service and tools: level names and the stderr logger (logging.h).
#include "service/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "base/enum_names.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <ctime>
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

std::string jsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

namespace {

/// `%*` in the JSON pattern: the message, escaped for a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*time*/,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        jsonEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

std::unique_ptr<spdlog::formatter> makeFormatter(LogFormat format) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (format == LogFormat::Json) {
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","logger":"%n","message":"%*"})");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  }
  return formatter;
}

}  // namespace

void setupLogging(spdlog::level::level_enum level, LogFormat format) {
  // Idempotent: a second call (another command run in the same process, a test) reuses the
  // "mocker" logger instead of registering it again, which spdlog refuses with an exception.
  std::shared_ptr<spdlog::logger> logger = spdlog::get("mocker");
  if (!logger) logger = spdlog::stderr_color_mt("mocker");
  spdlog::set_default_logger(logger);
  // Every registered logger (component loggers cloned earlier, e.g. "serve", keep their own
  // formatter otherwise).
  spdlog::apply_all([format](const std::shared_ptr<spdlog::logger>& l) {
    l->set_formatter(makeFormatter(format));
  });
  // Every registered logger, so component loggers cloned earlier ("serve") follow the level.
  spdlog::set_level(level);
}

net::LogSink defaultLoggerSink() {
  return [](net::LogLevel level, std::string_view message) {
    spdlog::default_logger()->log(
        level == net::LogLevel::Error ? spdlog::level::err : spdlog::level::warn, message);
  };
}

}  // namespace mocker::service
