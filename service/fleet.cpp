// The port plan, the fleet file and the in-process fleet (fleet.h).
#include "service/fleet.h"

#include <unistd.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "base/endpoint.h"
#include "engine/config.h"
#include "service/http_server.h"

namespace mocker::service {
namespace {

constexpr std::uint32_t kMaxPort = 65535;

/// The ZeroMQ endpoint keys the default plan lays out.
constexpr std::string_view kEndpointKeys[] = {
    "endpoints.submit.endpoint",    "endpoints.submit.connect",     "endpoints.cancel.endpoint",
    "endpoints.cancel.connect",     "endpoints.kv_events.endpoint", "endpoints.kv_events.connect",
    "endpoints.kv_replay.endpoint", "endpoints.kv_replay.connect",  "endpoints.fpm.endpoint",
    "endpoints.fpm.connect",        "endpoints.handoff.endpoint",   "endpoints.handoff.connect"};

/// The numeric port of a tcp://HOST:PORT endpoint; nullopt for a wildcard port or other schemes.
std::optional<std::uint32_t> fixedPort(std::string_view endpoint) {
  const auto ep = parseEndpoint(endpoint);
  return ep ? ep->numericPort() : std::nullopt;
}

struct Socket {
  const EndpointConfig* endpoint;
  bool per_rank;
  bool enabled;
};

std::vector<Socket> socketsOf(const ServiceConfig& c) {
  const KvEventsConfig& kv = c.kv_events;
  return {{&c.endpoints.submit, false, true},
          {&c.endpoints.cancel, false, true},
          {&c.endpoints.kv_events, true, kv.enabled},
          {&c.endpoints.kv_replay, true, kv.enabled && kv.replay_enabled},
          {&c.endpoints.fpm, true, c.fpm.enabled},
          {&c.endpoints.handoff, false, c.engine.worker_type == engine::WorkerType::Prefill}};
}

std::vector<EndpointConfig*> mutableEndpoints(ServiceConfig& c) {
  return {&c.endpoints.submit,    &c.endpoints.cancel, &c.endpoints.kv_events,
          &c.endpoints.kv_replay, &c.endpoints.fpm,    &c.endpoints.handoff};
}

std::optional<std::uint16_t> httpPort(const ServiceConfig& c) {
  if (!c.endpoints.http.enabled) return std::nullopt;
  const auto hp = parseHttpEndpoint(c.endpoints.http.endpoint);
  if (!hp || hp->port == 0) return std::nullopt;
  return hp->port;
}

std::string tcpAt(std::string_view host, std::uint64_t port) {
  return "tcp://" + std::string(host) + ":" + std::to_string(port);
}

}  // namespace

Result<EndpointsConfig> defaultEndpoints(std::uint32_t dp_size, std::uint16_t http_port) {
  const std::set<std::uint32_t> reserved = {kIndexQueryPort, kDefaultHttpPort, http_port};
  std::uint32_t next = kFirstPlanPort;
  const auto take = [&](std::uint32_t count) -> Result<std::uint32_t> {
    while (true) {
      const auto hit = reserved.lower_bound(next);
      if (hit == reserved.end() || *hit >= next + count) break;
      next = *hit + 1;
    }
    if (std::uint64_t{next} + count - 1 > kMaxPort) {
      return invalidArgument("engine.dp_size (" + std::to_string(dp_size) +
                             "): the default port plan does not fit below 65536");
    }
    const std::uint32_t first = next;
    next += count;
    return first;
  };
  EndpointsConfig e;
  const std::uint32_t dp = std::max(1u, dp_size);
  MOCKER_TRY(const std::uint32_t submit, take(1));
  MOCKER_TRY(const std::uint32_t cancel, take(1));
  MOCKER_TRY(const std::uint32_t events, take(dp));
  MOCKER_TRY(const std::uint32_t replay, take(dp));
  MOCKER_TRY(const std::uint32_t fpm, take(dp));
  MOCKER_TRY(const std::uint32_t handoff, take(1));
  e.submit.endpoint = tcpAt("127.0.0.1", submit);
  e.cancel.endpoint = tcpAt("127.0.0.1", cancel);
  e.kv_events.endpoint = tcpAt("127.0.0.1", events);
  e.kv_replay.endpoint = tcpAt("127.0.0.1", replay);
  e.fpm.endpoint = tcpAt("127.0.0.1", fpm);
  e.handoff.endpoint = tcpAt("127.0.0.1", handoff);
  return e;
}

bool endpointsLeftAtDefaults(const KeyOrigins& origins) {
  return std::none_of(std::begin(kEndpointKeys), std::end(kEndpointKeys),
                      [&](std::string_view key) { return origins.contains(key); });
}

std::vector<std::uint32_t> boundTcpPorts(const ServiceConfig& worker) {
  std::vector<std::uint32_t> ports;
  for (const Socket& s : socketsOf(worker)) {
    if (!s.enabled || s.endpoint->connect) continue;
    const auto base = fixedPort(s.endpoint->endpoint);
    if (!base) continue;
    const std::uint32_t ranks = s.per_rank ? std::max(1u, worker.engine.dp_size) : 1;
    for (std::uint32_t r = 0; r < ranks; ++r) ports.push_back(*base + r);
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

std::vector<std::string> workerAddresses(const ServiceConfig& worker) {
  std::vector<std::string> out;
  for (const Socket& s : socketsOf(worker)) {
    if (!s.enabled) continue;
    const std::uint32_t ranks = s.per_rank ? std::max(1u, worker.engine.dp_size) : 1;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      auto address = rankEndpoint(*s.endpoint, r);
      out.push_back(address ? *address : s.endpoint->endpoint);
    }
  }
  return out;
}

Result<std::vector<ServiceConfig>> planFleet(const ServiceConfig& config) {
  const std::uint32_t n = config.fleet.num_workers;
  if (n < 1 || n > kMaxFleetWorkers) {
    return invalidArgument("fleet.num_workers must be in [1, " + std::to_string(kMaxFleetWorkers) +
                           "] (got " + std::to_string(n) + ")");
  }
  std::vector<ServiceConfig> workers;
  workers.reserve(n);
  workers.push_back(config);
  if (n == 1) return workers;

  std::uint64_t base_id = 0;
  {
    const std::string& text = config.fpm.worker_id;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), base_id);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
      return invalidArgument("fpm.worker_id must be a decimal u64 (got '" + text + "')");
    }
    if (base_id > UINT64_MAX - (n - 1)) {
      return invalidArgument("fpm.worker_id (" + text + ") + fleet.num_workers - 1 exceeds 2^64-1");
    }
  }
  const std::vector<std::uint32_t> ports = boundTcpPorts(config);
  std::set<std::uint32_t> reserved = {kIndexQueryPort, kDefaultHttpPort};
  if (const auto http = httpPort(config)) reserved.insert(*http);
  const std::uint32_t width = ports.empty() ? 0 : ports.back() - ports.front() + 1;
  std::uint64_t k = 0;  // the last block used
  const auto label = [&](std::uint64_t id) {
    const std::string& prefix = config.service.worker_label;
    return prefix.empty() ? std::to_string(id) : prefix + "-" + std::to_string(id);
  };
  workers.front().service.worker_label = label(base_id);
  for (std::uint32_t i = 1; i < n; ++i) {
    std::uint64_t shift = 0;
    if (width > 0) {
      while (true) {
        ++k;
        shift = k * width;
        if (ports.back() + shift > kMaxPort) {
          return invalidArgument(
              "fleet.num_workers (" + std::to_string(n) + "): worker " + std::to_string(i) +
              " does not fit below port 65536 (each worker takes " + std::to_string(width) +
              " ports from " + std::to_string(ports.front()) +
              "); use fewer workers or ephemeral ports (tcp://127.0.0.1:*)");
        }
        const bool clash = std::any_of(ports.begin(), ports.end(), [&](std::uint32_t p) {
          return reserved.contains(static_cast<std::uint32_t>(p + shift));
        });
        if (!clash) break;
      }
    }
    ServiceConfig w = config;
    w.fpm.worker_id = std::to_string(base_id + i);
    w.service.worker_label = label(base_id + i);
    for (EndpointConfig* ep : mutableEndpoints(w)) {
      if (ep->connect) continue;
      const auto parsed = parseEndpoint(ep->endpoint);
      if (const auto port = parsed ? parsed->numericPort() : std::nullopt) {
        ep->endpoint = tcpAt(parsed->host, *port + shift);
      } else if (parsed && !parsed->isTcp()) {
        ep->endpoint += "_w" + std::to_string(i);
      }
    }
    workers.push_back(std::move(w));
  }
  return workers;
}

