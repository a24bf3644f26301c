// The HTTP endpoint of a live Server ([endpoints.http], ephemeral port): /metrics after a known
// workload, /health and /ready through the loop's phases, refused paths, hostile clients, the
// periodic stats line. Real sockets on loopback; httplib's client on the test side.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "service/config.h"
#include "service/server.h"
#include "tests/service/http_probe.h"
#include "tests/service/live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using testing::collect;
using testing::httpClient;
using testing::LiveService;
using testing::pollUntil;
using testing::prompt;
using testing::sample;
using testing::TestConfig;
using testing::withHttp;

int port(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

TEST(HttpServeTest, MetricsCountWhatTheClientsReceived) {
  LiveService svc(withHttp(TestConfig().build()));
  ASSERT_FALSE(svc.endpoints().http.empty());
  auto client = svc.client();
  std::uint64_t prompt_tokens = 0;
  for (std::uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->submit({.id = "r" + std::to_string(i),
                                .prompt = prompt(8 + i, 100 * i),
                                .max_tokens = 5 + 2 * i}));
    prompt_tokens += 8 + i;
  }
  const auto streams = collect(*client, {"r0", "r1", "r2"});
  std::uint64_t received = 0;
  for (const auto& [id, s] : streams) received += s.tokens.size();
  ASSERT_EQ(received, 5u + 7u + 9u);

  auto http = httpClient(svc.endpoints().http);
  const std::string r0 = R"({model_name="mocker",engine="0")";
  std::string text;
  ASSERT_TRUE(pollUntil(
      http, "/metrics",
      [&](int status, const std::string& body) {
        return status == 200 && sample(body, "vllm:generation_tokens_total" + r0 + "}") ==
                                    static_cast<double>(received);
      },
      5s, &text))
      << text;
  EXPECT_EQ(sample(text, "vllm:prompt_tokens_total" + r0 + "}"),
            static_cast<double>(prompt_tokens));
  EXPECT_EQ(sample(text, "vllm:request_success_total" + r0 + ",finished_reason=\"length\"}"), 3);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_count" + r0 + "}"), 3);
  EXPECT_EQ(sample(text, "vllm:inter_token_latency_seconds_count" + r0 + "}"),
            static_cast<double>(received - 3));
  EXPECT_EQ(sample(text, "vllm:e2e_request_latency_seconds_count" + r0 + "}"), 3);
  EXPECT_EQ(sample(text, "vllm:num_requests_running" + r0 + "}"), 0);
  EXPECT_GT(sample(text, "vllm:prefix_cache_queries_total" + r0 + "}"), 0);
  EXPECT_GE(sample(text, "mocker:passes_total{model_name=\"mocker\"}"), 9);
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
}

