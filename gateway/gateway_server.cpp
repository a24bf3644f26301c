#include "gateway/gateway_server.h"

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <unordered_map>

#include "base/check.h"
#include "gateway/exchange.h"
#include "gateway/gateway_metrics.h"
#include "gateway/http_routes.h"
#include "gateway/lora_rollout.h"
#include "gateway/output_order.h"
#include "gateway/token_routes.h"
#include "gateway/tokenizer.h"
#include "gateway/worker_choice.h"
#include "tools/replay/decode_router.h"
#include "tools/replay/random.h"

namespace mocker::gateway {
namespace {

namespace asio = boost::asio;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

HttpReply errorReply(const ApiError& error) {
  return HttpReply{.status = error.status, .body = errorBody(error)};
}

HttpReply jsonReply(const ojson& body) {
  return HttpReply{.body = body.dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

class Server final : public GatewayServer, public ExchangeHost {
 public:
  explicit Server(GatewayOptions options) : options_(std::move(options)) {}

  Status open() {
    MOCKER_TRY(loras_, LoraAdapters::create(options_.model, options_.lora_modules));
    auto listener = HttpListener::listen(
        io_, options_.host, options_.port, options_.http,
        [this](const std::shared_ptr<HttpConnection>& c, HttpRequest&& r) {
          handle(c, std::move(r));
        },
        [this](int status, const std::string& message) {
          metrics_.countRequest("refused", status);
          return errorReply(ApiError{.status = status, .message = message});
        });
    if (!listener) return listener.error();
    listener_ = std::move(*listener);
    auto pool = WorkerPool::start(
        options_.pool, io_, [this](std::vector<WorkerEvent>&& events) { onWorkerEvents(events); });
    if (!pool) return pool.error();
    pool_ = std::move(*pool);
    const replay::DecodeRouterKind decode_router =
        options_.decode_router == RouterKind::Random ? replay::DecodeRouterKind::Random
        : options_.decode_router == RouterKind::Kv   ? replay::DecodeRouterKind::LeastLoaded
                                                     : replay::DecodeRouterKind::RoundRobin;
    choice_ = std::make_unique<WorkerChoice>(
        pool_->size() - options_.num_decode_workers, options_.num_decode_workers,
        options_.router == RouterKind::Random, decode_router, options_.lengths.seed);
    if (options_.router == RouterKind::Kv) {
      if (!options_.kv) return invalidArgument("--router kv needs the workers' KV-event endpoints");
      MOCKER_TRY(kv_, KvRouting::start(*options_.kv));
    }
    return {};
  }

  std::uint16_t port() const override { return listener_->port(); }

  Status run(const std::function<void()>& on_listening) override {
    asio::signal_set signals(io_, SIGINT, SIGTERM);
    signals.async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) requestStop();
    });
    sweep();
    if (on_listening) on_listening();
    io_.run();
    pool_.reset();  // its pending handlers, never run now, would do nothing
    sweep_timer_.cancel();
    return {};
  }

