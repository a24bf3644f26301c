#include "tools/replay/live_connect.h"

#include <algorithm>
#include <chrono>
#include <variant>

#include "base/check.h"
#include "base/endpoint.h"
#include "net/client.h"

namespace mocker::replay {

using Clock = std::chrono::steady_clock;

Result<std::vector<std::unique_ptr<net::Client>>> connectServers(
    const std::vector<LiveTarget>& all, const std::optional<net::CurveClientKeys>& curve,
    double connect_timeout_ms, LiveReplayStats& stats) {
  std::vector<std::unique_ptr<net::Client>> clients;
  for (const LiveTarget& target : all) {
    net::ClientOptions client_options{.submit_endpoint = target.submit_endpoint,
                                      .cancel_endpoint = target.cancel_endpoint,
                                      .rcvhwm = 0,  // never make the server drop streams
                                      .sndhwm = 0,  // an open loop never blocks on a send
                                      .nonblocking_send = true,
                                      // A submit to a server with no connection (gone, or not
                                      // reached yet) is refused, not queued: the driver migrates
                                      // it at once (live_replay.h "Migration").
                                      .refuse_without_connection = true,
                                      .watch_connection = true};  // worker health
    if (curve) {
      client_options.curve_server_key = curve->server_public_key;
      client_options.curve_public_key = curve->public_key;
      client_options.curve_secret_key = curve->secret_key;
    }
    auto client = net::Client::connect(client_options);
    if (!client) {
      return Error{client.error().code, "cannot connect to " + target.submit_endpoint + " / " +
                                            target.cancel_endpoint + ": " + client.error().message};
    }
    clients.push_back(std::move(*client));
  }
  std::vector<net::Client*> ptrs;
  for (const auto& c : clients) ptrs.push_back(c.get());
  std::vector<std::optional<std::uint32_t>> ranks(clients.size());
  stats.timing_start.assign(clients.size(), std::nullopt);
  stats.engines.assign(clients.size(), std::nullopt);
  stats.handoff_expired_start.assign(clients.size(), 0);
  stats.faults_start.assign(clients.size(), std::nullopt);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::milli>(connect_timeout_ms));
  const auto answered = [&ranks] {
    return std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.has_value(); });
  };
  // The `stats` request goes out once the connection is up (the client refuses it before): retried
  // at each connection event, and every kHandshakeRetry as a backstop (libzmq may attach the
  // connection just after it reports the handshake).
  constexpr auto kHandshakeRetry = std::chrono::milliseconds(5);
  std::vector<bool> asked(clients.size(), false);
  while (!answered()) {
    bool all_asked = true;
    for (std::size_t t = 0; t < clients.size(); ++t) {
      if (!asked[t]) asked[t] = static_cast<bool>(clients[t]->send(protocol::StatsRequest{}));
      all_asked = all_asked && asked[t];
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      for (std::size_t t = 0; t < ranks.size(); ++t) {
        if (!ranks[t]) {
          return Error{ErrorCode::IoError,
                       "no answer from " + all[t].submit_endpoint + " within " +
                           std::to_string(static_cast<long long>(connect_timeout_ms)) +
                           " ms: is `mocker serve` running there?"};
        }
      }
    }
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(left);
    if (!all_asked) wait = std::min(wait, kHandshakeRetry);
    MOCKER_TRY(const std::vector<std::size_t> ready, net::Client::waitReadable(ptrs, wait));
    for (const std::size_t t : ready) {
      (void)clients[t]->takeConnectionEvents();  // the first handshake: nothing to act on
      while (true) {
        auto msg = clients[t]->receiveReady();
        if (!msg) {
          return Error{msg.error().code,
                       "server " + all[t].submit_endpoint +
                           " answered with a message that does not decode: " + msg.error().message};
        }
        if (!*msg) break;
        if (const auto* reply = std::get_if<protocol::StatsReply>(&**msg)) {
          ranks[t] = static_cast<std::uint32_t>(reply->ranks.size());
          stats.timing_start[t] = reply->timing;
          stats.engines[t] = reply->engine;
          stats.handoff_expired_start[t] = handoffExpiredOf(*reply);
          stats.faults_start[t] = reply->faults;
        }
      }
    }
  }
  std::uint32_t offset = 0;
  for (const auto& r : ranks) {
    stats.ranks_per_target.push_back(*r);
    stats.rank_offset.push_back(offset);
    offset += *r;
  }
  return clients;
}

