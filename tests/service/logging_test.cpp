#include "service/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace mocker::service {
namespace {

TEST(LoggingTest, ParsesLevelNamesCaseInsensitively) {
  EXPECT_EQ(*parseLogLevel("INFO"), spdlog::level::info);
  EXPECT_EQ(*parseLogLevel("warning"), spdlog::level::warn);
  EXPECT_EQ(*parseLogLevel("error"), spdlog::level::err);
  EXPECT_EQ(logLevelName(spdlog::level::err), "error");
}

TEST(LoggingTest, UnknownLevelListsAcceptedNames) {
  const auto r = parseLogLevel("loud");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("'loud'"), std::string::npos);
  EXPECT_NE(r.error().message.find("trace, debug"), std::string::npos);
}

TEST(LoggingTest, SetupTwiceInOneProcessReconfiguresInsteadOfThrowing) {
  ASSERT_NO_THROW(setupLogging(spdlog::level::info));
  EXPECT_EQ(spdlog::default_logger()->name(), "mocker");
  // A component logger cloned from the default one (as `mocker serve` does) follows the level.
  auto component = spdlog::default_logger()->clone("logging-test-component");
  spdlog::register_logger(component);
  ASSERT_NO_THROW(setupLogging(spdlog::level::err));  // threw spdlog_ex: logger exists
  EXPECT_EQ(spdlog::default_logger()->name(), "mocker");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  EXPECT_EQ(component->level(), spdlog::level::err);
  ASSERT_NO_THROW(setupLogging(spdlog::level::debug));
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
  EXPECT_EQ(component->level(), spdlog::level::debug);
  spdlog::drop("logging-test-component");
}

TEST(LoggingTest, DefaultLoggerSinkWritesNetReportsAtTheirLevel) {
  // What net/'s ZAP thread reports (a refused key: warn; a socket failure: error) reaches the
  // default logger current at the time of the report.
  const auto before = spdlog::default_logger();
  std::ostringstream text;
  auto logger = std::make_shared<spdlog::logger>(
      "logging-test-sink", std::make_shared<spdlog::sinks::ostream_sink_mt>(text));
  logger->set_pattern("%l %v");
  logger->set_level(spdlog::level::info);
  const net::LogSink sink = defaultLoggerSink();
  spdlog::set_default_logger(logger);
  sink(net::LogLevel::Warn, "CURVE handshake from 127.0.0.1 refused");
  sink(net::LogLevel::Error, "ZAP handler: poll failed");
  spdlog::set_default_logger(before);
  EXPECT_EQ(text.str(),
            "warning CURVE handshake from 127.0.0.1 refused\nerror ZAP handler: poll failed\n");
}

TEST(LoggingTest, JsonFormatWritesOneParseableObjectPerLine) {
  std::ostringstream text;
  auto logger = std::make_shared<spdlog::logger>(
      "logging-test-json", std::make_shared<spdlog::sinks::ostream_sink_mt>(text));
  spdlog::register_logger(logger);
  setupLogging(spdlog::level::info, LogFormat::Json);
  logger->info("say \"hi\"\\ to {}\n\tand\x01 bye", "you");
  logger->warn("second");
  setupLogging(spdlog::level::info, LogFormat::Text);
  logger->info("plain");
  spdlog::drop("logging-test-json");

  std::istringstream lines(text.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const auto first = nlohmann::json::parse(line);  // throws (fails the test) if not JSON
  EXPECT_EQ(first["message"], "say \"hi\"\\ to you\n\tand\x01 bye");
  EXPECT_EQ(first["level"], "info");
  EXPECT_EQ(first["logger"], "logging-test-json");
  EXPECT_EQ(first["time"].get<std::string>().size(), 29u) << first["time"];  // ISO 8601, +hh:mm
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(nlohmann::json::parse(line)["level"], "warning");
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_NE(line.find("info [logging-test-json] plain"), std::string::npos) << line;
}

TEST(LoggingTest, JsonEscapeEscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(jsonEscape("a\"b\\c\nd\x7f"), "a\\\"b\\\\c\\nd\\u007f");
}

}  // namespace
}  // namespace mocker::service
