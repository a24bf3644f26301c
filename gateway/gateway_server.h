// GatewayServer: `mocker gateway` — the OpenAI HTTP API in front of a fleet of `mocker serve`
// workers (gateway/README.md). One I/O thread runs the HTTP listener and every request's
// bookkeeping (parsing, routing, response shaping, metrics) and the WorkerPool's ZeroMQ clients
// (their notification fds wait in the same reactor).
//
//   auto server = GatewayServer::create(options);      // binds HTTP, connects the workers
//   server->run([&](const std::string& url) {...});   // until requestStop() / SIGINT / SIGTERM
//
// Thread-safety: create and run on one thread; requestStop from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "gateway/http_connection.h"
#include "gateway/kv_routing.h"
#include "gateway/lora_adapters.h"
#include "gateway/openai_request.h"
#include "gateway/output_plan.h"
#include "gateway/tokenizer.h"
#include "gateway/worker_pool.h"

namespace mocker::gateway {

enum class RouterKind { RoundRobin, Random, Kv };

struct GatewayOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;  ///< 0 = ephemeral
  std::string model = "mocker";
  /// --lora-modules: adapters served under their own model names (lora_adapters.h).
  std::vector<LoraAdapter> lora_modules{};
  /// --allow-runtime-lora-updating: POST /v1/load_lora_adapter and /v1/unload_lora_adapter
  /// exist (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING); off, they are 404 as in vLLM.
  bool allow_runtime_lora_updating = false;
  WorkerPoolOptions pool{};
  HttpLimits http{};
  RequestLimits request{};
  LengthModel lengths{};
  RouterKind router = RouterKind::RoundRobin;
  /// Kv: the index of the workers requests go to (all, or the prefill workers) and the cost.
  std::optional<KvRoutingOptions> kv;
  /// Disaggregated when > 0: the last `num_decode_workers` of pool.workers are `mocker serve
  /// --worker-type decode` workers, the others `--worker-type prefill` workers. Requests go to a
  /// prefill worker (by `router`); its handoff goes on to the decode worker `decode_router`
  /// picks (tools/replay/decode_router.h, as `mocker replay --mode live`: round_robin, random,
  /// or kv = the decode worker with the fewest requests in flight).
  std::size_t num_decode_workers = 0;
  RouterKind decode_router = RouterKind::RoundRobin;
  std::size_t max_inflight = 10'000;  ///< generation requests in flight; more get 429
  /// A request not finished this long after it arrived is cancelled and fails with 504 (its
  /// worker may be gone without a word).
  std::chrono::milliseconds request_timeout{600'000};
  std::set<std::string> api_keys;  ///< empty: no authentication
  /// --tokenizer (a tokenizer.json); null: the built-in tokenizer.
  std::shared_ptr<const Tokenizer> tokenizer;
};

class GatewayServer {
 public:
  static Result<std::unique_ptr<GatewayServer>> create(GatewayOptions options);
  virtual ~GatewayServer() = default;
  /// The bound HTTP port.
  virtual std::uint16_t port() const = 0;
  /// Serves until requestStop(), SIGINT or SIGTERM. `on_listening` runs once, first.
  virtual Status run(const std::function<void()>& on_listening) = 0;
  virtual void requestStop() = 0;
};

/// Reads an API-key file: one key per line; blank lines and lines starting with '#' skipped.
Result<std::set<std::string>> loadApiKeys(const std::string& path);

}  // namespace mocker::gateway
