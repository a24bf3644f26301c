// Pure parts of `mocker index`: the --worker syntax (the query codec is tested in
// tests/protocol/index_query_test.cpp).
#include <gtest/gtest.h>

#include "tools/index/index_service.h"

namespace mocker::index {
namespace {

TEST(WorkerSpec, EventsOnly) {
  auto w = parseWorkerSpec("7=tcp://127.0.0.1:5557");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0], (WorkerEndpoint{.worker_id = 7, .events = "tcp://127.0.0.1:5557"}));
}

TEST(WorkerSpec, AllOptionsAndExplicitRank) {
  auto w = parseWorkerSpec(
      "18446744073709551615/3=tcp://h:1,replay=tcp://h:2,snapshot=tcp://h:3,topic=kv@a@b");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0], (WorkerEndpoint{.worker_id = 18446744073709551615u,
                                     .dp_rank = 3,
                                     .events = "tcp://h:1",
                                     .replay = "tcp://h:2",
                                     .snapshot = "tcp://h:3",
                                     .topic = "kv@a@b"}));
}

TEST(WorkerSpec, DpExpandsWithPortOffsets) {
  auto w = parseWorkerSpec("1=tcp://h:5557,replay=tcp://h:6000,snapshot=tcp://h:5555,dp=3");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ASSERT_EQ(w->size(), 3u);
  for (std::uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ((*w)[r].dp_rank, r);
    EXPECT_EQ((*w)[r].events, "tcp://h:" + std::to_string(5557 + r));
    EXPECT_EQ((*w)[r].replay, "tcp://h:" + std::to_string(6000 + r));
    EXPECT_EQ((*w)[r].snapshot, "tcp://h:5555");
  }
}

TEST(WorkerSpec, ErrorsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"tcp://h:1", "expected ID"},
      {"x=tcp://h:1", "ID"},
      {"-1=tcp://h:1", "ID"},
      {"1=", "missing the KV-event endpoint"},
      {"1=tcp://h:1,replay", "not key=value"},
      {"1=tcp://h:1,foo=1", "unknown option 'foo'"},
      {"1=tcp://h:1,dp=0", "dp must be"},
      {"1/0=tcp://h:1,dp=2", "either /RANK or dp=N"},
      {"1/x=tcp://h:1", "RANK"},
      {"1=tcp://h:1,replay=", "needs a value"},
      {"1=tcp://h,dp=2", "tcp://h"},
  };
  for (const auto& [spec, what] : bad) {
    auto w = parseWorkerSpec(spec);
    ASSERT_FALSE(w.has_value()) << spec;
    EXPECT_NE(w.error().message.find(what), std::string::npos) << spec << ": " << w.error().message;
  }
}

}  // namespace
}  // namespace mocker::index
