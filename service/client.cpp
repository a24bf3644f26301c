#include "service/client.h"

#include <cerrno>
#include <random>
#include <zmq.hpp>

namespace mocker::service {

struct Client::Impl {
  zmq::context_t context{1};
  zmq::socket_t submit{context, zmq::socket_type::dealer};
  zmq::socket_t cancel{context, zmq::socket_type::dealer};
  std::string routing_id;
  zmq::send_flags send_flags = zmq::send_flags::none;
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::connect(ClientOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->routing_id = options.routing_id;
  if (options.nonblocking_send) impl->send_flags = zmq::send_flags::dontwait;
  if (impl->routing_id.empty()) {
    std::random_device rd;
    static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    for (int i = 0; i < 16; ++i) impl->routing_id += kAlphabet[rd() % 36];
  }
  try {
    for (zmq::socket_t* s : {&impl->submit, &impl->cancel}) {
      s->set(zmq::sockopt::routing_id, impl->routing_id);
      s->set(zmq::sockopt::linger, options.linger_ms);
    }
    impl->submit.set(zmq::sockopt::rcvhwm, options.rcvhwm);
    impl->submit.set(zmq::sockopt::sndhwm, options.sndhwm);
    impl->submit.set(zmq::sockopt::rcvbuf, options.rcvbuf);
    impl->submit.connect(options.submit_endpoint);
    impl->cancel.connect(options.cancel_endpoint);
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("client connect: ") + e.what()};
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const std::string& Client::routingId() const { return impl_->routing_id; }

Status Client::sendRaw(std::span<const std::byte> payload) {
  try {
    if (!impl_->submit.send(zmq::buffer(payload.data(), payload.size()), impl_->send_flags)) {
      return Error{ErrorCode::IoError, "send: would block (high-water mark reached)"};
    }
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("send: ") + e.what()};
  }
  return {};
}

Status Client::send(const protocol::ClientMessage& message) {
  return sendRaw(protocol::encodeClientMessage(message));
}

Status Client::cancel(const std::string& id, std::optional<std::string> client) {
  const auto bytes = protocol::encodeClientMessage(protocol::CancelRequest{id, std::move(client)});
  try {
    if (!impl_->cancel.send(zmq::buffer(bytes.data(), bytes.size()), impl_->send_flags)) {
      return Error{ErrorCode::IoError, "send cancel: would block (high-water mark reached)"};
    }
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("send cancel: ") + e.what()};
  }
  return {};
}

Result<std::optional<protocol::ClientMessage>> Client::receive(std::chrono::milliseconds timeout) {
  const auto decode =
      [](const zmq::message_t& msg) -> Result<std::optional<protocol::ClientMessage>> {
    auto decoded =
        protocol::decodeClientMessage({static_cast<const std::byte*>(msg.data()), msg.size()});
    if (!decoded) return decoded.error();
    return std::optional<protocol::ClientMessage>(std::move(*decoded));
  };
  try {
    // A message already queued (the common case while outputs stream) needs no poll call;
    // the cancel socket goes first.
    zmq::message_t msg;
    for (zmq::socket_t* s : {&impl_->cancel, &impl_->submit}) {
      if (s->recv(msg, zmq::recv_flags::dontwait)) return decode(msg);
    }
    zmq::pollitem_t items[] = {{impl_->cancel.handle(), 0, ZMQ_POLLIN, 0},
                               {impl_->submit.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, timeout);
    for (int i = 0; i < 2; ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      zmq::socket_t& s = i == 0 ? impl_->cancel : impl_->submit;
      if (s.recv(msg, zmq::recv_flags::dontwait)) return decode(msg);
    }
  } catch (const zmq::error_t& e) {
    // A signal (e.g. Ctrl-C handled by the caller) interrupts poll: report "nothing yet".
    if (e.num() == EINTR) return std::optional<protocol::ClientMessage>();
    return Error{ErrorCode::IoError, std::string("receive: ") + e.what()};
  }
  return std::optional<protocol::ClientMessage>();
}

Result<std::vector<std::size_t>> Client::waitReadable(std::span<Client* const> clients,
                                                      std::chrono::milliseconds timeout) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(clients.size() * 2);
  for (Client* c : clients) {
    items.push_back({c->impl_->cancel.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({c->impl_->submit.handle(), 0, ZMQ_POLLIN, 0});
  }
  std::vector<std::size_t> ready;
  try {
    zmq::poll(items.data(), items.size(), timeout);
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
  }
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if ((items[2 * i].revents | items[2 * i + 1].revents) & ZMQ_POLLIN) ready.push_back(i);
  }
  return ready;
}

}  // namespace mocker::service
