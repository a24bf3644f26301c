#include "tools/index_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "service/logging.h"
#include "tools/cli_options.h"
#include "tools/index/index_service.h"
#include "tools/index_plan.h"

namespace mocker::tools {
namespace {

std::atomic<index::IndexService*> g_index{nullptr};

extern "C" void onIndexStopSignal(int /*signal*/) {
  if (index::IndexService* s = g_index.load()) s->requestStop();  // async-signal-safe (eventfd)
}

std::string hex(std::uint64_t h) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void listHashes(std::ostringstream& os, const char* what, const std::vector<std::uint64_t>& v) {
  constexpr std::size_t kShown = 16;
  os << "    " << what << " " << v.size() << ":";
  for (std::size_t i = 0; i < v.size() && i < kShown; ++i) os << " " << hex(v[i]);
  if (v.size() > kShown) os << " …";
  os << "\n";
}

nlohmann::json statsJson(const index::IndexStats& s, double events_per_s, double blocks_per_s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : index::statsCounters(s)) j[k] = v;
  j["uptime_s"] = s.uptime_s;
  j["events_per_s"] = events_per_s;
  j["blocks_per_s"] = blocks_per_s;
  return j;
}

/// --stats-interval-s / --stats-json: a line on `err` per interval, the JSON file rewritten
/// each time and at exit (rates over the interval since the previous call).
std::function<void(const index::IndexStats&)> statsReporter(const IndexFlags& f,
                                                            std::ostream& err) {
  return [&f, &err, last = index::IndexStats{},
          failed = false](const index::IndexStats& s) mutable {
    const double dt = s.uptime_s - last.uptime_s;
    const double ev = dt > 0 ? static_cast<double>(s.events_applied - last.events_applied) / dt : 0;
    const double bl = dt > 0 ? static_cast<double>(s.blocks_applied - last.blocks_applied) / dt : 0;
    if (f.stats_interval_s > 0) {
      err << fmt::format(
                 "index: {:.0f} events/s, {:.0f} blocks/s, {} blocks indexed ({} distinct, {} "
                 "sources); gaps {} detected / {} healed / {} unhealed; {} resyncs; {} decode "
                 "errors",
                 ev, bl, s.blocks_indexed, s.distinct_hashes, s.sources, s.gaps_detected,
                 s.gaps_healed, s.gaps_unhealed, s.resyncs, s.decode_errors)
          << std::endl;
    }
    if (!f.stats_json.empty()) {
      const std::string tmp = f.stats_json + ".tmp";
      std::ofstream file(tmp);
      file << statsJson(s, ev, bl).dump(2) << "\n";
      file.close();
      if (!file || std::rename(tmp.c_str(), f.stats_json.c_str()) != 0) {
        if (!failed) err << "mocker index: cannot write " << f.stats_json << "\n";
        failed = true;
      }
    }
    last = s;
  };
}

}  // namespace

std::string formatVerifyReply(const index::VerifyReply& r) {
  std::ostringstream os;
  std::uint64_t blocks = 0;
  for (const auto& d : r.sources) blocks += d.worker_blocks;
  // A worker that could not be compared (no snapshot, no answer) is an error, not a difference.
  const char* verdict = r.ok ? "OK" : !r.errors.empty() ? "ERROR" : "DIFFERENCE";
  os << "verify: " << verdict << " (" << r.sources.size() << " source(s), " << blocks
     << " worker block(s)";
  if (!r.errors.empty()) os << "; " << r.errors.size() << " could not be compared";
  os << ")\n";
  for (const auto& d : r.sources) {
    const bool same = d.missing.empty() && d.extra.empty();
    os << "  worker " << d.worker_id << " rank " << d.dp_rank << ": index " << d.index_blocks
       << " block(s), worker " << d.worker_blocks << (same ? " — same\n" : " — differ\n");
    if (!same) {
      listHashes(os, "missing in index", d.missing);
      listHashes(os, "extra in index", d.extra);
    }
  }
  for (const auto& e : r.errors) os << "  error: " << e << "\n";
  return os.str();
}