// KV offload tiers on a live service (docs/engine.md, "KV offload tiers"): a prompt's blocks are
// flushed from an 8-block GPU pool into host memory, the prompt comes back and is onboarded.
// The scrape shows vLLM's offload counters and mocker's per-tier ones with the values that
// sequence implies (block = 4 tokens x 1,000 B).
TEST(HttpServeTest, OffloadCountersFollowAnEvictionAndAnOnboarding) {
  ServiceConfig config = withHttp(TestConfig().numGpuBlocks(8).build());
  config.engine.num_g2_blocks = 64;
  config.engine.kv_bytes_per_token = 1000;
  LiveService svc(config);
  auto client = svc.client();
  auto http = httpClient(svc.endpoints().http);
  const std::string r0 = R"({model_name="mocker",engine="0")";
  const auto run = [&](const std::string& id, std::vector<std::uint32_t> tokens) {
    ASSERT_TRUE(client->submit({.id = id, .prompt = std::move(tokens), .max_tokens = 1}));
    ASSERT_EQ(collect(*client, {id}).at(id).tokens.size(), 1u);
  };
  run("a", prompt(16, 0));         // 4 full blocks cached
  run("flush", prompt(31, 5000));  // 31 prompt tokens fill all 8 blocks: a's go to host memory
  std::string text;
  ASSERT_TRUE(pollUntil(
      http, "/metrics",
      [&](int status, const std::string& body) {
        return status == 200 && sample(body, "mocker:kv_tier_blocks" + r0 + R"(,tier="CPU"})") >= 4;
      },
      20s, &text))
      << text;
  run("a-again", prompt(16, 0));  // 3 blocks onboarded (the last prompt token is recomputed)
  ASSERT_TRUE(pollUntil(
      http, "/metrics",
      [&](int status, const std::string& body) {
        return status == 200 && sample(body, "mocker:kv_onboardings_total" + r0 + "}") == 1 &&
               sample(body, "vllm:generation_tokens_total" + r0 + "}") == 3;
      },
      20s, &text))
      << text;
  EXPECT_EQ(sample(text, "mocker:kv_tier_hit_blocks_total" + r0 + R"(,tier="CPU"})"), 3);
  EXPECT_EQ(sample(text, "mocker:kv_tier_hit_blocks_total" + r0 + R"(,tier="DISK"})"), 0);
  EXPECT_EQ(sample(text, "mocker:kv_tier_capacity_blocks" + r0 + R"(,tier="CPU"})"), 64);
  EXPECT_EQ(sample(text, "vllm:prefix_cache_hits_total" + r0 + "}"), 12);
  const double loaded =
      sample(text, "vllm:kv_offload_total_bytes_total" + r0 + R"(,transfer_type="CPU_to_GPU"})");
  const double stored =
      sample(text, "vllm:kv_offload_total_bytes_total" + r0 + R"(,transfer_type="GPU_to_CPU"})");
  EXPECT_EQ(loaded, 3 * 4000);
  EXPECT_GE(stored, 4 * 4000);  // a's 4 blocks, and whatever else the flush evicted
  EXPECT_EQ(sample(text, "vllm:kv_offload_load_bytes_total" + r0 + "}"), loaded);
  EXPECT_EQ(sample(text, "vllm:kv_offload_store_bytes_total" + r0 + "}"), stored);
  EXPECT_EQ(sample(text, "mocker:kv_tier_bytes_total" + r0 + R"(,direction="host_to_gpu"})"),
            loaded);
  // 12,000 B at 14 GB/s: 0.857 us of modelled load time.
  EXPECT_NEAR(
      sample(text, "vllm:kv_offload_total_time_total" + r0 + R"(,transfer_type="CPU_to_GPU"})"),
      12000.0 / 14e9, 1e-12);
  EXPECT_GT(sample(text, "vllm:kv_offload_store_time_total" + r0 + "}"), 0);
  EXPECT_EQ(sample(text, "mocker:kv_onboarding_requests" + r0 + "}"), 0);
}

TEST(HttpServeTest, ReadyFollowsStartupAndDrainingHealthTheLoop) {
  ServiceConfig c = withHttp(TestConfig().paced(1, 5).build());
  c.service.startup_time_s = 0.5;
  LiveService svc(c, {.drain = true});
  auto http = httpClient(svc.endpoints().http);
  auto ready = http.Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find(R"("phase":"starting")"), std::string::npos) << ready->body;
  auto health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;  // alive while starting
  ASSERT_TRUE(pollUntil(
      http, "/ready", [](int status, const std::string&) { return status == 200; }, 10s));
  health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_NE(health->body.find(R"("phase":"serving")"), std::string::npos) << health->body;

  // Draining: a long request keeps the loop in its drain; /ready says so at once.
  auto client = svc.client();
  ASSERT_TRUE(client->submit({.id = "long", .prompt = prompt(4), .max_tokens = 400}));
  std::map<std::string, testing::Stream> streams;
  ASSERT_TRUE(testing::awaitAck(*client, "long", streams));
  std::thread stopper([&] { svc.stop(); });
  std::string body;
  EXPECT_TRUE(pollUntil(
      http, "/ready",
      [](int status, const std::string& b) {
        return status == 503 && b.find(R"("phase":"draining")") != std::string::npos;
      },
      10s, &body))
      << body;
  (void)collect(*client, {"long"}, nullptr, 20s, std::move(streams));
  stopper.join();
  // run() returned; the HTTP server lives as long as the Server object.
  ready = http.Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find(R"("phase":"stopped")"), std::string::npos) << ready->body;
}

