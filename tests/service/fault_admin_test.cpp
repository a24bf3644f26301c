// The fault admin interface (service/fault_admin.h): the FaultAdmin's hand-off between a request
// thread and a loop without sockets (answers, time-outs, closed workers, the bearer key), and a
// live Server whose /admin/faults is driven by httplib clients on other threads while a stream
// runs (the TSan build runs this: the HTTP threads never touch the loop's FaultPlan).
#include "service/fault_admin.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

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
using testing::prompt;
using testing::TestConfig;
using testing::withHttp;

TEST(FaultAdminTest, KeysCompareInFullAndLoadWithChecks) {
  EXPECT_TRUE(sameKey("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(sameKey("0123456789abcdeX", "0123456789abcdef"));
  EXPECT_FALSE(sameKey("0123456789abcde", "0123456789abcdef"));
  EXPECT_FALSE(sameKey("0123456789abcdef0", "0123456789abcdef"));
  EXPECT_FALSE(sameKey("", "0123456789abcdef"));
  const auto missing = loadAdminKey("/nonexistent/admin.key");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("'/nonexistent/admin.key': cannot read"),
            std::string::npos);
}

TEST(FaultAdminTest, ALoopThatDoesNotAnswerInTimeIsLeftOutAndNeverArmedLater) {
  FaultAdmin admin({.num_workers = 2, .dp_size = 1, .first_id = 3, .answer_timeout = 50ms});
  // Worker 1's loop is gone; worker 0's never looks at its box during the request.
  admin.close(1);
  const auto r = admin.handle("POST", "/admin/faults?workers=all", "slow:factor=2", "");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("\"id\":3"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("not armed on worker(s) 0, 1"), std::string::npos) << r.body;
  // The command was taken back: the loop finds nothing to apply.
  int applied = 0;
  admin.applyCommands(
      0,
      [&](const FaultAdmin::Command&) -> std::uint64_t {
        ++applied;
        return 0;
      },
      [] { return std::vector<FaultAdmin::Listed>{}; });
  EXPECT_EQ(applied, 0);
  // Nothing listed, so nothing to delete; ids are not reused.
  EXPECT_EQ(admin.handle("DELETE", "/admin/faults/3", "", "").status, 404);
  const auto again = admin.handle("POST", "/admin/faults", "slow:factor=2:worker=1", "");
  EXPECT_EQ(again.status, 503);
  EXPECT_NE(again.body.find("\"id\":4"), std::string::npos) << again.body;
}

TEST(FaultAdminTest, ALoopThreadAnswersWhatTheRequestThreadQueued) {
  FaultAdmin admin({.num_workers = 1, .dp_size = 2, .first_id = 0});
  std::atomic<bool> stop{false};
  std::vector<FaultAdmin::Command> seen;  // the loop thread's only
  std::thread loop([&] {
    while (!stop.load()) {
      admin.applyCommands(
          0,
          [&](const FaultAdmin::Command& c) -> std::uint64_t {
            seen.push_back(c);
            return 40 + c.id;
          },
          [&] {
            std::vector<FaultAdmin::Listed> l;
            for (const auto& c : seen) {
              if (c.op == FaultAdmin::Command::Op::Arm) {
                l.push_back({.info = {.id = c.id, .spec = c.spec, .armed_at_pass = 40 + c.id}});
              }
            }
            return l;
          });
      std::this_thread::yield();
    }
  });
  const auto armed = admin.handle("POST", "/admin/faults", " drop:rank=1 \n", "");
  EXPECT_EQ(armed.status, 201) << armed.body;
  EXPECT_EQ(armed.body,
            R"({"id":0,"spec":"drop:rank=1","workers":[{"worker":0,"armed_at_pass":40}]})"
            "\n");
  const auto listed = admin.handle("GET", "/admin/faults", "", "");
  EXPECT_EQ(listed.status, 200);
  EXPECT_EQ(listed.body,
            R"({"faults":[{"id":0,"kind":"drop","spec":"drop:rank=1","trigger":)"
            R"("next KV-event batch","scope":{"worker":"all","rank":1},"source":"admin",)"
            R"("fired":0,"workers":[{"worker":0,"running":true,"armed_at_pass":40,"fired":0}]}]})"
            "\n");
  EXPECT_EQ(admin.handle("POST", "/admin/faults", "drop:rank=2", "").status, 400);
  stop.store(true);
  loop.join();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].spec.rank, 1u);
}

