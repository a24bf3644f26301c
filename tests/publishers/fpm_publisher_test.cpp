#include "publishers/fpm_publisher.h"

#include <gtest/gtest.h>

#include "protocol/framing.h"
#include "tests/testing/recording_frame_sink.h"

namespace mocker::publishers {
namespace {

using testing::RecordingFrameSink;

class FpmPublisherTest : public ::testing::Test {
 protected:
  std::unique_ptr<FpmPublisher> make(FpmPublisherConfig config) {
    auto p = FpmPublisher::create(std::move(config), sink_);
    EXPECT_TRUE(p.has_value()) << p.error().toString();
    return std::move(p).value();
  }
  protocol::FpmRecord record(std::size_t i) const {
    const auto r = protocol::decodeFpm(sink_.messages().at(i).at(2));
    EXPECT_TRUE(r.has_value());
    return *r;
  }
  static bool isHeartbeat(const protocol::FpmRecord& r) {
    return r.wall_time == 0.0 && r.scheduled == protocol::FpmScheduled{} &&
           r.queued == protocol::FpmQueued{};
  }
  static engine::ForwardPassMetrics work() {
    return engine::ForwardPassMetrics{
        .wall_time = 0.025,
        .scheduled = {.num_prefill_requests = 1, .sum_prefill_tokens = 512},
        .queued = {.num_decode_requests = 2, .var_decode_kv_tokens = 4.0}};
  }
  RecordingFrameSink sink_;
};

TEST_F(FpmPublisherTest, RecordsAreStampedAndCountersMatchTheSequenceFrame) {
  auto p = make({.worker_id = "7587889736218396437", .dp_rank = 2});
  EXPECT_EQ(p->onPass(work(), 10.0), 0u);
  EXPECT_EQ(p->onPass(work(), 20.0), 1u);
  ASSERT_EQ(sink_.messages().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const Message& m = sink_.messages()[i];
    ASSERT_EQ(m.size(), 3u);
    EXPECT_TRUE(m[0].empty());
    EXPECT_EQ(*protocol::decodeSeqNo(m[1]), i);
    const protocol::FpmRecord r = record(i);
    EXPECT_EQ(r.counter_id, i);
    EXPECT_EQ(r.version, 1u);
    EXPECT_EQ(r.worker_id, "7587889736218396437");
    EXPECT_EQ(r.dp_rank, 2u);
    EXPECT_EQ(r.wall_time, 0.025);
    EXPECT_EQ(r.scheduled.sum_prefill_tokens, 512u);
    EXPECT_EQ(r.queued.num_decode_requests, 2u);
    EXPECT_EQ(r.queued.var_decode_kv_tokens, 4.0);
    EXPECT_EQ(r.extensions, protocol::FpmExtensions{});
  }
}

TEST_F(FpmPublisherTest, RestartStartsTheCounterOverAndAnnouncesTheWorkerAgain) {
  auto p = make({.heartbeat_interval_s = 1.0});
  EXPECT_EQ(p->onPass(work(), 10.0), 0u);
  EXPECT_EQ(p->onPass(work(), 20.0), 1u);
  EXPECT_TRUE(p->onIdle(30.0));  // busy -> idle
  EXPECT_FALSE(p->onIdle(30.5));
  p->restart();
  EXPECT_EQ(p->nextHeartbeatDue(), std::nullopt);  // busy until its next onIdle
  EXPECT_TRUE(p->onIdle(31.0));                    // a new process announces itself
  EXPECT_EQ(p->onPass(work(), 40.0), 1u);          // the heartbeat took counter 0
  ASSERT_EQ(sink_.messages().size(), 5u);
  EXPECT_EQ(record(3).counter_id, 0u);
  EXPECT_TRUE(isHeartbeat(record(3)));
  EXPECT_EQ(p->numSent(), 5u);  // the counters go on
}

TEST_F(FpmPublisherTest, HeartbeatOnBusyToIdleThenEveryInterval) {
  auto p = make({.heartbeat_interval_s = 1.0});
  p->onPass(work(), 100.0);
  EXPECT_EQ(p->nextHeartbeatDue(), std::nullopt);  // busy
  EXPECT_TRUE(p->onIdle(150.0));                   // went idle: immediately
  EXPECT_EQ(p->nextHeartbeatDue(), 1150.0);
  EXPECT_FALSE(p->onIdle(151.0));
  EXPECT_FALSE(p->onIdle(1149.999));
  EXPECT_TRUE(p->onIdle(1150.0));
  EXPECT_EQ(p->nextHeartbeatDue(), 2150.0);
  EXPECT_TRUE(p->onIdle(2150.5));  // slightly late: keeps the cadence
  EXPECT_EQ(p->nextHeartbeatDue(), 3150.0);
  EXPECT_TRUE(p->onIdle(9000.0));  // very late: one heartbeat, no burst
  EXPECT_EQ(p->nextHeartbeatDue(), 10000.0);
  ASSERT_EQ(sink_.messages().size(), 5u);
  EXPECT_FALSE(isHeartbeat(record(0)));
  for (std::size_t i = 1; i < 5; ++i) {
    EXPECT_TRUE(isHeartbeat(record(i))) << i;
    EXPECT_EQ(record(i).counter_id, i);  // heartbeats share the counter
  }
  EXPECT_EQ(p->numHeartbeats(), 4u);
  // Work again, then idle again: a new immediate heartbeat.
  p->onPass(work(), 9500.0);
  EXPECT_EQ(p->nextHeartbeatDue(), std::nullopt);
  EXPECT_TRUE(p->onIdle(9501.0));
  EXPECT_EQ(p->nextHeartbeatDue(), 10501.0);
}

TEST_F(FpmPublisherTest, FirstIdleAnnouncesTheWorker) {
  auto p = make({.heartbeat_interval_s = 0.25});
  EXPECT_EQ(p->nextHeartbeatDue(), std::nullopt);
  EXPECT_TRUE(p->onIdle(0.0));
  EXPECT_EQ(p->nextHeartbeatDue(), 250.0);
  EXPECT_FALSE(p->onIdle(249.0));
  EXPECT_TRUE(p->onIdle(250.0));
  ASSERT_EQ(sink_.messages().size(), 2u);
  EXPECT_TRUE(isHeartbeat(record(0)));
}

TEST_F(FpmPublisherTest, ExtensionsOnlyWhenEnabled) {
  const protocol::FpmExtensions ext{
      .pass_start_ms = 1.0, .pass_end_ms = 2.0, .preemptions_total = 3};
  auto off = make({});
  off->onPass(work(), 0.0, ext);
  EXPECT_EQ(record(0).extensions, protocol::FpmExtensions{});
  RecordingFrameSink other;
  auto on = FpmPublisher::create({.extensions = true}, other);
  ASSERT_TRUE(on.has_value());
  (*on)->onPass(work(), 0.0, ext);
  EXPECT_EQ(protocol::decodeFpm(other.messages().at(0).at(2))->extensions, ext);
}

TEST_F(FpmPublisherTest, DropsAreCountedAndDoNotReuseCounters) {
  auto p = make({});
  sink_.dropNext(1);
  p->onPass(work(), 0.0);
  p->onPass(work(), 1.0);
  EXPECT_EQ(p->numDropped(), 1u);
  EXPECT_EQ(p->numSent(), 1u);
  EXPECT_EQ(record(0).counter_id, 1u);
}

TEST_F(FpmPublisherTest, ConfigValidation) {
  RecordingFrameSink sink;
  for (const char* id : {"", "abc", "-1", "01", "18446744073709551616"}) {
    const auto r = FpmPublisher::create({.worker_id = id}, sink);
    ASSERT_FALSE(r.has_value()) << id;
    EXPECT_NE(r.error().message.find("worker_id"), std::string::npos);
  }
  for (double interval : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    const auto r = FpmPublisher::create({.heartbeat_interval_s = interval}, sink);
    ASSERT_FALSE(r.has_value()) << interval;
    EXPECT_NE(r.error().message.find("fpm_heartbeat_interval_s"), std::string::npos);
  }
}

}  // namespace
}  // namespace mocker::publishers