IndexCommand::IndexCommand(CLI::App& app) {
  cmd_ = app.add_subcommand(
      "index",
      "KV-event subscriber keeping a router's prefix index: gap healing via replay, resync "
      "from kv_snapshot, overlap queries on a ROUTER, --verify");
  IndexFlags& f = flags_;
  cmd_->add_option("--worker", f.workers,
                   "ID[/RANK]=tcp://HOST:PORT[,replay=EP][,snapshot=EP][,dp=N][,topic=T] "
                   "(repeatable; one per worker, or one per rank with /RANK)")
      ->take_all();
  cmd_->add_option("--fleet", f.fleet_file,
                   "every worker and rank of a `mocker serve --fleet-file FILE` (its KV-event, "
                   "replay and submit endpoints; its block size is the token queries' default)")
      ->option_text("FILE");
  cmd_->add_option("--query-endpoint", f.query_endpoint,
                   "ROUTER for overlap/stats/verify queries (binds); 'none' disables")
      ->capture_default_str();
  cmd_->add_option("--block-size", f.block_size, "default block size of token queries")
      ->capture_default_str()
      ->check(between(1, index::kMaxQueryBlockSize));
  cmd_->add_option("--hash-seed", f.hash_seed, "default content-hash seed of token queries")
      ->capture_default_str();
  cmd_->add_option("--chain-seed", f.chain_seed, "default chain-hash seed of token queries")
      ->capture_default_str();
  cmd_->add_flag("--verify", f.verify,
                 "after catching up, compare the index with every worker's kv_snapshot and "
                 "print the difference");
  cmd_->add_flag("--once", f.once, "with --verify: exit after it (exit 1 on a difference)");
  cmd_->add_option("--stats-interval-s", f.stats_interval_s,
                   "print stats on stderr every S seconds (0 = never)")
      ->capture_default_str()
      ->check(between(0, 86400));
  cmd_->add_option("--stats-json", f.stats_json,
                   "write stats as JSON to FILE every interval and at exit");
  cmd_->add_option("--rcvhwm", f.rcvhwm, "ZMQ_RCVHWM of each SUB (0 = unlimited)")
      ->capture_default_str()
      ->check(atLeast(0));
  cmd_->add_option("--probe-interval-ms", f.probe_interval_ms,
                   "ask an idle rank for a replay from its next seq this often (0 = never)")
      ->capture_default_str();
  cmd_->add_option("--replay-timeout-ms", f.replay_timeout_ms, "replay end-marker timeout")
      ->capture_default_str()
      ->check(between(1, 3600000));
  cmd_->add_option("--snapshot-timeout-ms", f.snapshot_timeout_ms, "kv_snapshot reply timeout")
      ->capture_default_str()
      ->check(between(1, 3600000));
  cmd_->add_flag("--no-replay-at-start", f.no_replay_at_start,
                 "do not ask replay(0) at connect; start at the first live seq");
  cmd_->add_option("--linger-ms", f.linger_ms, "ZMQ_LINGER on close")
      ->capture_default_str()
      ->check(between(0, 60000));
  cmd_->add_option("--log-level", f.log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  auto* query_key = cmd_->add_option("--query-curve-secret-key-file", f.query_curve_secret_key_file,
                                     "CURVE on the query ROUTER: this index's secret key file "
                                     "(mocker keygen)");
  auto* query_clients =
      cmd_->add_option("--query-curve-client-key-files", f.query_curve_client_key_files,
                       "CURVE on the query ROUTER: public key files of the clients allowed to "
                       "query (comma-separated)")
          ->delimiter(',');
  query_key->needs(query_clients);
  query_clients->needs(query_key);
  auto* worker_server =
      cmd_->add_option("--worker-curve-server-key-file", f.worker_curve_server_key_file,
                       "CURVE workers: their public key file");
  auto* worker_secret =
      cmd_->add_option("--worker-curve-secret-key-file", f.worker_curve_secret_key_file,
                       "CURVE workers: this index's secret key file (its public key must be on "
                       "the workers' allow-list)");
  worker_server->needs(worker_secret);
  worker_secret->needs(worker_server);
  cmd_->add_flag("--worker-curve-publishers", f.worker_curve_publishers,
                 "the workers' KV-event PUBs use CURVE too (their curve_publishers)")
      ->needs(worker_server);
  cmd_->footer(
      "Prints `query <endpoint>` and `ready` on stdout once the sockets are up. Stops on "
      "SIGINT/SIGTERM. See index.md in /usr/share/doc/mocker (tools/index/README.md in the "
      "sources) for the worker syntax and the query protocol.");
}

bool IndexCommand::parsed() const { return cmd_->parsed(); }

int IndexCommand::run(std::ostream& out, std::ostream& err) {
  const IndexFlags& f = flags_;
  auto config = indexConfigFromFlags(f, cmd_->get_option("--block-size")->count() > 0);
  if (!config) {
    err << "mocker index: " << config.error().message << "\n";
    return 2;
  }
  const auto level = service::parseLogLevel(f.log_level);
  if (!level) {
    err << "mocker index: --log-level: " << level.error().message << "\n";
    return 2;
  }
  service::setupLogging(*level);
  config->on_stats = statsReporter(f, err);
  bool differences = false;
  config->on_verify = [&](const index::VerifyReply& r) {
    out << formatVerifyReply(r);
    out.flush();
    differences = differences || !r.ok;
  };

  const std::string query_endpoint = config->query_endpoint;
  auto service = index::IndexService::create(std::move(*config));
  if (!service) {
    err << "mocker index: cannot start: " << service.error().message;
    // The query ROUTER is the only socket the index binds.
    if (!query_endpoint.empty() &&
        service.error().message.find("'" + query_endpoint + "'") != std::string::npos) {
      err << " (give --query-endpoint another address, or 'none')";
    }
    err << "\n";
    return service.error().code == ErrorCode::InvalidArgument ? 2 : 1;
  }
  if (!(*service)->queryEndpoint().empty()) out << "query " << (*service)->queryEndpoint() << "\n";
  out << "ready\n";
  out.flush();

  g_index.store(service->get());
  struct sigaction action {};
  action.sa_handler = onIndexStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const Status status = (*service)->run();
  g_index.store(nullptr);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (!status) {
    err << "mocker index: " << status.error().message << "\n";
    return 1;
  }
  return differences ? 1 : 0;
}

}  // namespace mocker::tools