TEST(FaultAdminTest, ABearerKeyIsRequiredOnEveryAdminRequest) {
  FaultAdmin admin({.key = "0123456789abcdef", .answer_timeout = 10ms});
  for (const char* auth :
       {"", "Bearer 0123456789abcdeF", "Basic 0123456789abcdef", "0123456789abcdef", "Bearer"}) {
    const auto r = admin.handle("GET", "/admin/nothing", "", auth);
    EXPECT_EQ(r.status, 401) << auth;
    EXPECT_TRUE(r.unauthorized);
  }
  EXPECT_EQ(admin.handle("GET", "/admin/nothing", "", "bearer 0123456789abcdef").status, 404);
  EXPECT_EQ(admin.handle("GET", "/admin/faults", "", "Bearer 0123456789abcdef").status, 200);
}

TEST(FaultAdminTest, ALiveServerArmsAndDisarmsFromHttpThreadsWhileStreaming) {
  ServiceConfig config = withHttp(TestConfig().paced(1, 1).build());
  config.faults.admin = true;
  LiveService svc(config);
  ASSERT_FALSE(svc.endpoints().http.empty());
  auto client = svc.client();
  ASSERT_TRUE(client->submit({.id = "long", .prompt = prompt(8), .max_tokens = 300}));
  // Two HTTP clients arm and disarm request faults concurrently while "long" streams.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto http = httpClient(svc.endpoints().http);
      for (int i = 0; i < 10; ++i) {
        const std::string spec = "abort:tokens=1:match=t" + std::to_string(t) + "-*";
        auto res = http.Post("/admin/faults", spec, "text/plain");
        if (!res || res->status != 201) {
          ++failures;
          continue;
        }
        const std::size_t at = res->body.find("\"id\":") + 5;
        const std::string id = res->body.substr(at, res->body.find(',', at) - at);
        auto del = http.Delete("/admin/faults/" + id);
        if (!del || del->status != 200) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // One left armed: the next matching request is cut after 1 token; "long" streams in full.
  auto http = httpClient(svc.endpoints().http);
  auto res = http.Post("/admin/faults", "abort:tokens=1:match=cut", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(client->submit({.id = "cut", .prompt = prompt(8, 50), .max_tokens = 20}));
  const auto streams = collect(*client, {"long", "cut"}, nullptr, 20s);
  EXPECT_EQ(streams.at("long").tokens.size(), 300u);
  EXPECT_EQ(streams.at("long").finish, protocol::FinishReason::Length);
  EXPECT_EQ(streams.at("cut").tokens.size(), 1u);
  EXPECT_EQ(streams.at("cut").finish, protocol::FinishReason::Error);
  // The loop publishes the firing on its next turn (after the terminal went out).
  std::string listed;
  EXPECT_TRUE(testing::pollUntil(
      http, "/admin/faults",
      [](int status, const std::string& body) {
        return status == 200 && body.find("\"fired\":1,\"workers\"") != std::string::npos;
      },
      10s, &listed))
      << listed;
  EXPECT_NE(listed.find("\"id\":20,\"kind\":\"abort\""), std::string::npos) << listed;
  svc.stop();
  // Stopped: the worker takes nothing more, and says so at once.
  auto after = http.Post("/admin/faults", "crash", "text/plain");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 503) << after->body;
}

}  // namespace
}  // namespace mocker::service
