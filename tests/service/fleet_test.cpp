// The port plan (pure functions), the fleet file (JSON round trip and hostile input) and an
// in-process Fleet on ephemeral ports (every worker serves, /metrics and /ready aggregate).
#include "service/fleet.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "http_probe.h"
#include "live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;

/// The configuration `mocker serve --num-workers n --dp-size dp` resolves to (no endpoint flag).
ServiceConfig defaultsFor(std::uint32_t n, std::uint32_t dp, std::string http = "127.0.0.1:8000") {
  ServiceConfig c;
  c.engine.dp_size = dp;
  c.fleet.num_workers = n;
  c.endpoints.http.endpoint = std::move(http);
  auto r = finishServiceConfig(
      c, {{"engine.dp_size", "--dp-size"}, {"fleet.num_workers", "--num-workers"}});
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? *r : c;
}

std::uint32_t portOf(const std::string& address) {
  return static_cast<std::uint32_t>(std::stoul(address.substr(address.rfind(':') + 1)));
}

TEST(PortPlanTest, DefaultsWithOneRankAreTheClassicPorts) {
  const auto e = defaultEndpoints(1);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->submit.endpoint, "tcp://127.0.0.1:5555");
  EXPECT_EQ(e->cancel.endpoint, "tcp://127.0.0.1:5556");
  EXPECT_EQ(e->kv_events.endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(e->kv_replay.endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ(e->fpm.endpoint, "tcp://127.0.0.1:5559");
  EXPECT_EQ(*e, EndpointsConfig{});  // and they are the configuration's defaults
}

TEST(PortPlanTest, DefaultsWithTwoRanksStartAndSkipTheIndexPort) {
  // `mocker serve --data-parallel-size 2` with no endpoint flag: valid, no 5560.
  const ServiceConfig c = defaultsFor(1, 2);
  EXPECT_FALSE(checkServiceConfig(c).has_value());
  EXPECT_EQ(c.endpoints.submit.endpoint, "tcp://127.0.0.1:5555");
  EXPECT_EQ(c.endpoints.cancel.endpoint, "tcp://127.0.0.1:5556");
  EXPECT_EQ(c.endpoints.kv_events.endpoint, "tcp://127.0.0.1:5557");  // ranks 5557, 5558
  EXPECT_EQ(c.endpoints.kv_replay.endpoint, "tcp://127.0.0.1:5561");  // 5559-5560 holds 5560
  EXPECT_EQ(c.endpoints.fpm.endpoint, "tcp://127.0.0.1:5563");
}

TEST(PortPlanTest, NoCollisionForAGridOfWorkersAndRanks) {
  for (const std::uint32_t n : {1u, 2u, 3u, 5u, 16u, 64u, 256u}) {
    for (const std::uint32_t dp : {1u, 2u, 3u, 4u, 8u}) {
      for (const std::string http : {"127.0.0.1:8000", "127.0.0.1:5570"}) {
        const ServiceConfig c = defaultsFor(n, dp, http);
        auto plan = planFleet(c);
        ASSERT_TRUE(plan.has_value()) << n << "x" << dp << ": " << plan.error().message;
        ASSERT_EQ(plan->size(), n);
        const std::uint32_t http_port = portOf(http);
        std::set<std::string> seen;
        for (std::uint32_t i = 0; i < n; ++i) {
          const ServiceConfig& w = (*plan)[i];
          EXPECT_FALSE(checkServiceConfig(w).has_value()) << n << "x" << dp << " worker " << i;
          EXPECT_EQ(w.fpm.worker_id, std::to_string(i));
          EXPECT_EQ(w.service.worker_label, n == 1 ? "" : std::to_string(i));
          const auto addresses = workerAddresses(w);
          ASSERT_EQ(addresses.size(), 2 + 3 * dp);
          for (const std::string& a : addresses) {
            EXPECT_TRUE(seen.insert(a).second) << n << "x" << dp << ": " << a << " twice";
            const std::uint32_t port = portOf(a);
            EXPECT_NE(port, kIndexQueryPort) << n << "x" << dp << " worker " << i;
            EXPECT_NE(port, 8000u) << n << "x" << dp << " worker " << i;
            EXPECT_NE(port, http_port) << n << "x" << dp << " worker " << i;
            EXPECT_LE(port, 65535u);
          }
        }
      }
    }
  }
}

TEST(PortPlanTest, GivenPortsAreWorkerZerosAndLaterWorkersTakeWholeBlocks) {
  ServiceConfig c;
  c.fleet.num_workers = 3;
  c.endpoints.submit.endpoint = "tcp://127.0.0.1:7000";
  c.endpoints.cancel.endpoint = "tcp://127.0.0.1:7001";
  c.endpoints.kv_events.endpoint = "tcp://127.0.0.1:7002";
  c.endpoints.kv_replay.endpoint = "tcp://127.0.0.1:7003";
  c.endpoints.fpm.endpoint = "tcp://127.0.0.1:*";  // stays ephemeral for every worker
  c.fpm.worker_id = "40";
  c.service.worker_label = "pod";
  const auto plan = planFleet(c);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ((*plan)[0].endpoints.submit.endpoint, "tcp://127.0.0.1:7000");
  EXPECT_EQ((*plan)[1].endpoints.submit.endpoint, "tcp://127.0.0.1:7004");
  EXPECT_EQ((*plan)[2].endpoints.kv_replay.endpoint, "tcp://127.0.0.1:7011");
  EXPECT_EQ((*plan)[2].endpoints.fpm.endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ((*plan)[2].fpm.worker_id, "42");
  EXPECT_EQ((*plan)[2].service.worker_label, "pod-42");
  EXPECT_EQ((*plan)[0].service.worker_label, "pod-40");
}

// Prefill workers bind a handoff ROUTER: 5561 (after 5560, the index's) for worker 0 with one
// rank, the port after fpm with more ranks; in a fleet it widens each worker's block.
TEST(PortPlanTest, PrefillWorkersGetAHandoffPortInThePlan) {
  EXPECT_EQ(EndpointsConfig{}.handoff.endpoint, "tcp://127.0.0.1:5561");
  const auto two = defaultEndpoints(2);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->handoff.endpoint, "tcp://127.0.0.1:5565");  // fpm 5563-5564
  ServiceConfig c;
  c.engine.worker_type = engine::WorkerType::Prefill;
  c.fleet.num_workers = 3;
  const auto plan = planFleet(c);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  // W = 5561 - 5555 + 1 = 7: worker 1 takes 5562-5568, worker 2 5569-5575.
  EXPECT_EQ((*plan)[0].endpoints.handoff.endpoint, "tcp://127.0.0.1:5561");
  EXPECT_EQ((*plan)[1].endpoints.submit.endpoint, "tcp://127.0.0.1:5562");
  EXPECT_EQ((*plan)[1].endpoints.handoff.endpoint, "tcp://127.0.0.1:5568");
  EXPECT_EQ((*plan)[2].endpoints.handoff.endpoint, "tcp://127.0.0.1:5575");
  for (const ServiceConfig& w : *plan) {
    EXPECT_FALSE(checkServiceConfig(w).has_value());
  }
}

TEST(PortPlanTest, WorkersThatDoNotFitBelow65536AreAnErrorNamingTheKey) {
  ServiceConfig c;
  c.fleet.num_workers = 4;
  c.endpoints.submit.endpoint = "tcp://127.0.0.1:65520";
  c.endpoints.cancel.endpoint = "tcp://127.0.0.1:65521";
  c.endpoints.kv_events.endpoint = "tcp://127.0.0.1:65522";
  c.endpoints.kv_replay.endpoint = "tcp://127.0.0.1:65523";
  c.endpoints.fpm.endpoint = "tcp://127.0.0.1:65524";
  const auto plan = planFleet(c);
  ASSERT_FALSE(plan.has_value());
  EXPECT_NE(plan.error().message.find("fleet.num_workers (4): worker 3 does not fit"),
            std::string::npos)
      << plan.error().message;
  c.fleet.num_workers = 2;
  c.fpm.worker_id = "18446744073709551615";
  const auto overflow = planFleet(c);
  ASSERT_FALSE(overflow.has_value());
  EXPECT_NE(overflow.error().message.find("exceeds 2^64-1"), std::string::npos);
}

TEST(PortPlanTest, NumWorkersIsRangeChecked) {
  ServiceConfig c;
  c.fleet.num_workers = 0;
  auto e = checkServiceConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->keys.front(), "fleet.num_workers");
  c.fleet.num_workers = kMaxFleetWorkers + 1;
  EXPECT_TRUE(checkServiceConfig(c).has_value());
}

