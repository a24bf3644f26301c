// `mocker index`'s flags → IndexServiceConfig (contract in index_plan.h).
#include "tools/index_plan.h"

#include <string>

#include "net/security.h"
#include "service/fleet.h"
#include "tools/index/worker_spec.h"

namespace mocker::tools {
namespace {

/// Every rank of every worker in a `mocker serve --fleet-file` manifest; its block size into
/// `block_size` unless --block-size was given.
Status addFleetWorkers(const std::string& path, bool block_size_given,
                       index::IndexServiceConfig& config) {
  auto manifest = service::loadFleetManifest(path);
  if (!manifest) return invalidArgument("--fleet: " + manifest.error().message);
  for (const service::FleetManifest::Worker& w : manifest->workers) {
    for (std::uint32_t r = 0; r < w.ranks.size(); ++r) {
      if (w.ranks[r].kv_events.empty()) {
        return invalidArgument("--fleet: worker " + std::to_string(w.worker_id) +
                               " publishes no KV events (its kv_events endpoint is null)");
      }
      config.workers.push_back({.worker_id = w.worker_id,
                                .dp_rank = r,
                                .events = w.ranks[r].kv_events,
                                .replay = w.ranks[r].kv_replay,
                                .snapshot = w.submit});
    }
  }
  if (!block_size_given) {
    if (manifest->block_size > index::kMaxQueryBlockSize) {
      return invalidArgument("--fleet: block_size " + std::to_string(manifest->block_size) +
                             " is above the query limit " +
                             std::to_string(index::kMaxQueryBlockSize));
    }
    config.block_size = manifest->block_size;
  }
  return {};
}

/// The --worker specs; an endpoint without a transport is refused with the expected form.
Status addWorkerSpecs(const std::vector<std::string>& specs, index::IndexServiceConfig& config) {
  for (const std::string& spec : specs) {
    auto parsed = index::parseWorkerSpec(spec);
    if (!parsed) return parsed.error();
    for (const index::WorkerEndpoint& w : *parsed) {
      for (const std::string* ep : {&w.events, &w.replay, &w.snapshot}) {
        if (ep->empty() || ep->find("://") != std::string::npos) continue;
        return invalidArgument(
            "--worker '" + spec + "': endpoint '" + *ep +
            "' has no transport; expected ID[/RANK]=tcp://HOST:PORT[,replay=tcp://HOST:PORT]"
            "[,snapshot=tcp://HOST:PORT][,dp=N], e.g. 0=tcp://127.0.0.1:5557");
      }
    }
    config.workers.insert(config.workers.end(), parsed->begin(), parsed->end());
  }
  return {};
}

/// CURVE on the query ROUTER and towards the workers, from key files.
Status addCurveKeys(const IndexFlags& f, index::IndexServiceConfig& config) {
  if (!f.query_curve_secret_key_file.empty()) {
    MOCKER_TRY(config.query_curve_secret_key,
               net::readKeyFile(f.query_curve_secret_key_file, "--query-curve-secret-key-file"));
    for (const std::string& path : f.query_curve_client_key_files) {
      std::string pub;
      MOCKER_TRY(pub, net::readKeyFile(path, "--query-curve-client-key-files"));
      config.query_curve_clients.push_back(std::move(pub));
    }
  }
  if (!f.worker_curve_secret_key_file.empty()) {
    MOCKER_TRY(config.worker_curve_server_key,
               net::readKeyFile(f.worker_curve_server_key_file, "--worker-curve-server-key-file"));
    MOCKER_TRY(config.worker_curve_secret_key,
               net::readKeyFile(f.worker_curve_secret_key_file, "--worker-curve-secret-key-file"));
    config.worker_curve_publishers = f.worker_curve_publishers;
  }
  return {};
}

}  // namespace

Result<index::IndexServiceConfig> indexConfigFromFlags(const IndexFlags& f, bool block_size_given) {
  if (f.once && !f.verify) return invalidArgument("--once needs --verify");
  if (f.workers.empty() && f.fleet_file.empty()) {
    return invalidArgument("give the workers: --worker ... (one per worker) or --fleet FILE");
  }
  index::IndexServiceConfig config;
  config.block_size = f.block_size;
  if (!f.fleet_file.empty()) {
    MOCKER_TRY_VOID(addFleetWorkers(f.fleet_file, block_size_given, config));
  }
  MOCKER_TRY_VOID(addWorkerSpecs(f.workers, config));
  MOCKER_TRY_VOID(addCurveKeys(f, config));
  config.query_endpoint = f.query_endpoint == "none" ? "" : f.query_endpoint;
  config.seeds = {f.hash_seed, f.chain_seed};
  config.sub_rcvhwm = f.rcvhwm;
  config.linger_ms = f.linger_ms;
  config.replay_at_start = !f.no_replay_at_start;
  config.probe_interval = std::chrono::milliseconds(f.probe_interval_ms);
  config.replay_timeout = std::chrono::milliseconds(f.replay_timeout_ms);
  config.snapshot_timeout = std::chrono::milliseconds(f.snapshot_timeout_ms);
  config.stats_interval = std::chrono::milliseconds(static_cast<long>(f.stats_interval_s * 1000));
  config.verify_at_start = f.verify;
  config.stop_after_verify = f.once;
  return config;
}

}  // namespace mocker::tools
