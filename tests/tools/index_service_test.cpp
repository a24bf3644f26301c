// `mocker index` against a real in-process service::Server (tests/service/live_service.h):
// catch-up, gap healing through replay (r1 and r2), ring overrun → resync from kv_snapshot,
// overlap queries, malformed queries, a reply to a client that left, the CLI's --verify --once.
// Lost live batches are made by a LossyRelay between the worker's PUB and the index
// (tests/tools/lossy_relay.h). Every wait polls a real socket with a deadline; no fixed ports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <sstream>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "engine/block_hash.h"
#include "engine/config.h"
#include "tests/service/live_service.h"
#include "tests/tools/index_live_harness.h"
#include "tests/tools/lossy_relay.h"
#include "tools/cli.h"
#include "tools/index/index_service.h"

namespace mocker::index {
namespace {

using namespace std::chrono_literals;
using publishers::ReplayLayout;
using service::ServiceConfig;
using service::testing::LiveService;
using testing::endpointOf;
using testing::eventsConfig;
using testing::indexConfig;
using testing::LossyRelay;
using testing::RunningIndex;
using testing::waitLive;
using testing::waitUntil;

/// Shared-prefix load: `n` requests in `groups` prefix groups (12 shared tokens) plus 8 unique
/// tokens each, 4 output tokens; submitted at once and collected to the end.
void runLoad(const LiveService& svc, std::uint32_t n, std::uint32_t groups,
             std::uint32_t salt = 0) {
  auto client = svc.client({.rcvhwm = 100000, .sndhwm = 100000});
  std::vector<std::string> ids;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::vector<std::uint32_t> prompt = service::testing::prompt(12, 1000 * (i % groups + 1));
    const auto tail = service::testing::prompt(8, 100000 + 100 * i + salt * 100000);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    std::string id = std::to_string(i);
    id.insert(0, 1, 'r');
    ASSERT_TRUE(client->submit({.id = id, .prompt = prompt, .max_tokens = 4}).has_value());
    ids.push_back(id);
  }
  const auto streams = service::testing::collect(*client, ids, nullptr, 60s);
  for (const auto& [id, s] : streams) {
    EXPECT_EQ(s.finish, protocol::FinishReason::Length) << id;
  }
}

std::string describe(const VerifyReply& r) {
  std::ostringstream os;
  for (const auto& d : r.sources) {
    os << "worker " << d.worker_id << " rank " << d.dp_rank << ": index " << d.index_blocks
       << " worker " << d.worker_blocks << " missing " << d.missing.size() << " extra "
       << d.extra.size() << "; ";
  }
  for (const auto& e : r.errors) os << "error: " << e << "; ";
  return os.str();
}

class IndexLiveTest : public ::testing::TestWithParam<ReplayLayout> {};

TEST_P(IndexLiveTest, CatchesUpUnderLoadAndVerifies) {
  LiveService svc(eventsConfig(GetParam(), 24, 10000));
  RunningIndex index(indexConfig({endpointOf(svc, 7)}));
  waitLive(svc, index);
  runLoad(svc, 150, 4);
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  ASSERT_EQ(v.sources.size(), 1u);
  EXPECT_GT(v.sources[0].worker_blocks, 0u);
  const IndexStats s = index.stats();
  EXPECT_GT(s.blocks_applied, s.blocks_indexed) << "the tiny pool must have evicted blocks";
  EXPECT_EQ(s.gaps_unhealed, 0u);
  EXPECT_EQ(s.resyncs, 0u);
  EXPECT_EQ(s.decode_errors, 0u);
}

TEST_P(IndexLiveTest, LostLiveBatchesAreHealedThroughReplay) {
  LiveService svc(eventsConfig(GetParam(), 24, 10000));
  // Lose every fifth live batch, as a dropped subscription window would.
  LossyRelay relay(svc.endpoints().kv_events.at(0), [](std::uint64_t seq) { return seq % 5 == 2; });
  WorkerEndpoint w = endpointOf(svc, 7);
  w.events = relay.endpoint();
  IndexServiceConfig config = indexConfig({w});
  // Holes are found by the next live batch only. An idle probe (or verify's catch-up) while the
  // relay hop lags behind the worker would fetch them in order, before any gap shows.
  config.probe_interval = 0ms;
  RunningIndex index(std::move(config));
  waitLive(svc, index);
  runLoad(svc, 150, 4);
  waitUntil([&] { return index.stats().gaps_detected > 0; });
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  const IndexStats s = index.stats();
  EXPECT_GT(relay.numDropped(), 0u);
  EXPECT_GT(s.gaps_detected, 0u);
  EXPECT_EQ(s.gaps_healed, s.gaps_detected);
  EXPECT_EQ(s.gaps_unhealed, 0u);
  EXPECT_EQ(s.resyncs, 0u);
}

TEST_P(IndexLiveTest, RingOverrunIsReportedAndResyncedFromSnapshot) {
  // A ring of 4 batches cannot cover a lost window of 20: the replay starts past the gap.
  LiveService svc(eventsConfig(GetParam(), 24, 4));
  std::atomic<bool> armed{false};
  int to_drop = 20;  // relay thread only
  LossyRelay relay(svc.endpoints().kv_events.at(0),
                   [&](std::uint64_t) { return armed.load() && to_drop-- > 0; });
  WorkerEndpoint w = endpointOf(svc, 7);
  w.events = relay.endpoint();
  IndexServiceConfig config = indexConfig({w});
  config.probe_interval = 0ms;  // only the next live batch may reveal the gap
  RunningIndex index(std::move(config));
  waitLive(svc, index);
  armed.store(true);
  runLoad(svc, 150, 4);
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  // After the resync every batch up to the newest one seen (the replay's) is a duplicate; when
  // the relay hop lags behind the replay, that is most of the first load. A second load after
  // the resync is received and applied normally.
  runLoad(svc, 150, 4, 1);
  const VerifyReply v2 = index.verifyEventually();
  EXPECT_TRUE(v2.ok) << describe(v2);
  const IndexStats s = index.stats();
  EXPECT_GT(s.batches_received, 30u);
  EXPECT_EQ(relay.numDropped(), 20u);
  EXPECT_GE(s.gaps_unhealed, 1u);
  EXPECT_GE(s.resyncs, 1u);
  EXPECT_EQ(s.resync_failures, 0u);
}

TEST_P(IndexLiveTest, LateJoinerCatchesUpThroughReplayFromZero) {
  LiveService svc(eventsConfig(GetParam(), 24, 10000));
  runLoad(svc, 60, 4);  // everything is published before the index connects
  RunningIndex index(indexConfig({endpointOf(svc, 7)}));
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  EXPECT_GT(v.sources.at(0).worker_blocks, 0u);
  const IndexStats s = index.stats();
  EXPECT_EQ(s.gaps_unhealed, 0u);
  EXPECT_EQ(s.resyncs, 0u);
  EXPECT_EQ(s.caught_up, 1u);
}

TEST_P(IndexLiveTest, LateJoinerWithOverrunRingResyncs) {
  LiveService svc(eventsConfig(GetParam(), 24, 4));
  runLoad(svc, 60, 4);
  RunningIndex index(indexConfig({endpointOf(svc, 7)}));
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  const IndexStats s = index.stats();
  EXPECT_GE(s.gaps_unhealed, 1u);
  EXPECT_GE(s.resyncs, 1u);
  // Still in step with new traffic after the resync.
  runLoad(svc, 40, 3, 1);
  const VerifyReply v2 = index.verifyEventually();
  EXPECT_TRUE(v2.ok) << describe(v2);
}

std::string layoutName(const ::testing::TestParamInfo<ReplayLayout>& p) {
  return p.param == ReplayLayout::R1 ? "r1" : "r2";
}

INSTANTIATE_TEST_SUITE_P(ReplayLayouts, IndexLiveTest,
                         ::testing::Values(ReplayLayout::R1, ReplayLayout::R2), layoutName);

TEST(IndexLive, TinyReceiveHighWaterMarkStillConverges) {
  LiveService svc(eventsConfig(ReplayLayout::R1, 24, 10000));
  IndexServiceConfig config = indexConfig({endpointOf(svc, 7)});
  config.sub_rcvhwm = 1;
  config.sub_rcvbuf = 256;
  RunningIndex index(std::move(config));
  waitLive(svc, index);
  runLoad(svc, 150, 4);
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  const IndexStats s = index.stats();
  // Whether ZeroMQ dropped anything depends on timing; every gap it did cause was healed.
  EXPECT_EQ(s.gaps_healed + s.gaps_unhealed, s.gaps_detected);
  EXPECT_EQ(s.resync_failures, 0u);
  std::cerr << "tiny RCVHWM: " << s.gaps_detected << " gap(s) detected, " << s.gaps_healed
            << " healed\n";
}

TEST(IndexLive, NoReplayEndpointResyncsOnGap) {
  LiveService svc(eventsConfig(ReplayLayout::R1, 24, 10000));
  std::atomic<bool> armed{false};
  int to_drop = 1;  // relay thread only
  LossyRelay relay(svc.endpoints().kv_events.at(0),
                   [&](std::uint64_t) { return armed.load() && to_drop-- > 0; });
  WorkerEndpoint w = endpointOf(svc, 7);
  w.events = relay.endpoint();
  w.replay.clear();
  RunningIndex index(indexConfig({w}));
  waitLive(svc, index);
  armed.store(true);
  runLoad(svc, 80, 4);
  const VerifyReply v = index.verifyEventually();
  EXPECT_TRUE(v.ok) << describe(v);
  EXPECT_EQ(relay.numDropped(), 1u);
  EXPECT_GE(index.stats().resyncs, 1u);
}

// A kv_snapshot names the KV-event seq its hashes are at (last_seq), so verify is exact while
// the worker is busy: passes in flight, evictions in a small pool, batches still on their way to
// the index or already past the snapshot. Every verify during a steady load finds no difference.
TEST(IndexLive, VerifyIsExactUnderLoad) {
  ServiceConfig config = eventsConfig(ReplayLayout::R1, 48, 10000);
  config.engine.speedup_ratio = 1;
  config.engine.timing_model = engine::TimingModelKind::Fixed;
  config.engine.fixed_prefill_ms = 2;
  config.engine.fixed_decode_ms = 1;
  LiveService svc(config);
  RunningIndex index(indexConfig({endpointOf(svc, 7)}));
  waitLive(svc, index);
  std::atomic<bool> done{false};
  std::atomic<std::uint32_t> waves{0};
  std::thread load([&] {
    for (std::uint32_t salt = 1; !done.load(); ++salt) {
      runLoad(svc, 60, 3, salt);
      waves.fetch_add(1);
    }
  });
  // Verifies back to back for as long as 6 waves of load take.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  int verifies = 0, clean = 0;
  while (waves.load() < 6 && std::chrono::steady_clock::now() < deadline) {
    auto r = index.ask(VerifyQuery{"v"});
    ASSERT_TRUE(r.has_value()) << r.error().message;
    const auto& v = std::get<VerifyReply>(*r);
    EXPECT_TRUE(v.ok) << "verify " << verifies << ": " << describe(v);
    clean += v.ok;
    ++verifies;
  }
  done.store(true);
  load.join();
  EXPECT_GE(verifies, 5);
  const std::uint64_t applied = index.stats().batches_applied;
  std::printf("%d of %d verifies under load clean; %u load waves, %llu batches applied\n", clean,
              verifies, waves.load(), static_cast<unsigned long long>(applied));
}

TEST(IndexLive, OverlapQueryNamesTheWorkerThatServedThePrompt) {
  LiveService a(eventsConfig(ReplayLayout::R1, 256, 10000));
  LiveService b(eventsConfig(ReplayLayout::R2, 256, 10000));
  RunningIndex index(indexConfig({endpointOf(a, 7), endpointOf(b, 8)}));
  // Both SUBs connected first: a batch published before a SUB joins is never seen live, and
  // nothing after it would reveal the gap.
  waitLive(a, index);
  waitLive(b, index);
  const std::vector<std::uint32_t> served = service::testing::prompt(22, 5000);  // 5 full blocks
  {
    auto client = a.client();
    ASSERT_TRUE(client->submit({.id = "p", .prompt = served, .max_tokens = 2}).has_value());
    service::testing::collect(*client, {"p"});
  }
  const auto other = service::testing::prompt(16, 9000);
  {
    auto client = b.client();
    ASSERT_TRUE(client->submit({.id = "q", .prompt = other, .max_tokens = 2}).has_value());
    service::testing::collect(*client, {"q"});
  }
  const auto reply = index.overlapEventually(
      OverlapQuery{.id = "o", .tokens = served},
      [](const OverlapReply& r) { return r.workers.size() == 2 && r.workers[0].blocks == 5; });
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->id, "o");
  EXPECT_EQ(reply->num_blocks, 5u);
  ASSERT_EQ(reply->workers.size(), 2u);
  EXPECT_EQ(reply->workers[0].worker_id, 7u);
  EXPECT_EQ(reply->workers[0].blocks, 5u);
  EXPECT_EQ(reply->workers[1].worker_id, 8u);
  EXPECT_EQ(reply->workers[1].blocks, 0u);

