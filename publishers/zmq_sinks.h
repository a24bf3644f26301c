// ZeroMQ adapters of the publishers: ZmqPubSink (a FrameSink over a PUB socket, for KV events
// and forward-pass metrics) and ZmqReplayServer (the KV-event replay ROUTER, wire.md §4).
//
// Endpoints: both sockets BIND unless `connect = true` is configured (issue #5: we do not copy
// vLLM's guess-from-the-address rule; set connect for consumers that bind their SUB, such as
// llm-d's older indexer). The caller applies the DP-rank offset (publishers/endpoint.h) first.
// The replay ROUTER always binds.
//
// Each object owns its socket and must be used by one thread only (the one that created it);
// neither copyable nor movable. Sends never block. The zmq::context_t must outlive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/result.h"
#include "publishers/frame_sink.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace mocker::publishers {

class KvEventPublisher;

struct ZmqPubConfig {
  std::string endpoint;  ///< e.g. "tcp://*:5557", "tcp://127.0.0.1:*", "ipc:///tmp/kv"
  bool connect = false;  ///< connect instead of bind
  int sndhwm = 100'000;  ///< ZMQ_SNDHWM; beyond it PUB drops silently (consumers see a gap)
  int linger_ms = 1000;  ///< ZMQ_LINGER at close
  /// Called on the new socket before bind/connect, e.g. to set CURVE options (may throw
  /// zmq::error_t, reported like a bind error). Empty: nothing.
  std::function<void(zmq::socket_t&)> configure;
};

class ZmqPubSink final : public FrameSink {
 public:
  /// Creates the PUB socket, sets options and binds/connects. Errors name the endpoint.
  static Result<std::unique_ptr<ZmqPubSink>> create(zmq::context_t& context,
                                                    const ZmqPubConfig& config);
  ~ZmqPubSink() override;
  ZmqPubSink(const ZmqPubSink&) = delete;
  ZmqPubSink& operator=(const ZmqPubSink&) = delete;

  /// Non-blocking multipart send. Dropped only if libzmq refuses the first part (EAGAIN or an
  /// error); a PUB at its high-water mark drops silently and reports Sent.
  SendResult send(std::span<const Frame> frames) override;

  /// The resolved endpoint (ZMQ_LAST_ENDPOINT: a wildcard port becomes the real one).
  const std::string& endpoint() const { return endpoint_; }

 private:
  explicit ZmqPubSink(std::unique_ptr<zmq::socket_t> socket, std::string endpoint);
  std::unique_ptr<zmq::socket_t> socket_;
  std::string endpoint_;
};

struct ZmqReplayConfig {
  std::string endpoint;  ///< always bound
  int sndhwm = 100'000;  ///< a client that does not read loses replies beyond this
  int linger_ms = 1000;
  std::int64_t max_request_bytes = 64;  ///< ZMQ_MAXMSGSIZE: larger frames disconnect the peer
  /// Called on the new socket before bind, e.g. to set CURVE options. Empty: nothing.
  std::function<void(zmq::socket_t&)> configure;
};

class ZmqReplayServer {
 public:
  /// Binds the ROUTER. `publisher` must outlive the server.
  static Result<std::unique_ptr<ZmqReplayServer>> create(zmq::context_t& context,
                                                         const ZmqReplayConfig& config,
                                                         KvEventPublisher& publisher);
  ~ZmqReplayServer();
  ZmqReplayServer(const ZmqReplayServer&) = delete;
  ZmqReplayServer& operator=(const ZmqReplayServer&) = delete;

  /// The socket handle for zmq_poll (zmq_pollitem_t::socket), polled for ZMQ_POLLIN.
  void* pollHandle() const;

  /// Reads every pending request without blocking, answers each through the publisher and
  /// sends the replies without blocking. Returns the number of messages read.
  std::size_t serviceReadable();

  const std::string& endpoint() const { return endpoint_; }
  std::uint64_t numRepliesDropped() const { return num_replies_dropped_; }

 private:
  ZmqReplayServer(std::unique_ptr<zmq::socket_t> socket, std::string endpoint,
                  KvEventPublisher& publisher);
  std::unique_ptr<zmq::socket_t> socket_;
  std::string endpoint_;
  KvEventPublisher* publisher_;
  std::uint64_t num_replies_dropped_ = 0;
};

}  // namespace mocker::publishers
