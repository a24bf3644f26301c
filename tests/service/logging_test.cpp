#include "service/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

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

}  // namespace
}  // namespace mocker::service