Result<std::uint32_t> resolveKvBlockSize(
    std::uint32_t given, const std::vector<std::optional<protocol::EngineInfo>>& engines,
    const std::vector<std::string>& servers) {
  MOCKER_CHECK(engines.size() == servers.size());
  std::optional<std::uint32_t> reported;
  std::size_t first = 0;
  for (std::size_t t = 0; t < engines.size(); ++t) {
    if (!engines[t]) continue;
    const std::uint32_t bs = engines[t]->block_size;
    if (given != 0 && bs != given) {
      return invalidArgument("--router-block-size " + std::to_string(given) + " but server " +
                             servers[t] + " hashes its KV events in blocks of " +
                             std::to_string(bs) + " tokens: drop the flag (the servers say it)");
    }
    if (reported && bs != *reported) {
      return invalidArgument("the servers use different KV block sizes (" + servers[first] + ": " +
                             std::to_string(*reported) + ", " + servers[t] + ": " +
                             std::to_string(bs) + "): one kv router cannot hash for both");
    }
    if (!reported) first = t;
    reported = bs;
  }
  if (given != 0) return given;
  if (!reported) {
    return invalidArgument(
        "the servers do not report their KV block size (a mocker older than this one?): give "
        "--router-block-size");
  }
  const auto silent = std::find(engines.begin(), engines.end(), std::nullopt);
  if (silent != engines.end()) {
    return invalidArgument("server " + servers[static_cast<std::size_t>(silent - engines.begin())] +
                           " does not report its KV block size: give --router-block-size");
  }
  return *reported;
}

Result<std::string> defaultEndpointAfter(std::string_view submit_endpoint, std::uint32_t offset,
                                         std::string_view what, std::string_view flag) {
  const std::string text(submit_endpoint);
  const std::string plus = "PORT + " + std::to_string(offset);
  MOCKER_TRY(const Endpoint ep, parseEndpoint(submit_endpoint));
  if (!ep.isTcp()) {
    return invalidArgument("cannot derive " + std::string(what) + " of '" + text +
                           "' (only tcp://HOST:PORT has a default, " + plus + "): give it with " +
                           std::string(flag));
  }
  const std::optional<std::uint32_t> port = ep.numericPort();
  if (!port || *port == 0 || std::uint64_t{*port} + offset > 65535) {
    return invalidArgument("endpoint '" + text + "': expected a port in 1.." +
                           std::to_string(65535 - offset) + " after the last ':' (" +
                           std::string(what) + " is " + plus + ")");
  }
  return ep.withPort(*port + offset);
}

Result<std::string> defaultCancelEndpoint(std::string_view submit_endpoint) {
  return defaultEndpointAfter(submit_endpoint, 1, "the cancel endpoint", "--connect-cancel");
}

index::LiveKvIndexConfig liveKvIndexConfig(const std::vector<LiveTarget>& targets,
                                           const std::vector<std::uint32_t>& ranks,
                                           std::uint32_t block_size, engine::HashSeeds seeds) {
  index::LiveKvIndexConfig config{.block_size = block_size, .seeds = seeds};
  for (std::uint32_t t = 0; t < targets.size(); ++t) {
    config.servers.push_back({.submit_endpoint = targets[t].submit_endpoint,
                              .kv_events = targets[t].kv_events,
                              .kv_replay = targets[t].kv_replay,
                              .ranks = ranks[t]});
  }
  return config;
}

void finalStatsRoundTrip(const std::vector<net::Client*>& clients, std::vector<bool>& pending,
                         int wait_ms, const std::function<void(std::uint32_t)>& drain) {
  std::vector<bool> asked(clients.size(), false);
  for (std::uint32_t t = 0; t < clients.size(); ++t) {
    if (clients[t]->send(protocol::StatsRequest{})) {
      asked[t] = true;
      pending[t] = true;
    }
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  const auto waiting = [&] {
    for (std::size_t t = 0; t < asked.size(); ++t) {
      if (asked[t] && pending[t]) return true;
    }
    return false;
  };
  while (waiting() && Clock::now() < deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const auto ready = net::Client::waitReadable(clients, left);
    if (!ready) break;
    for (const std::size_t t : *ready) drain(static_cast<std::uint32_t>(t));
  }
}

}  // namespace mocker::replay