// --- The fleet file --------------------------------------------------------------------------

std::string fleetManifestJson(const FleetManifest& m) {
  using nlohmann::ordered_json;
  const auto orNull = [](const std::string& s) {
    return s.empty() ? ordered_json() : ordered_json(s);
  };
  ordered_json j;
  j["format"] = "mocker-fleet";
  j["version"] = m.version;
  j["mocker_version"] = m.mocker_version;
  j["model_name"] = m.model_name;
  j["engine_type"] = m.engine_type;
  j["block_size"] = m.block_size;
  j["dp_size"] = m.dp_size;
  j["http"] = orNull(m.http);
  ordered_json workers = ordered_json::array();
  for (const FleetManifest::Worker& w : m.workers) {
    ordered_json jw;
    jw["worker_id"] = w.worker_id;
    jw["submit"] = w.submit;
    jw["cancel"] = w.cancel;
    if (!w.handoff.empty()) jw["handoff"] = w.handoff;
    ordered_json ranks = ordered_json::array();
    for (std::size_t r = 0; r < w.ranks.size(); ++r) {
      ordered_json jr;
      jr["dp_rank"] = r;
      jr["kv_events"] = orNull(w.ranks[r].kv_events);
      jr["kv_replay"] = orNull(w.ranks[r].kv_replay);
      jr["fpm"] = orNull(w.ranks[r].fpm);
      ranks.push_back(std::move(jr));
    }
    jw["ranks"] = std::move(ranks);
    workers.push_back(std::move(jw));
  }
  j["workers"] = std::move(workers);
  return j.dump(2) + "\n";
}