FleetManifest sampleManifest() {
  FleetManifest m;
  m.mocker_version = "1.2.3";
  m.model_name = "m";
  m.engine_type = "vllm";
  m.block_size = 64;
  m.dp_size = 2;
  m.http = "http://127.0.0.1:8000";
  m.workers = {{.worker_id = 7,
                .submit = "tcp://127.0.0.1:1",
                .cancel = "tcp://127.0.0.1:2",
                .ranks = {{"tcp://127.0.0.1:3", "tcp://127.0.0.1:4", "tcp://127.0.0.1:5"},
                          {"tcp://127.0.0.1:6", "", ""}}}};
  return m;
}

TEST(FleetManifestTest, RoundTrips) {
  const FleetManifest m = sampleManifest();
  const std::string text = fleetManifestJson(m);
  EXPECT_NE(text.find("\"kv_replay\": null"), std::string::npos) << text;
  const auto back = parseFleetManifest(text, "f.json");
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, m);
}

TEST(FleetManifestTest, HandoffEndpointsRoundTripAndAreOmittedWhenNone) {
  FleetManifest m = sampleManifest();
  EXPECT_EQ(fleetManifestJson(m).find("handoff"), std::string::npos);
  m.workers[0].handoff = "tcp://127.0.0.1:9";
  const std::string text = fleetManifestJson(m);
  EXPECT_NE(text.find("\"handoff\": \"tcp://127.0.0.1:9\""), std::string::npos) << text;
  const auto back = parseFleetManifest(text, "f.json");
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, m);
  std::string bad = text;
  bad.replace(bad.find("\"tcp://127.0.0.1:9\""), 19, "7");
  const auto refused = parseFleetManifest(bad, "f.json");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("workers[0]: \"handoff\" must be a non-empty string"),
            std::string::npos)
      << refused.error().message;
}

