// Worker faults over a real `mocker serve` child (service/README.md "Failure drills"): a crash
// exits with the documented code and writes its fault-log line; a slowed worker's passes take
// factor × their modelled time (read from its FPM records, not from wall sleeps); a hung worker
// keeps its sockets up, streams nothing more (the client's timeout ends its request) and its
// /health turns 503. Every wait is a poll with a deadline.
#include <gtest/gtest.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "http_probe.h"
#include "live_service.h"
#include "protocol/fpm.h"
#include "serve_process.h"
#include "service/fault_plan.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using testing::ServeProcess;
using Clock = std::chrono::steady_clock;

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::filesystem::path tempPath(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         (name + "-" + std::to_string(getpid()) + ".jsonl");
}

std::unique_ptr<net::Client> connectTo(ServeProcess& serve) {
  auto c = net::Client::connect({.submit_endpoint = serve.endpoints.at("submit"),
                                 .cancel_endpoint = serve.endpoints.at("cancel")});
  EXPECT_TRUE(c) << (c ? "" : c.error().message);
  return c ? std::move(*c) : nullptr;
}

/// Receives into `streams` until `done()` or the deadline; false at the deadline.
template <typename Done>
bool receiveUntil(net::Client& c, std::map<std::string, testing::Stream>& streams, Done done,
                  Clock::time_point deadline) {
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    auto m = c.receive(20ms);
    EXPECT_TRUE(m) << m.error().message;
    if (m && *m) testing::absorb(streams, std::move(**m), nullptr);
  }
  return true;
}

/// The next stats reply on `c`, folding any stream message into `streams`.
std::optional<protocol::StatsReply> statsOf(net::Client& c,
                                            std::map<std::string, testing::Stream>& streams,
                                            Clock::time_point deadline) {
  if (!c.send(protocol::StatsRequest{})) return std::nullopt;
  while (Clock::now() < deadline) {
    auto m = c.receive(20ms);
    EXPECT_TRUE(m) << m.error().message;
    if (!m || !*m) continue;
    if (auto* r = std::get_if<protocol::StatsReply>(&**m)) return *r;
    testing::absorb(streams, std::move(**m), nullptr);
  }
  return std::nullopt;
}

TEST(FaultServeTest, CrashAfterPassesExitsWithTheDocumentedCode) {
  const auto log = tempPath("fault-crash");
  ServeProcess serve(
      {"--speedup-ratio", "0", "--fault", "crash:after_passes=5", "--fault-log", log.string()});
  ASSERT_TRUE(serve.awaitReady());
  auto c = connectTo(serve);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->submit({.id = "victim", .prompt = testing::prompt(8), .max_tokens = 1000}));
  const auto t0 = Clock::now();
  const int code = serve.waitExit(20s);
  std::printf("[fault] crash after 5 passes: exit code %d after %.3f s\n", code,
              std::chrono::duration<double>(Clock::now() - t0).count());
  EXPECT_EQ(code, kFaultCrashExitCode);
  // What the client got before the sockets closed: 5 passes' worth at most, and no terminal.
  std::map<std::string, testing::Stream> streams;
  receiveUntil(
      *c, streams, [] { return false; }, Clock::now() + 200ms);
  EXPECT_LE(streams["victim"].tokens.size(), 5u);
  EXPECT_FALSE(streams["victim"].finish.has_value());
  // One line, flushed before the exit: {"time_ms":T,"kind":"crash",...}.
  const std::string line = readFile(log);
  const std::string tail = R"(,"kind":"crash","fault":0,"worker":0,"detail":"after 5 passes"})"
                           "\n";
  EXPECT_TRUE(line.starts_with(R"({"time_ms":)")) << line;
  EXPECT_TRUE(line.ends_with(tail)) << line;
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  std::filesystem::remove(log);
}

