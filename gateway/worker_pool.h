// WorkerPool: the gateway's ZeroMQ side — one net::Client per worker, driven by the gateway's
// Asio I/O thread itself (house style: a socket lives on one thread; here the I/O thread). No
// thread of its own: every socket's ZeroMQ notification fd (Client::notifyFds) waits in Asio's
// reactor; when one fires, or after a round of sends (a send may take a notification), every
// socket with news is drained to empty (Client::drain) and the messages go, in one batch, to
// `on_events` — called on the I/O thread from a handler of its own, never from inside submit or
// cancel. A request thus crosses no thread of the gateway's: the HTTP connection, the ZeroMQ
// send and the worker's answer are all handled on the I/O thread (libzmq's own I/O thread
// remains).
//
// Readiness: at start the pool asks every worker for `stats`; a worker is ready once it
// answered. Stats are asked again every `stats_interval` (load for routing, liveness).
// Liveness: a worker from which nothing at all (stats reply, outputs, ...) arrived for
// `worker_timeout` is lost — the pool hands a Liveness::Lost event up once, then
// Liveness::Back when it is heard from again (checked at every stats round).
//
// Thread-safety: submit and cancel on the I/O thread only (the io_context's one thread);
// readyCount and lostCount from any thread. Destroy it on the I/O thread or after the
// io_context stopped running; its pending handlers then do nothing. Not copyable or movable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "net/security.h"
#include "protocol/client.h"

namespace boost::asio {
class io_context;
}

namespace mocker::gateway {

struct WorkerEndpoints {
  std::string submit;
  std::string cancel;
};

struct WorkerPoolOptions {
  std::vector<WorkerEndpoints> workers;
  net::CurveClientKeys curve{};
  std::chrono::milliseconds stats_interval{1000};
  std::chrono::milliseconds worker_timeout{5000};  ///< silence that makes a worker lost
};

enum class Liveness : std::uint8_t { None, Lost, Back };

/// A message from worker `worker`, or (liveness != None) a change of its liveness.
struct WorkerEvent {
  std::size_t worker = 0;
  protocol::ClientMessage message;
  Liveness liveness = Liveness::None;
};

class WorkerPool final {
 public:
  using EventSink = std::function<void(std::vector<WorkerEvent>&&)>;

  /// Connects every worker's client, asks each for stats and starts waiting on `io` (which must
  /// outlive the pool). Errors: bad endpoints or keys.
  static Result<std::unique_ptr<WorkerPool>> start(WorkerPoolOptions options,
                                                   boost::asio::io_context& io,
                                                   EventSink on_events);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::size_t size() const { return num_workers_; }
  /// Sends now; a submit that cannot be sent comes back as a SubmitReject event.
  void submit(std::size_t worker, protocol::SubmitRequest&& request);
  void cancel(std::size_t worker, std::string id);
  /// Sends a lora_load / lora_unload; one that cannot be sent comes back as a LoraReply event
  /// with an error.
  void sendLora(std::size_t worker, protocol::LoraOp op, const std::string& name);
  /// Workers that answered a stats request at least once.
  std::size_t readyCount() const { return num_ready_.load(); }
  bool ready() const { return readyCount() == num_workers_; }
  /// Workers lost now (silent for worker_timeout).
  std::size_t lostCount() const { return num_lost_.load(); }

  struct Impl;  // clients, their descriptors in the reactor, the stats timer (I/O thread)

 private:
  WorkerPool() = default;
  std::shared_ptr<Impl> impl_;  // shared with its handlers, which hold it weakly
  std::size_t num_workers_ = 0;
  std::atomic<std::size_t> num_ready_{0};
  std::atomic<std::size_t> num_lost_{0};
};

}  // namespace mocker::gateway
