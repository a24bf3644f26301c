#include "publishers/endpoint.h"

#include <gtest/gtest.h>

namespace mocker::publishers {
namespace {

TEST(EndpointTest, RankZeroIsUnchanged) {
  EXPECT_EQ(*offsetEndpoint("tcp://127.0.0.1:5557", 0), "tcp://127.0.0.1:5557");
  EXPECT_EQ(*offsetEndpoint("tcp://127.0.0.1:*", 0), "tcp://127.0.0.1:*");
}

TEST(EndpointTest, TcpPortIsOffsetByRank) {
  EXPECT_EQ(*offsetEndpoint("tcp://*:5557", 3), "tcp://*:5560");
  EXPECT_EQ(*offsetEndpoint("tcp://[::1]:5557", 1), "tcp://[::1]:5558");
}

TEST(EndpointTest, IpcAndInprocGetSuffix) {
  EXPECT_EQ(*offsetEndpoint("ipc:///tmp/kv", 2), "ipc:///tmp/kv_dp2");
  EXPECT_EQ(*offsetEndpoint("inproc://kv", 1), "inproc://kv_dp1");
}

TEST(EndpointTest, ErrorsNameTheEndpoint) {
  const auto bad_scheme = offsetEndpoint("udp://x:1", 1);
  ASSERT_FALSE(bad_scheme.has_value());
  EXPECT_NE(bad_scheme.error().message.find("udp://x:1"), std::string::npos);
  EXPECT_FALSE(offsetEndpoint("tcp://host", 1).has_value());
  EXPECT_FALSE(offsetEndpoint("tcp://host:65535", 1).has_value());
  EXPECT_FALSE(offsetEndpoint("tcp://host:*", 1).has_value());
  EXPECT_FALSE(offsetEndpoint("tcp://host:12ab", 0).has_value());
}

}  // namespace
}  // namespace mocker::publishers