TEST(FaultServeTest, SlowedPassesTakeFactorTimesTheirModelledTime) {
  // Fixed 2 ms passes; passes 4..9 (after 3, for 6) take 4 × 2 ms. Read from the FPM records'
  // wall_time (the modelled duration the service paced the pass by).
  ServeProcess serve({"--timing-model", "fixed", "--fixed-prefill-ms", "2", "--fixed-decode-ms",
                      "2", "--fpm-heartbeat-interval", "0.05", "--fault",
                      "slow:factor=4:after_passes=3:for_passes=6"});
  ASSERT_TRUE(serve.awaitReady());
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(serve.endpoints.at("fpm[0]"));
  auto c = connectTo(serve);
  ASSERT_TRUE(c);
  // The SUB is connected once a heartbeat arrives (the service sends one per second idle).
  const auto fpmRecord = [&](Clock::time_point deadline) -> std::optional<protocol::FpmRecord> {
    while (Clock::now() < deadline) {
      std::vector<zmq::message_t> parts;
      zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, 20ms);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      (void)zmq::recv_multipart(sub, std::back_inserter(parts));
      auto r = protocol::decodeFpm(
          std::span(static_cast<const std::byte*>(parts.back().data()), parts.back().size()));
      EXPECT_TRUE(r) << r.error().message;
      if (r) return *r;
    }
    return std::nullopt;
  };
  ASSERT_TRUE(fpmRecord(Clock::now() + 10s)) << "no FPM heartbeat";
  ASSERT_TRUE(c->submit({.id = "s", .prompt = testing::prompt(8), .max_tokens = 12}));
  std::vector<double> ms;
  while (ms.size() < 12) {
    auto r = fpmRecord(Clock::now() + 10s);
    ASSERT_TRUE(r) << "FPM record " << ms.size() << " missing";
    if (r->wall_time > 0) ms.push_back(r->wall_time * 1000.0);  // heartbeats have 0
  }
  std::string shown;
  for (const double m : ms) shown += " " + std::to_string(m);
  std::printf("[fault] pass durations (ms):%s\n", shown.c_str());
  // Pass 1 prefills (not slowed); passes 2..12 decode: 2 ms, ×4 for passes 4..9. A duration is
  // the difference of two engine times that follow the wall clock (end − start), so it carries
  // their rounding: compared within 1e-9 ms, never exactly (CI once saw 4 + 1 ulp against 4.0).
  EXPECT_LE(ms[0], 4.0 + 1e-9);
  for (std::size_t i = 1; i < ms.size(); ++i) {
    const double want = i >= 3 && i < 9 ? 8.0 : 2.0;
    EXPECT_NEAR(ms[i], want, 1e-9) << "pass " << i + 1;
  }
  std::map<std::string, testing::Stream> streams;
  ASSERT_TRUE(receiveUntil(
      *c, streams, [&] { return streams["s"].finish.has_value(); }, Clock::now() + 10s));
  EXPECT_EQ(streams["s"].tokens.size(), 12u);
  // Counted once (the onset) in /metrics.
  auto http = testing::httpClient(serve.endpoints.at("http"));
  std::string body;
  EXPECT_TRUE(testing::pollUntil(
      http, "/metrics",
      [](int status, const std::string& b) {
        return status == 200 &&
               testing::sample(
                   b, R"(mocker:faults_injected_total{model_name="mocker",kind="slow"})") == 1;
      },
      5s, &body))
      << body;
  EXPECT_EQ(serve.stop(), 0);
}

