// HttpServer: the HTTP endpoint of `mocker serve` ([endpoints.http]) — GET /metrics (Prometheus
// text 0.0.4), GET /health (the process is alive and its loop turning) and GET /ready (sockets
// bound, startup delay over, not draining); service/README.md, "HTTP: metrics, health,
// readiness". With a FaultAdmin, also /admin/faults (service/README.md "Failure drills", "Admin
// interface"): its handlers hand commands to the loops and wait for their answers (bounded).
//
// Threads: start() binds on the caller's thread, then runs cpp-httplib's accept loop on a
// thread of its own with a small worker pool; the handlers read only the MetricsBoard (a copy of
// the published snapshot, atomics for phase and liveness), so a scrape never waits for the
// serve loop and the serve loop never waits for a scrape. Hostile clients are bounded by the
// timeouts and sizes in http_server.cpp; they can at worst occupy the HTTP workers, never the
// loop. Not copyable or movable; the destructor stops the server and joins its thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "service/config.h"
#include "service/metrics.h"

namespace mocker::service {

class FaultAdmin;

class HttpServer final {
 public:
  /// Binds `config.endpoint` (port 0 = ephemeral) and starts serving. Errors name the endpoint.
  /// `admin` (may be null: /admin is 404) must outlive this.
  static Result<std::unique_ptr<HttpServer>> start(const HttpEndpointConfig& config,
                                                   const MetricsBoard& board,
                                                   FaultAdmin* admin = nullptr);
  /// The same for several loops (a fleet): /metrics shows every board's series, /health and
  /// /ready are ok only when every board is. `boards` must not be empty and must outlive this.
  static Result<std::unique_ptr<HttpServer>> start(const HttpEndpointConfig& config,
                                                   std::vector<const MetricsBoard*> boards,
                                                   FaultAdmin* admin = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// "http://HOST:PORT" with the bound port.
  const std::string& url() const { return url_; }

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl, std::string url);
  std::unique_ptr<Impl> impl_;
  std::string url_;
};

}  // namespace mocker::service
