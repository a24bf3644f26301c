// Client: the C++ client of `mocker serve` (submit and cancel DEALERs) — contract in client.h.
#include "net/client.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <zmq.hpp>

#include <poll.h>

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
  /// The same for the monitor socket: cleared when readMonitor read it until empty.
  bool monitor_may_hold = true;

  zmq::socket_t& socket(std::size_t i) { return i == 0 ? cancel : submit; }
  // Reads the monitor's events into `events` and `connected`.
  void readMonitor();
  // Sends one single-frame message; `what` names the message in errors.
  Status sendOn(zmq::socket_t& socket, std::span<const std::byte> payload, const char* what);
  // One non-blocking receive on socket `i`: nullopt when none is queued, else the decoded
  // message or its error; `recv_failed` tells a failed receive from a bad message.
  std::optional<Result<protocol::ClientMessage>> tryReceive(std::size_t i, bool& recv_failed);
  // tryReceive as receive() reports it: nullopt when socket `i` is empty.
  std::optional<Result<std::optional<protocol::ClientMessage>>> take(std::size_t i);
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

std::optional<Result<std::optional<protocol::ClientMessage>>> Client::Impl::take(std::size_t i) {
  bool failed = false;
  auto got = tryReceive(i, failed);
  if (!got) return std::nullopt;
  if (!*got) return Result<std::optional<protocol::ClientMessage>>(got->error());
  return Result<std::optional<protocol::ClientMessage>>(
      std::optional<protocol::ClientMessage>(std::move(**got)));
}

Result<std::optional<protocol::ClientMessage>> Client::receiveReady() {
  for (std::size_t i = 0; i < 2; ++i) {
    if (!impl_->may_hold[i]) continue;
    if (auto got = impl_->take(i)) return std::move(*got);
  }
  return std::optional<protocol::ClientMessage>();
}

Result<std::optional<protocol::ClientMessage>> Client::receive(std::chrono::milliseconds timeout) {
  // A message already queued (the common case while outputs stream) needs no poll call; the
  // cancel socket goes first.
  for (std::size_t i = 0; i < 2; ++i) {
    if (auto got = impl_->take(i)) return std::move(*got);
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
    if (auto got = impl_->take(i)) return std::move(*got);
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
  // Not found holding events since its last drain (monitor_may_hold false: its descriptor is
  // exact): a poll of the descriptor tells, cheaper than a receive that finds nothing.
  if (!monitor || (!monitor_may_hold && !monitor->mayHaveEvents())) return;
  std::vector<std::pair<std::uint16_t, std::uint32_t>> raw;
  monitor_may_hold = !monitor->drainEvents(raw);
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

namespace {

// Whether a ZeroMQ socket has a message to receive (ZMQ_EVENTS: libzmq processes the socket's
// pending commands first — its mailbox check, a getpid and a poll). When it says no, every pipe
// was found empty, so the socket's ZMQ_FD announces the next message.
bool hasInput(void* socket) {
  int events = 0;
  std::size_t size = sizeof events;
  if (zmq_getsockopt(socket, ZMQ_EVENTS, &events, &size) != 0) return true;  // let a receive tell
  return (events & ZMQ_POLLIN) != 0;
}

int notifyFd(void* socket) {
  int fd = -1;
  std::size_t size = sizeof fd;
  return zmq_getsockopt(socket, ZMQ_FD, &fd, &size) == 0 ? fd : -1;
}

}  // namespace

Result<std::vector<std::size_t>> Client::waitReadable(std::span<Client* const> clients,
                                                      std::chrono::milliseconds timeout,
                                                      int wake_fd) {
  // Not zmq_poll: it asks every socket for ZMQ_EVENTS on both sides of the wait (a mailbox
  // check each), which for a live replay over a 64-worker fleet (192 sockets) cost ~37 system
  // calls per received message. Here a socket is asked only when it may hold messages its
  // ZMQ_FD will not announce (may_hold: sent on, or not found empty, since its last receive),
  // and after the wait only if its ZMQ_FD fired (the descriptor also fires for commands that
  // bring no message: the ask tells).
  struct Watched {
    std::size_t client;
    void* socket;
    bool* may_hold;
  };
  std::vector<::pollfd> fds;
  std::vector<Watched> watched;
  fds.reserve(clients.size() * 3 + 1);
  watched.reserve(clients.size() * 3);
  std::vector<char> is_ready(clients.size(), 0);
  bool any_ready = false;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    Impl& m = *clients[i]->impl_;
    // A connection event a send already took from the monitor (sendOn reads it) is pending in
    // the client, and its monitor socket will not announce it again: such a client is ready now.
    bool ready = !m.events.empty();
    std::array<void*, 3> sockets{m.has_cancel ? m.cancel.handle() : nullptr, m.submit.handle(),
                                 m.monitor ? m.monitor->pollHandle() : nullptr};
    for (std::size_t k = 0; k < sockets.size() && !ready; ++k) {
      if (sockets[k] == nullptr) continue;
      bool& may_hold = k < 2 ? m.may_hold[k] : m.monitor_may_hold;
      if (!may_hold) continue;
      if (hasInput(sockets[k])) {
        ready = true;
      } else {
        may_hold = false;
      }
    }
    if (ready) {
      is_ready[i] = 1;
      any_ready = true;
      continue;
    }
    for (std::size_t k = 0; k < sockets.size(); ++k) {
      if (sockets[k] == nullptr) continue;
      fds.push_back({notifyFd(sockets[k]), POLLIN, 0});
      watched.push_back({i, sockets[k], k < 2 ? &m.may_hold[k] : &m.monitor_may_hold});
    }
  }
  if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
  const int wait_ms = any_ready ? 0
                                : static_cast<int>(std::min<std::int64_t>(
                                      timeout.count(), std::numeric_limits<int>::max()));
  if (::poll(fds.data(), fds.size(), wait_ms < 0 ? -1 : wait_ms) < 0 && errno != EINTR) {
    return Error{ErrorCode::IoError, std::string("poll: ") + std::strerror(errno)};
  }
  for (std::size_t f = 0; f < watched.size(); ++f) {
    const std::size_t i = watched[f].client;
    if (fds[f].revents == 0) continue;
    // The ask took the descriptor's signal: until a receive finds the socket empty, the next
    // wait asks again (a caller may leave it unread).
    if (hasInput(watched[f].socket)) is_ready[i] = *watched[f].may_hold = true;
  }
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if (is_ready[i]) ready.push_back(i);
  }
  return ready;
}

}  // namespace mocker::net
