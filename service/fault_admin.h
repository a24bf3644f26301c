// FaultAdmin: the run-time side of the failure drills — `GET/POST /admin/faults` and `DELETE
// /admin/faults/{id}` on the metrics port (service/README.md "Failure drills", "Admin
// interface"), shared by the HTTP thread and the serve loop(s) of one process.
//
//   HTTP thread                               serve loop of worker w
//   handle(method, target, body, auth)
//     parse + check (no loop involved)
//     queue a command in box(w), wake it  ──► poll sees box(w).wakeFd(): applyCommands(...)
//     wait (deadline) for its answer      ◄── answers, and publishes its armed faults
//   GET: the listings the loops published     (publish() also after a fault fired)
//
// The loop applies a command between two turns, before it starts its next passes: the fault is
// armed "at pass P" (its trigger counts from there; the fault log says which pass), so the
// same arming pass and workload inject the same faults. Nothing of the FaultPlan is touched by
// the HTTP thread; everything shared is under one mutex (and one condition variable for the
// answers). A worker whose loop stopped (crashed, shut down) is closed: commands to it are
// answered "not running" at once.
//
// Thread-safe. Not copyable or movable (the loops hold references to its boxes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "net/stop_event.h"
#include "service/fault_plan.h"

namespace mocker::service {

/// Largest request body the admin interface reads (one fault spec is far smaller).
inline constexpr std::size_t kMaxAdminBodyBytes = 4096;
/// Shortest bearer key accepted from `[faults] admin_key_file`.
inline constexpr std::size_t kMinAdminKeyBytes = 16;

/// Reads the bearer key file: its content without surrounding whitespace, at least
/// kMinAdminKeyBytes printable ASCII characters without spaces. Errors name the file.
Result<std::string> loadAdminKey(const std::string& path);

/// Constant-time comparison of a presented and the expected key (time depends only on the
/// expected key's length).
bool sameKey(std::string_view presented, std::string_view expected);

class FaultAdmin final {
 public:
  struct Options {
    std::uint32_t num_workers = 1;
    std::uint32_t dp_size = 1;
    std::uint32_t first_id = 0;  ///< the first run-time fault id (= start-up faults' count)
    std::string key;             ///< bearer key; "" = none asked for
    /// How long an HTTP request waits for a loop to take its command.
    std::chrono::milliseconds answer_timeout{5000};
  };
  explicit FaultAdmin(Options options);
  FaultAdmin(const FaultAdmin&) = delete;
  FaultAdmin& operator=(const FaultAdmin&) = delete;

  // --- HTTP thread ---------------------------------------------------------------------------
  struct Reply {
    int status = 200;
    std::string body;           ///< JSON, newline-terminated
    bool unauthorized = false;  ///< 401: send `WWW-Authenticate: Bearer`
    std::string allow;          ///< 405: the methods the path takes
  };
  /// One request on /admin...: `target` is the request target (path and query),
  /// `authorization` the Authorization header ("" when absent).
  Reply handle(std::string_view method, std::string_view target, std::string_view body,
               std::string_view authorization);

  // --- Serve loop of worker w ----------------------------------------------------------------
  /// What a loop does to its FaultPlan for a command; the pass count the fault was armed at
  /// (arm), or whether it was armed (disarm: 0 or 1).
  struct Command {
    enum class Op { Arm, Disarm } op = Op::Arm;
    std::uint32_t id = 0;
    FaultSpec spec;  ///< Arm
    std::uint64_t ticket = 0;
  };
  /// An armed fault as a loop lists it.
  struct Listed {
    FaultPlan::ArmedInfo info;
    std::uint64_t fired = 0;  ///< injections so far on this worker
  };
  /// The eventfd the loop polls; readable when commands wait.
  int wakeFd(std::uint32_t worker) { return boxes_[worker]->wake.fd(); }
  /// Takes the waiting commands, applies each with `apply` (returns the pass count armed at, or
  /// for a disarm 1 if it was armed, 0 if not), answers them and publishes `listing`.
  void applyCommands(std::uint32_t worker,
                     const std::function<std::uint64_t(const Command&)>& apply,
                     const std::function<std::vector<Listed>()>& listing);
  /// Publishes the worker's armed faults (at start, and after a fault fired).
  void publish(std::uint32_t worker, std::vector<Listed> listing);
  /// The worker's loop stopped: commands to it are answered "not running".
  void close(std::uint32_t worker);

 private:
  struct Answer {
    std::uint64_t ticket = 0;
    std::uint32_t worker = 0;
    bool done = false;  ///< false: not running
    std::uint64_t value = 0;
  };
  struct Box {
    net::StopEvent wake;
    std::deque<Command> queue;
    std::vector<Listed> listing;
    bool closed = false;
  };

  Reply list() const;
  Reply arm(std::string_view query, std::string_view body);
  Reply disarm(std::string_view id_text);
  /// Queues `command` (ticket set here) to `workers`, waits for their answers (each worker's, or
  /// "not running"); those that did not answer in time are taken back and left out.
  std::vector<Answer> dispatch(Command command, const std::vector<std::uint32_t>& workers);

  Options options_;
  std::vector<std::unique_ptr<Box>> boxes_;
  mutable std::mutex mutex_;
  std::condition_variable answered_;
  std::vector<Answer> answers_;
  std::uint32_t next_id_;
  std::uint64_t next_ticket_ = 1;
};

}  // namespace mocker::service
