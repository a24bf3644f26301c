// WorkerChoice: which worker a choice goes to — the gateway's socket-free routing state.
// Requests go to the "request workers" (all workers, or the prefill workers of a disaggregated
// fleet: the first num_request of them); a disaggregated choice's handoff goes to one of the
// decode workers after them. Workers that stopped answering (WorkerPool Liveness::Lost) are
// skipped until they answer again:
//   round_robin: the next live request worker after the previous pick;
//   random:      uniform over the live request workers (SplitMix64(seed));
//   decode hop:  tools/replay/decode_router.h's rule over all decode workers (the same as
//                `mocker replay --mode live`), then, when that one is lost, the next live one.
// The kv router's pick (kv_routing.h) is taken as given unless lost (then round robin).
//
// Not thread-safe: the gateway's I/O thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tools/replay/decode_router.h"
#include "tools/replay/random.h"

namespace mocker::gateway {

class WorkerChoice {
 public:
  WorkerChoice(std::size_t num_request, std::size_t num_decode, bool random,
               replay::DecodeRouterKind decode_router, std::uint64_t seed);

  bool anyLiveRequestWorker() const;
  /// A live request worker; none when every one is lost.
  std::optional<std::size_t> pickRequestWorker();
  /// `kv_pick` when it is live, else pickRequestWorker().
  std::optional<std::size_t> keepOrPick(std::size_t kv_pick);
  /// A live decode worker (a worker index, after the request workers) for the choice
  /// dispatched `dispatch`-th, counted in flight there until decodeEnded(); none when every
  /// decode worker is lost.
  std::optional<std::size_t> pickDecodeWorker(std::uint64_t dispatch);
  void decodeEnded(std::size_t worker);

  void setLost(std::size_t worker, bool lost) { lost_.at(worker) = lost; }
  bool lost(std::size_t worker) const { return lost_.at(worker); }
  bool isDecode(std::size_t worker) const { return worker >= num_request_; }
  std::size_t numRequestWorkers() const { return num_request_; }

 private:
  std::size_t num_request_;
  bool random_;
  replay::DecodeRouterKind decode_router_;
  std::uint64_t seed_;
  replay::SplitMix64 rng_;
  std::size_t next_ = 0;
  std::vector<bool> lost_;
  std::vector<std::uint32_t> decode_in_flight_;
};

}  // namespace mocker::gateway
