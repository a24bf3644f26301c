// FaultPlan: the failure drills of a worker (service/README.md "Failure drills") as a socket-free,
// clock-free unit — which faults are armed, and, per pass and per request, which ones fire.
//
//   parseFaultSpec("slow:factor=3:after_passes=10")   one `--fault` / `[faults] inject` entry
//   FaultPlan plan(specs, seed, worker)                the faults that apply to fleet worker
//   plan.beforePass(rank, passes, rank_passes, now)    crash / hang / slow / fpm_stop /
//                                                      metrics_freeze / restart for the next pass
//   plan.onSubmit(rank, request_id, now)               error / abort for a new request
//   plan.onBatch(rank, seq, passes, rank_passes, now)  KV-event faults for the next batch
//   plan.arm(spec, id, passes, rank_passes, now)       a fault armed at run time (admin API)
//   plan.disarm(id)                                    no more firings of fault `id`
//   faultLogLine(injection)                            the JSONL line of the fault log
//
// Decisions depend only on the specs, the seed and what the caller passes in (pass counts, the
// request id, the time the caller reads from the engine's clock): the same configuration, seed
// and workload inject the same faults at the same points. A rate draw is a hash of (seed, fault
// index, request id), so whether a request fails does not depend on the order requests arrive
// in; a KV-event batch's draw is a hash of (seed, fault index, worker, rank, batch seq). Each
// injection is returned once, for the caller to log, count and write to the fault log.
//
// Plain value type; not thread-safe (one per serve loop or offline run).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace mocker::service {

/// What a fault does. Worker faults act on passes, request faults on one request each, KV-event
/// faults on one KV-event batch each (the publisher does it: publishers/kv_event_publisher.h).
enum class FaultKind {
  Crash,           ///< worker: sockets closed, the process exits with kFaultCrashExitCode
  Hang,            ///< worker: passes stop, sockets stay up; /health 503 after health_after_ms
  Slow,            ///< worker: each pass takes factor × its modelled time
  Error,           ///< request: answered with an `error` of the given code instead of accepted
  Abort,           ///< request: its stream ends with finish `error` after `tokens` output tokens
  Drop,            ///< KV batch: not sent, kept in the replay ring (a gap a replay heals)
  DropUnhealable,  ///< KV batch: not sent and left out of the replay ring (resync needed)
  Suppress,        ///< KV batch: sent (and ringed) without its events; the seq stays contiguous
  Duplicate,       ///< KV batch: sent twice
  Reorder,         ///< KV batch: held, sent right after the next batch
  Delay,           ///< KV batch: held `ms` milliseconds
  TruncateRing,    ///< KV batch: the replay ring forgets every batch before it
  FpmStop,         ///< worker: forward-pass metrics (and their heartbeats) stop being published
  MetricsFreeze,   ///< worker: /metrics keeps serving the snapshot taken at the trigger
  // Disaggregation: a prefill worker's answer to a decode worker's kv_fetch of a held request.
  FetchNotFound,  ///< kv_fetch: answered `not_found` at once (the hold stays until it ends)
  FetchLate,      ///< kv_fetch: answered `ms` wall milliseconds after its transfer end
  FetchNever,     ///< kv_fetch: never answered (the decode worker's fetch timeout ends it)
  Restart,        ///< worker: open streams end `shutdown`, a fresh engine and KV-event sequence
  Silent,         ///< request: acknowledged, then nothing (no output, no terminal) until cancelled
};
inline constexpr std::size_t kNumFaultKinds = 19;
std::string_view faultKindName(FaultKind kind);
bool isWorkerFault(FaultKind kind);
bool isKvFault(FaultKind kind);
bool isFetchFault(FaultKind kind);

/// Exit code of `mocker serve` when a `crash` fault fires (EX_SOFTWARE).
inline constexpr int kFaultCrashExitCode = 70;
/// The `reason` of the `shutdown` terminal a `restart` fault gives every open stream.
inline constexpr std::string_view kRestartReason = "the worker restarted (fault injected: restart)";
/// /health of a hung worker turns 503 this long after the hang, unless health_after_ms says.
inline constexpr double kDefaultHangHealthAfterMs = 10000.0;