Result<FleetManifest> parseFleetManifest(std::string_view text, std::string_view source_name) {
  const std::string where = std::string(source_name) + ": ";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument(where + "not JSON: " + e.what());
  }
  const auto fail = [&](const std::string& why) { return invalidArgument(where + why); };
  if (!j.is_object()) return fail("expected a JSON object (a mocker fleet file)");
  if (!j.contains("format") || j["format"] != "mocker-fleet") {
    return fail("not a mocker fleet file (\"format\" must be \"mocker-fleet\")");
  }
  if (!j.contains("version") || !j["version"].is_number_integer()) {
    return fail("\"version\" must be an integer");
  }
  FleetManifest m;
  m.version = j["version"].get<int>();
  if (m.version != FleetManifest::kVersion) {
    return fail("version " + std::to_string(m.version) + " is not supported (this mocker reads " +
                std::to_string(FleetManifest::kVersion) + ")");
  }
  const auto str = [&](const nlohmann::json& o, const char* key, const std::string& at,
                       bool nullable) -> Result<std::string> {
    if (!o.contains(key)) return fail(at + "\"" + key + "\" is missing");
    const nlohmann::json& v = o[key];
    if (v.is_null() && nullable) return std::string();
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
      return fail(at + "\"" + key + "\" must be a non-empty string" + (nullable ? " or null" : ""));
    }
    return v.get<std::string>();
  };
  const auto uint = [&](const nlohmann::json& o, const char* key,
                        const std::string& at) -> Result<std::uint64_t> {
    if (!o.contains(key) || !o[key].is_number_unsigned()) {
      return fail(at + "\"" + key + "\" must be an unsigned integer");
    }
    return o[key].get<std::uint64_t>();
  };
  MOCKER_TRY(m.mocker_version, str(j, "mocker_version", "", false));
  MOCKER_TRY(m.model_name, str(j, "model_name", "", false));
  MOCKER_TRY(m.engine_type, str(j, "engine_type", "", false));
  MOCKER_TRY(const std::uint64_t block_size, uint(j, "block_size", ""));
  MOCKER_TRY(const std::uint64_t dp_size, uint(j, "dp_size", ""));
  if (block_size < 1 || block_size > UINT32_MAX) return fail("\"block_size\" must be >= 1");
  if (dp_size < 1 || dp_size > 1024) return fail("\"dp_size\" must be in [1, 1024]");
  m.block_size = static_cast<std::uint32_t>(block_size);
  m.dp_size = static_cast<std::uint32_t>(dp_size);
  MOCKER_TRY(m.http, str(j, "http", "", true));
  if (!j.contains("workers") || !j["workers"].is_array() || j["workers"].empty()) {
    return fail("\"workers\" must be a non-empty array");
  }
  std::set<std::uint64_t> ids;
  for (std::size_t i = 0; i < j["workers"].size(); ++i) {
    const nlohmann::json& jw = j["workers"][i];
    const std::string at = "workers[" + std::to_string(i) + "]: ";
    if (!jw.is_object()) return fail(at + "expected an object");
    FleetManifest::Worker w;
    MOCKER_TRY(w.worker_id, uint(jw, "worker_id", at));
    if (!ids.insert(w.worker_id).second) {
      return fail(at + "worker_id " + std::to_string(w.worker_id) + " appears twice");
    }
    MOCKER_TRY(w.submit, str(jw, "submit", at, false));
    MOCKER_TRY(w.cancel, str(jw, "cancel", at, false));
    if (jw.contains("handoff") && !jw["handoff"].is_null()) {
      MOCKER_TRY(w.handoff, str(jw, "handoff", at, false));
    }
    if (!jw.contains("ranks") || !jw["ranks"].is_array() || jw["ranks"].size() != m.dp_size) {
      return fail(at + "\"ranks\" must be an array of dp_size (" + std::to_string(m.dp_size) +
                  ") entries");
    }
    for (std::size_t r = 0; r < m.dp_size; ++r) {
      const nlohmann::json& jr = jw["ranks"][r];
      const std::string rat = at + "ranks[" + std::to_string(r) + "]: ";
      if (!jr.is_object()) return fail(rat + "expected an object");
      MOCKER_TRY(const std::uint64_t rank, uint(jr, "dp_rank", rat));
      if (rank != r) return fail(rat + "\"dp_rank\" must be " + std::to_string(r));
      FleetManifest::Rank out;
      MOCKER_TRY(out.kv_events, str(jr, "kv_events", rat, true));
      MOCKER_TRY(out.kv_replay, str(jr, "kv_replay", rat, true));
      MOCKER_TRY(out.fpm, str(jr, "fpm", rat, true));
      w.ranks.push_back(std::move(out));
    }
    m.workers.push_back(std::move(w));
  }
  return m;
}

