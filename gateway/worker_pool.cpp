#include "gateway/worker_pool.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "net/client.h"

namespace mocker::gateway {

struct WorkerPool::Impl {
  WorkerPoolOptions options;
  EventSink on_events;
  std::vector<std::unique_ptr<net::Client>> clients;
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
    auto client = net::Client::connect({.submit_endpoint = w.submit,
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
  std::vector<net::Client*> raw;
  for (auto& c : impl.clients) raw.push_back(c.get());
  std::vector<Command> commands;
  std::vector<WorkerEvent> events;
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_stats) {
      checkLiveness(now, events);
      for (std::size_t w = 0; w < raw.size(); ++w) {
        if (auto s = raw[w]->send(protocol::StatsRequest{}); !s) {
          SPDLOG_DEBUG("gateway: stats to worker {}: {}", w, s.error().message);
        }
      }
      next_stats = now + impl.options.stats_interval;
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_stats - now);
    auto ready =
        net::Client::waitReadable(raw, std::max(wait, std::chrono::milliseconds(1)), impl.wake_fd);
    if (!ready) {
      spdlog::error("gateway: polling the workers failed: {}", ready.error().message);
      return;
    }
    std::uint64_t drained = 0;
    (void)!::read(impl.wake_fd, &drained, sizeof drained);
    wake_pending_.store(false);  // before taking the queue: a later push wakes the next round
    {
      std::lock_guard lock(mutex_);
      commands.swap(commands_);
    }
    for (auto& command : commands) {
      net::Client& client = *raw[command.worker];
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
    commands.clear();
    for (const std::size_t w : *ready) {
      while (true) {
        auto message = raw[w]->receive(std::chrono::milliseconds(0));
        if (!message) {
          spdlog::warn("gateway: worker {}: {}", w, message.error().message);
          continue;
        }
        if (!*message) break;
        heard(w, Clock::now(), events);
        if (std::holds_alternative<protocol::StatsReply>(**message) && !impl.answered[w]) {
          impl.answered[w] = true;
          num_ready_.fetch_add(1);
        }
        events.push_back({.worker = w, .message = std::move(**message)});
      }
    }
    if (!events.empty()) {
      impl.on_events(std::move(events));
      events = {};
    }
  }
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
