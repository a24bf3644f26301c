// LoraRollout: the gateway's run-time LoRA loads and unloads on its workers (gateway/README.md,
// "LoRA adapters"). POST /v1/load_lora_adapter and /v1/unload_lora_adapter send the client
// protocol's lora_load / lora_unload to every worker; the operation ends once each worker
// replied, or failed for a worker that is lost or silent past the timeout. One operation per
// adapter name at a time (vLLM holds a lock per name): a request for a name with an operation
// in flight is deferred, and run again (checked afresh) when that operation ends.
//
// Pure bookkeeping, no sockets; not thread-safe (the gateway's I/O thread owns it).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/lora_adapters.h"
#include "protocol/client.h"

namespace mocker::gateway {

class LoraRollout {
 public:
  using Clock = std::chrono::steady_clock;

  struct Outcome {
    protocol::LoraOp op = protocol::LoraOp::Load;
    std::string name;
    /// One per worker that refused or did not answer, in worker order: "worker 1: ...".
    std::vector<std::string> errors;
  };
  using Done = std::function<void(Outcome&&)>;

  /// True while an operation on adapter `name` is in flight.
  bool busy(const std::string& name) const { return ops_.contains(name); }
  std::size_t inFlight() const { return ops_.size(); }

  /// Starts `op` on `name`, awaited from workers 0..workers-1 (REQUIRES: !busy(name), workers
  /// >= 1). `done` runs once, when the last one answered or failed.
  void start(protocol::LoraOp op, const std::string& name, std::size_t workers,
             Clock::time_point now, Done done);
  /// Runs `retry` when the operation on `name` ends (REQUIRES: busy(name)).
  void defer(const std::string& name, std::function<void()> retry);

  /// Worker `worker`'s lora_reply. A reply no operation awaits is ignored (false).
  bool onReply(std::size_t worker, const protocol::LoraReply& reply);
  /// Worker `worker` is lost: every operation awaiting it fails for it with `why`.
  void onLost(std::size_t worker, const std::string& why);
  /// Operations started before now - timeout fail for every worker they still await.
  void expire(Clock::time_point now, std::chrono::milliseconds timeout);

 private:
  struct Op {
    protocol::LoraOp op;
    std::vector<bool> awaiting;  // per worker
    std::size_t left = 0;
    std::vector<std::optional<std::string>> errors;  // per worker
    Clock::time_point started;
    Done done;
    std::vector<std::function<void()>> deferred;
  };
  void answered(std::map<std::string, Op>::iterator it, std::size_t worker,
                std::optional<std::string> error);

  std::map<std::string, Op> ops_;  // by adapter name
};

/// The answer to a load or unload once `outcome` is in (vLLM's): an unload stops serving the
/// adapter and succeeds whatever the workers said (their refusals logged); a load that every
/// worker accepted serves `adapter` (checkLoad's) and succeeds; one that a worker refused is
/// vLLM's answer to an engine that cannot load it, 400 BadRequestError naming each refusal.
std::variant<std::string, ApiError> finishLoraUpdate(LoraAdapters& adapters,
                                                     LoraRollout::Outcome&& outcome,
                                                     std::optional<LoraAdapter>&& adapter);

}  // namespace mocker::gateway
