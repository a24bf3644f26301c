// Client: the C++ client of `mocker serve` (submit and cancel DEALERs) — contract in client.h.
#include "net/client.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <random>
#include <utility>
#include <zmq.hpp>

#include "net/connection_monitor.h"
#include "net/security.h"
#include "net/zmq_io.h"

namespace mocker::net {

struct Client::Impl {
  zmq::context_t context{1};
  zmq::socket_t submit{context, zmq::socket_type::dealer};
  zmq::socket_t cancel{context, zmq::socket_type::dealer};
  std::string routing_id;
  bool has_cancel = true;  ///< false: `cancel` was never connected (no cancel endpoint given)
  bool nonblocking_send = false;
  bool refuse_without_connection = false;
  bool connected = false;                      ///< the monitor's view of the submit connection
  std::vector<ConnectionEvent> events;         ///< read from the monitor, not yet taken
  std::vector<zmq::message_t> parts;           // receive scratch
  std::unique_ptr<ConnectionMonitor> monitor;  // watch_connection only
  /// Per socket ([0] cancel, [1] submit): messages may be queued that its ZMQ_FD will not
  /// announce — it was sent on (a send may take the notification) or not found empty since its
  /// last receive. Cleared only by a receive that finds it empty.
  std::array<bool, 2> may_hold{true, true};