TEST(FaultServeTest, HungWorkerKeepsItsSocketsAndFailsHealth) {
  ServeProcess serve({"--timing-model", "fixed", "--fixed-prefill-ms", "1", "--fixed-decode-ms",
                      "1", "--fault", "hang:after_passes=3:health_after_ms=300"});
  ASSERT_TRUE(serve.awaitReady());
  auto http = testing::httpClient(serve.endpoints.at("http"));
  auto c = connectTo(serve);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->submit({.id = "h", .prompt = testing::prompt(8), .max_tokens = 100}));
  // The client's timeout: no output for 1 s ends its wait for the request.
  std::map<std::string, testing::Stream> streams;
  auto last_output = Clock::now();
  std::size_t seen = 0;
  const auto hung_at = Clock::now();
  while (Clock::now() - last_output < 1s) {
    auto m = c->receive(20ms);
    ASSERT_TRUE(m) << m.error().message;
    if (m && *m) testing::absorb(streams, std::move(**m), nullptr);
    if (streams["h"].tokens.size() != seen) {
      seen = streams["h"].tokens.size();
      last_output = Clock::now();
    }
    ASSERT_LT(Clock::now() - hung_at, 20s);
  }
  std::printf("[fault] hang after 3 passes: %zu tokens, then nothing for 1 s (client timeout)\n",
              seen);
  EXPECT_TRUE(streams["h"].acked);
  EXPECT_EQ(seen, 3u);
  EXPECT_FALSE(streams["h"].finish.has_value());
  // The sockets stay up: stats is answered (the request still there) and a new submit acked.
  ASSERT_TRUE(c->submit({.id = "h2", .prompt = testing::prompt(4), .max_tokens = 1}));
  ASSERT_TRUE(c->send(protocol::StatsRequest{}));  // read after h2: both requests open
  std::optional<protocol::StatsReply> stats;
  const auto deadline = Clock::now() + 10s;
  while ((!stats || !streams["h2"].acked) && Clock::now() < deadline) {
    auto m = c->receive(20ms);
    ASSERT_TRUE(m) << m.error().message;
    if (!m || !*m) continue;
    if (auto* s = std::get_if<protocol::StatsReply>(&**m)) {
      stats = *s;
    } else {
      testing::absorb(streams, std::move(**m), nullptr);
    }
  }
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->routes, 2u);
  EXPECT_TRUE(streams["h2"].acked);
  EXPECT_TRUE(streams["h2"].tokens.empty());
  // /health: 503 (at most 300 ms after the hang, which is over a second ago now); /ready 200.
  EXPECT_TRUE(testing::pollUntil(
      http, "/health", [](int status, const std::string&) { return status == 503; }, 5s));
  auto ready = http.Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(serve.stop(), 0);
}

TEST(FaultServeTest, RequestErrorsAndAbortsAtASeededRate) {
  const auto log = tempPath("fault-requests");
  const std::vector<std::string> specs = {"error:rate=0.3:code=internal",
                                          "abort:tokens=3:match=a-*"};
  ServeProcess serve({"--speedup-ratio", "0", "--fault", specs[0], "--fault", specs[1],
                      "--fault-seed", "5", "--fault-log", log.string()});
  ASSERT_TRUE(serve.awaitReady());
  auto c = connectTo(serve);
  ASSERT_TRUE(c);
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back("a-" + std::to_string(i));
  for (int i = 0; i < 10; ++i) ids.push_back("b-" + std::to_string(i));
  for (const std::string& id : ids) {
    ASSERT_TRUE(c->submit({.id = id, .prompt = testing::prompt(8), .max_tokens = 10}));
  }
  std::map<std::string, testing::Stream> streams;
  std::map<std::string, protocol::ErrorReply> errors;
  const auto deadline = Clock::now() + 20s;
  const auto ended = [&] {
    std::size_t n = errors.size();
    for (const auto& [id, stream] : streams) n += stream.finish.has_value() ? 1u : 0u;
    return n;
  };
  while (ended() < ids.size()) {
    ASSERT_LT(Clock::now(), deadline) << "not every request ended";
    auto m = c->receive(20ms);
    ASSERT_TRUE(m) << m.error().message;
    if (!m || !*m) continue;
    if (auto* e = std::get_if<protocol::ErrorReply>(&**m)) {
      errors[e->id.value_or("?")] = *e;
    } else {
      testing::absorb(streams, std::move(**m), nullptr);
    }
  }
  // The decisions are the plan's (seed 5): the same ids fail whatever the arrival order.
  auto parsed = parseFaultSpecs(specs, 1, 1);
  ASSERT_TRUE(parsed);
  const FaultPlan plan(*parsed, 5);
  std::size_t n_errors = 0, n_aborts = 0;
  for (const std::string& id : ids) {
    const auto want = plan.onSubmit(0, id, 0.0);
    if (want.error) {
      ++n_errors;
      ASSERT_TRUE(errors.contains(id)) << id;
      EXPECT_EQ(errors[id].code, ErrorCode::Internal);
      EXPECT_EQ(errors[id].message, "fault injected: error (fault 0)");
    } else if (want.abort_after_tokens) {
      ++n_aborts;
      EXPECT_EQ(streams[id].tokens.size(), 3u) << id;
      EXPECT_EQ(streams[id].finish, protocol::FinishReason::Error) << id;
      EXPECT_EQ(streams[id].reason, "fault injected: stream aborted after 3 tokens");
    } else {
      EXPECT_EQ(streams[id].tokens.size(), 10u) << id;
      EXPECT_EQ(streams[id].finish, protocol::FinishReason::Length) << id;
    }
  }
  std::printf("[fault] 40 requests: %zu errors, %zu aborted after 3 tokens\n", n_errors, n_aborts);
  EXPECT_GT(n_errors, 0u);
  EXPECT_GT(n_aborts, 0u);
  EXPECT_LT(n_errors + n_aborts, ids.size());
  // stats and the fault log count them.
  const auto stats = statsOf(*c, streams, deadline);
  ASSERT_TRUE(stats && stats->faults);
  EXPECT_EQ(stats->faults->error, n_errors);
  EXPECT_EQ(stats->faults->abort, n_aborts);
  const std::string lines = readFile(log);
  EXPECT_EQ(static_cast<std::size_t>(std::count(lines.begin(), lines.end(), '\n')),
            n_errors + n_aborts);
  EXPECT_EQ(serve.stop(), 0);
  std::filesystem::remove(log);
}

