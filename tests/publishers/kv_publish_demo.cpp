// kv_publish_demo: a live KvEventPublisher for the python schema test (kv_events_schema_test.py).
//
//   kv_publish_demo [layout]      layout: p6 | p7 | p8 (default) | p9 | p12 | map | map26
//
// Binds a PUB and a replay ROUTER on ephemeral 127.0.0.1 ports, prints "PUB <endpoint>" and
// "REPLAY <endpoint>", publishes four batches (the docs/wire.md worked examples plus an
// AllBlocksCleared), then serves replay requests. Every "publish" line on stdin publishes one
// more batch (the test repeats it until its SUB has joined); end of stdin exits with status 0.
#include <poll.h>
#include <unistd.h>

#include <zmq.hpp>

#include <cstdio>
#include <string>

#include "publishers/kv_event_publisher.h"
#include "publishers/zmq_sinks.h"

namespace {

using mocker::engine::AllBlocksCleared;
using mocker::engine::BlockRemoved;
using mocker::engine::BlockStored;
using mocker::engine::KvEvent;

constexpr std::uint64_t kS0 = 0xcb38e4d7fb2dca5cull;
constexpr std::uint64_t kS1 = 0x44a2b2379d6d3c3dull;
constexpr std::uint64_t kS2 = 0xaea1e67a6c80cf84ull;

int run(const std::string& layout_name) {
  const auto layout = mocker::protocol::parseKvLayout(layout_name);
  if (!layout) {
    std::fprintf(stderr, "%s\n", layout.error().toString().c_str());
    return 2;
  }
  zmq::context_t ctx;
  auto pub = mocker::publishers::ZmqPubSink::create(ctx, {.endpoint = "tcp://127.0.0.1:*"});
  if (!pub) {
    std::fprintf(stderr, "%s\n", pub.error().toString().c_str());
    return 1;
  }
  auto publisher = mocker::publishers::KvEventPublisher::create(
      {.topic = "kv@127.0.0.1:8000@Qwen/Qwen3-0.6B", .encoding = {.layout = *layout}}, **pub);
  if (!publisher) return 1;
  auto replay = mocker::publishers::ZmqReplayServer::create(ctx, {.endpoint = "tcp://127.0.0.1:*"},
                                                            **publisher);
  if (!replay) {
    std::fprintf(stderr, "%s\n", replay.error().toString().c_str());
    return 1;
  }
  auto& p = **publisher;
  const std::vector<KvEvent> batch0{BlockStored{.block_hashes = {kS0, kS1},
                                                .parent_block_hash = std::nullopt,
                                                .token_ids = {1, 2, 3, 4, 5, 6, 7, 8},
                                                .block_size = 4}};
  const std::vector<KvEvent> batch1{BlockStored{.block_hashes = {kS2},
                                                .parent_block_hash = kS1,
                                                .token_ids = {9, 10, 11, 12},
                                                .block_size = 4}};
  const std::vector<KvEvent> batch2{BlockRemoved{.block_hash = kS2},
                                    BlockRemoved{.block_hash = kS1}};
  const std::vector<KvEvent> batch3{AllBlocksCleared{}};
  p.publishPass(batch0, 1700000000.5);
  p.publishPass(batch1, 1700000000.75);
  p.publishPass(batch2, 1700000001.0);
  p.publishPass(batch3, 1700000001.25);
  std::printf("PUB %s\nREPLAY %s\n", (*pub)->endpoint().c_str(), (*replay)->endpoint().c_str());
  std::fflush(stdout);

  std::string pending;
  std::uint64_t extra = 0;
  for (;;) {
    zmq::pollitem_t items[] = {{(*replay)->pollHandle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, STDIN_FILENO, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(-1));
    if (items[0].revents & ZMQ_POLLIN) (*replay)->serviceReadable();
    if (items[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
      char buf[256];
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
      if (n <= 0) return 0;  // stdin closed: the test is done
      pending.append(buf, static_cast<std::size_t>(n));
      for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
        if (pending.substr(0, nl) == "publish") {
          const std::vector<KvEvent> more{
              BlockStored{.block_hashes = {0x1000000000000000ull + extra},
                          .parent_block_hash = std::nullopt,
                          .token_ids = {7, 7, 7, 7},
                          .block_size = 4}};
          ++extra;
          p.publishPass(more, 1700000002.0);
        }
        pending.erase(0, nl + 1);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? argv[1] : "p8");
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "zmq error: %s\n", e.what());
    return 1;
  }
}
