#include "publishers/zmq_sinks.h"

#include <zmq.hpp>

#include <cerrno>
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

std::string openEndpoint(zmq::socket_t& socket, const std::string& endpoint, bool connect) {
  if (connect) {
    socket.connect(endpoint);
    return endpoint;
  }
  socket.bind(endpoint);
  return socket.get(zmq::sockopt::last_endpoint);
}

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
    std::string endpoint = openEndpoint(*socket, config.endpoint, config.connect);
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
  } catch (const zmq::error_t& e) {
    ++num_errors_;
    if (!pending_error_) pending_error_ = "PUB '" + endpoint_ + "': send failed: " + e.what();
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
    socket->set(zmq::sockopt::router_mandatory, 1);  // undeliverable replies are seen, not lost
    socket->set(zmq::sockopt::sndhwm, config.sndhwm);
    socket->set(zmq::sockopt::linger, config.linger_ms);
    socket->set(zmq::sockopt::maxmsgsize, config.max_request_bytes);
    if (config.configure) config.configure(*socket);
    std::string endpoint = openEndpoint(*socket, config.endpoint, config.connect);
    return std::unique_ptr<ZmqReplayServer>(
        new ZmqReplayServer(std::move(socket), std::move(endpoint), publisher));
  } catch (const zmq::error_t& e) {
    return zmqError(
        config.connect ? "cannot connect replay ROUTER to" : "cannot bind replay ROUTER to",
        config.endpoint, e);
  }
}

void* ZmqReplayServer::pollHandle() const { return socket_->handle(); }

ZmqReplayServer::SendOutcome ZmqReplayServer::sendReply(const Message& reply, std::string& error) {
  try {
    for (std::size_t i = 0; i < reply.size(); ++i) {
      const bool last = i + 1 == reply.size();
      auto flags = last ? zmq::send_flags::none : zmq::send_flags::sndmore;
      // Only the routing-id frame can be refused (peer gone, pipe full); ZeroMQ accepts the rest
      // of a message whose first frame it took.
      if (i == 0) flags = flags | zmq::send_flags::dontwait;
      if (!socket_->send(zmq::const_buffer(reply[i].data(), reply[i].size()), flags)) {
        return SendOutcome::WouldBlock;
      }
    }
    return SendOutcome::Sent;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return SendOutcome::Unroutable;
    error = "replay ROUTER '" + endpoint_ + "': send failed: " + e.what();
    return SendOutcome::Failed;
  }
}

ReplayServiceResult ZmqReplayServer::serviceReadable() {
  ReplayServiceResult result;
  std::vector<zmq::message_t> parts;
  for (;;) {
    parts.clear();
    try {
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
    } catch (const zmq::error_t& e) {
      ++num_errors_;
      result.error = "replay ROUTER '" + endpoint_ + "': receive failed: " + e.what();
      return result;
    }
    ++result.num_read;
    std::vector<Frame> frames;
    frames.reserve(parts.size());
    for (const zmq::message_t& p : parts) {
      frames.emplace_back(static_cast<const std::byte*>(p.data()), p.size());
    }
    const std::vector<Message> replies = publisher_->handleReplayRequest(frames);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      std::string error;
      const SendOutcome out = sendReply(replies[i], error);
      if (out == SendOutcome::Sent) {
        ++result.num_replies_sent;
        continue;
      }
      // The rest of this request's replies are dropped with it: no replay with a hole.
      const std::size_t dropped = replies.size() - i;
      result.num_replies_dropped += dropped;
      num_replies_dropped_ += dropped;
      if (out == SendOutcome::Unroutable) num_replies_unroutable_ += dropped;
      if (out == SendOutcome::Failed) {
        ++num_errors_;
        result.error = std::move(error);
        return result;
      }
      break;
    }
  }
  return result;
}

}  // namespace mocker::publishers
