#include "tools/gateway_command.h"

#include <CLI/CLI.hpp>

#include "gateway/gateway_server.h"
#include "gateway/hf_tokenizer.h"
#include "net/security.h"
#include "service/fleet.h"
#include "tools/cli_options.h"
#include "tools/replay/live_replay.h"

namespace mocker::tools {
namespace {

/// Appends every worker of fleet file `path` (named `flag` in errors) to `out`; with `kv`, the
/// workers' KV-event and replay endpoints (every rank's) and block size for the kv router.
Status addFleet(const std::string& path, const char* flag,
                std::vector<gateway::WorkerEndpoints>& out, std::string& model_from_fleet,
                index::LiveKvIndexConfig* kv = nullptr) {
  auto manifest = service::loadFleetManifest(path);
  if (!manifest) return invalidArgument(std::string(flag) + ": " + manifest.error().message);
  for (const auto& w : manifest->workers) out.push_back({.submit = w.submit, .cancel = w.cancel});
  if (model_from_fleet.empty()) model_from_fleet = manifest->model_name;
  if (!kv) return {};
  kv->block_size = manifest->block_size;
  for (std::size_t i = 0; i < manifest->workers.size(); ++i) {
    const auto& w = manifest->workers[i];
    index::LiveKvServer server{.submit_endpoint = w.submit,
                               .ranks = static_cast<std::uint32_t>(w.ranks.size())};
    for (std::size_t r = 0; r < w.ranks.size(); ++r) {
      if (w.ranks[r].kv_events.empty() || w.ranks[r].kv_replay.empty()) {
        return invalidArgument(std::string(flag) + ": --router kv: worker " + std::to_string(i) +
                               " rank " + std::to_string(r) +
                               " publishes no KV events or has no KV replay socket");
      }
      server.kv_events.push_back(w.ranks[r].kv_events);
      server.kv_replay.push_back(w.ranks[r].kv_replay);
    }
    kv->servers.push_back(std::move(server));
  }
  return {};
}

/// The workers: --connect (cancel endpoints given or derived), the fleet file, or the prefill
/// fleet then the decode fleet (`num_decode` of them). With `kv`, the kv router's index of the
/// workers requests go to (a fleet file's or the prefill fleet's).
Result<std::vector<gateway::WorkerEndpoints>> workers(const GatewayCommand& c,
                                                      std::string& model_from_fleet,
                                                      std::size_t& num_decode,
                                                      index::LiveKvIndexConfig* kv) {
  std::vector<gateway::WorkerEndpoints> out;
  if (!c.connect.empty() && !c.fleet_file.empty()) {
    return invalidArgument("give --connect or --fleet, not both");
  }
  if (c.prefill_fleet.empty() != c.decode_fleet.empty()) {
    return invalidArgument(c.prefill_fleet.empty()
                               ? "--decode-fleet needs the prefill workers: --prefill-fleet"
                               : "--prefill-fleet needs the decode workers: --decode-fleet");
  }
  if (!c.prefill_fleet.empty()) {
    if (!c.connect.empty() || !c.fleet_file.empty()) {
      return invalidArgument(
          "--prefill-fleet / --decode-fleet replace --connect / --fleet: give one or the other");
    }
    MOCKER_TRY_VOID(addFleet(c.prefill_fleet, "--prefill-fleet", out, model_from_fleet, kv));
    const std::size_t num_prefill = out.size();
    MOCKER_TRY_VOID(addFleet(c.decode_fleet, "--decode-fleet", out, model_from_fleet));
    num_decode = out.size() - num_prefill;
    if (num_prefill == 0 || num_decode == 0) {
      return invalidArgument("--prefill-fleet / --decode-fleet: a fleet file lists no worker");
    }
    return out;
  }
  if (kv && !c.connect.empty()) {
    return invalidArgument(
        "--router kv needs every worker's KV-event endpoints: give the workers with --fleet (or "
        "--prefill-fleet), not --connect");
  }
  if (!c.connect_cancel.empty() && c.connect_cancel.size() != c.connect.size()) {
    return invalidArgument("--connect-cancel: " + std::to_string(c.connect_cancel.size()) +
                           " given for " + std::to_string(c.connect.size()) + " --connect");
  }
  for (std::size_t i = 0; i < c.connect.size(); ++i) {
    std::string cancel;
    if (c.connect_cancel.empty()) {
      MOCKER_TRY(cancel, replay::defaultCancelEndpoint(c.connect[i]));
    } else {
      cancel = c.connect_cancel[i];
    }
    out.push_back({.submit = c.connect[i], .cancel = std::move(cancel)});
  }
  if (!c.fleet_file.empty()) {
    MOCKER_TRY_VOID(addFleet(c.fleet_file, "--fleet", out, model_from_fleet, kv));
  }
  if (out.empty())
    return invalidArgument("no workers: give --connect EP (repeatable) or --fleet FILE");
  return out;
}

gateway::RouterKind routerKind(const std::string& name) {
  if (name == "random") return gateway::RouterKind::Random;
  if (name == "kv") return gateway::RouterKind::Kv;
  return gateway::RouterKind::RoundRobin;
}

Result<gateway::GatewayOptions> gatewayOptions(const GatewayCommand& c) {
  gateway::GatewayOptions o;
  std::string fleet_model;
  index::LiveKvIndexConfig kv_index;
  const bool kv = c.router == "kv";
  MOCKER_TRY(o.pool.workers,
             workers(c, fleet_model, o.num_decode_workers, kv ? &kv_index : nullptr));
  if (kv) {
    o.kv = gateway::KvRoutingOptions{
        .index = std::move(kv_index),
        .router = {.overlap_weight = c.router_overlap_weight, .temperature = c.router_temperature},
        .seed = c.seed};
  }
  if (!c.curve_server_key_file.empty()) {
    MOCKER_TRY(o.pool.curve,
               net::loadCurveClientKeys(c.curve_server_key_file, c.curve_secret_key_file));
  }
  o.pool.stats_interval = std::chrono::milliseconds(c.stats_interval_ms);
  o.pool.worker_timeout = std::chrono::milliseconds(static_cast<long>(c.worker_timeout_s * 1000.0));
  if (o.pool.worker_timeout < 2 * o.pool.stats_interval) {
    return invalidArgument("--worker-timeout-s " + std::to_string(c.worker_timeout_s) +
                           " must be at least twice --stats-interval-ms (" +
                           std::to_string(c.stats_interval_ms) +
                           " ms): a live worker answers one stats request per interval");
  }
  o.host = c.host;
  o.port = c.port;
  o.model = !c.model.empty() ? c.model : !fleet_model.empty() ? fleet_model : "mocker";
  o.router = routerKind(c.router);
  o.decode_router = routerKind(c.decode_router);
  o.request.max_model_len = c.max_model_len;
  o.request.default_completion_max_tokens = c.default_max_tokens;
  o.request.max_n = c.max_n;
  o.lengths = {.mean = c.output_len_mean, .stddev = c.output_len_stddev, .seed = c.seed};
  o.http.max_connections = c.max_connections;
  o.http.max_body_bytes = c.max_body_bytes;
  o.http.max_header_bytes = c.max_header_bytes;
  o.http.max_stream_buffer_bytes = c.max_stream_buffer_bytes;
  o.http.read_timeout = std::chrono::milliseconds(static_cast<long>(c.read_timeout_s * 1000.0));
  o.max_inflight = c.max_inflight;
  o.request_timeout = std::chrono::milliseconds(static_cast<long>(c.request_timeout_s * 1000.0));
  if (!c.api_key_file.empty()) {
    MOCKER_TRY(o.api_keys, gateway::loadApiKeys(c.api_key_file));
  }
  if (!c.tokenizer_file.empty()) {
    MOCKER_TRY(o.tokenizer, gateway::HfTokenizer::load(c.tokenizer_file));
  }
  for (const std::string& spec : c.lora_modules) {
    MOCKER_TRY(gateway::LoraAdapter adapter, gateway::parseLoraModule(spec));
    o.lora_modules.push_back(std::move(adapter));
  }
  MOCKER_TRY_VOID(gateway::LoraAdapters::create(o.model, o.lora_modules));  // names checked early
  o.allow_runtime_lora_updating = c.allow_runtime_lora_updating;
  return o;
}

/// The workers behind the gateway, how requests pick one, and how their health is watched.
void addWorkerFlags(CLI::App& c, GatewayCommand& g) {
  const std::string workers = "Workers";
  c.add_option("--connect", g.connect,
               "submit endpoint of a running `mocker serve` worker (tcp://HOST:PORT); repeat for "
               "several")
      ->option_text("EP")
      ->group(workers);
  c.add_option("--connect-cancel", g.connect_cancel,
               "cancel endpoint of each --connect worker, in the same order (default: the "
               "submit port + 1)")
      ->option_text("EP")
      ->group(workers);
  c.add_option("--fleet", g.fleet_file,
               "every worker of a `mocker serve --fleet-file FILE` (submit and cancel endpoints; "
               "its model name is the default --model)")
      ->option_text("FILE")
      ->group(workers);
  c.add_option("--prefill-fleet", g.prefill_fleet,
               "disaggregated: the `mocker serve --worker-type prefill --fleet-file FILE` "
               "workers; requests go to them (by --router) and each handoff goes on to a "
               "--decode-fleet worker (by --decode-router). Replaces --connect / --fleet")
      ->option_text("FILE")
      ->group(workers);
  c.add_option("--decode-fleet", g.decode_fleet,
               "disaggregated: the `mocker serve --worker-type decode --fleet-file FILE` workers")
      ->option_text("FILE")
      ->group(workers);
  c.add_option("--decode-router", g.decode_router,
               "disaggregated: the decode worker of a handoff, as `mocker replay --mode live` "
               "picks it: round_robin (request order), random (seeded by --seed), kv (the "
               "fewest requests in flight)")
      ->check(CLI::IsMember({"round_robin", "random", "kv"}))
      ->capture_default_str()
      ->group(workers);
  c.add_option("--router", g.router,
               "how a request picks its worker (with --prefill-fleet: its prefill worker): "
               "round_robin, random (seeded by --seed), or kv: Dynamo's KV-router cost over "
               "every worker rank, with the overlaps from a live KV index subscribed to the "
               "workers' KV events (gap healing through their replay sockets) and the load this "
               "gateway routed; needs --fleet or --prefill-fleet (the event endpoints)")
      ->check(CLI::IsMember({"round_robin", "random", "kv"}))
      ->capture_default_str()
      ->group(workers);
  c.add_option("--router-overlap-weight", g.router_overlap_weight,
               "--router kv: weight of the prefill blocks in the cost (Dynamo's "
               "overlap_score_weight)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(workers);
  c.add_option("--router-temperature", g.router_temperature,
               "--router kv: 0 picks the lowest cost; T > 0 draws by softmax(-cost / T) (seeded "
               "by --seed)")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(workers);
  c.add_option("--stats-interval-ms", g.stats_interval_ms,
               "ask every worker for stats this often (readiness, liveness)")
      ->check(atLeast(10))
      ->capture_default_str()
      ->group(workers);
  c.add_option("--worker-timeout-s", g.worker_timeout_s,
               "a worker silent this long (no stats reply, no output) is lost: its requests fail "
               "at once with 504 (and are cancelled there), new ones go to the others, /ready "
               "says 503 until it answers again (at least 2 x --stats-interval-ms)")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(workers);
  auto* server_key = c.add_option("--curve-server-key-file", g.curve_server_key_file,
                                  "CURVE: the workers' public key file (NAME.pub)")
                         ->option_text("FILE")
                         ->group(workers);
  auto* secret_key = c.add_option("--curve-secret-key-file", g.curve_secret_key_file,
                                  "CURVE: this client's secret key file (NAME.key; its public "
                                  "key must be on the workers' allow-list)")
                         ->option_text("FILE")
                         ->group(workers);
  server_key->needs(secret_key);
  secret_key->needs(server_key);
}

/// The HTTP listener and its limits.
void addHttpFlags(CLI::App& c, GatewayCommand& g) {
  const std::string http = "HTTP";
  c.add_option("--host", g.host, "address to listen on")->capture_default_str()->group(http);
  c.add_option("--port", g.port, "port to listen on (0: an ephemeral port, printed)")
      ->capture_default_str()
      ->group(http);
  c.add_option("--api-key-file", g.api_key_file,
               "require `Authorization: Bearer KEY` on /v1/* with one of the keys in FILE (one "
               "per line, # comments)")
      ->option_text("FILE")
      ->group(http);
  c.add_option("--max-connections", g.max_connections,
               "open connections; more get 503 and are closed")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(http);
  c.add_option("--max-inflight", g.max_inflight, "generation requests in flight; more get 429")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(http);
  c.add_option("--max-body-bytes", g.max_body_bytes, "request body size; larger gets 413")
      ->check(atLeast(64))
      ->capture_default_str()
      ->group(http);
  c.add_option("--max-header-bytes", g.max_header_bytes, "request header size; larger gets 431")
      ->check(atLeast(256))
      ->capture_default_str()
      ->group(http);
  c.add_option("--max-stream-buffer-bytes", g.max_stream_buffer_bytes,
               "unsent stream bytes per connection (also its kernel send buffer, SO_SNDBUF); a "
               "slower reader is disconnected and its request cancelled")
      ->check(atLeast(1024))
      ->capture_default_str()
      ->group(http);
  c.add_option("--request-timeout-s", g.request_timeout_s,
               "a generation request not finished this long after it arrived is cancelled on "
               "its worker and fails with 504 (a worker gone without a word)")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(http);
  c.add_option("--read-timeout-s", g.read_timeout_s,
               "a request must arrive completely within this time (idle keep-alive included)")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(http);
}

/// The served model: name, tokenizer, lengths.
void addModelFlags(CLI::App& c, GatewayCommand& g) {
  const std::string model = "Model";
  c.add_option("--model", g.model, "served model name (default: the fleet file's, else \"mocker\")")
      ->group(model);
  c.add_option("--tokenizer", g.tokenizer_file,
               "a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen 2 style) "
               "instead of the built-in tokenizer: prompt token counts and prefix hashes then "
               "match the real model's; generated text is spelled with its \" word\" tokens so "
               "it re-tokenizes to the reported count")
      ->option_text("FILE")
      ->group(model);
  c.add_option("--lora-modules", g.lora_modules,
               "LoRA adapters served under their own model names, as vLLM's flag: name=path, "
               "name alone (path = name), or vLLM's JSON form '{\"name\": ..., \"path\": ..., "
               "\"base_model_name\": ...}' (base_model_name: the adapter's /v1/models `parent`); "
               "several values or repeated; the path is only echoed (/v1/models `root`). A "
               "request whose `model` is an adapter is sent with it to the workers (they need "
               "--max-loras > 0)")
      ->option_text("NAME[=PATH]|JSON ...")
      ->group(model);
  c.add_flag("--allow-runtime-lora-updating", g.allow_runtime_lora_updating,
             "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's "
             "VLLM_ALLOW_RUNTIME_LORA_UPDATING; without it they are 404)")
      ->group(model);
  c.add_option("--max-model-len", g.max_model_len,
               "prompt + max_tokens limit (400 beyond); chat without max_tokens gets the rest")
      ->check(atLeast(2))
      ->capture_default_str()
      ->group(model);
  c.add_option("--default-max-tokens", g.default_max_tokens,
               "/v1/completions max_tokens when the request gives none")
      ->check(atLeast(1))
      ->capture_default_str()
      ->group(model);
  c.add_option("--max-n", g.max_n, "largest `n` (choices per prompt)")
      ->check(between(1, 1024))
      ->capture_default_str()
      ->group(model);
  c.add_option("--output-len-mean", g.output_len_mean,
               "without ignore_eos: output length ~ Normal(mean, stddev), clamped to "
               "[min_tokens, max_tokens]")
      ->check(greaterThan(0))
      ->capture_default_str()
      ->group(model);
  c.add_option("--output-len-stddev", g.output_len_stddev, "see --output-len-mean")
      ->check(atLeast(0))
      ->capture_default_str()
      ->group(model);
  c.add_option("--seed", g.seed,
               "seeds output lengths of requests without `seed`, and generated request ids")
      ->capture_default_str()
      ->group(model);
}

}  // namespace

void addGatewayCommand(CLI::App& app, GatewayCommand& command) {
  command.cmd = app.add_subcommand(
      "gateway",
      "Serve the OpenAI HTTP API (completions, chat, models, tokenize, metrics) in "
      "front of running `mocker serve` workers");
  CLI::App& c = *command.cmd;
  addWorkerFlags(c, command);
  addHttpFlags(c, command);
  addModelFlags(c, command);
  c.footer(
      "Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, POST "
      "/tokenize, POST /detokenize, GET /health, GET /ready (200 once every worker answered and "
      "none is lost), GET "
      "/metrics. Prints http://HOST:PORT when listening; SIGINT/SIGTERM stop it.\n"
      "Exit codes: 0 stopped by a signal, 1 error, 2 usage error.");
}

int runGatewayCommand(const GatewayCommand& command, std::ostream& out, std::ostream& err) {
  auto options = gatewayOptions(command);
  if (!options) {
    err << "mocker gateway: " << options.error().message << "\n";
    return options.error().code == ErrorCode::InvalidArgument ? 2 : 1;
  }
  const std::string host = options->host;
  auto server = gateway::GatewayServer::create(std::move(*options));
  if (!server) {
    err << "mocker gateway: " << server.error().message << "\n";
    return 1;
  }
  const Status s =
      (*server)->run([&] { out << "http://" << host << ":" << (*server)->port() << std::endl; });
  if (!s) {
    err << "mocker gateway: " << s.error().message << "\n";
    return 1;
  }
  return 0;
}

}  // namespace mocker::tools
