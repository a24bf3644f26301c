#include "service/logging.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mocker::service
