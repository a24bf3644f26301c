// `mocker serve` as a real child process on ephemeral loopback endpoints, free of any test
// framework (tests wrap it in tests/service/serve_process.h; benches use it as is). Waiting is a
// poll on the child's stdout with a deadline, never a sleep.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace mocker::testing {

class ServeChild {
 public:
  using Clock = std::chrono::steady_clock;

  /// Starts `<binary> serve --submit-endpoint tcp://127.0.0.1:* ... <extra>`; `launched` is the
  /// time just before the spawn. Its stderr (the log) goes to `stderr_path` when one is given.
  /// A failed start leaves `spawnError()` non-empty (and no child).
  ServeChild(const std::string& binary, const std::vector<std::string>& extra,
             const std::string& stderr_path = {}) {
    std::vector<std::string> args = {binary, "serve"};
    for (const char* flag : {"--submit-endpoint", "--cancel-endpoint", "--kv-events-endpoint",
                             "--kv-replay-endpoint", "--fpm-endpoint"}) {
      args.emplace_back(flag);
      args.emplace_back("tcp://127.0.0.1:*");
    }
    args.emplace_back("--http-endpoint");
    args.emplace_back("127.0.0.1:0");
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) {
      spawn_error_ = "pipe failed";
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, out[1]);
    if (!stderr_path.empty()) {
      posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    launched = Clock::now();
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    stdout_fd_ = out[0];
    if (rc != 0) {
      spawn_error_ = std::string("cannot start ") + argv[0];
      pid_ = -1;
    }
  }
  ~ServeChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;

  /// Why the child could not be started; empty when it was.
  const std::string& spawnError() const { return spawn_error_; }

  /// The next stdout line, or nullopt at the deadline or end of output.
  std::optional<std::string> readLine(Clock::time_point deadline) {
    while (true) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  /// Reads the endpoint lines ("<name> <endpoint>") until a line that is not one (returned: it
  /// should be "ready"), or — when `until` is given — until the endpoint named `until` was read
  /// (then returns `until`); nullopt at the deadline.
  std::optional<std::string> readEndpoints(Clock::time_point deadline,
                                           std::optional<std::string> until = std::nullopt) {
    while (auto line = readLine(deadline)) {
      const auto space = line->find(' ');
      if (space == std::string::npos) return line;
      const std::string name = line->substr(0, space);
      endpoints[name] = line->substr(space + 1);
      if (name == until) return until;
    }
    return std::nullopt;
  }

  /// Reads until "ready"; false at the deadline.
  bool awaitReady(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto line = readEndpoints(Clock::now() + timeout);
    return line == "ready";
  }

  /// VmRSS of the child in KiB (/proc/PID/status), 0 if unreadable.
  std::uint64_t rssKib() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string key;
    while (status >> key) {
      if (key == "VmRSS:") {
        std::uint64_t kib = 0;
        status >> kib;
        return kib;
      }
      status.ignore(1 << 16, '\n');
    }
    return 0;
  }

  /// SIGTERM, then waits (bounded) for the exit code; -1 if it did not exit in time.
  int stop(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    return waitExit(timeout);
  }

  /// Waits (bounded) for the child to exit by itself: its exit code (128 + signal when killed),
  /// -1 if it did not exit in time.
  int waitExit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return -1;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      // The child's stdout closes when it exits: wait on it rather than sleeping.
      pollfd p{stdout_fd_, POLLIN, 0};
      poll(&p, 1, 20);
      char sink[4096];
      if (p.revents & POLLIN) (void)!read(stdout_fd_, sink, sizeof(sink));
    }
    return -1;
  }

  pid_t pid() const { return pid_; }

  Clock::time_point launched;
  std::map<std::string, std::string> endpoints;

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  std::string spawn_error_;
};

}  // namespace mocker::testing
