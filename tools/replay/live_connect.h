// Reaching the `mocker serve` instances of a live replay (tools/replay/live_replay.h): a
// server's endpoints (LiveTarget) and their default layout after its submit endpoint, the
// start-up handshake (a client per server, a `stats` round trip that tells its DP ranks, pass
// timing and engine), and the kv router's block size from what the servers reported.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "net/security.h"
#include "protocol/client.h"
#include "tools/index/live_kv_index.h"
#include "tools/replay/live_stats.h"

namespace mocker::net {
class Client;
}  // namespace mocker::net

namespace mocker::replay {

/// One running `mocker serve`: its submit and cancel ROUTER endpoints, and for the kv router its
/// KV-event PUB and replay ROUTER endpoints (one per DP rank, or only rank 0's: rank r then
/// uses port + r).
struct LiveTarget {
  std::string submit_endpoint;
  std::string cancel_endpoint;
  std::vector<std::string> kv_events{};
  std::vector<std::string> kv_replay{};
};

/// The endpoint `offset` ports after a server's tcp://HOST:PORT submit endpoint, when none is
/// given (the `mocker serve` default layout: cancel + 1, kv_events + 2, kv_replay + 3). `what`
/// names it in errors ("the cancel endpoint"), `flag` the option that gives it explicitly.
/// Errors for text that is no endpoint (e.g. "missing tcp://"), other schemes (ipc://,
/// inproc://), a missing or wildcard port, or a port past 65535 - offset.
Result<std::string> defaultEndpointAfter(std::string_view submit_endpoint, std::uint32_t offset,
                                         std::string_view what, std::string_view flag);

/// defaultEndpointAfter(submit_endpoint, 1): the cancel endpoint (--connect-cancel).
Result<std::string> defaultCancelEndpoint(std::string_view submit_endpoint);

/// The kv router's block size: `given` (--router-block-size; 0 = not given) or the one every
/// server reports (`engines[t]`, stats_reply.engine; `servers[t]` names it). Errors: a server
/// that reports another size than `given`, servers that disagree, no size given and one server
/// that does not report it.
Result<std::uint32_t> resolveKvBlockSize(
    std::uint32_t given, const std::vector<std::optional<protocol::EngineInfo>>& engines,
    const std::vector<std::string>& servers);

/// The kv router's index over the (prefill) servers `targets`: their KV-event and replay
/// endpoints, the DP ranks each reported at the handshake (`ranks[t]`), the block size and the
/// hash seeds.
index::LiveKvIndexConfig liveKvIndexConfig(const std::vector<LiveTarget>& targets,
                                           const std::vector<std::uint32_t>& ranks,
                                           std::uint32_t block_size, engine::HashSeeds seeds);

/// Connects a client to every server of `servers` (CURVE with `curve`) and waits, at most
/// `connect_timeout_ms`, for each one's answer to a `stats` request; fills `stats`'s
/// ranks_per_target, rank_offset, timing_start, engines and handoff_expired_start (servers in
/// order). Errors name the server: a socket that cannot connect, no answer in time, a reply that
/// does not decode.
Result<std::vector<std::unique_ptr<net::Client>>> connectServers(
    const std::vector<LiveTarget>& servers, const std::optional<net::CurveClientKeys>& curve,
    double connect_timeout_ms, LiveReplayStats& stats);

/// The end of a run: a `stats` request to every client, then reads their messages (`drain(t)`
/// reads client t's, and sets `pending[t]` false at its stats_reply) until every client asked
/// has answered or `wait_ms` has passed. A client whose send fails is not waited for.
void finalStatsRoundTrip(const std::vector<net::Client*>& clients, std::vector<bool>& pending,
                         int wait_ms, const std::function<void(std::uint32_t)>& drain);

}  // namespace mocker::replay
