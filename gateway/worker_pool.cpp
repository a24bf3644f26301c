#include "gateway/worker_pool.h"

#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "net/client.h"

namespace mocker::gateway {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct WorkerPool::Impl : std::enable_shared_from_this<WorkerPool::Impl> {
  Impl(asio::io_context& io_context, WorkerPoolOptions opts, EventSink sink)
      : io(io_context),
        options(std::move(opts)),
        on_events(std::move(sink)),
        stats_timer(io_context) {}
  ~Impl() {
    // The fds belong to libzmq: out of the reactor, never closed by Asio.
    for (auto& d : fds) (void)d.release();
  }

  asio::io_context& io;
  WorkerPoolOptions options;
  EventSink on_events;
  asio::steady_timer stats_timer;
  std::vector<std::unique_ptr<net::Client>> clients;
  /// Per worker w: [2w] its cancel socket's notification fd, [2w + 1] its submit socket's.
  std::vector<asio::posix::stream_descriptor> fds;
  std::vector<bool> fired;  ///< per fd: its wait completed and is not re-armed yet
  bool drain_posted = false;
  std::vector<WorkerEvent> events;  ///< collected for the next batch
  std::vector<bool> answered;
  std::vector<Clock::time_point> last_heard;
  std::vector<bool> lost;
  std::atomic<std::size_t>* num_ready = nullptr;
  std::atomic<std::size_t>* num_lost = nullptr;

  void arm(std::size_t k);
  void postDrain();
  void drainAll();
  void statsRound();
  void received(std::size_t w, Result<protocol::ClientMessage>&& message);
  void heard(std::size_t w, Clock::time_point now);
  void checkLiveness(Clock::time_point now);
};

void WorkerPool::Impl::arm(std::size_t k) {
  fds[k].async_wait(asio::posix::stream_descriptor::wait_read,
                    [weak = weak_from_this(), k](const boost::system::error_code& ec) {
                      const auto self = weak.lock();
                      if (ec || !self) return;
                      self->fired[k] = true;
                      self->drainAll();
                    });
}

// After sends (which may take a socket's notification) and for events made without a message
// (rejects): one drain, from a handler of its own, per batch.
void WorkerPool::Impl::postDrain() {
  if (drain_posted) return;
  drain_posted = true;
  asio::post(io, [weak = weak_from_this()] {
    if (const auto self = weak.lock()) self->drainAll();
  });
}

// Every socket with news drained to empty — only then does its fd announce the next message —,
// the fired waits re-armed, and the batch handed up.
void WorkerPool::Impl::drainAll() {
  drain_posted = false;
  for (std::size_t w = 0; w < clients.size(); ++w) {
    clients[w]->drain({fired[2 * w], fired[2 * w + 1]},
                      [&](Result<protocol::ClientMessage>&& m) { received(w, std::move(m)); });
  }
  for (std::size_t k = 0; k < fds.size(); ++k) {
    if (!fired[k]) continue;
    fired[k] = false;
    arm(k);
  }
  if (events.empty()) return;
  std::vector<WorkerEvent> batch;
  batch.swap(events);
  on_events(std::move(batch));
}

void WorkerPool::Impl::statsRound() {
  checkLiveness(Clock::now());
  for (std::size_t w = 0; w < clients.size(); ++w) {
    if (auto s = clients[w]->send(protocol::StatsRequest{}); !s) {
      SPDLOG_DEBUG("gateway: stats to worker {}: {}", w, s.error().message);
    }
  }
  postDrain();
  stats_timer.expires_after(options.stats_interval);
  stats_timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    const auto self = weak.lock();
    if (ec || !self) return;
    self->statsRound();
  });
}

void WorkerPool::Impl::received(std::size_t w, Result<protocol::ClientMessage>&& message) {
  if (!message) {
    spdlog::warn("gateway: worker {}: {}", w, message.error().message);
    return;
  }
  heard(w, Clock::now());
  if (std::holds_alternative<protocol::StatsReply>(*message) && !answered[w]) {
    answered[w] = true;
    num_ready->fetch_add(1);
  }
  events.push_back({.worker = w, .message = std::move(*message)});
}

