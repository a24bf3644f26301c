// The ZAP handler thread (contract in zap_handler.h).
#include "net/zap_handler.h"

#include <array>
#include <future>
#include <vector>

#include "net/zmq_io.h"

namespace mocker::net {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string z85(const zmq::message_t& key) {
  std::array<char, 41> text{};
  if (key.size() != 32 ||
      zmq_z85_encode(text.data(), static_cast<const std::uint8_t*>(key.data()), 32) == nullptr) {
    return {};
  }
  return std::string(text.data());
}

}  // namespace

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(zmq::context_t& context, std::string domain,
                                                      std::set<std::string> allowed_clients,
                                                      LogSink log) {
  std::map<std::string, std::set<std::string>> allowed;
  allowed.emplace(std::move(domain), std::move(allowed_clients));
  return start(context, std::move(allowed), std::move(log));
}

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(
    zmq::context_t& context, std::map<std::string, std::set<std::string>> allowed_by_domain,
    LogSink log) {
  std::unique_ptr<ZapHandler> h(new ZapHandler(std::move(allowed_by_domain), std::move(log)));
  if (!h->stop_.valid()) return Error{ErrorCode::IoError, "ZAP handler: eventfd failed"};
  std::promise<Status> bound;
  auto bound_result = bound.get_future();
  ZapHandler* self = h.get();
  h->thread_ = std::thread([self, &context, &bound] {
    // The socket lives and dies on this thread.
    zmq::socket_t socket;
    try {
      socket = zmq::socket_t(context, zmq::socket_type::rep);
      socket.set(zmq::sockopt::linger, 0);
      socket.bind(kZapEndpoint);
    } catch (const zmq::error_t& e) {
      bound.set_value(Error{ErrorCode::IoError, std::string("ZAP handler: cannot bind ") +
                                                    kZapEndpoint + ": " + e.what()});
      return;
    }
    bound.set_value(Status{});
    self->serve(socket);
  });
  Status st = bound_result.get();
  if (!st) {
    h->thread_.join();
    return st.error();
  }
  return h;
}

ZapHandler::~ZapHandler() {
  if (thread_.joinable()) {
    stop_.notify();
    thread_.join();
  }
}

void ZapHandler::serve(zmq::socket_t& socket) {
  std::vector<zmq::message_t> req;
  std::array<zmq::pollitem_t, 2> items{};
  while (true) {
    items[0] = {socket.handle(), 0, ZMQ_POLLIN, 0};
    items[1] = {nullptr, stop_.fd(), ZMQ_POLLIN, 0};
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      report(LogLevel::Error, std::string("ZAP handler: poll failed: ") + e.what());
      return;
    }
    if (items[1].revents & ZMQ_POLLIN) return;
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    if (tryRecvMultipart(socket, req) != RecvOutcome::Received) continue;
    // [version, request id, domain, address, identity, mechanism, credentials...]
    std::string status = "400";
    std::string text = "malformed ZAP request";
    std::string user_id;
    const auto frame = [&](std::size_t i) {
      return i < req.size() ? req[i].to_string() : std::string();
    };
    if (req.size() >= 6 && frame(0) == "1.0") {
      const std::string address = frame(3);
      const auto domain = allowed_.find(frame(2));
      if (domain == allowed_.end()) {
        text = "unknown ZAP domain";
      } else if (frame(5) != "CURVE" || req.size() != 7) {
        text = "CURVE required";
      } else if (const std::string key = z85(req[6]); domain->second.contains(key)) {
        status = "200";
        text = "OK";
        user_id = key;
      } else {
        text = "client key not in the allow-list";
        report(LogLevel::Warn, "CURVE handshake from " + address + " refused: client key " + key +
                                   " is not in the allow-list of " + frame(2));
      }
    }
    if (status != "200") refused_.fetch_add(1, std::memory_order_relaxed);
    const std::array<zmq::const_buffer, 6> reply = {
        zmq::buffer(std::string_view("1.0")),
        zmq::buffer(req.size() > 1 ? req[1].data() : nullptr, req.size() > 1 ? req[1].size() : 0),
        zmq::buffer(status),
        zmq::buffer(text),
        zmq::buffer(user_id),
        zmq::buffer(std::string_view())};
    std::string error;
    if (trySendMultipart(socket, reply, &error) != SendOutcome::Sent) {
      report(LogLevel::Error, "ZAP handler: reply not sent: " + error);
    }
  }
}

}  // namespace mocker::net