TEST(FleetManifestTest, HostileInputIsAnErrorNamingWhatIsWrong) {
  const std::string good = fleetManifestJson(sampleManifest());
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"", "f.json: not JSON"},
           {"[]", "expected a JSON object"},
           {"{\"format\":\"x\"}", "not a mocker fleet file"},
           {replaced("\"version\": 1", "\"version\": 2"), "version 2 is not supported"},
           {replaced("\"dp_size\": 2", "\"dp_size\": 3"), "workers[0]: \"ranks\" must be"},
           {replaced("\"worker_id\": 7", "\"worker_id\": -7"), "workers[0]: \"worker_id\""},
           {replaced("\"submit\": \"tcp://127.0.0.1:1\"", "\"submit\": 5"),
            "workers[0]: \"submit\" must be a non-empty string"},
           {replaced("\"dp_rank\": 1", "\"dp_rank\": 0"), "ranks[1]: \"dp_rank\" must be 1"},
           {replaced("\"block_size\": 64", "\"block_size\": 0"), "\"block_size\" must be >= 1"},
       }) {
    const auto r = parseFleetManifest(text, "f.json");
    ASSERT_FALSE(r.has_value()) << text;
    EXPECT_NE(r.error().message.find(fragment), std::string::npos)
        << r.error().message << " (wanted " << fragment << ")";
  }
}

TEST(FleetManifestTest, WritesAtomically) {
  char dir_template[] = "/tmp/mocker-fleet-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  ASSERT_NE(dir, nullptr);
  const std::string path = std::string(dir) + "/fleet.json";
  ASSERT_TRUE(writeFileAtomically(path, "old").has_value());
  ASSERT_TRUE(writeFileAtomically(path, fleetManifestJson(sampleManifest())).has_value());
  const auto back = loadFleetManifest(path);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, sampleManifest());
  EXPECT_FALSE(writeFileAtomically(std::string(dir) + "/no/such/dir/f.json", "x").has_value());
  std::remove(path.c_str());
  rmdir(dir);
}

