// The order in which the gateway hands the entries of one worker output message (one pass's
// outputs for ~every stream that worker runs) to their requests. Each streamed entry becomes a
// socket write, and a pass's ~50 writes take the gateway's one I/O thread ~0.7 ms; the engine
// lists a pass's newly admitted requests last, so taken in message order the first token of a
// new request waited behind every running stream's token (docs/benchmarks.md "Gateway figures",
// 2026-12-03 decomposition). Handling order:
//   1. entries that bring their request's first tokens, oldest request first — TTFT;
//   2. then every other entry, newest request first — a request that just got its first token
//      stays near the front on its next passes (its first inter-token gap is not stretched by a
//      whole burst), and each stream's place moves by only the few requests admitted per pass,
//      so the gaps between its tokens stay even.
// Only the order between different requests changes: a request has at most one entry per
// message and its own entries keep their order. The messages of one drain are ordered together
// (burstKeys): taken message by message, a worker's first tokens waited behind the whole burst of
// the other worker's message drained with it. Pure; no I/O.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

namespace mocker::gateway {

struct OutputKey {
  std::uint32_t index = 0;     ///< the entry's position in the message
  bool first_tokens = false;   ///< it carries tokens and its request has had none yet
  std::uint64_t dispatch = 0;  ///< its request's dispatch order (the gateway's; larger = newer)
};

/// Sorts `keys` into handling order (above).
void sortForHandling(std::vector<OutputKey>& keys);

/// How many keys lead `keys` (in handling order) with first tokens: where the gateway yields the
/// CPU once before the rest of a burst (gateway_server.cpp, `handleHeld`).
std::size_t firstTokensEnd(const std::vector<OutputKey>& keys);

/// One entry of a burst: the messages of one drain handled together (both workers' pass ends,
/// or two passes of one), so that every message's first tokens go before any message's other
/// entries.
struct BurstEntry {
  std::uint64_t dispatch = 0;  ///< its request's dispatch order
  bool has_tokens = false;
  bool had_tokens = false;  ///< its request got tokens before this burst
};

/// The keys of a burst's entries, given in collection order (message after message; `messages`
/// of them), into `keys` (cleared first; `seen` is scratch). An entry brings first tokens when it
/// has tokens, its request had none before, and it is that request's first entry in the burst:
/// a request has at most one entry per message, so with several messages its later entries are
/// "the rest" and, sorted by (dispatch, index), keep their order after it.
void burstKeys(const std::vector<BurstEntry>& entries, std::size_t messages,
               std::vector<OutputKey>& keys, std::unordered_set<std::uint64_t>& seen);

}  // namespace mocker::gateway