/// One fault: `KIND[:KEY=VALUE]...` (service/README.md "Failure drills" lists the keys).
struct FaultSpec {
  FaultKind kind = FaultKind::Crash;
  // Trigger. Worker faults: from the pass after `after_passes` passes of the scope, or from the
  // first pass that starts at or after `at_ms` (engine ms since start); neither = at once.
  std::optional<std::uint64_t> after_passes;
  std::optional<double> at_ms;
  std::optional<std::uint64_t> for_passes;  ///< slow: passes slowed (none = for good)
  // KV-event faults take the same triggers (the first batch published after `after_passes`
  // passes, or at or after `at_ms`) and then hit each batch with probability `rate`, `count`
  // times at most (default: once without `rate`, without limit with it).
  std::optional<std::uint64_t> count;
  // Request faults: probability per request (in [0, 1]) and the ids it applies to: exact, or a
  // prefix ending in '*'; "" = every id. KV-event faults: probability per batch.
  double rate = 1.0;
  bool rate_given = false;  ///< KV-event faults: `rate` was given
  std::string match;
  // Scope: a fleet worker (index) and/or a DP rank; none = all.
  std::optional<std::uint32_t> worker;
  std::optional<std::uint32_t> rank;
  // Parameters.
  double factor = 1.0;                            ///< slow: > 1 (required)
  ErrorCode code = ErrorCode::ResourceExhausted;  ///< error: the `error` message's code
  std::uint32_t tokens = 0;                       ///< abort: output tokens before the stream ends
  double delay_ms = 0.0;  ///< delay: how long a batch is held; fetch_late: the answer (> 0)
  std::optional<double> health_after_ms = kDefaultHangHealthAfterMs;  ///< hang; none = stays 200
  bool cleared = true;   ///< restart: AllBlocksCleared is the new sequence's batch 0
  double down_ms = 0.0;  ///< restart: wall ms the worker stays down (reads nothing, no passes)
  friend bool operator==(const FaultSpec&, const FaultSpec&) = default;
};

/// Parses one spec; errors name the key and what is wrong ("fault 'slow': factor is required").
Result<FaultSpec> parseFaultSpec(std::string_view text);
/// Parses every spec of `[faults] inject` and checks its scope: worker < num_workers, rank <
/// dp_size. Errors name the spec (and its position when there are several).
Result<std::vector<FaultSpec>> parseFaultSpecs(const std::vector<std::string>& specs,
                                               std::uint32_t num_workers, std::uint32_t dp_size);
/// The spec in canonical form (parses back to an equal spec).
std::string faultSpecText(const FaultSpec& spec);

/// One injected fault, as the fault log records it.
struct Injection {
  double time_ms = 0.0;  ///< engine ms since start (offline: modelled time)
  FaultKind kind = FaultKind::Crash;
  std::uint32_t fault = 0;  ///< index of its spec
  std::uint32_t worker = 0;
  std::optional<std::uint32_t> rank;
  std::string request;               ///< request faults: the request id
  std::optional<std::uint64_t> seq;  ///< KV-event faults: the batch's sequence number
  std::string detail;  ///< what was done ("after 100 passes", "code resource_exhausted")
  friend bool operator==(const Injection&, const Injection&) = default;
};
/// {"time_ms":…,"kind":…,"fault":…,"worker":…,"rank":…,"request":…,"seq":…,"detail":…} (no
/// newline); rank, request and seq only when set. Fixed number formatting: byte-for-byte
/// reproducible.
std::string faultLogLine(const Injection& injection);

class FaultPlan {
 public:
  FaultPlan() = default;
  /// The specs (in their order: `fault` indexes them) as seen by fleet worker `worker`.
  FaultPlan(std::vector<FaultSpec> specs, std::uint64_t seed, std::uint32_t worker = 0);

  bool empty() const { return specs_.empty(); }

  /// What the next pass of `rank` suffers. `passes` / `rank_passes`: passes the worker / the
  /// rank has run so far; `now_ms`: engine time the pass would start at.
  struct PassFaults {
    bool crash = false;
    bool hang = false;
    std::optional<double> health_after_ms;  ///< with hang
    double slow_factor = 1.0;
    bool fpm_stop = false;         ///< from this pass on, the rank publishes no FPM
    bool metrics_freeze = false;   ///< from this pass on, the worker's /metrics is frozen
    bool restart = false;          ///< the worker restarts instead of running the pass
    bool restart_cleared = true;   ///< with restart: publish AllBlocksCleared first
    double restart_down_ms = 0.0;  ///< with restart: wall ms down before it comes back
  };
  PassFaults beforePass(std::uint32_t rank, std::uint64_t passes, std::uint64_t rank_passes,
                        double now_ms, std::vector<Injection>& out);