// Three workers of two ranks each in one process, every endpoint ephemeral: each worker answers
// on its own submit socket, /metrics has each worker's series, /ready is ready when all are.
TEST(FleetTest, EveryWorkerServesAndHttpAggregates) {
  ServiceConfig c = testing::withHttp(testing::TestConfig().dpSize(2).build());
  c.fleet.num_workers = 3;
  c.fpm.worker_id = "10";
  std::atomic<int> ready_calls{0};
  auto fleet = Fleet::create(c, {.on_ready = [&] { ++ready_calls; }});
  ASSERT_TRUE(fleet.has_value()) << fleet.error().message;
  Fleet& f = **fleet;
  ASSERT_EQ(f.size(), 3u);
  std::set<std::string> submits;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f.workerId(i), 10 + i);
    submits.insert(f.endpoints(i).submit);
  }
  EXPECT_EQ(submits.size(), 3u);
  const FleetManifest m = f.manifest("v");
  EXPECT_EQ(m.workers.size(), 3u);
  EXPECT_EQ(m.workers[2].worker_id, 12u);
  EXPECT_EQ(m.workers[1].ranks.size(), 2u);
  EXPECT_EQ(m.http, f.http());
  Status status;
  std::thread runner([&] { status = f.run(); });
  auto http = testing::httpClient(f.http());
  EXPECT_TRUE(testing::pollUntil(
      http, "/ready", [](int code, const std::string&) { return code == 200; },
      10s * testing::kSlowdown));
  for (std::size_t i = 0; i < 3; ++i) {
    auto client = net::Client::connect(
        {.submit_endpoint = f.endpoints(i).submit, .cancel_endpoint = f.endpoints(i).cancel});
    ASSERT_TRUE(client.has_value());
    ASSERT_TRUE((*client)->submit({.id = "r",
                                   .prompt = testing::prompt(8),
                                   .max_tokens = static_cast<std::uint32_t>(3 + i)}));
    auto s = testing::collect(**client, {"r"});
    EXPECT_EQ(s["r"].tokens.size(), 3 + i) << "worker " << i;
    EXPECT_EQ(s["r"].finish, protocol::FinishReason::Length);
  }
  std::string body;
  // Worker i's rank-summed generation tokens: 3 + i.
  EXPECT_TRUE(testing::pollUntil(
      http, "/metrics",
      [](int code, const std::string& text) {
        double sum = 0;
        for (const char* w : {"10", "11", "12"}) {
          for (const char* r : {"0", "1"}) {
            sum +=
                std::max(0.0, testing::sample(text, std::string("vllm:generation_tokens_total{"
                                                                "model_name=\"mocker\",worker=\"") +
                                                        w + "\",engine=\"" + r + "\"}"));
          }
        }
        return code == 200 && sum == 12;
      },
      10s * testing::kSlowdown, &body))
      << body;
  // Each metric family is announced once for all workers.
  std::size_t headers = 0;
  for (std::size_t at = 0; (at = body.find("# TYPE vllm:num_requests_running ", at)) != body.npos;
       ++at) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u);
  auto ready = http.Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->body,
            "{\"status\":\"ok\",\"phase\":\"serving\",\"workers\":3,\"workers_ready\":3}\n");
  f.requestStop();
  runner.join();
  EXPECT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(ready_calls.load(), 1);
}

TEST(FleetTest, OneWorkerIsOneServerWithItsOwnHttp) {
  ServiceConfig c = testing::withHttp(testing::TestConfig().build());
  auto fleet = Fleet::create(c);
  ASSERT_TRUE(fleet.has_value()) << fleet.error().message;
  EXPECT_EQ((*fleet)->size(), 1u);
  EXPECT_EQ((*fleet)->http(), (*fleet)->endpoints(0).http);
  EXPECT_FALSE((*fleet)->http().empty());
}

// A fleet of two prefill workers: each binds its own handoff ROUTER (in the fleet file), and a
// request prefilled by worker 1 is decoded by a separate decode worker from worker 1's ticket.
TEST(FleetTest, PrefillWorkersHandOffFromTheirOwnHandoffSockets) {
  ServiceConfig c = testing::TestConfig().build();
  c.engine.worker_type = engine::WorkerType::Prefill;
  c.fleet.num_workers = 2;
  auto fleet = Fleet::create(c);
  ASSERT_TRUE(fleet.has_value()) << fleet.error().message;
  Fleet& f = **fleet;
  const FleetManifest m = f.manifest("v");
  ASSERT_EQ(m.workers.size(), 2u);
  EXPECT_EQ(m.workers[0].handoff, f.endpoints(0).handoff);
  EXPECT_EQ(m.workers[1].handoff, f.endpoints(1).handoff);
  EXPECT_FALSE(f.endpoints(1).handoff.empty());
  EXPECT_NE(f.endpoints(0).handoff, f.endpoints(1).handoff);
  Status status;
  std::thread runner([&] { status = f.run(); });
  ServiceConfig dcfg = testing::TestConfig().build();
  dcfg.engine.worker_type = engine::WorkerType::Decode;
  testing::LiveService d(dcfg);
  auto pc = net::Client::connect(
      {.submit_endpoint = f.endpoints(1).submit, .cancel_endpoint = f.endpoints(1).cancel});
  ASSERT_TRUE(pc.has_value());
  ASSERT_TRUE((*pc)->submit({.id = "r", .prompt = testing::prompt(8), .max_tokens = 3}));
  auto h = testing::awaitMessage<protocol::Handoff>(**pc, 10s * testing::kSlowdown);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->ticket.source, f.endpoints(1).handoff);
  auto dc = d.client();
  protocol::SubmitRequest r{.id = "d", .prompt = testing::prompt(8), .max_tokens = 3};
  r.handoff = h->ticket;
  ASSERT_TRUE(dc->submit(r).has_value());
  auto s = testing::collect(*dc, {"d"}, nullptr, 10s * testing::kSlowdown);
  EXPECT_EQ(s["d"].finish, protocol::FinishReason::Length);
  EXPECT_EQ(s["d"].tokens.size(), 3u);
  f.requestStop();
  runner.join();
  EXPECT_TRUE(status.has_value()) << status.error().message;
}

}  // namespace
}  // namespace mocker::service
