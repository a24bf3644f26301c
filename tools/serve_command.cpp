#include "tools/serve_command.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <optional>
#include <string>

#include "service/fleet.h"
#include "service/logging.h"
#include "service/server.h"
#include "tools/build_info.h"
#include "tools/output_path.h"

namespace mocker::tools {
namespace {

std::atomic<service::Fleet*> g_fleet{nullptr};

/// Allocations of at least this size get their own mapping, returned to the system when freed.
constexpr int kMmapThresholdBytes = 1 << 20;

extern "C" void onStopSignal(int /*signal*/) {
  if (service::Fleet* f = g_fleet.load()) f->requestStop();  // async-signal-safe (eventfds)
}

/// For a start-up error about an endpoint ("cannot bind PUB to 'tcp://…': Address already in
/// use"), the flag that sets that endpoint, found through the configuration: the first endpoint
/// key whose value (or the value of one of its per-rank sockets) is the endpoint in the message.
std::optional<std::string> flagOfFailedEndpoint(const ServeFlags& flags,
                                                const service::ServiceConfig& config,
                                                const std::string& message) {
  // The endpoint is the first quoted text with a scheme ("… to 'tcp://127.0.0.1:5557': …").
  std::string failed;
  for (std::size_t open = message.find('\''); open != std::string::npos;) {
    const std::size_t close = message.find('\'', open + 1);
    if (close == std::string::npos) break;
    const std::string quoted = message.substr(open + 1, close - open - 1);
    if (quoted.find("://") != std::string::npos) {
      failed = quoted;
      break;
    }
    open = message.find('\'', close + 1);
  }
  if (failed.empty()) return std::nullopt;
  // Every worker's configuration (a fleet's workers have shifted ports).
  auto workers = service::planFleet(config);
  if (!workers) workers = std::vector<service::ServiceConfig>{config};
  for (const service::ServiceConfig& worker : *workers) {
    for (const ServeFlags::Binding& b : flags.bindings) {
      if (b.boolean || !b.key.starts_with("endpoints.") || !b.key.ends_with(".endpoint")) continue;
      const auto value = service::configValueText(worker, b.key);
      if (!value) continue;
      for (std::uint32_t rank = 0; rank < std::max(1u, worker.engine.dp_size); ++rank) {
        const auto resolved = service::rankEndpoint({.endpoint = *value}, rank);
        if (resolved && *resolved == failed) return b.flag;
      }
    }
  }
  return std::nullopt;
}

/// A fleet opens many sockets (and each client connection one more): the soft limit on open
/// files goes up to the hard limit. Best effort; a failure leaves the limit as it was.
void raiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("mocker serve: could not raise the open-file limit");
  }
}

}  // namespace

void addServeCommand(CLI::App& app, ServeCommand& command) {
  command.cmd = app.add_subcommand(
      "serve",
      "Run the live service: submit/cancel ROUTERs, streamed outputs, KV-event and "
      "forward-pass-metric publishers (loopback endpoints by default)");
  command.cmd->add_flag("--drain", command.drain,
                        "on SIGINT/SIGTERM finish in-flight requests before exiting (default: "
                        "end them with a terminal `shutdown` message)");
  command.cmd
      ->add_option("--fleet-file", command.fleet_file,
                   "after binding, write every worker's resolved endpoints to FILE (JSON, "
                   "atomically) for `mocker index --fleet` / `mocker replay --fleet`")
      ->option_text("FILE");
  addServeFlags(*command.cmd, command.flags);
  command.cmd->footer(
      "Stops on SIGINT/SIGTERM. Prints one line per endpoint: `<name> <endpoint>`; with\n"
      "--num-workers N > 1 the names are `worker[I].<name>` (and `worker[I].worker_id ID`).\n"
      "HTTP (`http http://HOST:PORT`, unless --no-http): GET /metrics (Prometheus, vLLM's metric\n"
      "names; a fleet's workers told apart by the `worker` label), /health, /ready.\n"
      "`mocker config --dump [flags]` shows the effective configuration.");
}

