// The live harness of the `mocker index` tests: a worker config with KV events and replay, an
// IndexService on a thread with a DEALER to its query socket, and waits that poll real sockets
// with a deadline (tests/tools/index_service_test.cpp, index_tiers_live_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/service/live_service.h"
#include "tools/index/index_service.h"

namespace mocker::index::testing {

using namespace std::chrono_literals;
using service::testing::LiveService;

inline service::ServiceConfig eventsConfig(publishers::ReplayLayout layout, std::uint32_t blocks,
                                           std::uint32_t ring) {
  service::ServiceConfig c = service::testing::testConfig();
  c.kv_events.enabled = true;
  c.kv_events.replay_enabled = true;
  c.kv_events.replay_layout = layout;
  c.kv_events.buffer_steps = ring;
  c.engine.num_gpu_blocks = blocks;
  c.engine.block_size = 4;
  return c;
}

inline WorkerEndpoint endpointOf(const LiveService& svc, std::uint64_t worker_id) {
  return {.worker_id = worker_id,
          .dp_rank = std::nullopt,
          .events = svc.endpoints().kv_events.at(0),
          .replay = svc.endpoints().kv_replay.at(0),
          .snapshot = svc.endpoints().submit,
          .topic = ""};
}

/// Runs an IndexService on a thread.
class RunningIndex {
 public:
  explicit RunningIndex(IndexServiceConfig config) {
    config.query_endpoint = "tcp://127.0.0.1:*";
    config.linger_ms = 0;
    auto s = IndexService::create(std::move(config));
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
    if (!s) return;
    service_ = std::move(*s);
    thread_ = std::thread([this] { status_ = service_->run(); });
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(service_->queryEndpoint());
  }
  ~RunningIndex() {
    if (thread_.joinable()) {
      service_->requestStop();
      thread_.join();
      EXPECT_TRUE(status_.has_value());
    }
  }
  IndexStats stats() const { return service_->stats(); }
  const std::string& queryEndpoint() const { return service_->queryEndpoint(); }

  /// Sends raw frames, returns the decoded reply (or an error on timeout / undecodable).
  Result<QueryReply> askRaw(const std::vector<std::vector<std::byte>>& frames,
                            std::chrono::milliseconds timeout = 20s) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i].data(), frames[i].size()),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::poll(&item, 1, 50ms);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> parts;
      (void)zmq::recv_multipart(socket_, std::back_inserter(parts));
      const auto& p = parts.back();
      return decodeQueryReply({static_cast<const std::byte*>(p.data()), p.size()});
    }
    return Error{ErrorCode::IoError, "no reply before the deadline"};
  }
  Result<QueryReply> ask(const QueryRequest& request) {
    return askRaw({encodeQueryRequest(request)});
  }

  /// Verify until it reports no difference or the deadline passes; returns the last reply.
  VerifyReply verifyEventually(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    VerifyReply last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = ask(VerifyQuery{"v"});
      if (!r) {
        ADD_FAILURE() << r.error().message;
        return last;
      }
      last = std::get<VerifyReply>(*r);
      if (last.ok) return last;
    }
    return last;
  }

  /// Polls overlap queries until `pred(reply)` or the deadline.
  template <typename Pred>
  std::optional<OverlapReply> overlapEventually(const OverlapQuery& q, Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    std::optional<OverlapReply> last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = ask(q);
      if (!r) return last;
      last = std::get<OverlapReply>(*r);
      if (pred(*last)) return last;
    }
    return last;
  }

 private:
  std::unique_ptr<IndexService> service_;
  std::thread thread_;
  Status status_;
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::dealer};
};

/// Submits small requests until the index has read a live batch from its SUB (the ZeroMQ
/// subscription is in place), so that later batches travel the live path.
inline void waitLive(const LiveService& svc, const RunningIndex& index) {
  auto client = svc.client();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  // Counted from now, so that with several workers each call proves its own SUB is connected.
  const std::uint64_t before = index.stats().live_messages;
  std::uint32_t i = 0;
  while (index.stats().live_messages == before && std::chrono::steady_clock::now() < deadline) {
    std::string id = std::to_string(i);
    id.insert(0, "warm");
    ASSERT_TRUE(client
                    ->submit({.id = id,
                              .prompt = service::testing::prompt(8, 77000 + 10 * i++),
                              .max_tokens = 1})
                    .has_value());
    service::testing::collect(*client, {id});
  }
  ASSERT_GT(index.stats().live_messages, before) << "the SUB never received a live batch";
}

/// Polls `pred` until it holds or 20 s pass (the caller's assertions then report the failure).
template <typename Pred>
void waitUntil(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!pred() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
}

inline IndexServiceConfig indexConfig(std::vector<WorkerEndpoint> workers) {
  IndexServiceConfig c;
  c.workers = std::move(workers);
  c.block_size = 4;
  c.probe_interval = 20ms;
  c.replay_timeout = 2000ms;
  return c;
}

}  // namespace mocker::index::testing