  zmq::socket_t& socket(std::size_t i) { return i == 0 ? cancel : submit; }
  // Reads the monitor's events into `events` and `connected`.
  void readMonitor();
  // Sends one single-frame message; `what` names the message in errors.
  Status sendOn(zmq::socket_t& socket, std::span<const std::byte> payload, const char* what);
  // One non-blocking receive on socket `i`: nullopt when none is queued, else the decoded
  // message or its error; `recv_failed` tells a failed receive from a bad message.
  std::optional<Result<protocol::ClientMessage>> tryReceive(std::size_t i, bool& recv_failed);
};

std::optional<Result<protocol::ClientMessage>> Client::Impl::tryReceive(std::size_t i,
                                                                        bool& recv_failed) {
  std::string error;
  recv_failed = false;
  switch (tryRecvMultipart(socket(i), parts, &error)) {
    case RecvOutcome::Empty:
      may_hold[i] = false;
      return std::nullopt;
    case RecvOutcome::Failed:
      recv_failed = true;
      return Result<protocol::ClientMessage>(Error{ErrorCode::IoError, "receive: " + error});
    case RecvOutcome::Received:
      break;
  }
  may_hold[i] = true;  // stopped before finding it empty
  if (parts.size() != 1) {
    return Result<protocol::ClientMessage>(
        Error{ErrorCode::Corruption,
              "expected a one-frame message (got " + std::to_string(parts.size()) + " frames)"});
  }
  return protocol::decodeClientMessage(
      {static_cast<const std::byte*>(parts[0].data()), parts[0].size()});
}

Status Client::Impl::sendOn(zmq::socket_t& socket, std::span<const std::byte> payload,
                            const char* what) {
  const std::array<zmq::const_buffer, 1> frames{zmq::buffer(payload.data(), payload.size())};
  if (refuse_without_connection && &socket == &submit) {
    readMonitor();
    if (!connected) {
      return Error{ErrorCode::IoError,
                   std::string(what) +
                       ": would block (no connection to the service, or high-water mark reached)"};
    }
  }
  may_hold[&socket == &cancel ? 0 : 1] = true;
  if (nonblocking_send) {
    std::string error;
    switch (trySendMultipart(socket, frames, &error)) {
      case SendOutcome::Sent:
        return {};
      case SendOutcome::WouldBlock:
        return Error{ErrorCode::IoError,
                     std::string(what) + (refuse_without_connection && &socket == &submit
                                              ? ": would block (no connection to the service, "
                                                "or high-water mark reached)"
                                              : ": would block (high-water mark reached)")};
      case SendOutcome::Unroutable:  // ROUTER only; a DEALER never reports it
        return Error{ErrorCode::IoError, std::string(what) + ": unroutable"};
      case SendOutcome::Failed:
        return Error{ErrorCode::IoError, std::string(what) + ": " + error};
    }
  }
  try {
    // Blocks until queued; an empty result could only come from a send timeout (none is set).
    if (!socket.send(frames[0], zmq::send_flags::none)) {
      return Error{ErrorCode::IoError, std::string(what) + ": timed out"};
    }
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string(what) + ": " + e.what()};
  }
  return {};
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::connect(ClientOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->routing_id = options.routing_id;
  impl->nonblocking_send = options.nonblocking_send;
  impl->refuse_without_connection = options.refuse_without_connection;
  if (options.refuse_without_connection && !options.watch_connection) {
    return invalidArgument(
        "client connect: refuse_without_connection needs watch_connection (the connection "
        "monitor says whether the submit connection is up)");
  }
  if (impl->routing_id.empty()) {
    std::random_device rd;
    static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    for (int i = 0; i < 16; ++i) impl->routing_id += kAlphabet[rd() % 36];
  }
  const CurveClientKeys curve{.server_public_key = options.curve_server_key,
                              .public_key = options.curve_public_key,
                              .secret_key = options.curve_secret_key};
  if (auto st = checkCurveClientKeys(curve); !st) return st.error();
  if (options.cancel_endpoint == options.submit_endpoint) {
    return invalidArgument("client connect: the cancel endpoint '" + options.cancel_endpoint +
                           "' is the submit endpoint; both sockets carry one routing id, so the "
                           "service would refuse one of them (give the cancel ROUTER's address, "
                           "or none)");
  }
  impl->has_cancel = !options.cancel_endpoint.empty();
  try {
    for (zmq::socket_t* s : {&impl->submit, &impl->cancel}) {
      makeCurveClient(*s, curve);
      s->set(zmq::sockopt::routing_id, impl->routing_id);
      s->set(zmq::sockopt::linger, options.linger_ms);
    }
    impl->submit.set(zmq::sockopt::rcvhwm, options.rcvhwm);
    impl->submit.set(zmq::sockopt::sndhwm, options.sndhwm);
    impl->submit.set(zmq::sockopt::rcvbuf, options.rcvbuf);
    // The monitor first: attached after connect(), it could miss the first handshake (and a
    // client refusing sends without a connection would then refuse them all).
    if (options.watch_connection) {
      MOCKER_TRY(impl->monitor,
                 ConnectionMonitor::create(impl->context, impl->submit, "client-submit",
                                           ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED));
    }
    impl->submit.connect(options.submit_endpoint);
    if (impl->has_cancel) impl->cancel.connect(options.cancel_endpoint);
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("client connect: ") + e.what()};
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const std::string& Client::routingId() const { return impl_->routing_id; }

Status Client::sendRaw(std::span<const std::byte> payload) {
  return impl_->sendOn(impl_->submit, payload, "send");
}

Status Client::send(const protocol::ClientMessage& message) {
  return sendRaw(protocol::encodeClientMessage(message));
}

Status Client::cancel(const std::string& id, std::optional<std::string> client) {
  if (!impl_->has_cancel) {
    return invalidArgument("cancel '" + id +
                           "': this client was connected without a cancel "
                           "endpoint");
  }
  const auto bytes = protocol::encodeClientMessage(protocol::CancelRequest{id, std::move(client)});
  return impl_->sendOn(impl_->cancel, bytes, "send cancel");
}

Result<std::optional<protocol::ClientMessage>> Client::receive(std::chrono::milliseconds timeout) {
  // A message already queued (the common case while outputs stream) needs no poll call; the
  // cancel socket goes first.
  using Received = Result<std::optional<protocol::ClientMessage>>;
  const auto take = [this](std::size_t i) -> std::optional<Received> {
    bool failed = false;
    auto got = impl_->tryReceive(i, failed);
    if (!got) return std::nullopt;
    if (!*got) return Received(got->error());
    return Received(std::optional<protocol::ClientMessage>(std::move(**got)));
  };
  for (std::size_t i = 0; i < 2; ++i) {
    if (auto got = take(i)) return std::move(*got);
  }
  // Both empty. A non-blocking receive that finds nothing has already processed the socket's
  // pending commands (libzmq), so a zero-timeout poll could not find more: it would only cost
  // its syscalls (a poll and a getpid per socket behind the mailbox check).
  if (timeout == std::chrono::milliseconds(0)) return std::optional<protocol::ClientMessage>();
  zmq::pollitem_t items[] = {{impl_->cancel.handle(), 0, ZMQ_POLLIN, 0},
                             {impl_->submit.handle(), 0, ZMQ_POLLIN, 0}};
  impl_->may_hold = {true, true};  // zmq_poll's event check takes their ZMQ_FD notifications
  try {
    zmq::poll(items, 2, timeout);
  } catch (const zmq::error_t& e) {
    // A signal (e.g. Ctrl-C handled by the caller) interrupts poll: report "nothing yet".
    if (e.num() == EINTR) return std::optional<protocol::ClientMessage>();
    return Error{ErrorCode::IoError, std::string("receive: ") + e.what()};
  }
  for (std::size_t i = 0; i < 2; ++i) {
    if (!(items[i].revents & ZMQ_POLLIN)) continue;
    if (auto got = take(i)) return std::move(*got);
  }
  return std::optional<protocol::ClientMessage>();
}

std::array<int, 2> Client::notifyFds() const {
  return {impl_->cancel.get(zmq::sockopt::fd), impl_->submit.get(zmq::sockopt::fd)};
}

std::size_t Client::drain(std::array<bool, 2> readable,
                          const std::function<void(Result<protocol::ClientMessage>&&)>& sink) {
  std::size_t handed = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    if (!readable[i] && !impl_->may_hold[i]) continue;
    bool failed = false;
    while (auto got = impl_->tryReceive(i, failed)) {
      ++handed;
      sink(std::move(*got));
      if (failed) break;
    }
  }
  return handed;
}

void Client::Impl::readMonitor() {
  if (!monitor) return;
  std::vector<std::pair<std::uint16_t, std::uint32_t>> raw;
  monitor->drainEvents(raw);
  for (const auto& [event, value] : raw) {
    if (event == ZMQ_EVENT_DISCONNECTED) {
      events.push_back(ConnectionEvent::Closed);
      connected = false;
    }
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      events.push_back(ConnectionEvent::Connected);
      connected = true;
    }
  }
}

