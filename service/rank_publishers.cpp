#include "service/rank_publishers.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <zmq.hpp>

#include "base/endpoint.h"
#include "protocol/kv_events.h"
#include "service/server.h"

namespace mocker::service {
namespace {

/// ZMQ_MAXMSGSIZE of the replay ROUTER: a request is 9 bytes; larger frames drop the peer. With
/// CURVE the handshake commands must fit as well.
const std::int64_t kReplayMaxMessageBytes = publishers::ZmqReplayConfig{}.max_request_bytes;
constexpr std::int64_t kCurveReplayMaxMessageBytes = 1024;

std::string ranked(const char* what, std::uint32_t r) {
  return std::string(what) + "[" + std::to_string(r) + "]";
}

}  // namespace

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void warnIfExposed(spdlog::logger& log, const std::string& what, const std::string& endpoint,
                   bool curve_on, bool publisher) {
  if (curve_on) return;
  // A bound endpoint reachable from this host only (ipc, inproc, loopback) needs no warning.
  if (const auto ep = parseEndpoint(endpoint); !ep || ep->loopbackOnly()) return;
  if (publisher) {
    log.warn(
        "{} is bound to {}, reachable from other hosts, without CURVE: anyone who can connect "
        "can subscribe (set [security] curve_publishers = true, or bind to 127.0.0.1)",
        what, endpoint);
    return;
  }
  log.warn(
      "{} is bound to {}, reachable from other hosts, without CURVE: anyone who can connect can "
      "submit, cancel and read as any client (set [security] curve = true, or bind to 127.0.0.1)",
      what, endpoint);
}

Result<RankPublishers> RankPublishers::open(const ServiceConfig& config, std::uint32_t r,
                                            const Sockets& sockets, BoundEndpoints& bound,
                                            spdlog::logger& log) {
  RankPublishers rank;
  const std::function<void(zmq::socket_t&)> publisher_security =
      config.security.curve_publishers ? sockets.secure : std::function<void(zmq::socket_t&)>();
  const int linger_ms = static_cast<int>(config.service.linger_ms);
  if (config.kv_events.enabled) {
    MOCKER_TRY(const std::string ep, rankEndpoint(config.endpoints.kv_events, r));
    MOCKER_TRY(rank.kv_sink, publishers::ZmqPubSink::create(
                                 sockets.context, {.endpoint = ep,
                                                   .connect = config.endpoints.kv_events.connect,
                                                   .sndhwm = static_cast<int>(config.kv_events.hwm),
                                                   .linger_ms = linger_ms,
                                                   .configure = publisher_security}));
    bound.kv_events.push_back(rank.kv_sink->endpoint());
    if (!config.endpoints.kv_events.connect) {
      warnIfExposed(log, ranked("kv_events", r), rank.kv_sink->endpoint(),
                    config.security.curve_publishers, /*publisher=*/true);
    }
    publishers::KvEventPublisherConfig kc;
    kc.dp_rank = r;
    kc.topic = config.kv_events.topic;
    kc.encoding.layout = config.kv_events.layout;
    kc.encoding.parent_root = config.kv_events.parent_root;
    kc.encoding.force_uint64_hashes = config.kv_events.force_uint64_hashes;
    kc.buffer_steps = config.kv_events.buffer_steps;
    kc.replay_layout = config.kv_events.replay_layout;
    MOCKER_TRY(rank.kv, publishers::KvEventPublisher::create(kc, *rank.kv_sink));
    if (config.kv_events.replay_enabled) {
      MOCKER_TRY(const std::string rep, rankEndpoint(config.endpoints.kv_replay, r));
      MOCKER_TRY(rank.replay,
                 publishers::ZmqReplayServer::create(
                     sockets.context,
                     {.endpoint = rep,
                      .connect = config.endpoints.kv_replay.connect,
                      .linger_ms = linger_ms,
                      // A CURVE handshake's commands (HELLO is 200 bytes) pass through
                      // ZMQ_MAXMSGSIZE too: 64 bytes refuses them all.
                      .max_request_bytes =
                          sockets.curve_on ? kCurveReplayMaxMessageBytes : kReplayMaxMessageBytes,
                      .configure = sockets.secure},
                     *rank.kv));
      bound.kv_replay.push_back(rank.replay->endpoint());
      warnIfExposed(log, ranked("kv_replay", r), rank.replay->endpoint(), sockets.curve_on);
    }
    if (config.kv_events.clear_on_start && config.engine.enable_prefix_caching) {
      rank.kv->publishEvents({protocol::AllBlocksClearedEvent{}}, unixSeconds());
    }
  }
  if (config.fpm.enabled) {
    MOCKER_TRY(const std::string ep, rankEndpoint(config.endpoints.fpm, r));
    MOCKER_TRY(rank.fpm_sink, publishers::ZmqPubSink::create(
                                  sockets.context, {.endpoint = ep,
                                                    .connect = config.endpoints.fpm.connect,
                                                    .linger_ms = linger_ms,
                                                    .configure = publisher_security}));
    bound.fpm.push_back(rank.fpm_sink->endpoint());
    if (!config.endpoints.fpm.connect) {
      warnIfExposed(log, ranked("fpm", r), rank.fpm_sink->endpoint(),
                    config.security.curve_publishers, /*publisher=*/true);
    }
    MOCKER_TRY(rank.fpm, publishers::FpmPublisher::create(
                             {.worker_id = config.fpm.worker_id,
                              .dp_rank = r,
                              .heartbeat_interval_s = config.service.fpm_heartbeat_interval_s},
                             *rank.fpm_sink));
  }
  return rank;
}

void RankPublishers::logSinkErrors(spdlog::logger& log) {
  for (publishers::ZmqPubSink* sink : {kv_sink.get(), fpm_sink.get()}) {
    if (auto error = sink ? sink->takeError() : std::nullopt) log.warn("{}", *error);
  }
}

std::optional<std::uint64_t> RankPublishers::lastKvSeq(bool events_pending) const {
  if (!kv) return std::nullopt;
  const std::uint64_t next = kv->nextSeq();
  // step() has already changed the cache; the pass's events go out when it completes.
  if (events_pending) return next;
  if (next == 0) return std::nullopt;
  return next - 1;
}

}  // namespace mocker::service
