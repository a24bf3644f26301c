// kv_fetch faults of a prefill worker (service/README.md "Failure drills"), where the decode
// worker's client sees them: a prefill worker and a decode worker, each a real Server on
// ephemeral loopback ports, every hop a real ZeroMQ message (as in disagg_live_test.cpp).
//   fetch_not_found  the decode stream ends `error` at once ("holds no KV for this key");
//   fetch_never      it ends `error` at the decode worker's fetch timeout ("no kv_fetch_reply");
//   fetch_late:ms=N  it completes, its first token at least N ms after the usual answer time;
// `match` picks the request; the faults are counted in the prefill worker's stats.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "protocol/client.h"
#include "service/fault_plan.h"
#include "tests/service/disagg_test_util.h"
#include "tests/service/live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using protocol::FinishReason;
using testing::awaitAck;
using testing::collect;
using testing::kSlowdown;
using testing::LiveService;
using testing::stats;
using testing::Stream;
using Clock = std::chrono::steady_clock;

/// A prefill worker with `faults`; transfers take 1 ms per token (20 ms for the prompt).
ServiceConfig prefillWith(std::vector<std::string> faults) {
  ServiceConfig c = testing::disaggWorker(engine::WorkerType::Prefill);
  c.faults.inject = std::move(faults);
  return c;
}

/// A decode worker that gives up on a kv_fetch after `fetch_timeout_ms`.
ServiceConfig decodeWorker(double fetch_timeout_ms = 30000.0) {
  ServiceConfig c = testing::disaggWorker(engine::WorkerType::Decode);
  c.service.handoff_fetch_timeout_ms = fetch_timeout_ms;
  return c;
}

struct TwoHop {
  Stream stream;
  double decode_ms = 0.0;  ///< decode submit → terminal
};

/// Request `id` (4 tokens) through both hops; the decode stream as its client saw it.
TwoHop twoHop(net::Client& pc, net::Client& dc, const std::string& id) {
  TwoHop out;
  const auto h = testing::prefillHop(pc, id, 4);
  EXPECT_TRUE(h.has_value());
  if (!h) return out;
  protocol::SubmitRequest r = testing::disaggRequest(id, 4);
  r.handoff = h->ticket;
  const auto start = Clock::now();
  EXPECT_TRUE(dc.submit(r).has_value());
  std::map<std::string, Stream> streams;
  EXPECT_TRUE(awaitAck(dc, id, streams));
  streams = collect(dc, {id}, nullptr, 20s * kSlowdown, std::move(streams));
  out.stream = streams[id];
  out.decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return out;
}

TEST(DisaggFaultTest, FetchNotFoundEndsTheDecodeStreamAtOnce) {
  LiveService p(prefillWith({"fetch_not_found:match=victim"}));
  LiveService d(decodeWorker());
  auto pc = p.client();
  auto dc = d.client();
  const TwoHop hit = twoHop(*pc, *dc, "victim");
  EXPECT_EQ(hit.stream.finish, FinishReason::Error);
  EXPECT_TRUE(hit.stream.tokens.empty());
  EXPECT_NE(hit.stream.reason.find("holds no KV for this key"), std::string::npos)
      << hit.stream.reason;
  // Another request is not matched: it streams in full.
  const TwoHop other = twoHop(*pc, *dc, "other");
  EXPECT_EQ(other.stream.finish, FinishReason::Length);
  EXPECT_EQ(other.stream.tokens.size(), 4u);
  const protocol::StatsReply s = stats(*pc);
  ASSERT_TRUE(s.faults.has_value());
  EXPECT_EQ(s.faults->fetch_not_found, 1u);
  EXPECT_EQ(s.faults->fetch_never + s.faults->fetch_late, 0u);
}

TEST(DisaggFaultTest, FetchNeverEndsTheDecodeStreamAtItsFetchTimeout) {
  constexpr double kTimeoutMs = 300.0;
  LiveService p(prefillWith({"fetch_never"}));
  LiveService d(decodeWorker(kTimeoutMs));
  auto pc = p.client();
  auto dc = d.client();
  const TwoHop hit = twoHop(*pc, *dc, "r1");
  EXPECT_EQ(hit.stream.finish, FinishReason::Error);
  EXPECT_NE(hit.stream.reason.find("no kv_fetch_reply"), std::string::npos) << hit.stream.reason;
  EXPECT_GE(hit.decode_ms, kTimeoutMs);
  std::printf("fetch_never: the decode stream ended after %.1f ms (fetch timeout %.0f ms)\n",
              hit.decode_ms, kTimeoutMs);
  ASSERT_TRUE(stats(*pc).faults.has_value());
  EXPECT_EQ(stats(*pc).faults->fetch_never, 1u);
}

TEST(DisaggFaultTest, FetchLateDelaysTheFirstDecodeToken) {
  constexpr double kLateMs = 400.0;
  LiveService p(prefillWith({"fetch_late:ms=400:match=late"}));
  LiveService d(decodeWorker());
  auto pc = p.client();
  auto dc = d.client();
  const TwoHop late = twoHop(*pc, *dc, "late");
  EXPECT_EQ(late.stream.finish, FinishReason::Length);
  EXPECT_EQ(late.stream.tokens.size(), 4u);
  EXPECT_GE(late.decode_ms, kLateMs);
  const TwoHop on_time = twoHop(*pc, *dc, "on-time");
  EXPECT_EQ(on_time.stream.finish, FinishReason::Length);
  std::printf("fetch_late: decode hop %.1f ms with the fault, %.1f ms without\n", late.decode_ms,
              on_time.decode_ms);
  ASSERT_TRUE(stats(*pc).faults.has_value());
  EXPECT_EQ(stats(*pc).faults->fetch_late, 1u);
  p.stop();
  EXPECT_EQ(p.server().counters().kv_fetches_ready, 2u);
}

}  // namespace
}  // namespace mocker::service
