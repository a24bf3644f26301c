// The decode-hop router of disaggregated serving: which decode worker receives a prefill
// worker's handoff. Shared by `mocker replay --mode live` with decode servers and `mocker
// gateway --decode-fleet` so both hand off by the same rule (tools/replay/README.md,
// Disaggregated replay):
//   round_robin:  the request's dispatch index mod D;
//   random:       SplitMix64(seed) mixed with the dispatch index (the same request goes to the
//                 same decode worker whatever order the handoffs arrive in);
//   least_loaded: the decode worker with the fewest requests handed to it and not ended, ties to
//                 the lowest index (the kv router's choice for this hop: overlap credit 0).
//
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "tools/replay/router_kind.h"

namespace mocker::replay {

enum class DecodeRouterKind { RoundRobin, Random, LeastLoaded };

/// The decode hop's rule for `--decode-router`: random → Random, kv → LeastLoaded (overlap
/// credit 0), round_robin → RoundRobin (kv_prefix is refused before a run; RoundRobin).
DecodeRouterKind decodeRouterKindFor(RouterKind kind);

/// The decode worker (< in_flight.size(), which must be > 0) for the request dispatched
/// `index`-th; `in_flight[d]`: requests handed to decode worker d and not ended.
std::uint32_t pickDecodeWorker(DecodeRouterKind kind, std::uint64_t seed, std::uint64_t index,
                               std::span<const std::uint32_t> in_flight);

}  // namespace mocker::replay
