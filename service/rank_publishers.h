// RankPublishers: what one DP rank publishes on — the KV-event PUB sink and publisher, the
// KV-event replay ROUTER, the FPM PUB sink and publisher — opened from the configuration
// (`[kv_events]`, `[fpm]`, `[endpoints]`), with the warning for an endpoint other hosts can
// reach without CURVE. The serve loop keeps one per rank and only feeds it passes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "publishers/fpm_publisher.h"
#include "publishers/kv_event_publisher.h"
#include "publishers/zmq_sinks.h"
#include "service/config.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace mocker::service {

struct BoundEndpoints;

/// Wall-clock time as Unix seconds (the timestamp of a KV-event batch).
double unixSeconds();

/// Warns on `log` when `endpoint` is bound where other hosts can reach it and CURVE is off for
/// it (`publisher`: a PUB socket, guarded by security.curve_publishers).
void warnIfExposed(spdlog::logger& log, const std::string& what, const std::string& endpoint,
                   bool curve_on, bool publisher = false);

struct RankPublishers {
  std::unique_ptr<publishers::ZmqPubSink> kv_sink;
  std::unique_ptr<publishers::KvEventPublisher> kv;
  std::unique_ptr<publishers::ZmqReplayServer> replay;
  std::unique_ptr<publishers::ZmqPubSink> fpm_sink;
  std::unique_ptr<publishers::FpmPublisher> fpm;

  /// How the sockets are opened: the context, the CURVE server options for a bound socket
  /// (empty: none) and whether CURVE is on for the ROUTERs.
  struct Sockets {
    zmq::context_t& context;
    std::function<void(zmq::socket_t&)> secure;
    bool curve_on = false;
  };
  /// Opens rank `r`'s sockets and publishers, appends their resolved endpoints to `bound` and
  /// warns on `log` about exposed ones; with kv_events.clear_on_start, publishes the
  /// all-cleared event. Errors name the endpoint.
  static Result<RankPublishers> open(const ServiceConfig& config, std::uint32_t r,
                                     const Sockets& sockets, BoundEndpoints& bound,
                                     spdlog::logger& log);

  /// Logs (as warnings) the send errors the PUB sinks recorded since the last call.
  void logSinkErrors(spdlog::logger& log);
  /// The KV-event batch the rank's cache is in now: the last one published, or the next one
  /// when `events_pending` (a running pass has events still to publish at its end); nullopt
  /// without KV events or before the first batch.
  std::optional<std::uint64_t> lastKvSeq(bool events_pending) const;
};

}  // namespace mocker::service