  // A shared 3-block prefix then a different tail: overlap 3 on worker 7.
  std::vector<std::uint32_t> partial(served.begin(), served.begin() + 12);
  partial.push_back(1);
  partial.push_back(2);
  partial.push_back(3);
  partial.push_back(4);
  auto r = index.ask(OverlapQuery{.tokens = partial});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<OverlapReply>(*r).workers.at(0).blocks, 3u);

  // By hashes (same seeds as the engine): worker 8's prompt.
  const auto hashes = engine::sequenceHashes(other, 4, engine::HashSeeds{});
  const auto by_hash = index.overlapEventually(
      OverlapQuery{.block_hashes = hashes},
      [](const OverlapReply& o) { return o.workers.size() == 2 && o.workers[1].blocks == 4; });
  ASSERT_TRUE(by_hash.has_value());
  EXPECT_EQ(by_hash->num_blocks, 4u);
  EXPECT_EQ(by_hash->workers.at(0).blocks, 0u);
  EXPECT_EQ(by_hash->workers.at(1).blocks, 4u);

  // Other seeds give other hashes: nothing matches.
  r = index.ask(OverlapQuery{.tokens = served, .hash_seed = 1});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<OverlapReply>(*r).workers.at(0).blocks, 0u);
  EXPECT_FALSE(std::get<OverlapReply>(*r).workers.at(0).ranks.at(0).cached.has_value());

  // with_cached: every rank entry also says how many blocks the index holds for it (the served
  // prompts' full blocks at least), whatever the query's overlap.
  r = index.ask(OverlapQuery{.tokens = partial, .hash_seed = 1, .with_cached = true});
  ASSERT_TRUE(r.has_value());
  const OverlapReply& cached = std::get<OverlapReply>(*r);
  ASSERT_EQ(cached.workers.size(), 2u);
  EXPECT_EQ(cached.workers[0].blocks, 0u);
  EXPECT_GE(cached.workers[0].ranks.at(0).cached.value_or(0), 5u);
  EXPECT_GE(cached.workers[1].ranks.at(0).cached.value_or(0), 4u);
}