  /// Every second (or sooner for short timeouts): requests past their timeout expire.
  void sweep() {
    const auto period = std::min<std::chrono::milliseconds>(
        std::chrono::seconds(1), std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10),
                                                                     options_.request_timeout / 4));
    sweep_timer_.expires_after(period);
    sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      const auto now = Clock::now();
      std::vector<std::shared_ptr<Exchange>> expired;
      for (const auto& [key, exchange] : inflight_) {
        if (now - exchange->timing().arrival > options_.request_timeout)
          expired.push_back(exchange);
      }
      const std::string message = "request timed out: not finished within " +
                                  std::to_string(options_.request_timeout.count()) +
                                  " ms (--request-timeout-s)";
      for (const auto& exchange : expired) exchange->expire(message);
      lora_rollout_.expire(now, options_.request_timeout);
      sweep();
    });
  }

  void requestStop() override {
    asio::post(io_, [this] {
      listener_->close();
      sweep_timer_.cancel();
      io_.stop();
    });
  }

  // ExchangeHost
  void submit(std::size_t worker, protocol::SubmitRequest&& request) override {
    pool_->submit(worker, std::move(request));
  }
  void cancel(std::size_t worker, const std::string& id) override { pool_->cancel(worker, id); }
  void forget(const std::string& id) override {
    const auto it = routes_.find(id);
    if (it == routes_.end()) return;
    choice_->decodeEnded(it->second.worker);
    if (kv_) kv_->remove(it->second.dispatch);
    routes_.erase(it);
  }
  void finished(Exchange& exchange, int status) override {
    metrics_.countRequest(exchange.endpoint(), status);
    const auto& t = exchange.timing();
    const double seconds = std::chrono::duration<double>(Clock::now() - t.arrival).count();
    metrics_.observeDuration(seconds);
    if (served(exchange.lora())) metrics_.finishLoraRequest(*exchange.lora(), status, seconds);
    metrics_.addTokens(exchange.shaper().promptTokens(), exchange.shaper().completionTokens(),
                       exchange.shaper().cachedTokens());
    if (exchange.disconnected()) metrics_.countDisconnect();
    inflight_.erase(&exchange);
    metrics_.setInflight(inflight_.size());
  }
  void firstToken(const Exchange& exchange, double seconds) override {
    metrics_.observeTtft(seconds);
    if (served(exchange.lora())) metrics_.observeLoraTtft(*exchange.lora(), seconds);
  }
  void interToken(double seconds) override { metrics_.observeItl(seconds); }

 private:
  /// A LoRA adapter the gateway serves now (per-adapter metrics exist for those only).
  bool served(const std::optional<std::string>& lora) const {
    return lora && loras_.find(*lora) != nullptr;
  }

  void handle(const std::shared_ptr<HttpConnection>& connection, HttpRequest&& request) {
    const std::string& path = request.target;
    HttpHeaders headers;
    if (!request.request_id.empty()) headers.emplace_back("X-Request-Id", request.request_id);
    auto answer = [&](const std::string& endpoint, HttpReply&& reply) {
      metrics_.countRequest(endpoint, reply.status);
      for (auto& h : headers) reply.headers.push_back(h);
      connection->reply(std::move(reply));
    };
    const RouteLookup route =
        lookupRoute(request.method, path, options_.allow_runtime_lora_updating);
    if (route.error) {
      HttpReply reply = errorReply(*route.error);
      if (!route.allow.empty()) reply.headers.emplace_back("Allow", route.allow);
      return answer(route.endpoint, std::move(reply));
    }
    const std::string& endpoint = route.endpoint;
    if (path == "/health") return answer(endpoint, HttpReply{.body = ""});
    if (path == "/ready") return answer(endpoint, readyReply());
    if (path == "/metrics") {
      metrics_.setInflight(inflight_.size());
      if (kv_) metrics_.setKvRouting(kv_->figures());
      return answer(endpoint, HttpReply{.content_type = "text/plain; version=0.0.4",
                                        .body = metrics_.render()});
    }
    if (!options_.api_keys.empty() && path.starts_with("/v1/") &&
        !bearerAuthorized(request.authorization, options_.api_keys)) {
      return answer(endpoint, errorReply({.status = 401,
                                          .message = "invalid or missing API key "
                                                     "(Authorization: Bearer KEY)"}));
    }
    if (path == "/v1/models") return answer(endpoint, modelsReply());
    if (route.lora_update) {
      return loraUpdate(connection, path == "/v1/load_lora_adapter", request.body, endpoint,
                        headers);
    }
    if (path == "/tokenize") {
      return answer(endpoint, tokenizeReply(request.body, *tokenizer_, options_.request));
    }
    if (path == "/detokenize") return answer(endpoint, detokenizeReply(request.body, *tokenizer_));
    generate(connection, std::move(request), endpoint, std::move(headers));
  }

  HttpReply readyReply() const {
    const bool ready = pool_->ready() && pool_->lostCount() == 0;
    ojson body = {{"status", ready ? "ready" : "not ready"},
                  {"workers", pool_->size()},
                  {"workers_ready", pool_->readyCount()},
                  {"workers_lost", pool_->lostCount()}};
    HttpReply reply = jsonReply(body);
    reply.status = ready ? 200 : 503;
    return reply;
  }

  /// The base model, then each LoRA adapter in load order (vLLM's cards: an adapter's `root` is
  /// its path, `parent` its base_model_name or else the base model, `max_model_len` null).
  HttpReply modelsReply() const {
    ojson data = ojson::array({ojson{{"id", options_.model},
                                     {"object", "model"},
                                     {"created", created_},
                                     {"owned_by", "mocker"},
                                     {"root", options_.model},
                                     {"parent", nullptr},
                                     {"max_model_len", options_.request.max_model_len}}});
    for (const LoraAdapter& a : loras_.adapters()) {
      data.push_back(
          ojson{{"id", a.name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "mocker"},
                {"root", a.path},
                {"parent", a.base_model_name.empty() ? options_.model : a.base_model_name},
                {"max_model_len", nullptr}});
    }
    return jsonReply(ojson{{"object", "list"}, {"data", std::move(data)}});
  }

  /// POST /v1/load_lora_adapter (`load`), /v1/unload_lora_adapter: checked as vLLM checks
  /// them, sent to every worker (lora_load / lora_unload, one operation per name at a time:
  /// lora_rollout.h) and answered once all replied: vLLM's plain-text success, or for a load a
  /// worker refused, vLLM's answer to an engine that cannot load it (400 BadRequestError). An
  /// unload is answered with success whatever the workers said (vLLM logs a failed engine
  /// removal and goes on), the refusals logged.
  void loraUpdate(const std::shared_ptr<HttpConnection>& connection, bool load,
                  const std::string& body, const std::string& endpoint,
                  const HttpHeaders& headers) {
    auto answer = [this, connection, endpoint, headers](HttpReply&& reply) {
      metrics_.countRequest(endpoint, reply.status);
      for (const auto& h : headers) reply.headers.push_back(h);
      connection->reply(std::move(reply));
    };
    if (const auto name = LoraAdapters::bodyName(body); name && lora_rollout_.busy(*name)) {
      lora_rollout_.defer(*name, [this, connection, load, body, endpoint, headers] {
        loraUpdate(connection, load, body, endpoint, headers);
      });
      return;
    }
    std::optional<LoraAdapter> adapter;
    std::string name;
    if (load) {
      auto checked = loras_.checkLoad(body);
      if (const auto* e = std::get_if<ApiError>(&checked)) return answer(errorReply(*e));
      adapter = std::move(std::get<LoraAdapter>(checked));
      name = adapter->name;
    } else {
      auto checked = loras_.checkUnload(body);
      if (const auto* e = std::get_if<ApiError>(&checked)) return answer(errorReply(*e));
      name = std::move(std::get<std::string>(checked));
    }
    const auto op = load ? protocol::LoraOp::Load : protocol::LoraOp::Unload;
    lora_rollout_.start(
        op, name, pool_->size(), Clock::now(),
        [this, answer, adapter = std::move(adapter)](LoraRollout::Outcome&& outcome) mutable {
          if (outcome.op == protocol::LoraOp::Unload) metrics_.forgetLora(outcome.name);
          auto result = finishLoraUpdate(loras_, std::move(outcome), std::move(adapter));
          if (const auto* e = std::get_if<ApiError>(&result)) return answer(errorReply(*e));
          answer(HttpReply{.content_type = "text/plain; charset=utf-8",
                           .body = std::move(std::get<std::string>(result))});
        });
    for (std::size_t w = 0; w < pool_->size(); ++w) pool_->sendLora(w, op, name);
  }

  void generate(const std::shared_ptr<HttpConnection>& connection, HttpRequest&& request,
                const std::string& endpoint, HttpHeaders&& headers) {
    auto refuse = [&](ApiError&& error) {
      metrics_.countRequest(endpoint, error.status);
      HttpReply reply = errorReply(error);
      reply.headers = headers;
      connection->reply(std::move(reply));
    };
    if (pool_->readyCount() == 0) {
      return refuse({.status = 503, .message = "no worker is ready (none answered yet)"});
    }
    if (!choice_->anyLiveRequestWorker()) {
      return refuse({.status = 503,
                     .message = "no worker is answering (every worker requests go to is lost: "
                                "--worker-timeout-s)"});
    }
    if (inflight_.size() >= options_.max_inflight) {
      return refuse({.status = 429,
                     .message = "too many requests in flight (limit " +
                                std::to_string(options_.max_inflight) + ")"});
    }
    auto parsed = endpoint == "completions"
                      ? parseCompletionRequest(request.body, *tokenizer_, options_.request)
                      : parseChatRequest(request.body, *tokenizer_, options_.request);
    if (auto* e = std::get_if<ApiError>(&parsed)) return refuse(std::move(*e));
    auto& req = std::get<GenerateRequest>(parsed);
    // `model`: the base model (or absent), or a LoRA adapter the request is then sent with.
    std::optional<std::string> lora;
    if (!req.model.empty() && req.model != options_.model) {
      if (loras_.find(req.model) == nullptr) {
        return refuse({.status = 404,
                       .message = "The model `" + req.model + "` does not exist.",
                       .param = "model"});
      }
      lora = req.model;
    }
    const std::uint64_t seq = next_sequence_++;
    std::string id = request.request_id;
    if (id.empty()) {
      replay::SplitMix64 rng(options_.lengths.seed + seq);
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng.next()));
      id = hex;
    }
    auto lengths = planOutputLengths(req, options_.lengths, seq);
    // vLLM answers with the adapter's name as `model` for an adapter's request.
    ResponseIdentity identity{
        .request_id = id, .model = lora.value_or(options_.model), .created = wallSeconds()};
    auto exchange = std::make_shared<Exchange>(
        *this, connection, endpoint, std::move(headers),
        ResponseShaper(req, std::move(lengths), std::move(identity), *tokenizer_), lora);
    inflight_.emplace(exchange.get(), exchange);
    metrics_.setInflight(inflight_.size());
    const std::string prefix = "gw" + std::to_string(seq) + "-";
    for (std::size_t c = 0; c < exchange->shaper().numChoices(); ++c) {
      const std::uint64_t dispatch = next_dispatch_++;
      std::optional<std::size_t> worker;
      std::optional<std::uint32_t> dp_rank;
      if (kv_) {
        const KvRouting::Pick pick = kv_->route(exchange->shaper().prompt(c), dispatch, lora);
        worker = choice_->keepOrPick(pick.worker);
        if (worker == pick.worker) dp_rank = pick.dp_rank;
      } else {
        worker = choice_->pickRequestWorker();
      }
      MOCKER_CHECK(worker.has_value());  // a live request worker was checked above
      std::string wire_id = prefix + std::to_string(c);
      routes_[wire_id] = {
          .exchange = exchange, .choice = c, .worker = *worker, .dispatch = dispatch};
      exchange->addChoice(*worker, std::move(wire_id), dp_rank);
    }
    exchange->start();
  }

  /// Hop 2 of a disaggregated request: the prefill worker's handoff goes to a decode worker.
  void onHandoff(std::size_t worker, protocol::Handoff& handoff) {
    auto route = find(handoff.id, worker);
    if (!route || choice_->isDecode(worker)) {
      // Gone (cancelled: the cancel sent to the prefill worker releases what it holds).
      SPDLOG_DEBUG("gateway: handoff of {} from worker {} routes nowhere", handoff.id, worker);
      return;
    }
    Route& r = routes_.at(handoff.id);
    if (kv_) kv_->remove(r.dispatch);  // the prefill worker's part is done
    const std::optional<std::size_t> d = choice_->pickDecodeWorker(r.dispatch);
    if (!d) {
      pool_->cancel(worker, handoff.id);  // releases the KV the prefill worker holds
      route->first->onFailure(route->second, 503,
                              "no decode worker is answering (every one lost: --worker-timeout-s)");
      return;
    }
    r.prefill_worker = worker;
    r.worker = *d;
    route->first->handOff(route->second, *d, std::move(handoff.ticket));
  }

  /// Worker `w` stopped answering (or answers again): routing skips it while lost, and every
  /// choice it holds fails now with 504 (and is cancelled there, should it wake up).
  void onLiveness(std::size_t w, bool lost) {
    choice_->setLost(w, lost);
    if (!lost) return;
    lora_rollout_.onLost(w, "stopped answering (--worker-timeout-s)");
    struct Held {
      std::uint64_t dispatch;
      std::shared_ptr<Exchange> exchange;
      std::size_t choice;
    };
    std::vector<Held> held;
    for (const auto& [id, route] : routes_) {
      if (route.worker != w) continue;
      if (auto exchange = route.exchange.lock())
        held.push_back({route.dispatch, std::move(exchange), route.choice});
    }
    // In dispatch order, whatever order the hash table keeps.
    std::sort(held.begin(), held.end(),
              [](const Held& a, const Held& b) { return a.dispatch < b.dispatch; });
    const std::string message =
        "worker " + std::to_string(w) + " (" + options_.pool.workers[w].submit +
        ") stopped answering: nothing from it for " +
        std::to_string(options_.pool.worker_timeout.count()) + " ms (--worker-timeout-s)";
    for (auto& h : held) h.exchange->onFailure(h.choice, 504, message, /*cancel=*/true);
  }

  /// A decode worker refused a handoff: the prefill worker still holds the KV; release it.
  void releaseHeld(const std::string& id) {
    const auto it = routes_.find(id);
    if (it != routes_.end() && it->second.prefill_worker)
      pool_->cancel(*it->second.prefill_worker, id);
  }

  /// One drain's messages. Consecutive output messages (both workers' pass ends drained
  /// together, or two passes of one) are handled as one burst, so that every message's first
  /// tokens go before any message's other entries (output_order.h); any other event first
  /// handles the outputs collected before it, so they keep their place relative to it.
  void onWorkerEvents(std::vector<WorkerEvent>& events) {
    for (auto& event : events) {
      const std::size_t w = event.worker;
      auto* batch = event.liveness == Liveness::None
                        ? std::get_if<protocol::OutputBatch>(&event.message)
                        : nullptr;
      if (batch) {
        holdOutputs(w, batch->outputs);
        continue;
      }
      handleHeld();
      if (event.liveness != Liveness::None) {
        onLiveness(w, event.liveness == Liveness::Lost);
        continue;
      }
      if (auto* handoff = std::get_if<protocol::Handoff>(&event.message)) {
        onHandoff(w, *handoff);
      } else if (auto* lora = std::get_if<protocol::LoraReply>(&event.message)) {
        if (!lora_rollout_.onReply(w, *lora)) {
          SPDLOG_DEBUG("gateway: lora_reply for '{}' from worker {} awaited by nothing", lora->name,
                       w);
        }
      } else if (auto* reject = std::get_if<protocol::SubmitReject>(&event.message)) {
        if (auto route = find(reject->id, w)) {
          releaseHeld(reject->id);
          route->first->onFailure(route->second, 400,
                                  "worker rejected the request: " + reject->reason);
        }
      } else if (auto* error = std::get_if<protocol::ErrorReply>(&event.message)) {
        if (error->id) {
          if (auto route = find(*error->id, w)) {
            route->first->onFailure(route->second, workerErrorStatus(error->code),
                                    std::string("worker error (") + errorCodeName(error->code) +
                                        "): " + error->message);
          }
        }
        spdlog::warn("gateway: worker {} error: {}", event.worker, error->message);
      }
    }
    handleHeld();
  }

  /// Collects the entries of one output message of worker `w` that route to a live request, for
  /// handleHeld (`outputs` outlives it: the batch of events).
  void holdOutputs(std::size_t w, const std::vector<protocol::RequestOutput>& outputs) {
    ++held_messages_;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const auto it = routes_.find(outputs[i].id);
      if (it == routes_.end() || it->second.worker != w) continue;
      auto exchange = it->second.exchange.lock();
      if (!exchange) {
        forget(outputs[i].id);
        continue;
      }
      held_streams_ = held_streams_ || exchange->shaper().streaming();
      held_.push_back({.exchange = std::move(exchange),
                       .choice = it->second.choice,
                       .dispatch = it->second.dispatch,
                       .output = &outputs[i]});
    }
  }

  /// Hands the collected entries to their requests. With streams among them, in the order of
  /// output_order.h (first tokens first); entries of non-streaming requests only write nothing
  /// before their ends and keep their order.
  void handleHeld() {
    if (held_.empty()) return;
    burst_.clear();
    for (const HeldOutput& h : held_) {
      burst_.push_back({.dispatch = h.dispatch,
                        .has_tokens = !h.output->tokens.empty(),
                        .had_tokens = h.exchange->timing().last_output.has_value()});
    }
    burstKeys(burst_, held_messages_, order_, seen_dispatch_);
    if (held_streams_ && order_.size() > 1) sortForHandling(order_);
    // Once a burst's first tokens are written, the CPU goes once to whoever they woke: a pass's
    // ~100 SSE writes keep this thread busy ~1.3 ms, and the kernel tends to wake a reader on the
    // writer's core (wake-affine), so a client on this machine read its first token only after
    // the whole burst (p90 2.3 ms from write to read; 0.14 ms with the yield, docs/benchmarks.md).
    const std::size_t yield_at = held_streams_ ? firstTokensEnd(order_) : 0;
    for (std::size_t k = 0; k < order_.size(); ++k) {
      if (k == yield_at && k > 0) sched_yield();
      const HeldOutput& h = held_[order_[k].index];
      // Handling an earlier entry may have ended this one (its client went away).
      if (!h.exchange->choiceOpen(h.choice)) continue;
      if (kv_ && !h.output->tokens.empty()) kv_->prefillDone(h.dispatch);
      h.exchange->onOutput(h.choice, *h.output);
    }
    held_.clear();  // the exchanges that ended go now
    held_messages_ = 0;
    held_streams_ = false;
  }

  /// The exchange and choice of wire id `id`, when it is live and (given `worker`) held by
  /// that worker: a prefill worker's late message after its handoff routes nowhere.
  std::optional<std::pair<std::shared_ptr<Exchange>, std::size_t>> find(
      const std::string& id, std::optional<std::size_t> worker = {}) {
    const auto it = routes_.find(id);
    if (it == routes_.end()) return {};
    if (worker && *worker != it->second.worker) return {};
    auto exchange = it->second.exchange.lock();
    if (!exchange) {
      forget(id);
      return {};
    }
    return std::make_pair(std::move(exchange), it->second.choice);
  }

  static std::int64_t wallSeconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  GatewayOptions options_;
  asio::io_context io_{1};
  asio::steady_timer sweep_timer_{io_};
  std::unique_ptr<HttpListener> listener_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<KvRouting> kv_;  // --router kv
  LoraAdapters loras_;             // --lora-modules and run-time loads
  LoraRollout lora_rollout_;       // run-time loads and unloads awaiting the workers
  std::shared_ptr<const Tokenizer> tokenizer_ =
      options_.tokenizer ? options_.tokenizer : std::make_shared<BuiltinTokenizer>();
  GatewayMetrics metrics_;
  std::int64_t created_ = wallSeconds();
  std::uint64_t next_sequence_ = 0;
  /// Where a wire id's messages go, and who holds it.
  struct Route {
    std::weak_ptr<Exchange> exchange;
    std::size_t choice = 0;
    std::size_t worker = 0;                     ///< the worker holding it now
    std::uint64_t dispatch = 0;                 ///< dispatch order of the choice (decode router)
    std::optional<std::size_t> prefill_worker;  ///< disaggregated, after the handoff
  };
  std::unordered_map<std::string, Route> routes_;
  std::unique_ptr<WorkerChoice> choice_;  // created with the pool
  std::uint64_t next_dispatch_ = 0;
  /// onOutputs' scratch: the message's entries that route somewhere, and their order.
  struct HeldOutput {
    std::shared_ptr<Exchange> exchange;
    std::size_t choice = 0;
    std::uint64_t dispatch = 0;
    const protocol::RequestOutput* output = nullptr;
  };
  std::vector<HeldOutput> held_;  // entries of the output messages being handled (handleHeld)
  std::size_t held_messages_ = 0;
  bool held_streams_ = false;
  std::vector<BurstEntry> burst_;
  std::vector<OutputKey> order_;
  std::unordered_set<std::uint64_t> seen_dispatch_;
  std::map<const Exchange*, std::shared_ptr<Exchange>> inflight_;  // owns them
};

}  // namespace

Result<std::unique_ptr<GatewayServer>> GatewayServer::create(GatewayOptions options) {
  auto server = std::make_unique<Server>(std::move(options));
  if (auto s = server->open(); !s) return s.error();
  return std::unique_ptr<GatewayServer>(std::move(server));
}

Result<std::set<std::string>> loadApiKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{ErrorCode::IoError, "--api-key-file '" + path + "': cannot read it"};
  std::set<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    keys.insert(line);
  }
  if (keys.empty()) return invalidArgument("--api-key-file '" + path + "': holds no key");
  return keys;
}

}  // namespace mocker::gateway
