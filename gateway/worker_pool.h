// WorkerPool: the gateway's ZeroMQ side — one service::Client per worker, all owned and polled
// by one thread of their own (house style: a socket lives on one thread). The I/O thread hands
// it submits and cancels through a queue (woken by an eventfd, written once per batch of
// commands the pool has not taken yet); it hands back every message the
// workers send, in batches, through `on_events` (called on the pool's thread; the gateway posts
// them to its I/O thread). One wake-up: one poll(2) over the eventfd and the sockets' ZeroMQ
// notification fds, then every socket with news drained to empty (Client::drain).
//
// Readiness: at start the pool asks every worker for `stats`; a worker is ready once it
// answered. Stats are asked again every `stats_interval` (load for routing, liveness).
// Liveness: a worker from which nothing at all (stats reply, outputs, ...) arrived for
// `worker_timeout` is lost — the pool hands a Liveness::Lost event up once, then
// Liveness::Back when it is heard from again (checked at every stats round).
//
// Thread-safety: submit, cancel, ready and readyCount from any thread; the callback runs on
// the pool's thread. Not copyable or movable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "base/result.h"
#include "protocol/client.h"
#include "service/security.h"

namespace mocker::gateway {

struct WorkerEndpoints {
  std::string submit;
  std::string cancel;
};

struct WorkerPoolOptions {
  std::vector<WorkerEndpoints> workers;
  service::CurveClientKeys curve{};
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

  /// Connects every worker's client and starts the thread. Errors: bad endpoints or keys.
  static Result<std::unique_ptr<WorkerPool>> start(WorkerPoolOptions options, EventSink on_events);
  ~WorkerPool();  ///< stops and joins the thread
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::size_t size() const { return num_workers_; }
  void submit(std::size_t worker, protocol::SubmitRequest&& request);
  void cancel(std::size_t worker, std::string id);
  /// Workers that answered a stats request at least once.
  std::size_t readyCount() const { return num_ready_.load(); }
  bool ready() const { return readyCount() == num_workers_; }
  /// Workers lost now (silent for worker_timeout).
  std::size_t lostCount() const { return num_lost_.load(); }

 private:
  struct Command {
    std::size_t worker = 0;
    std::variant<protocol::SubmitRequest, std::string> what;  // submit, or cancel of an id
  };
  using Clock = std::chrono::steady_clock;
  WorkerPool() = default;
  void run();
  void sendCommands(std::vector<Command>& commands, std::vector<WorkerEvent>& events);
  void received(std::size_t worker, Result<protocol::ClientMessage>&& message,
                std::vector<WorkerEvent>& events);
  void heard(std::size_t worker, Clock::time_point now, std::vector<WorkerEvent>& events);
  void checkLiveness(Clock::time_point now, std::vector<WorkerEvent>& events);
  void push(Command&& command);

  struct Impl;  // clients and the event fd (pool thread)
  std::unique_ptr<Impl> impl_;
  std::size_t num_workers_ = 0;
  std::atomic<std::size_t> num_ready_{0};
  std::atomic<std::size_t> num_lost_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> wake_pending_{false};  ///< the event fd was written since the last take
  std::mutex mutex_;
  // Guarded by mutex_.
  std::vector<Command> commands_;
  std::thread thread_;
};

}  // namespace mocker::gateway
