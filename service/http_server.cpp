// The HTTP endpoint over cpp-httplib (http_server.h).
#include "service/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/enum_names.h"
#include "service/fault_admin.h"

namespace mocker::service {
namespace {

using Clock = std::chrono::steady_clock;

/// Worker threads serving connections (scrapes and probes are rare and small).
constexpr std::size_t kWorkers = 2;
/// A request's headers must arrive within this long; a connection idles this long at most.
constexpr auto kReadTimeout = std::chrono::seconds(2);
constexpr auto kWriteTimeout = std::chrono::seconds(2);
constexpr time_t kKeepAliveSeconds = 2;
constexpr std::size_t kKeepAliveRequests = 100;
/// GET only: a body is never needed (with the admin interface: one fault spec).
constexpr std::size_t kMaxPayloadBytes = 1024;
/// /health fails when the loop has not finished a turn for this long (it wakes at least once a
/// second while HTTP is on, so this is a loop stuck in one step).
constexpr auto kStalledAfter = std::chrono::seconds(10);

constexpr EnumNames<LoopPhase, 4> kPhaseNames{{{"starting", LoopPhase::Starting},
                                               {"serving", LoopPhase::Serving},
                                               {"draining", LoopPhase::Draining},
                                               {"stopped", LoopPhase::Stopped}}};

std::string_view phaseName(LoopPhase p) { return enumName(kPhaseNames, p); }

void json(httplib::Response& res, int status, bool ok, LoopPhase phase, std::string_view extra) {
  res.status = status;
  std::string body = "{\"status\":\"";
  body += ok ? "ok" : "unavailable";
  body += "\",\"phase\":\"";
  body += phaseName(phase);
  body += "\"";
  body += extra;
  body += "}\n";
  res.set_content(body, "application/json");
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(std::vector<const MetricsBoard*> boards, FaultAdmin* admin)
      : boards_(std::move(boards)), admin_(admin) {}
  ~Impl() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Result<std::string> start(const HttpEndpointConfig& config) {
    MOCKER_TRY(const HttpHostPort hp, parseHttpEndpoint(config.endpoint));
    server_.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
    server_.set_read_timeout(kReadTimeout);
    server_.set_write_timeout(kWriteTimeout);
    server_.set_keep_alive_timeout(kKeepAliveSeconds);
    server_.set_keep_alive_max_count(kKeepAliveRequests);
    server_.set_payload_max_length(admin_ ? kMaxAdminBodyBytes : kMaxPayloadBytes);
    // cpp-httplib's default also sets SO_REUSEPORT, which lets a second process bind the same
    // port and take half the scrapes: only SO_REUSEADDR here, so a busy port is an error.
    server_.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::vector<MetricsSnapshot> snapshots;
      snapshots.reserve(boards_.size());
      for (const MetricsBoard* board : boards_) {
        snapshots.push_back(board->read());  // copied under the board's lock
      }
      res.set_content(renderPrometheus(snapshots), "text/plain; version=0.0.4; charset=utf-8");
    });
    // With several loops (a fleet), /health and /ready are ok only when every loop is; the
    // phase shown is that of the first loop that is not ok (else the first loop's), and the
    // body also counts the loops and those that are ok.
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const auto now = Clock::now();
      std::size_t ok = 0;
      std::optional<LoopPhase> first_bad;
      Clock::duration since_max{};
      for (const MetricsBoard* board : boards_) {
        const LoopPhase phase = board->phase();
        const auto since = board->sinceLastTurn(now);
        since_max = std::max(since_max, since);
        // A hung worker (a `hang` fault) fails from the time its fault says.
        const bool turning =
            !board->unhealthy(now) && (phase == LoopPhase::Starting ||
                                       (phase != LoopPhase::Stopped && since < kStalledAfter));
        if (turning) {
          ++ok;
        } else if (!first_bad) {
          first_bad = phase;
        }
      }
      const bool all = ok == boards_.size();
      const double since_s = std::chrono::duration<double>(since_max).count();
      json(res, all ? 200 : 503, all, first_bad.value_or(boards_.front()->phase()),
           ",\"seconds_since_loop_turn\":" + std::to_string(since_s) + counts("workers_ok", ok));
    });
    server_.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
      std::size_t ok = 0;
      std::optional<LoopPhase> first_bad;
      for (const MetricsBoard* board : boards_) {
        const LoopPhase phase = board->phase();
        if (phase == LoopPhase::Serving) {
          ++ok;
        } else if (!first_bad) {
          first_bad = phase;
        }
      }
      const bool all = ok == boards_.size();
      json(res, all ? 200 : 503, all, first_bad.value_or(boards_.front()->phase()),
           counts("workers_ready", ok));
    });
    addAdmin();
    server_.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) {
        std::string what = std::to_string(res.status);
        if (res.status == 413) {
          what += ": body over " + std::to_string(admin_ ? kMaxAdminBodyBytes : kMaxPayloadBytes) +
                  " bytes";
        } else if (res.status == 400) {
          what += ": malformed request, or a method this server does not know";
        } else if (res.status == 404) {
          what += ": no such path";
        }
        res.set_content("{\"error\":\"" + what +
                            "\",\"paths\":[\"/metrics\",\"/health\",\"/ready\"" +
                            (admin_ ? ",\"/admin/faults\"" : "") + "]}\n",
                        "application/json");
      }
    });
    int port = hp.port;
    if (hp.port == 0) {
      port = server_.bind_to_any_port(hp.host);
      if (port < 0) return bindError(config);
    } else if (!server_.bind_to_port(hp.host, hp.port)) {
      return bindError(config);
    }
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      done_.store(true);
    });
    // stop() only takes effect once the accept loop runs: wait for it, so that a destructor
    // right after start() cannot miss it and join forever.
    while (!server_.is_running() && !done_.load()) std::this_thread::yield();
    if (done_.load()) return bindError(config);
    const bool v6 = hp.host.find(':') != std::string::npos;
    return "http://" + (v6 ? "[" + hp.host + "]" : hp.host) + ":" + std::to_string(port);
  }

 private:
  /// /admin/...: every method goes to the FaultAdmin (which answers 401, 404 and 405 itself);
  /// without one, 404 saying how to turn it on.
  void addAdmin() {
    const auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      if (!admin_) {
        res.status = 404;
        res.set_content(
            "{\"error\":\"the fault admin interface is off ([faults] admin = true, "
            "--faults-admin)\"}\n",
            "application/json");
        return;
      }
      const FaultAdmin::Reply r =
          admin_->handle(req.method, req.target, req.body, req.get_header_value("Authorization"));
      res.status = r.status;
      if (r.unauthorized) res.set_header("WWW-Authenticate", "Bearer");
      if (!r.allow.empty()) res.set_header("Allow", r.allow);
      res.set_content(r.body, "application/json");
    };
    const std::string pattern = "/admin(/.*)?";
    server_.Get(pattern, handler);
    server_.Post(pattern, handler);
    server_.Put(pattern, handler);
    server_.Patch(pattern, handler);
    server_.Delete(pattern, handler);
    server_.Options(pattern, handler);
  }

  /// `,"workers":N,"<name>":K` with several loops; nothing with one (the single-worker body).
  std::string counts(std::string_view name, std::size_t ok) const {
    if (boards_.size() == 1) return "";
    return ",\"workers\":" + std::to_string(boards_.size()) + ",\"" + std::string(name) +
           "\":" + std::to_string(ok);
  }

  static Error bindError(const HttpEndpointConfig& config) {
    return Error{ErrorCode::IoError, "endpoints.http.endpoint '" + config.endpoint +
                                         "': cannot bind (address in use or not local)"};
  }

  std::vector<const MetricsBoard*> boards_;  // at least one
  FaultAdmin* admin_;                        // null: /admin is off
  httplib::Server server_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl, std::string url)
    : impl_(std::move(impl)), url_(std::move(url)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpEndpointConfig& config,
                                                      const MetricsBoard& board,
                                                      FaultAdmin* admin) {
  return start(config, std::vector<const MetricsBoard*>{&board}, admin);
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpEndpointConfig& config,
                                                      std::vector<const MetricsBoard*> boards,
                                                      FaultAdmin* admin) {
  if (boards.empty()) return invalidArgument("HttpServer: no metrics board to serve");
  auto impl = std::make_unique<Impl>(std::move(boards), admin);
  MOCKER_TRY(std::string url, impl->start(config));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), std::move(url)));
}

}  // namespace mocker::service
