// Admission: whether the serve loop takes a submit, and on which rank (service/README.md,
// "Limits"). The limits, the submit backlog that pauses reading submits, the least-loaded rank
// choice and the address-space probe that refuses work the process could not hold. No sockets:
// the loop asks before it queues a request in the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"
#include "engine/engine.h"
#include "protocol/client.h"
#include "service/config.h"
#include "service/route_table.h"

namespace mocker::service {

/// The limit (`[limits]`) a submit of `client` (with CURVE, of its key `principal`; empty
/// without) would break, as the error to answer it with; nullopt if none.
std::optional<Error> limitBroken(const LimitsConfig& limits, RouteTable& routes,
                                 const std::string& client, const std::string& principal,
                                 const protocol::SubmitRequest& req);

/// Whether submits wait unread: the engine's ranks have `max_backlog` or more waiting requests.
bool submitsPaused(const engine::Engine& engine, std::uint64_t max_backlog);

/// The least loaded rank (running + waiting), lowest index on ties.
std::uint32_t leastLoadedRank(const engine::Engine& engine);

/// True if `bytes` more of address space can still be mapped (RLIMIT_AS, overcommit): maps and
/// unmaps them without touching a page (~10 µs on a 2-core VM under load).
bool addressSpaceLeft(std::size_t bytes);

/// Refuses submits when the process is about to run out of address space, without probing on
/// every submit: the headroom is probed once `probe_every_bytes` of requests were accepted
/// since the last probe.
class AddressSpaceProbe {
 public:
  /// Address space a submit must leave unused: what the passes running the already queued
  /// work may still need (memory follows the tokens generated).
  static constexpr std::size_t kHeadroomBytes = std::size_t{64} << 20;
  /// 1 MiB is ~1,500 small requests, or every request of 256 k tokens (a probe costs ~10 µs).
  static constexpr std::size_t kProbeEveryBytes = std::size_t{1} << 20;
  /// What a queued request costs besides its token ids (engine record, queue slot, route).
  static constexpr std::size_t kRequestOverheadBytes = 640;

  explicit AddressSpaceProbe(std::size_t headroom_bytes = kHeadroomBytes,
                             std::size_t probe_every_bytes = kProbeEveryBytes)
      : headroom_bytes_(headroom_bytes), probe_every_bytes_(probe_every_bytes) {}

  /// The bytes a request costs while queued.
  static std::size_t cost(const protocol::SubmitRequest& req);
  /// Whether a request of `cost` bytes may be queued: probes when due (and, when the headroom
  /// is there, starts counting afresh); false means refuse it (`resource_exhausted`).
  bool admits(std::size_t cost);
  /// A request of `cost` bytes was queued.
  void accepted(std::size_t cost) { unprobed_bytes_ += cost; }
  std::size_t unprobedBytes() const { return unprobed_bytes_; }

 private:
  std::size_t headroom_bytes_;
  std::size_t probe_every_bytes_;
  std::size_t unprobed_bytes_ = 0;  // request bytes accepted since the last probe
};

}  // namespace mocker::service
