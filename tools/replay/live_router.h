// LiveRouter: where the live replay (live_replay.h) sends a request, as a socket-free unit — the
// router kinds of `--router` over the (prefill) servers that are routable (worker_health.h), and
// the decode hop of a disaggregated run (decode_router.h). The loop says which servers may be
// used and what happened to a request; the kv router's cache view comes from a query function
// (the live replay's in-process `mocker index`; a table in the tests).
//
//   round_robin: the k-th route() call goes to the (k mod up)-th routable server, k counting
//                every call (a dispatch, or a migration: live_replay.h "Migration");
//   random:      a uniform draw among the routable servers from SplitMix64(seed), one per call;
//   kv:          Dynamo's KV-router cost (kv_router.h) over every (server, DP rank), the ranks
//                of servers that are not routable left out; the request's load is added to the
//                chosen rank until prefillDone() / released(). An overlap query that fails
//                routes as if nothing were cached (said in LiveRoute::query_error).
//   decode hop:  routeDecode() by decode_router (round_robin / random by the request key,
//                kv = the decode server with the fewest requests handed to it and not ended)
//                among the decode servers that are routable (the k-th of them).
//
// Deterministic: the choices depend only on the calls, their order and the seed. Not
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/random.h"
#include "tools/replay/router_kind.h"

namespace mocker::replay {

/// The kv router's view of the servers' caches for a prompt's block hashes: for every global
/// rank (rank_offset[server] + rank), the leading cached blocks (`overlaps`) and the blocks the
/// index holds (`cached`, the tie-break). Both are sized to the number of ranks by the caller.
using KvOverlapQuery =
    std::function<Status(std::span<const std::uint64_t> hashes,
                         std::vector<std::uint32_t>& overlaps, std::vector<std::uint64_t>& cached)>;

struct LiveRouterConfig {
  RouterKind kind = RouterKind::RoundRobin;  ///< RoundRobin, Random or Kv
  std::uint64_t seed = 0;
  /// DP ranks of each (prefill) server, in --connect order: the servers, and the kv router's
  /// candidates (every rank of every server).
  std::vector<std::uint32_t> ranks_per_server{};
  KvRouterConfig kv{};                ///< Kv only
  std::uint32_t kv_block_size = 16;   ///< Kv only: the servers' block size (>= 1)
  engine::HashSeeds kv_hash_seeds{};  ///< Kv only: the servers' hash seeds
  RouterKind decode_kind = RouterKind::RoundRobin;
  std::uint32_t num_decode = 0;  ///< decode servers (0: aggregated, routeDecode unused)
};

/// A route() choice.
struct LiveRoute {
  std::uint32_t server = 0;
  std::optional<std::uint32_t> rank{};       ///< kv: the DP rank chosen (the request names it)
  bool cached_prefix = false;                ///< kv: routed where the overlap was > 0
  std::optional<std::string> query_error{};  ///< kv: the overlap query failed (overlap 0 used)
};

class LiveRouter {
 public:
  /// `query` is used by the kv router only (may be empty otherwise).
  LiveRouter(LiveRouterConfig config, KvOverlapQuery query);

  /// The server for request `request` (a key unique among the requests routed and not
  /// released) with prompt `prompt`, among the servers `routable` marks (one entry per
  /// server); nullopt when none is. Kv: the request's load now counts on its rank; the prompt is
  /// hashed under its adapter `lora` (absent = the base model) as the engine hashes it, so blocks
  /// cached under another adapter are no overlap.
  std::optional<LiveRoute> route(std::uint64_t request, std::span<const std::uint32_t> prompt,
                                 const std::vector<bool>& routable,
                                 const std::optional<std::string>& lora = std::nullopt);
  /// Kv load: the request's first token arrived (its prefill is done).
  void prefillDone(std::uint64_t request);
  /// Kv load: the request left its server (ended, handed off or migrated). Unknown: ignored.
  void released(std::uint64_t request);

  /// The decode server for request `request`'s handoff among the decode servers `routable`
  /// marks (one entry per decode server; worker_health.h), by the decode hop's rule
  /// (decode_router.h) over those servers alone — the same choice as over all of them while
  /// every one is routable; nullopt when none is. The choice counts as in flight there until
  /// decodeEnded().
  std::optional<std::uint32_t> routeDecode(std::uint64_t request,
                                           const std::vector<bool>& routable);
  void decodeEnded(std::uint32_t decode_server);

  std::uint32_t numServers() const {
    return static_cast<std::uint32_t>(config_.ranks_per_server.size());
  }

 private:
  std::optional<LiveRoute> routeKv(std::uint64_t request, std::span<const std::uint32_t> prompt,
                                   const std::vector<bool>& routable,
                                   const std::optional<std::string>& lora);

  LiveRouterConfig config_;
  KvOverlapQuery query_;
  SplitMix64 rng_;
  std::uint64_t calls_ = 0;                      ///< route() calls so far (round robin)
  std::vector<std::uint32_t> decode_in_flight_;  ///< by decode server: handed off, not ended
  // Kv router.
  std::optional<KvCostRouter> kv_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> candidates_;  // g → (server, rank)
  std::vector<std::uint64_t> hashes_;                                // scratch
  std::vector<std::uint32_t> overlaps_;                              // scratch, by g
  std::vector<std::uint64_t> cached_;                                // scratch, by g
};

}  // namespace mocker::replay