Result<FleetManifest> loadFleetManifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::NotFound, path + ": cannot open the fleet file"};
  std::ostringstream text;
  text << in.rdbuf();
  return parseFleetManifest(text.str(), path);
}

Status writeFileAtomically(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error{ErrorCode::IoError, path + ": cannot write " + tmp};
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Error{ErrorCode::IoError, path + ": write failed"};
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Error{ErrorCode::IoError, path + ": cannot rename " + tmp + " over it"};
  }
  return {};
}

// --- The fleet ---------------------------------------------------------------------------------

Result<std::unique_ptr<Fleet>> Fleet::create(ServiceConfig config, ServerOptions options) {
  MOCKER_TRY_VOID(validateServiceConfig(config));
  MOCKER_TRY(std::vector<ServiceConfig> plan, planFleet(config));
  std::unique_ptr<Fleet> fleet(new Fleet());
  fleet->config_ = config;
  const std::size_t n = plan.size();
  const auto on_ready = options.on_ready;
  if (n > 1) {
    // Each socket costs the context a slot (ZMQ_MAX_SOCKETS, default 1023): per worker the two
    // ROUTERs, the submit monitor's pair, and per rank a PUB, a replay ROUTER and an FPM PUB.
    const int per_worker = 8 + 4 * static_cast<int>(config.engine.dp_size);
    const int io_threads = static_cast<int>(std::clamp<std::size_t>(
        std::thread::hardware_concurrency(), 1, std::min<std::size_t>(n, 4)));
    if (!config.security.curve) {
      options.context =
          std::make_shared<zmq::context_t>(io_threads, per_worker * static_cast<int>(n) + 64);
    }
    options.external_http = true;
    std::atomic<std::size_t>* ready = fleet->ready_.get();
    options.on_ready = [ready, n, on_ready] {
      if (ready->fetch_add(1) + 1 == n && on_ready) on_ready();
    };
  }
  // One fault log for every worker: their lines go to the same file.
  if (!config.faults.log.empty()) {
    MOCKER_TRY(options.fault_log, FaultLog::open(config.faults.log));
  }
  // One admin interface on the fleet's HTTP endpoint, a box per worker.
  if (n > 1 && config.faults.admin && config.endpoints.http.enabled) {
    FaultAdmin::Options o{.num_workers = static_cast<std::uint32_t>(n),
                          .dp_size = config.engine.dp_size,
                          .first_id = static_cast<std::uint32_t>(config.faults.inject.size())};
    if (!config.faults.admin_key_file.empty()) {
      MOCKER_TRY(o.key, loadAdminKey(config.faults.admin_key_file));
    }
    options.fault_admin = std::make_shared<FaultAdmin>(std::move(o));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (n > 1) options.log_name = "serve[" + plan[i].fpm.worker_id + "]";
    options.worker_index = static_cast<std::uint32_t>(i);
    auto server = Server::create(plan[i], options);
    if (!server) {
      if (n == 1) return std::move(server.error());
      return Error{server.error().code,
                   "worker " + plan[i].fpm.worker_id + ": " + server.error().message};
    }
    fleet->worker_ids_.push_back(std::stoull(plan[i].fpm.worker_id));
    fleet->servers_.push_back(std::move(*server));
  }
  if (n == 1) {
    fleet->http_url_ = fleet->servers_.front()->endpoints().http;
  } else if (config.endpoints.http.enabled) {
    std::vector<const MetricsBoard*> boards;
    for (const auto& s : fleet->servers_) boards.push_back(&s->metricsBoard());
    MOCKER_TRY(fleet->http_, HttpServer::start(config.endpoints.http, std::move(boards),
                                               options.fault_admin.get()));
    fleet->http_url_ = fleet->http_->url();
  }
  return fleet;
}

