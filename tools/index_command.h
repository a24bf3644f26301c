// `mocker index --worker ID=tcp://… [options]`: subscribes to workers' KV events, keeps the
// prefix index (tools/index/index_service.h), answers overlap / stats / verify queries on a
// ROUTER, prints periodic stats, and with `--verify [--once]` compares the index with each
// worker's kv_snapshot (tools/index/README.md).
//
//   IndexCommand index(app);            // registers the subcommand before app.parse()
//   if (index.parsed()) return index.run(out, err);
//
// Call from the main thread. Not copyable or movable: CLI11 holds pointers into it.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "protocol/index_query.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct IndexFlags {
  std::vector<std::string> workers;
  std::string fleet_file;  ///< --fleet: every worker and rank of a `mocker serve --fleet-file`
  std::string query_endpoint = "tcp://127.0.0.1:5560";
  std::uint32_t block_size = 64;  ///< = a default mocker serve's (vllm) block size
  std::uint64_t hash_seed = 1337;
  std::uint64_t chain_seed = 1337;
  bool verify = false;
  bool once = false;
  double stats_interval_s = 10.0;
  std::string stats_json;
  int rcvhwm = 100000;
  std::uint32_t probe_interval_ms = 1000;
  std::uint32_t replay_timeout_ms = 2000;
  std::uint32_t snapshot_timeout_ms = 5000;
  bool no_replay_at_start = false;
  int linger_ms = 100;
  std::string log_level = "info";
  std::string query_curve_secret_key_file;                ///< CURVE on the query ROUTER
  std::vector<std::string> query_curve_client_key_files;  ///< who may query (public key files)
  std::string worker_curve_server_key_file;  ///< CURVE towards the workers: their public key
  std::string worker_curve_secret_key_file;  ///< and this index's secret key
  bool worker_curve_publishers = false;      ///< the workers' PUBs use CURVE too
};

class IndexCommand final {
 public:
  explicit IndexCommand(CLI::App& app);
  IndexCommand(const IndexCommand&) = delete;
  IndexCommand& operator=(const IndexCommand&) = delete;

  bool parsed() const;

  /// Runs until SIGINT/SIGTERM (or, with --verify --once, until the verify finished). Exit code:
  /// 0 clean stop / verify found no difference, 1 verify found a difference or a runtime error,
  /// 2 usage error (bad --worker, ...). Stats go to `err`; verify results and endpoints to `out`.
  int run(std::ostream& out, std::ostream& err);

 private:
  CLI::App* cmd_ = nullptr;
  IndexFlags flags_;
};

/// Human-readable verify result (what `--verify` prints).
std::string formatVerifyReply(const index::VerifyReply& reply);

}  // namespace mocker::tools