void WorkerPool::Impl::heard(std::size_t w, Clock::time_point now) {
  last_heard[w] = now;
  if (!lost[w]) return;
  lost[w] = false;
  num_lost->fetch_sub(1);
  events.push_back({.worker = w, .liveness = Liveness::Back});
}

void WorkerPool::Impl::checkLiveness(Clock::time_point now) {
  for (std::size_t w = 0; w < lost.size(); ++w) {
    if (lost[w] || now - last_heard[w] <= options.worker_timeout) continue;
    lost[w] = true;
    num_lost->fetch_add(1);
    spdlog::warn("gateway: worker {} ({}) lost: nothing from it for {} ms", w,
                 options.workers[w].submit, options.worker_timeout.count());
    events.push_back({.worker = w, .liveness = Liveness::Lost});
  }
}

Result<std::unique_ptr<WorkerPool>> WorkerPool::start(WorkerPoolOptions options,
                                                      asio::io_context& io, EventSink on_events) {
  if (options.workers.empty()) return invalidArgument("no workers: give --connect or --fleet");
  std::unique_ptr<WorkerPool> pool(new WorkerPool());
  const std::size_t n = options.workers.size();
  pool->impl_ = std::make_shared<Impl>(io, std::move(options), std::move(on_events));
  Impl& impl = *pool->impl_;
  impl.num_ready = &pool->num_ready_;
  impl.num_lost = &pool->num_lost_;
  for (const auto& w : impl.options.workers) {
    auto client = net::Client::connect({.submit_endpoint = w.submit,
                                        .cancel_endpoint = w.cancel,
                                        // Deep queues: the service drops outputs to a
                                        // client whose receive queue is full.
                                        .rcvhwm = 1'000'000,
                                        .sndhwm = 100'000,
                                        .nonblocking_send = true,
                                        .curve_server_key = impl.options.curve.server_public_key,
                                        .curve_public_key = impl.options.curve.public_key,
                                        .curve_secret_key = impl.options.curve.secret_key});
    if (!client) return client.error().withContext("worker " + w.submit);
    for (const int fd : (*client)->notifyFds()) {
      boost::system::error_code ec;
      impl.fds.emplace_back(io).assign(fd, ec);
      if (ec) return Error{ErrorCode::IoError, "worker " + w.submit + ": " + ec.message()};
    }
    impl.clients.push_back(std::move(*client));
  }
  impl.fired.assign(impl.fds.size(), false);
  impl.answered.assign(n, false);
  impl.last_heard.assign(n, Clock::now());
  impl.lost.assign(n, false);
  pool->num_workers_ = n;
  for (std::size_t k = 0; k < impl.fds.size(); ++k) impl.arm(k);
  impl.statsRound();
  return pool;
}

WorkerPool::~WorkerPool() = default;

void WorkerPool::submit(std::size_t worker, protocol::SubmitRequest&& request) {
  Impl& impl = *impl_;
  if (auto s = impl.clients[worker]->submit(request); !s) {
    // Never left hanging: a submit that could not be sent is answered as a reject.
    impl.events.push_back({.worker = worker,
                           .message = protocol::SubmitReject{
                               .id = request.id, .reason = "send failed: " + s.error().message}});
  }
  impl.postDrain();
}

void WorkerPool::cancel(std::size_t worker, std::string id) {
  Impl& impl = *impl_;
  if (auto s = impl.clients[worker]->cancel(id); !s) {
    spdlog::warn("gateway: cancel to worker {}: {}", worker, s.error().message);
  }
  impl.postDrain();
}

void WorkerPool::sendLora(std::size_t worker, protocol::LoraOp op, const std::string& name) {
  Impl& impl = *impl_;
  const protocol::ClientMessage message = op == protocol::LoraOp::Load
                                              ? protocol::ClientMessage{protocol::LoraLoad{name}}
                                              : protocol::ClientMessage{protocol::LoraUnload{name}};
  if (auto s = impl.clients[worker]->send(message); !s) {
    impl.events.push_back(
        {.worker = worker,
         .message = protocol::LoraReply{.op = op,
                                        .name = name,
                                        .error = ErrorCode::IoError,
                                        .message = "send failed: " + s.error().message}});
  }
  impl.postDrain();
}

}  // namespace mocker::gateway
