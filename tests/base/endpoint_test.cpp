#include "base/endpoint.h"

#include <gtest/gtest.h>

namespace mocker {
namespace {

TEST(EndpointTest, TcpSplitsHostAndPortAtTheLastColon) {
  const auto ep = parseEndpoint("tcp://[::1]:5557");
  ASSERT_TRUE(ep) << ep.error().message;
  EXPECT_TRUE(ep->isTcp());
  EXPECT_EQ(ep->host, "[::1]");
  EXPECT_EQ(ep->port, "5557");
  EXPECT_EQ(ep->numericPort(), 5557u);
  EXPECT_EQ(ep->withPort(6000), "tcp://[::1]:6000");
  const auto odd = parseEndpoint("tcp://h:12ab");  // split as written; the port is not a number
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->port, "12ab");
  EXPECT_EQ(odd->numericPort(), std::nullopt);
  EXPECT_EQ(parseEndpoint("tcp://h:")->numericPort(), std::nullopt);
}

TEST(EndpointTest, IpcAndInprocKeepTheirName) {
  const auto ipc = parseEndpoint("ipc:///tmp/kv");
  ASSERT_TRUE(ipc);
  EXPECT_EQ(ipc->scheme, Endpoint::Scheme::Ipc);
  EXPECT_EQ(ipc->path, "/tmp/kv");
  EXPECT_TRUE(ipc->loopbackOnly());
  EXPECT_FALSE(ipc->wildcardPort());
  EXPECT_EQ(ipc->numericPort(), std::nullopt);
  const auto inproc = parseEndpoint("inproc://kv");
  ASSERT_TRUE(inproc);
  EXPECT_EQ(inproc->scheme, Endpoint::Scheme::Inproc);
  EXPECT_EQ(inproc->path, "kv");
}

TEST(EndpointTest, WildcardsAndLoopback) {
  for (const char* host : {"*", "0.0.0.0", "[::]", "::", "[*]"}) {
    EXPECT_TRUE(parseEndpoint(std::string("tcp://") + host + ":1")->wildcardHost()) << host;
  }
  EXPECT_FALSE(parseEndpoint("tcp://127.0.0.1:1")->wildcardHost());
  EXPECT_TRUE(parseEndpoint("tcp://127.0.0.1:*")->wildcardPort());
  EXPECT_FALSE(parseEndpoint("tcp://127.0.0.1:5")->wildcardPort());
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "[::1]", "::1"}) {
    EXPECT_TRUE(parseEndpoint(std::string("tcp://") + host + ":1")->loopbackOnly()) << host;
  }
  for (const char* host : {"*", "0.0.0.0", "10.0.0.1", "example.com"}) {
    EXPECT_FALSE(parseEndpoint(std::string("tcp://") + host + ":1")->loopbackOnly()) << host;
  }
}

TEST(EndpointTest, ErrorsNameTheEndpointAndWhatIsMissing) {
  const auto no_scheme = parseEndpoint("localhost:5555");
  ASSERT_FALSE(no_scheme);
  EXPECT_EQ(no_scheme.error().message,
            "endpoint 'localhost:5555': missing tcp:// (expected tcp://HOST:PORT, ipc://PATH or "
            "inproc://NAME)");
  const auto udp = parseEndpoint("udp://x:1");
  ASSERT_FALSE(udp);
  EXPECT_EQ(udp.error().message,
            "endpoint 'udp://x:1': unsupported scheme (expected tcp://HOST:PORT, ipc://PATH or "
            "inproc://NAME)");
  const auto no_port = parseEndpoint("tcp://host");
  ASSERT_FALSE(no_port);
  EXPECT_EQ(no_port.error().message, "endpoint 'tcp://host': no port (expected tcp://HOST:PORT)");
  EXPECT_FALSE(parseEndpoint("tcp://"));
  EXPECT_FALSE(parseEndpoint(""));
  EXPECT_TRUE(parseEndpoint("ipc://"));  // an empty name is ZeroMQ's to refuse, at bind
}

TEST(OffsetEndpointTest, OffsetZeroIsUnchanged) {
  EXPECT_EQ(*offsetEndpoint("tcp://127.0.0.1:5557", 0), "tcp://127.0.0.1:5557");
  EXPECT_EQ(*offsetEndpoint("tcp://127.0.0.1:*", 0), "tcp://127.0.0.1:*");
  EXPECT_EQ(*offsetEndpoint("ipc://", 0), "ipc://");
}

TEST(OffsetEndpointTest, TcpPortIsOffset) {
  EXPECT_EQ(*offsetEndpoint("tcp://*:5557", 3), "tcp://*:5560");
  EXPECT_EQ(*offsetEndpoint("tcp://[::1]:5557", 1), "tcp://[::1]:5558");
  EXPECT_EQ(*offsetEndpoint("tcp://h:65534", 1), "tcp://h:65535");
}

TEST(OffsetEndpointTest, IpcAndInprocGetASuffix) {
  EXPECT_EQ(*offsetEndpoint("ipc:///tmp/kv", 2), "ipc:///tmp/kv_dp2");
  EXPECT_EQ(*offsetEndpoint("inproc://kv", 1), "inproc://kv_dp1");
  EXPECT_EQ(*offsetEndpoint("ipc://", 1), "ipc://_dp1");
}

TEST(OffsetEndpointTest, ErrorsNameTheEndpoint) {
  const auto expect = [](const char* endpoint, std::uint32_t offset, const std::string& why) {
    const auto r = offsetEndpoint(endpoint, offset);
    ASSERT_FALSE(r.has_value()) << endpoint;
    EXPECT_EQ(r.error().message, "endpoint '" + std::string(endpoint) + "': " + why);
  };
  expect("udp://x:1", 1, "unsupported scheme (expected tcp://, ipc:// or inproc://)");
  expect("localhost:5555", 0, "unsupported scheme (expected tcp://, ipc:// or inproc://)");
  expect("tcp://host", 1, "expected tcp://host:port with a numeric port");
  expect("tcp://host:12ab", 0, "expected tcp://host:port with a numeric port");
  expect("tcp://host:70000", 0, "port out of range");
  expect("tcp://host:65535", 1, "port 65535 + dp_rank 1 exceeds 65535");
  expect("tcp://host:*", 1, "a wildcard port cannot be offset for dp_rank 1");
}

}  // namespace
}  // namespace mocker