std::vector<std::byte> raw(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::vector<std::byte> hexBytes(std::string_view hex) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

TEST(IndexLive, MalformedQueriesGetErrorRepliesAndTheServiceLivesOn) {
  LiveService svc(eventsConfig(ReplayLayout::R1, 64, 10000));
  RunningIndex index(indexConfig({endpointOf(svc, 7)}));
  const std::vector<std::pair<std::string, std::vector<std::byte>>> cases = {
      {"not msgpack", raw("\xc1\xc1\xc1")},
      {"empty", {}},
      {"array", hexBytes("93010203")},
      {"no type", hexBytes("81a26964a178")},               // {"id": "x"}
      {"unknown type", hexBytes("81a474797065a3666f6f")},  // {"type": "foo"}
      {"type not str", hexBytes("81a47479706501")},        // {"type": 1}
      {"overlap without input", hexBytes("81a474797065a76f7665726c6170")},
      // {"type": "overlap", "tokens": ["a"]}
      {"token not int", hexBytes("82a474797065a76f7665726c6170a6746f6b656e7391a161")},
      // {"type": "overlap", "tokens": [1], "block_size": 0}
      {"block_size 0",
       hexBytes("83a474797065a76f7665726c6170a6746f6b656e739101aa626c6f636b5f73697a6500")},
      // {"type": "overlap", "tokens": [1], "block_hashes": [1]}
      {"both inputs",
       hexBytes("83a474797065a76f7665726c6170a6746f6b656e739101ac626c6f636b5f68617368657391"
                "01")},
      {"trailing bytes", hexBytes("81a474797065a57374617473c0")},
      {"truncated", hexBytes("82a474797065a7")},
  };
  for (const auto& [name, payload] : cases) {
    auto r = index.askRaw({payload});
    ASSERT_TRUE(r.has_value()) << name << ": " << r.error().message;
    const auto* e = std::get_if<QueryError>(&*r);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_FALSE(e->message.empty()) << name;
  }
  // The id of a bad request is echoed when readable.
  // {"type": "overlap", "id": "z"} (no input)
  auto r = index.askRaw({hexBytes("82a474797065a76f7665726c6170a26964a17a")});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<QueryError>(*r).id, "z");
  // Two payload frames after the routing id: an error too.
  r = index.askRaw({raw("a"), raw("b")});
  ASSERT_TRUE(r.has_value());
  EXPECT_NE(std::get_if<QueryError>(&*r), nullptr);
  // Still serving.
  r = index.ask(StatsQuery{"s"});
  ASSERT_TRUE(r.has_value());
  const auto& stats = std::get<StatsReply>(*r);
  EXPECT_EQ(stats.id, "s");
  EXPECT_GE(index.stats().query_errors, cases.size() + 2);
}