TEST(HttpServeTest, UnknownPathsMethodsAndHugeHeadersAreRefused) {
  LiveService svc(withHttp(TestConfig().build()));
  auto http = httpClient(svc.endpoints().http);
  auto res = http.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(res->body.find("/metrics"), std::string::npos);
  res = http.Post("/metrics", std::string(100, 'x'), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_GE(res->status, 400);
  res = http.Post("/metrics", std::string(1 << 20, 'x'), "text/plain");  // over the body limit
  EXPECT_TRUE(!res || res->status >= 400);
  httplib::Headers huge{{"X-Huge", std::string(64 * 1024, 'h')}};
  res = http.Get("/metrics", huge);
  EXPECT_TRUE(!res || res->status >= 400);
  res = http.Get("/metrics");  // still serving
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(HttpServeTest, SlowlorisConnectionsStallNeitherTheLoopNorLaterScrapes) {
  LiveService svc(withHttp(TestConfig().paced(1, 2).build()));
  // More half-sent requests than the HTTP server has workers, each holding its connection open.
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port(svc.endpoints().http)));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string partial = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    ASSERT_EQ(send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
    slow.push_back(fd);
  }
  // The engine loop serves as usual meanwhile.
  auto client = svc.client();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client->submit({.id = "r", .prompt = prompt(8), .max_tokens = 20}));
  const auto streams = collect(*client, {"r"}, nullptr, 5s);
  EXPECT_EQ(streams.at("r").tokens.size(), 20u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // And a scrape gets through once the read timeout has dropped the slow connections (they
  // stay open on our side).
  auto http = httpClient(svc.endpoints().http);
  http.set_read_timeout(15s);
  std::string text;
  EXPECT_TRUE(pollUntil(
      http, "/metrics",
      [](int status, const std::string& body) {
        return status == 200 &&
               sample(body, R"(vllm:generation_tokens_total{model_name="mocker",engine="0"})") ==
                   20;
      },
      20s, &text))
      << text;
  for (const int fd : slow) close(fd);
}

TEST(HttpServeTest, NoHttpBindsNothingAndABusyPortIsAnErrorNamingTheKey) {
  ServiceConfig off = TestConfig().build();  // endpoints.http.enabled = false
  LiveService quiet(off);
  EXPECT_TRUE(quiet.endpoints().http.empty());

  LiveService first(withHttp(TestConfig().build()));
  ServiceConfig second = withHttp(TestConfig().build());
  second.endpoints.http.endpoint = "127.0.0.1:" + std::to_string(port(first.endpoints().http));
  auto server = Server::create(second);
  ASSERT_FALSE(server);
  EXPECT_NE(server.error().message.find("endpoints.http.endpoint '127.0.0.1:"), std::string::npos)
      << server.error().message;
}

TEST(HttpEndpointTest, ParsesHostPortAndRefusesTheRest) {
  auto hp = parseHttpEndpoint("127.0.0.1:8000");
  ASSERT_TRUE(hp);
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 8000);
  hp = parseHttpEndpoint("[::1]:0");
  ASSERT_TRUE(hp);
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 0);
  for (const char* bad : {"", "8000", "tcp://127.0.0.1:8000", "127.0.0.1:", "127.0.0.1:65536",
                          "127.0.0.1:-1", "127.0.0.1:80x", "*:8000", ":8000", "[zz]:1"}) {
    EXPECT_FALSE(parseHttpEndpoint(bad)) << bad;
  }
  ServiceConfig c;
  c.endpoints.http.endpoint = "127.0.0.1:5555";  // the submit port
  auto broken = validateServiceConfig(c);
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.error().message.find("endpoints.http.endpoint"), std::string::npos);
  EXPECT_NE(broken.error().message.find("endpoints.submit"), std::string::npos);
  c.endpoints.http.enabled = false;
  EXPECT_TRUE(validateServiceConfig(c));
  c.endpoints.http = {.endpoint = "localhost", .enabled = true};
  broken = validateServiceConfig(c);
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.error().message.find("HOST:PORT"), std::string::npos) << broken.error().message;
}

TEST(HttpServeTest, StatsLineIsLoggedAtTheConfiguredInterval) {
  std::ostringstream text;
  auto previous = spdlog::get("serve");
  spdlog::drop("serve");
  auto logger = std::make_shared<spdlog::logger>(
      "serve", std::make_shared<spdlog::sinks::ostream_sink_mt>(text));
  spdlog::register_logger(logger);
  {
    ServiceConfig c = TestConfig().paced(1, 20).build();  // HTTP off: the line does not need it
    c.log_stats_interval_s = 0.1;
    LiveService svc(c);
    logger->set_level(spdlog::level::info);  // LiveService sets every logger to warn
    auto client = svc.client();
    ASSERT_TRUE(client->submit({.id = "r", .prompt = prompt(8), .max_tokens = 30}));
    (void)collect(*client, {"r"}, nullptr, 10s);
  }
  spdlog::drop("serve");
  if (previous) spdlog::register_logger(previous);
  const std::string log = text.str();
  EXPECT_NE(log.find("Engine 000: Avg prompt throughput: "), std::string::npos) << log;
  EXPECT_NE(log.find("Running: 1 reqs, Waiting: 0 reqs, KV cache usage: "), std::string::npos)
      << log;
  EXPECT_NE(log.find("Prefix cache hit rate: "), std::string::npos) << log;
}

}  // namespace
}  // namespace mocker::service