  /// What a newly submitted request suffers: an error or silence (the first error or silent
  /// fault that fires wins over any abort), or an abort after some tokens (the first abort
  /// fault that fires), with its injection. The caller records an error's or a silence's
  /// injection at once and an abort's when the stream reaches its token count (a request that
  /// ends first was not aborted).
  struct RequestFaults {
    bool silent = false;  ///< acknowledged, then never run and never answered until cancelled
    std::optional<ErrorCode> error;
    std::string error_message;  ///< names the fault ("fault injected: error (fault 0)")
    std::optional<std::uint32_t> abort_after_tokens;
    std::optional<Injection> injection;
  };
  RequestFaults onSubmit(std::uint32_t rank, std::string_view request_id, double now_ms) const;

  /// What a kv_fetch of request `request_id` (held on `rank` of this prefill worker) suffers:
  /// the first fetch fault whose `match` and rate draw (seed, fault index, request id) hit it,
  /// with its injection; none = answered as usual.
  struct FetchFaults {
    std::optional<FaultKind> kind;  ///< FetchNotFound, FetchLate or FetchNever
    double late_ms = 0.0;           ///< FetchLate: wall ms added to the answer time
    std::optional<Injection> injection;
  };
  FetchFaults onFetch(std::uint32_t rank, std::string_view request_id, double now_ms) const;

  /// What the next KV-event batch of `rank` suffers (several faults on one batch combine; a
  /// dropped batch is not sent at all). `seq`: the batch's sequence number; `passes` /
  /// `rank_passes`: passes run so far, the batch's own included; `now_ms`: engine time.
  struct BatchFaults {
    bool drop = false;
    bool unhealable = false;  ///< with drop: out of the replay ring too
    bool suppress = false;
    bool duplicate = false;
    bool reorder = false;
    bool truncate_ring = false;
    double delay_ms = 0.0;
    bool any() const {
      return drop || suppress || duplicate || reorder || truncate_ring || delay_ms > 0;
    }
  };
  BatchFaults onBatch(std::uint32_t rank, std::uint64_t seq, std::uint64_t passes,
                      std::uint64_t rank_passes, double now_ms, std::vector<Injection>& out);
  /// Whether any KV-event fault applies to this worker (the caller skips onBatch otherwise).
  bool hasKvFaults() const { return has_kv_; }
  /// Whether any kv_fetch fault applies to this worker.
  bool hasFetchFaults() const { return has_fetch_; }

  /// Arms `spec` at run time as fault `id` (the `fault` of its injections and of its rate
  /// draws; ids must not repeat), its trigger counted from now: `after_passes=N` fires N passes
  /// after the scope's current count (`passes`, or `rank_passes` of its `rank`), `at_ms=T` at
  /// T ms after `now_ms`. Returns the pass count it was armed at (the fault log's details say
  /// "armed at pass P"). The caller checks the scope (worker and rank exist).
  std::uint64_t arm(FaultSpec spec, std::uint32_t id, std::uint64_t passes,
                    std::uint64_t rank_passes, double now_ms);
  /// Stops fault `id` from firing again (what it already did stays: a hung rank stays hung, a
  /// frozen /metrics frozen, a stream already cut by an abort cut); false if it is not armed.
  bool disarm(std::uint32_t id);
  /// One armed fault as listed by the admin interface.
  struct ArmedInfo {
    std::uint32_t id = 0;
    FaultSpec spec;  ///< as given (a run-time fault's trigger relative to its arming)
    std::optional<std::uint64_t> armed_at_pass;  ///< run-time faults: the pass count then
  };
  std::vector<ArmedInfo> armed() const;

  /// An armed abort, held by the caller until the stream reaches `after_tokens`.
  struct PendingAbort {
    std::uint32_t after_tokens = 0;
    Injection injection;
  };

 private:
  struct Armed {
    FaultSpec spec;
    std::uint32_t index = 0;
    bool fired = false;        ///< crash / hang / slow onset injected
    std::uint64_t slowed = 0;  ///< slow: passes slowed so far
    std::uint64_t hits = 0;    ///< KV-event faults: batches hit so far
    FaultSpec given;           ///< the spec as given (arm(): before its trigger was shifted)
    std::optional<std::uint64_t> armed_at_pass;  ///< arm(): the scope's pass count then
  };
  /// `detail` with ", armed at pass P" for a run-time fault.
  static std::string withArming(const Armed& a, std::string detail);
  void noteKinds();
  bool inScope(const FaultSpec& spec, std::uint32_t rank) const;
  double draw(std::uint32_t fault, std::string_view request_id) const;
  double drawBatch(std::uint32_t fault, std::uint32_t rank, std::uint64_t seq) const;

  std::vector<Armed> specs_;
  std::uint64_t seed_ = 0;
  std::uint32_t worker_ = 0;
  bool has_kv_ = false;
  bool has_fetch_ = false;
};

}  // namespace mocker::service
