// `mocker index`'s flags → IndexServiceConfig (tools/index_plan.h), without sockets.
#include "tools/index_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "service/fleet.h"

namespace mocker::tools {
namespace {

IndexFlags oneWorker() {
  IndexFlags f;
  f.workers = {"3=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558"};
  return f;
}

std::string errorOf(const IndexFlags& f, bool block_size_given = false) {
  auto config = indexConfigFromFlags(f, block_size_given);
  return config ? "" : config.error().message;
}

/// A fleet file of two workers of two DP ranks at block size 16, removed at exit.
class FleetFile {
 public:
  explicit FleetFile(const std::string& name, std::string kv_events = "tcp://127.0.0.1:7000")
      : path_(testing::TempDir() + name) {
    service::FleetManifest m;
    m.mocker_version = "test";
    m.model_name = "m";
    m.engine_type = "vllm";
    m.block_size = 16;
    m.dp_size = 2;
    m.workers.push_back({.worker_id = 0,
                         .submit = "tcp://127.0.0.1:6000",
                         .cancel = "tcp://127.0.0.1:6001",
                         .ranks = {{.kv_events = kv_events, .kv_replay = "tcp://127.0.0.1:7001"},
                                   {.kv_events = "tcp://127.0.0.1:7004"}}});
    m.workers.push_back(
        {.worker_id = 1,
         .submit = "tcp://127.0.0.1:6002",
         .cancel = "tcp://127.0.0.1:6003",
         .ranks = {{.kv_events = "tcp://127.0.0.1:7002"}, {.kv_events = "tcp://127.0.0.1:7003"}}});
    std::ofstream(path_) << service::fleetManifestJson(m);
  }
  ~FleetFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(IndexPlanTest, FlagsBecomeTheServiceConfig) {
  IndexFlags f = oneWorker();
  f.query_endpoint = "none";
  f.verify = true;
  f.once = true;
  f.probe_interval_ms = 250;
  f.stats_interval_s = 0.5;
  f.no_replay_at_start = true;
  auto config = indexConfigFromFlags(f, false);
  ASSERT_TRUE(config) << config.error().message;
  ASSERT_EQ(config->workers.size(), 1u);
  EXPECT_EQ(config->workers[0].worker_id, 3u);
  EXPECT_EQ(config->workers[0].replay, "tcp://127.0.0.1:5558");
  EXPECT_EQ(config->query_endpoint, "") << "'none' disables the query ROUTER";
  EXPECT_EQ(config->block_size, 64u);
  EXPECT_TRUE(config->verify_at_start);
  EXPECT_TRUE(config->stop_after_verify);
  EXPECT_FALSE(config->replay_at_start);
  EXPECT_EQ(config->probe_interval.count(), 250);
  EXPECT_EQ(config->stats_interval.count(), 500);
}

TEST(IndexPlanTest, UsageErrorsNameTheFlag) {
  IndexFlags once = oneWorker();
  once.once = true;
  EXPECT_EQ(errorOf(once), "--once needs --verify");
  EXPECT_NE(errorOf(IndexFlags{}).find("--worker ... (one per worker) or --fleet FILE"),
            std::string::npos);
  IndexFlags bare;
  bare.workers = {"0=localhost:5557"};
  EXPECT_NE(errorOf(bare).find("endpoint 'localhost:5557' has no transport"), std::string::npos)
      << errorOf(bare);
  IndexFlags key = oneWorker();
  key.query_curve_secret_key_file = testing::TempDir() + "no-such.key";
  EXPECT_NE(errorOf(key).find("--query-curve-secret-key-file"), std::string::npos) << errorOf(key);
  IndexFlags fleet;
  fleet.fleet_file = testing::TempDir() + "no-such-fleet.json";
  EXPECT_EQ(errorOf(fleet).rfind("--fleet: ", 0), 0u) << errorOf(fleet);
}

TEST(IndexPlanTest, AFleetGivesEveryRankAndItsBlockSize) {
  const FleetFile file("index_plan_fleet.json");
  IndexFlags f;
  f.fleet_file = file.path();
  auto config = indexConfigFromFlags(f, /*block_size_given=*/false);
  ASSERT_TRUE(config) << config.error().message;
  ASSERT_EQ(config->workers.size(), 4u);
  EXPECT_EQ(config->workers[0].snapshot, "tcp://127.0.0.1:6000");
  EXPECT_EQ(config->workers[0].replay, "tcp://127.0.0.1:7001");
  EXPECT_EQ(config->workers[3].worker_id, 1u);
  EXPECT_EQ(config->workers[3].dp_rank, 1u);
  EXPECT_EQ(config->workers[3].events, "tcp://127.0.0.1:7003");
  EXPECT_EQ(config->workers[3].snapshot, "tcp://127.0.0.1:6002");
  EXPECT_EQ(config->block_size, 16u) << "the fleet's block size is the queries' default";

  f.block_size = 32;
  config = indexConfigFromFlags(f, /*block_size_given=*/true);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->block_size, 32u) << "--block-size wins over the fleet file";
}

TEST(IndexPlanTest, AFleetWorkerWithoutKvEventsIsRefused) {
  const FleetFile file("index_plan_silent_fleet.json", "");
  IndexFlags f;
  f.fleet_file = file.path();
  EXPECT_EQ(errorOf(f),
            "--fleet: worker 0 publishes no KV events (its kv_events endpoint is null)");
}

}  // namespace
}  // namespace mocker::tools