Fleet::~Fleet() = default;

FleetManifest Fleet::manifest(std::string mocker_version) const {
  FleetManifest m;
  m.mocker_version = std::move(mocker_version);
  m.model_name = config_.service.served_model_name;
  m.engine_type = std::string(engine::toString(config_.engine.engine_type));
  m.block_size = engine::effectiveBlockSize(config_.engine);
  m.dp_size = config_.engine.dp_size;
  m.http = http_url_;
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    const BoundEndpoints& ep = servers_[i]->endpoints();
    FleetManifest::Worker w{
        .worker_id = worker_ids_[i],
        .submit = ep.submit,
        .cancel = ep.cancel,
        // What tickets name: the advertised endpoint when set (a
        // one-worker fleet; validation refuses it for more).
        .handoff = ep.handoff.empty() || config_.endpoints.handoff_advertise.empty()
                       ? ep.handoff
                       : config_.endpoints.handoff_advertise};
    for (std::uint32_t r = 0; r < m.dp_size; ++r) {
      const auto at = [r](const std::vector<std::string>& v) {
        return r < v.size() ? v[r] : std::string();
      };
      w.ranks.push_back(
          {.kv_events = at(ep.kv_events), .kv_replay = at(ep.kv_replay), .fpm = at(ep.fpm)});
    }
    m.workers.push_back(std::move(w));
  }
  return m;
}

Status Fleet::run() {
  if (servers_.size() == 1) return servers_.front()->run();
  std::mutex mutex;
  std::optional<Error> first_error;
  const auto runOne = [&](std::size_t i) {
    Status st = servers_[i]->run();
    if (!st) {
      {
        const std::lock_guard lock(mutex);
        if (!first_error) {
          first_error = Error{st.error().code, "worker " + std::to_string(worker_ids_[i]) + ": " +
                                                   st.error().message};
        }
      }
      requestStop();  // one worker failed: stop the others
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(servers_.size() - 1);
  for (std::size_t i = 1; i < servers_.size(); ++i) threads.emplace_back(runOne, i);
  runOne(0);
  for (std::thread& t : threads) t.join();
  if (first_error) return std::move(*first_error);
  return {};
}

bool Fleet::crashed() const {
  return std::all_of(servers_.begin(), servers_.end(),
                     [](const std::unique_ptr<Server>& s) { return s->crashed(); });
}

void Fleet::requestStop() {
  for (const auto& s : servers_) s->requestStop();
}

}  // namespace mocker::service
