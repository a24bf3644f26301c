#include "publishers/zmq_sinks.h"

#include <zmq.hpp>

#include <vector>

#include "publishers/kv_event_publisher.h"

namespace mocker::publishers {
namespace {

// Most frames a replay request may have; a longer message is drained and ignored.
constexpr std::size_t kMaxRequestFrames = 8;

Error zmqError(const std::string& what, const std::string& endpoint, const zmq::error_t& e) {
  return Error{ErrorCode::IoError, what + " '" + endpoint + "': " + e.what()};
}

}  // namespace

ZmqPubSink::ZmqPubSink(std::unique_ptr<zmq::socket_t> socket, std::string endpoint)
    : socket_(std::move(socket)), endpoint_(std::move(endpoint)) {}

ZmqPubSink::~ZmqPubSink() = default;

Result<std::unique_ptr<ZmqPubSink>> ZmqPubSink::create(zmq::context_t& context,
                                                       const ZmqPubConfig& config) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pub);
    socket->set(zmq::sockopt::sndhwm, config.sndhwm);
    socket->set(zmq::sockopt::linger, config.linger_ms);
    if (config.configure) config.configure(*socket);
    if (config.connect) {
      socket->connect(config.endpoint);
    } else {
      socket->bind(config.endpoint);
    }
    std::string endpoint =
        config.connect ? config.endpoint : socket->get(zmq::sockopt::last_endpoint);
    return std::unique_ptr<ZmqPubSink>(new ZmqPubSink(std::move(socket), std::move(endpoint)));
  } catch (const zmq::error_t& e) {
    return zmqError(config.connect ? "cannot connect PUB to" : "cannot bind PUB to",
                    config.endpoint, e);
  }
}

SendResult ZmqPubSink::send(std::span<const Frame> frames) {
  try {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const bool more = i + 1 < frames.size();
      const auto flags =
          more ? zmq::send_flags::sndmore | zmq::send_flags::dontwait : zmq::send_flags::dontwait;
      const auto sent = socket_->send(zmq::const_buffer(frames[i].data(), frames[i].size()), flags);
      // Parts of a multipart message are queued atomically: only the first can fail.
      if (!sent.has_value()) return SendResult::Dropped;
    }
    return SendResult::Sent;
  } catch (const zmq::error_t&) {
    return SendResult::Dropped;
  }
}

ZmqReplayServer::ZmqReplayServer(std::unique_ptr<zmq::socket_t> socket, std::string endpoint,
                                 KvEventPublisher& publisher)
    : socket_(std::move(socket)), endpoint_(std::move(endpoint)), publisher_(&publisher) {}

ZmqReplayServer::~ZmqReplayServer() = default;

Result<std::unique_ptr<ZmqReplayServer>> ZmqReplayServer::create(zmq::context_t& context,
                                                                 const ZmqReplayConfig& config,
                                                                 KvEventPublisher& publisher) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    socket->set(zmq::sockopt::sndhwm, config.sndhwm);
    socket->set(zmq::sockopt::linger, config.linger_ms);
    socket->set(zmq::sockopt::maxmsgsize, config.max_request_bytes);
    if (config.configure) config.configure(*socket);
    socket->bind(config.endpoint);
    std::string endpoint = socket->get(zmq::sockopt::last_endpoint);
    return std::unique_ptr<ZmqReplayServer>(
        new ZmqReplayServer(std::move(socket), std::move(endpoint), publisher));
  } catch (const zmq::error_t& e) {
    return zmqError("cannot bind replay ROUTER to", config.endpoint, e);
  }
}

void* ZmqReplayServer::pollHandle() const { return socket_->handle(); }

std::size_t ZmqReplayServer::serviceReadable() {
  std::size_t num_read = 0;
  try {
    for (;;) {
      std::vector<zmq::message_t> parts;
      zmq::message_t part;
      if (!socket_->recv(part, zmq::recv_flags::dontwait)) break;
      bool more = part.more();
      parts.push_back(std::move(part));
      while (more) {  // the rest of a multipart message is already here
        zmq::message_t next;
        if (!socket_->recv(next, zmq::recv_flags::dontwait)) break;
        more = next.more();
        if (parts.size() < kMaxRequestFrames + 1) parts.push_back(std::move(next));
      }
      ++num_read;
      std::vector<Frame> frames;
      frames.reserve(parts.size());
      for (const zmq::message_t& p : parts) {
        frames.emplace_back(static_cast<const std::byte*>(p.data()), p.size());
      }
      for (const Message& reply : publisher_->handleReplayRequest(frames)) {
        for (std::size_t i = 0; i < reply.size(); ++i) {
          const bool last = i + 1 == reply.size();
          const auto flags = last ? zmq::send_flags::dontwait
                                  : zmq::send_flags::sndmore | zmq::send_flags::dontwait;
          if (!socket_->send(zmq::const_buffer(reply[i].data(), reply[i].size()), flags)) {
            ++num_replies_dropped_;
            break;
          }
        }
      }
    }
  } catch (const zmq::error_t&) {
    // ETERM at shutdown, or an unroutable peer: nothing to do for a replay server.
  }
  return num_read;
}

}  // namespace mocker::publishers
