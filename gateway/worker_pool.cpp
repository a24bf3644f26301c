#include "gateway/worker_pool.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "service/client.h"

namespace mocker::gateway {

struct WorkerPool::Impl {
  WorkerPoolOptions options;
  EventSink on_events;
  std::vector<std::unique_ptr<service::Client>> clients;
  std::vector<bool> answered;
  std::vector<std::chrono::steady_clock::time_point> last_heard;
  std::vector<bool> lost;
  int wake_fd = -1;
  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }
};

Result<std::unique_ptr<WorkerPool>> WorkerPool::start(WorkerPoolOptions options,
                                                      EventSink on_events) {
  if (options.workers.empty()) return invalidArgument("no workers: give --connect or --fleet");
  std::unique_ptr<WorkerPool> pool(new WorkerPool());
  pool->impl_ = std::make_unique<Impl>();
  Impl& impl = *pool->impl_;
  impl.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl.wake_fd < 0) return Error{ErrorCode::IoError, "eventfd failed"};
  // The clients are created here and then used only by the pool thread (started below, after
  // which this thread never touches them): the hand-over is ordered by std::thread's start.
  for (const auto& w : options.workers) {
    auto client = service::Client::connect({.submit_endpoint = w.submit,
                                            .cancel_endpoint = w.cancel,
                                            // Deep queues: the service drops outputs to a
                                            // client whose receive queue is full.
                                            .rcvhwm = 1'000'000,
                                            .sndhwm = 100'000,
                                            .nonblocking_send = true,
                                            .curve_server_key = options.curve.server_public_key,
                                            .curve_public_key = options.curve.public_key,
                                            .curve_secret_key = options.curve.secret_key});
    if (!client) return client.error().withContext("worker " + w.submit);
    impl.clients.push_back(std::move(*client));
  }
  impl.answered.assign(options.workers.size(), false);
  impl.last_heard.assign(options.workers.size(), std::chrono::steady_clock::now());
  impl.lost.assign(options.workers.size(), false);
  pool->num_workers_ = options.workers.size();
  impl.options = std::move(options);
  impl.on_events = std::move(on_events);
  pool->thread_ = std::thread([p = pool.get()] { p->run(); });
  return pool;
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  const std::uint64_t one = 1;
  if (impl_ && impl_->wake_fd >= 0) (void)!::write(impl_->wake_fd, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void WorkerPool::push(Command&& command) {
  {
    std::lock_guard lock(mutex_);
    commands_.push_back(std::move(command));
  }
  // One wake-up per batch of commands: while the pool has not yet taken the queue, a wake-up is
  // already on its way (the pool clears the flag before it takes the queue).
  if (wake_pending_.exchange(true)) return;
  const std::uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
}

void WorkerPool::submit(std::size_t worker, protocol::SubmitRequest&& request) {
  push({.worker = worker, .what = std::move(request)});
}

void WorkerPool::cancel(std::size_t worker, std::string id) {
  push({.worker = worker, .what = std::move(id)});
}

void WorkerPool::run() {
  Impl& impl = *impl_;
  auto next_stats = Clock::now();
  // One poll over the event fd and every socket's ZeroMQ notification fd (Client::notifyFds):
  // [0] the event fd, then per worker its cancel and submit sockets.
  std::vector<pollfd> fds{{.fd = impl.wake_fd, .events = POLLIN, .revents = 0}};
  for (auto& c : impl.clients) {
    for (const int fd : c->notifyFds()) fds.push_back({.fd = fd, .events = POLLIN, .revents = 0});
  }
  std::vector<Command> commands;
  std::vector<WorkerEvent> events;
  bool woken = true;  // take the queue in the first round
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_stats) {
      checkLiveness(now, events);
      for (std::size_t w = 0; w < impl.clients.size(); ++w) {
        if (auto s = impl.clients[w]->send(protocol::StatsRequest{}); !s) {
          SPDLOG_DEBUG("gateway: stats to worker {}: {}", w, s.error().message);
        }
      }
      next_stats = now + impl.options.stats_interval;
    }
    if (woken) {
      std::uint64_t drained = 0;
      (void)!::read(impl.wake_fd, &drained, sizeof drained);
      wake_pending_.store(false);  // before taking the queue: a later push wakes the next round
      {
        std::lock_guard lock(mutex_);
        commands.swap(commands_);
      }
      sendCommands(commands, events);
      commands.clear();
    }
    // Every socket with something new (its fd polled readable, or sent on since it was last
    // found empty) drained to empty: only then does its fd announce the next message.
    for (std::size_t w = 0; w < impl.clients.size(); ++w) {
      const std::array<bool, 2> readable{fds[1 + 2 * w].revents != 0, fds[2 + 2 * w].revents != 0};
      impl.clients[w]->drain(readable, [&](Result<protocol::ClientMessage>&& message) {
        received(w, std::move(message), events);
      });
    }
    if (!events.empty()) {
      impl.on_events(std::move(events));
      events = {};
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_stats - Clock::now());
    const int rc =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait.count(), 1)));
    if (rc < 0 && errno != EINTR) {
      spdlog::error("gateway: polling the workers failed: {}", std::strerror(errno));
      return;
    }
    if (rc <= 0) {
      for (auto& p : fds) p.revents = 0;
    }
    woken = fds[0].revents != 0;
  }
}

