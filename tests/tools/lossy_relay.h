// LossyRelay: a lossy network hop for `mocker index` tests. A SUB on a worker's KV-event PUB
// and a PUB bound on an ephemeral loopback port, with a thread that forwards every message
// [topic, seq, payload] unchanged except the ones the drop predicate picks (by sequence
// number). Pointing the index at endpoint() instead of the worker's PUB makes real gaps on the
// live stream, while the worker's replay ROUTER and kv_snapshot still serve the truth.
//
// Both sockets are created and used by the relay thread only; numDropped()/numForwarded() may
// be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "protocol/framing.h"

namespace mocker::index::testing {

class LossyRelay {
 public:
  /// `drop(seq)` is called on the relay thread for every well-formed message, in order.
  LossyRelay(std::string upstream, std::function<bool(std::uint64_t seq)> drop)
      : upstream_(std::move(upstream)), drop_(std::move(drop)) {
    std::promise<std::string> bound;
    auto endpoint = bound.get_future();
    thread_ = std::thread([this, &bound] { run(bound); });
    endpoint_ = endpoint.get();
  }
  ~LossyRelay() {
    stop_ = true;
    thread_.join();
  }
  LossyRelay(const LossyRelay&) = delete;
  LossyRelay& operator=(const LossyRelay&) = delete;

  /// The relay's PUB (tcp://127.0.0.1:PORT): subscribe here instead of the worker's PUB.
  const std::string& endpoint() const { return endpoint_; }
  std::uint64_t numDropped() const { return dropped_.load(); }
  std::uint64_t numForwarded() const { return forwarded_.load(); }

 private:
  void run(std::promise<std::string>& bound) {
    zmq::socket_t sub(context_, zmq::socket_type::sub);
    zmq::socket_t pub(context_, zmq::socket_type::pub);
    try {
      for (zmq::socket_t* s : {&sub, &pub}) s->set(zmq::sockopt::linger, 0);
      sub.set(zmq::sockopt::rcvhwm, 0);  // the relay itself must lose nothing
      pub.set(zmq::sockopt::sndhwm, 0);
      sub.set(zmq::sockopt::subscribe, "");
      sub.connect(upstream_);
      pub.bind("tcp://127.0.0.1:*");
    } catch (const zmq::error_t&) {
      bound.set_exception(std::current_exception());
      return;
    }
    bound.set_value(pub.get(zmq::sockopt::last_endpoint));
    std::vector<zmq::message_t> parts;
    while (!stop_) {
      zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      parts.clear();
      if (!zmq::recv_multipart(sub, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
        continue;
      }
      if (parts.size() == 3) {
        const auto seq = protocol::decodeSeqNo(
            {static_cast<const std::byte*>(parts[1].data()), parts[1].size()});
        if (seq && drop_(*seq)) {
          ++dropped_;
          continue;
        }
      }
      zmq::send_multipart(pub, parts);
      ++forwarded_;
    }
  }

  std::string upstream_;
  std::function<bool(std::uint64_t)> drop_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> forwarded_{0};
  zmq::context_t context_{1};
  std::thread thread_;
};

}  // namespace mocker::index::testing