TEST(IndexLive, ReplyToAClientThatLeftIsCountedNotSent) {
  zmq::context_t context(1);
  zmq::socket_t events(context, zmq::socket_type::pub);
  zmq::socket_t silent(context, zmq::socket_type::router);  // never answers kv_snapshot
  for (zmq::socket_t* s : {&events, &silent}) {
    s->set(zmq::sockopt::linger, 0);
    s->bind("tcp://127.0.0.1:*");
  }
  IndexServiceConfig config = indexConfig({{.worker_id = 7,
                                            .dp_rank = 0,
                                            .events = events.get(zmq::sockopt::last_endpoint),
                                            .replay = "",
                                            .snapshot = silent.get(zmq::sockopt::last_endpoint),
                                            .topic = ""}});
  config.snapshot_timeout = 200ms;  // the verify reply comes after this
  RunningIndex index(std::move(config));
  {
    zmq::socket_t client(context, zmq::socket_type::dealer);
    client.set(zmq::sockopt::linger, 0);
    client.connect(index.queryEndpoint());
    const auto request = encodeQueryRequest(VerifyQuery{"gone"});
    client.send(zmq::buffer(request.data(), request.size()), zmq::send_flags::none);
    waitUntil([&] { return index.stats().queries >= 1; });
    ASSERT_EQ(index.stats().queries, 1u);
  }  // the client leaves before the verify can answer
  waitUntil([&] { return index.stats().replies_unsent >= 1; });
  const IndexStats s = index.stats();
  EXPECT_EQ(s.replies_unsent, 1u);
  EXPECT_EQ(s.verify_runs, 1u);
  EXPECT_EQ(s.verify_differences, 1u);  // the snapshot timed out
  // Still serving other clients.
  auto r = index.ask(StatsQuery{"s"});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<StatsReply>(*r).id, "s");
}