// `silent`: the matching request is acknowledged and then nothing comes — no output, no
// terminal — while the worker serves the rest (a later request streams in full, so the silent
// one was passed over, not merely slow); its route stays open until the client cancels it
// (answered `applied`, terminal `cancelled`). Counted in stats and the fault log.
TEST(FaultServeTest, SilentRequestIsAcknowledgedThenNothingUntilCancelled) {
  const auto log = tempPath("fault-silent");
  ServeProcess serve(
      {"--speedup-ratio", "0", "--fault", "silent:match=quiet-*", "--fault-log", log.string()});
  ASSERT_TRUE(serve.awaitReady());
  auto c = connectTo(serve);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->submit({.id = "quiet-1", .prompt = testing::prompt(8), .max_tokens = 10}));
  ASSERT_TRUE(c->submit({.id = "loud-1", .prompt = testing::prompt(8, 500), .max_tokens = 10}));
  std::map<std::string, testing::Stream> streams;
  const auto deadline = Clock::now() + 20s;
  ASSERT_TRUE(receiveUntil(
      *c, streams, [&] { return streams["loud-1"].finish.has_value(); }, deadline));
  EXPECT_EQ(streams["loud-1"].tokens.size(), 10u);
  EXPECT_TRUE(streams["quiet-1"].acked);
  EXPECT_TRUE(streams["quiet-1"].tokens.empty());
  EXPECT_FALSE(streams["quiet-1"].finish.has_value());
  auto stats = statsOf(*c, streams, deadline);
  ASSERT_TRUE(stats && stats->faults);
  EXPECT_EQ(stats->faults->silent, 1u);
  EXPECT_EQ(stats->routes, 1u) << "the silent request's route stays open";
  EXPECT_TRUE(streams["quiet-1"].tokens.empty());

  ASSERT_TRUE(c->cancel("quiet-1"));
  std::optional<protocol::CancelReply> reply;
  while (!(reply && streams["quiet-1"].finish)) {
    ASSERT_LT(Clock::now(), deadline) << "no cancel reply or terminal for the silent request";
    auto m = c->receive(20ms);
    ASSERT_TRUE(m) << m.error().message;
    if (!m || !*m) continue;
    if (auto* r = std::get_if<protocol::CancelReply>(&**m)) {
      reply = *r;
    } else {
      testing::absorb(streams, std::move(**m), nullptr);
    }
  }
  EXPECT_EQ(reply->result, protocol::CancelResult::Applied);
  EXPECT_EQ(streams["quiet-1"].finish, protocol::FinishReason::Cancelled);
  EXPECT_TRUE(streams["quiet-1"].tokens.empty());
  stats = statsOf(*c, streams, deadline);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->routes, 0u);
  const std::string lines = readFile(log);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << lines;
  EXPECT_NE(lines.find(R"("kind":"silent")"), std::string::npos) << lines;
  EXPECT_NE(lines.find(R"("request":"quiet-1")"), std::string::npos) << lines;
  EXPECT_EQ(serve.stop(), 0);
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace mocker::service