int runServeCommand(const ServeCommand& command, std::ostream& out, std::ostream& err) {
  auto config = resolveServeConfig(command.flags);
  if (!config) {
    err << "mocker: configuration error: " << config.error().message << "\n";
    return 2;
  }
  service::setupLogging(config->log_level, config->log_format);
  // NOTE: glibc raises its mmap threshold to the size of any mapped block it frees (up to
  // 32 MiB); from then on blocks of that size come from the heap and stay resident after free.
  // One client message over the protocol limit (16 MiB + 1, answered with an error) would pin
  // that much RSS for the rest of the process's life. Setting the threshold fixes it (and the
  // trim threshold) so large message buffers always go back to the system.
  if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1) {
    spdlog::warn("mocker serve: mallopt(M_MMAP_THRESHOLD) failed; large buffers may stay resident");
  }
  // `ready` means serving: printed by the server once the startup delay is over.
  const auto on_ready = [&out] {
    out << "ready\n";
    out.flush();
  };
  // The fleet file is written once every socket is bound: a path that cannot be written fails
  // now, naming the file, instead of after the bind.
  if (!command.fleet_file.empty()) {
    if (const Status st = checkOutputFile("--fleet-file", command.fleet_file); !st) {
      err << "mocker: " << st.error().message << "\n";
      return 1;
    }
  }
  if (config->fleet.num_workers > 1) raiseOpenFileLimit();
  auto fleet = service::Fleet::create(*config, {.drain = command.drain, .on_ready = on_ready});
  if (!fleet) {
    const std::string& message = fleet.error().message;
    err << "mocker: cannot start: " << message;
    if (message.find("Address already in use") != std::string::npos) {
      const auto flag = flagOfFailedEndpoint(command.flags, *config, message);
      err << " (another process, perhaps another `mocker serve`, is bound there: stop it, or "
          << (flag ? "give " + *flag + " another address" : std::string("change that endpoint"))
          << "; `tcp://127.0.0.1:*` picks a free port)";
    } else if (message.starts_with("endpoints.http.endpoint")) {
      err << " (another process, perhaps another `mocker serve`, may be bound there: stop it, "
             "or give --http-endpoint another address; port 0 picks a free one, --no-http "
             "turns HTTP off)";
    }
    err << "\n";
    return 1;
  }
  service::Fleet& f = **fleet;
  const auto print = [&out](const std::string& prefix, const service::BoundEndpoints& ep) {
    out << prefix << "submit " << ep.submit << "\n" << prefix << "cancel " << ep.cancel << "\n";
    for (std::size_t r = 0; r < ep.kv_events.size(); ++r) {
      out << prefix << "kv_events[" << r << "] " << ep.kv_events[r] << "\n";
    }
    for (std::size_t r = 0; r < ep.kv_replay.size(); ++r) {
      out << prefix << "kv_replay[" << r << "] " << ep.kv_replay[r] << "\n";
    }
    for (std::size_t r = 0; r < ep.fpm.size(); ++r) {
      out << prefix << "fpm[" << r << "] " << ep.fpm[r] << "\n";
    }
    if (!ep.handoff.empty()) out << prefix << "handoff " << ep.handoff << "\n";
  };
  if (f.size() == 1) {
    print("", f.endpoints(0));
  } else {
    for (std::size_t i = 0; i < f.size(); ++i) {
      const std::string prefix = "worker[" + std::to_string(i) + "].";
      out << prefix << "worker_id " << f.workerId(i) << "\n";
      print(prefix, f.endpoints(i));
    }
  }
  if (!f.http().empty()) out << "http " << f.http() << "\n";
  if (!command.fleet_file.empty()) {
    const service::FleetManifest manifest = f.manifest(buildVersion());
    if (auto st =
            service::writeFileAtomically(command.fleet_file, service::fleetManifestJson(manifest));
        !st) {
      err << "mocker: --fleet-file: " << st.error().message << "\n";
      return 1;
    }
  }
  out.flush();
  spdlog::info(
      "mocker serve: {} {} worker(s), engine {} with {} rank(s), {} blocks of {} tokens "
      "each",
      f.size(), engine::toString(config->engine.worker_type),
      engine::toString(config->engine.engine_type), config->engine.dp_size,
      engine::effectiveNumGpuBlocks(config->engine), engine::effectiveBlockSize(config->engine));
  if (const auto tokens = engine::deploymentKvCacheTokens(config->engine)) {
    // vLLM's start-up line, per DP rank, when the deployment sized the cache.
    spdlog::info("{} (per rank, from the deployment)", engine::gpuKvCacheSizeText(*tokens));
  }

  g_fleet.store(&f);
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const Status status = f.run();
  g_fleet.store(nullptr);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (!status) {
    err << "mocker: " << status.error().message << "\n";
    return 1;
  }
  if (f.crashed()) {
    err << "mocker: crashed by a `crash` fault ([faults]); exit code "
        << service::kFaultCrashExitCode << "\n";
    return service::kFaultCrashExitCode;
  }
  spdlog::info("mocker serve: stopped");
  return 0;
}

}  // namespace mocker::tools