TEST(IndexCli, VerifyOnceReportsNoDifferenceAfterLoad) {
  LiveService svc(eventsConfig(ReplayLayout::R2, 24, 10000));
  runLoad(svc, 60, 4);
  const WorkerEndpoint w = endpointOf(svc, 3);
  std::string spec = std::string("3=").append(w.events).append(",replay=").append(w.replay);
  spec.append(",snapshot=").append(w.snapshot);
  std::ostringstream out, err;
  const int code =
      tools::runCli({"mocker", "index", "--worker", spec, "--verify", "--once", "--query-endpoint",
                     "none", "--stats-interval-s", "0", "--linger-ms", "0"},
                    out, err);
  EXPECT_EQ(code, 0) << out.str() << err.str();
  EXPECT_THAT(out.str(), ::testing::HasSubstr("verify: OK"));
  EXPECT_THAT(out.str(), ::testing::HasSubstr("worker 3 rank 0"));
}

TEST(IndexCli, VerifyOnceWithoutSnapshotEndpointFails) {
  LiveService svc(eventsConfig(ReplayLayout::R1, 24, 10000));
  const WorkerEndpoint w = endpointOf(svc, 3);
  const std::string spec = std::string("3=").append(w.events).append(",replay=").append(w.replay);
  std::ostringstream out, err;
  const int code = tools::runCli({"mocker", "index", "--worker", spec, "--verify", "--once",
                                  "--query-endpoint", "none", "--stats-interval-s", "0"},
                                 out, err);
  EXPECT_EQ(code, 1) << out.str() << err.str();
  EXPECT_THAT(out.str(), ::testing::HasSubstr("no snapshot endpoint"));
}

TEST(IndexCli, DefaultQueryBlockSizeIsTheServiceDefault) {
  // Token queries hash with --block-size; its default must be what a default `mocker serve`
  // uses (the vllm engine's), or every token overlap against such a worker comes back 0.
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli({"mocker", "index", "--help"}, out, err), 0);
  const std::string expected =
      "(default: " + std::to_string(engine::effectiveBlockSize(service::ServiceConfig{}.engine)) +
      ")\n";
  const std::string help = out.str();
  const auto line = help.find("--block-size");
  ASSERT_NE(line, std::string::npos) << help;
  EXPECT_EQ(help.substr(help.find("(default: ", line), expected.size()), expected) << help;
}

