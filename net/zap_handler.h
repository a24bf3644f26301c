// ZapHandler: the ZeroMQ authentication handler (RFC 27 ZAP) of a process's CURVE sockets. It
// decides, for every CURVE handshake on a socket of its context, whether the client's public key
// is on the allow-list, and names the accepted client by that key: the reply's user id, which
// libzmq attaches to every message of the connection as the "User-Id" property
// (net/connection_monitor.h: peerUserId). The serve loop takes a client's identity from
// there (service/README.md, "Security").
//
// Threads: start() launches one thread that owns a REP socket bound to
// inproc://zeromq.zap.01 in the given context and answers requests until the handler is
// destroyed (an eventfd wakes it; the destructor joins). It shares nothing mutable with the
// serve loop: the allow-list is fixed before the thread starts, and the only other shared state
// is two atomic counters. The loop never waits for it; a handshake waits for it, which is off
// the loop's thread (libzmq's I/O thread sends the request and resumes on the reply).
//
// Lifetime: create it before binding any CURVE socket (a CURVE socket without a ZAP handler
// accepts every key) and destroy it before the context. Neither copyable nor movable.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "base/result.h"
#include "net/log_sink.h"
#include "net/stop_event.h"

namespace mocker::net {

class ZapHandler final {
 public:
  /// Binds inproc://zeromq.zap.01 in `context` and starts answering: CURVE handshakes of the ZAP
  /// domain `domain` from a key in `allowed_clients` (Z85) are accepted with that key as user
  /// id; everything else is refused. `context` must outlive the handler. `log` (called on the
  /// handler's thread) hears of every refused key (Warn, naming the peer's address, the key and
  /// the domain) and of a poll or reply failure (Error).
  static Result<std::unique_ptr<ZapHandler>> start(zmq::context_t& context, std::string domain,
                                                   std::set<std::string> allowed_clients,
                                                   LogSink log);
  /// Same, with one allow-list per ZAP domain: a socket's domain (ZMQ_ZAP_DOMAIN) selects the
  /// keys it accepts (a prefill worker's handoff socket accepts worker keys, not client keys).
  static Result<std::unique_ptr<ZapHandler>> start(
      zmq::context_t& context, std::map<std::string, std::set<std::string>> allowed_by_domain,
      LogSink log);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  /// Handshakes refused so far (any thread).
  std::uint64_t numRefused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  ZapHandler(std::map<std::string, std::set<std::string>> allowed_by_domain, LogSink log)
      : allowed_(std::move(allowed_by_domain)), log_(std::move(log)) {}
  void report(LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }
  void serve(zmq::socket_t& socket);

  // Allow-list per ZAP domain; immutable once the thread runs.
  const std::map<std::string, std::set<std::string>> allowed_;
  const LogSink log_;
  std::atomic<std::uint64_t> refused_{0};
  StopEvent stop_;
  std::thread thread_;
};

}  // namespace mocker::net