std::vector<ConnectionEvent> Client::takeConnectionEvents() {
  impl_->readMonitor();
  return std::exchange(impl_->events, {});
}

Result<std::vector<std::size_t>> Client::waitReadable(std::span<Client* const> clients,
                                                      std::chrono::milliseconds timeout,
                                                      int wake_fd) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(clients.size() * 3 + 1);
  std::vector<std::size_t> first(clients.size() + 1, 0);  // client i: items [first[i], first[i+1])
  for (std::size_t i = 0; i < clients.size(); ++i) {
    Client* c = clients[i];
    c->impl_->may_hold = {true, true};  // zmq_poll's event check takes their ZMQ_FD notifications
    first[i] = items.size();
    items.push_back({c->impl_->cancel.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({c->impl_->submit.handle(), 0, ZMQ_POLLIN, 0});
    if (c->impl_->monitor) items.push_back({c->impl_->monitor->pollHandle(), 0, ZMQ_POLLIN, 0});
  }
  first[clients.size()] = items.size();
  if (wake_fd >= 0) items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
  // A connection event a send already took from the monitor (sendOn reads it) is pending in
  // the client, and its monitor socket will not announce it again: such a client is ready now.
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if (!clients[i]->impl_->events.empty()) ready.push_back(i);
  }
  if (!ready.empty()) timeout = std::chrono::milliseconds(0);
  try {
    zmq::poll(items.data(), items.size(), timeout);
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
  }
  const std::size_t pending = ready.size();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if (std::find(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(pending), i) !=
        ready.begin() + static_cast<std::ptrdiff_t>(pending)) {
      continue;
    }
    for (std::size_t k = first[i]; k < first[i + 1]; ++k) {
      if (items[k].revents & ZMQ_POLLIN) {
        ready.push_back(i);
        break;
      }
    }
  }
  std::sort(ready.begin(), ready.end());
  return ready;
}

}  // namespace mocker::net