TEST(IndexCli, UsageErrors) {
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli({"mocker", "index", "--worker", "x=tcp://127.0.0.1:1"}, out, err), 2);
  EXPECT_THAT(err.str(), ::testing::HasSubstr("ID"));
  EXPECT_EQ(
      tools::runCli({"mocker", "index", "--worker", "1=tcp://127.0.0.1:1", "--once"}, out, err), 2);
  EXPECT_EQ(tools::runCli({"mocker", "index"}, out, err), 2);
}

// CURVE end to end: a CURVE worker (curve_publishers too) and an index that reaches it with its
// own key pair (SUB, replay and snapshot DEALERs) and serves queries over CURVE to allow-listed
// keys only.
TEST(IndexCurveTest, IndexFollowsACurveWorkerAndAnswersOnlyAllowedQueriers) {
  struct Keys {
    std::string pub, sec;
  };
  const auto keys = [] {
    std::array<char, 41> p{};
    std::array<char, 41> k{};
    EXPECT_EQ(zmq_curve_keypair(p.data(), k.data()), 0);
    return Keys{p.data(), k.data()};
  };
  const Keys worker = keys(), idx = keys(), querier = keys(), stranger = keys();
  ServiceConfig wc = eventsConfig(ReplayLayout::R1, 64, 10000);
  wc.security.curve = true;
  wc.security.curve_publishers = true;
  wc.security.server_secret_key = worker.sec;
  wc.security.client_public_keys = {idx.pub, querier.pub};
  LiveService svc(wc);

  // The load runs before the index starts: what it indexes comes through a CURVE replay.
  auto client = svc.client({.curve_server_key = worker.pub,
                            .curve_public_key = querier.pub,
                            .curve_secret_key = querier.sec});
  std::vector<std::string> ids;
  for (std::uint32_t i = 0; i < 6; ++i) {
    ids.push_back("c" + std::to_string(i));
    ASSERT_TRUE(client->submit(
        {.id = ids.back(), .prompt = service::testing::prompt(12, 100 * i), .max_tokens = 2}));
  }
  service::testing::collect(*client, ids);

  IndexServiceConfig ic = indexConfig({endpointOf(svc, 7)});
  ic.query_endpoint = "tcp://127.0.0.1:*";
  ic.linger_ms = 0;
  ic.query_curve_secret_key = idx.sec;
  ic.query_curve_clients = {querier.pub};
  ic.worker_curve_server_key = worker.pub;
  ic.worker_curve_secret_key = idx.sec;
  ic.worker_curve_publishers = true;
  auto created = IndexService::create(ic);
  ASSERT_TRUE(created) << created.error().message;
  std::unique_ptr<IndexService> index = std::move(*created);
  Status status;
  std::thread runner([&] { status = index->run(); });

  zmq::context_t ctx(1);
  const auto dealer = [&](const Keys& who) {
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    d.set(zmq::sockopt::curve_serverkey, idx.pub);
    d.set(zmq::sockopt::curve_publickey, who.pub);
    d.set(zmq::sockopt::curve_secretkey, who.sec);
    d.connect(index->queryEndpoint());
    return d;
  };
  const auto askVerify = [&](zmq::socket_t& d) -> std::optional<QueryReply> {
    const auto req = encodeQueryRequest(VerifyQuery{"v"});
    if (!d.send(zmq::buffer(req.data(), req.size()), zmq::send_flags::dontwait)) return {};
    zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 2000ms);
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
    zmq::message_t m;
    (void)d.recv(m);
    auto r = decodeQueryReply({static_cast<const std::byte*>(m.data()), m.size()});
    return r ? std::optional<QueryReply>(*r) : std::nullopt;
  };
  zmq::socket_t allowed = dealer(querier);
  bool ok = false;
  std::string last;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!ok && std::chrono::steady_clock::now() < deadline) {
    if (auto r = askVerify(allowed)) {
      if (const auto* v = std::get_if<VerifyReply>(&*r)) {
        ok = v->ok && !v->sources.empty() && v->sources[0].worker_blocks > 0;
        last = describe(*v);
      }
    }
  }
  EXPECT_TRUE(ok) << last;  // the replay and the snapshot came through CURVE
  EXPECT_GT(index->stats().batches_applied, 0u);

  zmq::socket_t refused = dealer(stranger);
  EXPECT_FALSE(askVerify(refused).has_value());  // handshake refused: no reply

  index->requestStop();
  runner.join();
  EXPECT_TRUE(status.has_value());
}

}  // namespace
}  // namespace mocker::index
