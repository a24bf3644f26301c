// Fleet: several simulated workers in one `mocker serve` process (`[fleet] num_workers`), the
// port plan that gives every worker and DP rank its own ports, and the fleet file (a JSON
// manifest of every worker's endpoints) that `mocker index --fleet`, `mocker replay --fleet` and
// the Python client read. service/README.md, "Fleet" and "Port plan".
//
//   auto plan = planFleet(config);                 // per-worker configurations (pure)
//   auto fleet = Fleet::create(config, options);   // every worker's engine, sockets; one HTTP
//   writeFileAtomically(path, fleetManifestJson(fleet->manifest(version)));
//   fleet->run();                                  // until requestStop(); every worker
//
// Design: one thread per worker, each running an ordinary Server loop (its own engine, sockets,
// timers), all in one shared ZeroMQ context (one set of I/O threads); one HTTP endpoint reads
// every worker's metrics board. A busy worker delays another only through the shared cores.
//
// Thread-safety: planFleet, defaultEndpoints and the manifest functions are pure (apart from
// file I/O). Fleet: create, run and destroy on one thread; requestStop from any thread or a
// signal handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "service/config.h"
#include "service/server.h"

namespace mocker::service {

class HttpServer;

/// `mocker index`'s default query port: the default plan never gives it to a worker.
inline constexpr std::uint16_t kIndexQueryPort = 5560;
/// The default HTTP port: the plan never gives it to a ZeroMQ socket.
inline constexpr std::uint16_t kDefaultHttpPort = 8000;
/// The first port of the default plan (worker 0's submit ROUTER).
inline constexpr std::uint16_t kFirstPlanPort = 5555;

/// The default ZeroMQ endpoints (127.0.0.1) of one worker with `dp_size` ranks: from 5555 up,
/// submit (1 port), cancel (1), kv_events (dp_size ports, rank r on base + r), kv_replay
/// (dp_size), fpm (dp_size), handoff (1; opened by prefill workers only), each range placed at the
/// lowest free port such that it holds neither 5560 nor `http_port` (nor 8000). dp_size 1 gives the
/// classic 5555..5559. Fails only when the ranges do not fit below 65536.
Result<EndpointsConfig> defaultEndpoints(std::uint32_t dp_size,
                                         std::uint16_t http_port = kDefaultHttpPort);

/// Whether a configuration's ZeroMQ endpoint keys were all left at their defaults (none is in
/// `origins`): then finishServiceConfig lays them out with defaultEndpoints(dp_size).
bool endpointsLeftAtDefaults(const KeyOrigins& origins);

/// The fixed TCP ports a worker's configuration binds (every enabled, bound socket and rank;
/// wildcard, ipc and inproc endpoints have none), ascending.
std::vector<std::uint32_t> boundTcpPorts(const ServiceConfig& worker);

/// Every address a worker's configuration binds or connects, per rank: "tcp://127.0.0.1:5557"
/// (wildcards as configured, "tcp://127.0.0.1:*").
std::vector<std::string> workerAddresses(const ServiceConfig& worker);

/// The configurations of the config.fleet.num_workers workers. Worker 0 is `config` itself.
/// Worker i (i >= 1) has:
///   - fpm.worker_id = fpm.worker_id + i;
///   - every fixed TCP port shifted by k_i * W, where W = the span of worker 0's fixed ports
///     (highest - lowest + 1; a prefill worker's handoff port counts) and k_i is the i-th k >= 1
///     whose shifted ports hold neither 5560,
///     8000 nor the HTTP port (so blocks never overlap); wildcard ports stay wildcards (each
///     socket gets its own ephemeral port); ipc/inproc paths get the suffix "_w<i>"; connected
///     (`connect = true`) endpoints stay as they are (every worker connects there).
/// With num_workers > 1 every worker's `worker` metrics label is its worker id, prefixed by
/// service.worker_label and "-" when that is set. Errors: ports past 65535, worker id overflow.
Result<std::vector<ServiceConfig>> planFleet(const ServiceConfig& config);

/// The fleet file: every worker's resolved endpoints and what a consumer needs to read them.
struct FleetManifest {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string mocker_version;
  std::string model_name;        ///< service.served_model_name
  std::string engine_type;       ///< "vllm" | "sglang" | "trtllm"
  std::uint32_t block_size = 0;  ///< tokens per KV block (the effective size)
  std::uint32_t dp_size = 1;
  std::string http;  ///< "http://HOST:PORT" of the process; "" = no HTTP
  struct Rank {
    std::string kv_events;  ///< "" = not published
    std::string kv_replay;  ///< "" = no replay socket
    std::string fpm;        ///< "" = not published
    friend bool operator==(const Rank&, const Rank&) = default;
  };
  struct Worker {
    std::uint64_t worker_id = 0;
    std::string submit;
    std::string cancel;
    std::string handoff;      ///< prefill workers' handoff ROUTER; "" = none (key omitted)
    std::vector<Rank> ranks;  ///< dp_size entries, by rank
    friend bool operator==(const Worker&, const Worker&) = default;
  };
  std::vector<Worker> workers;
  friend bool operator==(const FleetManifest&, const FleetManifest&) = default;
};

/// The manifest as JSON text (service/README.md, "Fleet file"); ends with a newline.
std::string fleetManifestJson(const FleetManifest& manifest);
/// Parses a fleet file; errors name `source_name` and what is wrong.
Result<FleetManifest> parseFleetManifest(std::string_view text, std::string_view source_name);
/// Reads and parses a fleet file.
Result<FleetManifest> loadFleetManifest(const std::string& path);
/// Writes `text` to `path` atomically: a temporary file in the same directory, then rename.
Status writeFileAtomically(const std::string& path, std::string_view text);

class Fleet final {
 public:
  /// Plans (planFleet), creates every worker (engine, sockets) and, with HTTP enabled, the one
  /// HTTP endpoint. With one worker this is exactly one Server (its own context and HTTP).
  /// options.on_ready is called once, when every worker is serving.
  static Result<std::unique_ptr<Fleet>> create(ServiceConfig config, ServerOptions options = {});
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  std::size_t size() const { return servers_.size(); }
  std::uint64_t workerId(std::size_t i) const { return worker_ids_[i]; }
  const BoundEndpoints& endpoints(std::size_t i) const { return servers_[i]->endpoints(); }
  /// "http://HOST:PORT" of the process's HTTP endpoint; "" when disabled.
  const std::string& http() const { return http_url_; }
  /// The fleet file's contents (resolved endpoints) for this process.
  FleetManifest manifest(std::string mocker_version) const;

  /// Runs every worker (one thread each; worker 0 on the caller's) until requestStop(), or
  /// until one fails (the others are then stopped); the first error.
  Status run();
  /// Whether every worker's run ended by a `crash` fault (service/README.md "Failure drills");
  /// a fleet whose other workers still serve keeps running (call after run()).
  bool crashed() const;
  /// Stops every worker. Async-signal-safe; callable from any thread.
  void requestStop();

  Server& worker(std::size_t i) { return *servers_[i]; }

 private:
  Fleet() = default;

  ServiceConfig config_;
  std::vector<std::uint64_t> worker_ids_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::unique_ptr<HttpServer> http_;  // after servers_: stops before the boards it reads go
  std::string http_url_;
  std::unique_ptr<std::atomic<std::size_t>> ready_ = std::make_unique<std::atomic<std::size_t>>(0);
};

}  // namespace mocker::service