void WorkerPool::sendCommands(std::vector<Command>& commands, std::vector<WorkerEvent>& events) {
  for (auto& command : commands) {
    service::Client& client = *impl_->clients[command.worker];
    if (auto* id = std::get_if<std::string>(&command.what)) {
      if (auto s = client.cancel(*id); !s) {
        spdlog::warn("gateway: cancel to worker {}: {}", command.worker, s.error().message);
      }
      continue;
    }
    auto& request = std::get<protocol::SubmitRequest>(command.what);
    if (auto s = client.submit(request); !s) {
      // Never left hanging: a submit that could not be sent is answered as a reject.
      events.push_back({.worker = command.worker,
                        .message = protocol::SubmitReject{
                            .id = request.id, .reason = "send failed: " + s.error().message}});
    }
  }
}

void WorkerPool::received(std::size_t w, Result<protocol::ClientMessage>&& message,
                          std::vector<WorkerEvent>& events) {
  if (!message) {
    spdlog::warn("gateway: worker {}: {}", w, message.error().message);
    return;
  }
  heard(w, Clock::now(), events);
  if (std::holds_alternative<protocol::StatsReply>(*message) && !impl_->answered[w]) {
    impl_->answered[w] = true;
    num_ready_.fetch_add(1);
  }
  events.push_back({.worker = w, .message = std::move(*message)});
}

void WorkerPool::heard(std::size_t w, Clock::time_point now, std::vector<WorkerEvent>& events) {
  Impl& impl = *impl_;
  impl.last_heard[w] = now;
  if (!impl.lost[w]) return;
  impl.lost[w] = false;
  num_lost_.fetch_sub(1);
  events.push_back({.worker = w, .liveness = Liveness::Back});
}

void WorkerPool::checkLiveness(Clock::time_point now, std::vector<WorkerEvent>& events) {
  Impl& impl = *impl_;
  for (std::size_t w = 0; w < impl.lost.size(); ++w) {
    if (impl.lost[w] || now - impl.last_heard[w] <= impl.options.worker_timeout) continue;
    impl.lost[w] = true;
    num_lost_.fetch_add(1);
    spdlog::warn("gateway: worker {} ({}) lost: nothing from it for {} ms", w,
                 impl.options.workers[w].submit, impl.options.worker_timeout.count());
    events.push_back({.worker = w, .liveness = Liveness::Lost});
  }
}

}  // namespace mocker::gateway
