#include "tools/stats_command.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <variant>

#include <nlohmann/json.hpp>

#include "net/client.h"
#include "net/security.h"
#include "protocol/detail/client_names.h"
#include "tools/cli_options.h"
#include "tools/peer_probe.h"

namespace mocker::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kAnswerWait = std::chrono::milliseconds(1000);

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string shortNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::string formatStatsText(const protocol::StatsReply& r) {
  std::string out;
  if (r.engine) {
    out += "engine " + r.engine->engine_type + ", worker type " + r.engine->worker_type +
           ", block size " + std::to_string(r.engine->block_size) + " tokens, speedup " +
           shortNumber(r.engine->speedup_ratio) + "\n";
  } else {
    out += "engine: not reported (a mocker older than this one)\n";
  }
  for (const protocol::RankStats& k : r.ranks) {
    out += "rank " + std::to_string(k.dp_rank) + ": running " + std::to_string(k.running) +
           ", waiting " + std::to_string(k.waiting) + ", KV " + std::to_string(k.active_blocks) +
           " of " + std::to_string(k.total_blocks) + " blocks (" + fixed(100.0 * k.kv_usage, 1) +
           " %), preemptions " + std::to_string(k.preemptions) + ", prefix cache " +
           std::to_string(k.prefix_hit_tokens) + " of " + std::to_string(k.prefix_queries_tokens) +
           " prompt tokens";
    if (k.held) out += ", held " + std::to_string(*k.held);
    if (k.pending_handoffs) out += ", pending handoffs " + std::to_string(*k.pending_handoffs);
    if (k.handoff_expired) out += ", expired holds " + std::to_string(*k.handoff_expired);
    out += "\n";
  }
  out += "routes " + std::to_string(r.routes) + " (live requests, every client)";
  if (r.client_entries) out += "; clients with state " + std::to_string(*r.client_entries);
  out += "\n";
  if (r.timing) {
    out += "timing: " + std::to_string(r.timing->passes) + " passes, lateness mean " +
           fixed(r.timing->lateness_mean_ms, 3) + " ms, p50 " +
           fixed(r.timing->lateness_p50_ms, 3) + " ms, p99 " + fixed(r.timing->lateness_p99_ms, 3) +
           " ms, max " + fixed(r.timing->lateness_max_ms, 3) + " ms, " +
           std::to_string(r.timing->resyncs) + " resyncs\n";
  }
  if (r.faults) {
    const protocol::FaultCounts& f = *r.faults;
    out += "faults injected:";
    for (const auto& [key, member] : protocol::detail::kFaultCountKeys) {
      out += (key == "crash" ? " " : ", ") + std::string(key) + " " + std::to_string(f.*member);
    }
    out += "\n";
  }
  return out;
}

std::string formatStatsJson(const protocol::StatsReply& r) {
  using json = nlohmann::ordered_json;
  json j;
  if (r.engine) {
    j["engine"] = {{"engine_type", r.engine->engine_type},
                   {"worker_type", r.engine->worker_type},
                   {"block_size", r.engine->block_size},
                   {"speedup_ratio", r.engine->speedup_ratio}};
  } else {
    j["engine"] = nullptr;
  }
  json ranks = json::array();
  for (const protocol::RankStats& k : r.ranks) {
    json o = {{"dp_rank", k.dp_rank},
              {"active_blocks", k.active_blocks},
              {"total_blocks", k.total_blocks},
              {"kv_usage", k.kv_usage},
              {"running", k.running},
              {"waiting", k.waiting},
              {"preemptions", k.preemptions},
              {"prefix_queries_tokens", k.prefix_queries_tokens},
              {"prefix_hit_tokens", k.prefix_hit_tokens}};
    if (k.held) o["held"] = *k.held;
    if (k.pending_handoffs) o["pending_handoffs"] = *k.pending_handoffs;
    if (k.handoff_expired) o["handoff_expired"] = *k.handoff_expired;
    ranks.push_back(std::move(o));
  }
  j["ranks"] = std::move(ranks);
  j["routes"] = r.routes;
  j["client_entries"] = r.client_entries ? json(*r.client_entries) : json(nullptr);
  if (r.timing) {
    j["timing"] = {{"passes", r.timing->passes},
                   {"resyncs", r.timing->resyncs},
                   {"lateness_mean_ms", r.timing->lateness_mean_ms},
                   {"lateness_p50_ms", r.timing->lateness_p50_ms},
                   {"lateness_p99_ms", r.timing->lateness_p99_ms},
                   {"lateness_max_ms", r.timing->lateness_max_ms}};
  } else {
    j["timing"] = nullptr;
  }
  if (r.faults) {
    j["faults"] = json::object();
    for (const auto& [key, member] : protocol::detail::kFaultCountKeys) {
      j["faults"][std::string(key)] = (*r.faults).*member;
    }
  }
  return j.dump(2) + "\n";
}

void addStatsCommand(CLI::App& app, StatsCommand& command) {
  command.cmd = app.add_subcommand(
      "stats",
      "Ask a running `mocker serve` for its stats once: engine, per-rank queues and KV "
      "cache, routes, pass timing");
  CLI::App& c = *command.cmd;
  c.add_option("endpoint", command.endpoint, "the service's submit endpoint")
      ->option_text("ENDPOINT")
      ->capture_default_str();
  c.add_flag("--json", command.json, "print the reply as one JSON object");
  c.add_option("--timeout-s", command.timeout_s, "give up when no reply comes for this long")
      ->check(greaterThan(0))
      ->capture_default_str();
  auto* server_key =
      c.add_option("--curve-server-key-file", command.curve_server_key_file,
                   "CURVE: the service's public key file (NAME.pub of its key pair)");
  auto* secret_key = c.add_option("--curve-secret-key-file", command.curve_secret_key_file,
                                  "CURVE: this client's secret key file (NAME.key)");
  server_key->needs(secret_key);
  secret_key->needs(server_key);
  c.footer(
      "Exit codes: 0 answered, 1 nothing listening, no reply in time or an error reply, "
      "2 usage error.");
}

int runStatsCommand(const StatsCommand& command, std::ostream& out, std::ostream& err) {
  // No cancel socket: it would carry the submit socket's routing id, and a second connection to
  // the submit ROUTER with that id is refused (the stats request was then lost at random).
  net::ClientOptions options{.submit_endpoint = command.endpoint, .cancel_endpoint = ""};
  if (!command.curve_secret_key_file.empty()) {
    auto keys =
        net::loadCurveClientKeys(command.curve_server_key_file, command.curve_secret_key_file);
    if (!keys) {
      err << "mocker stats: " << keys.error().message << "\n";
      return 1;
    }
    options.curve_server_key = keys->server_public_key;
    options.curve_secret_key = keys->secret_key;
    options.curve_public_key = keys->public_key;
  }
  const Result<bool> listening = somethingAccepts(command.endpoint, kAnswerWait, "ENDPOINT");
  if (!listening) {
    err << "mocker stats: " << listening.error().message << "\n";
    return 1;
  }
  if (!*listening) {
    err << "mocker stats: nothing answers at " << command.endpoint << " (no connection within "
        << kAnswerWait.count() << " ms): is `mocker serve` running there?\n";
    return 1;
  }
  auto client = net::Client::connect(std::move(options));
  if (!client) {
    err << "mocker stats: " << client.error().message << "\n";
    return 1;
  }
  if (auto sent = (*client)->send(protocol::StatsRequest{}); !sent) {
    err << "mocker stats: " << sent.error().message << "\n";
    return 1;
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(command.timeout_s));
  while (Clock::now() < deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    auto received = (*client)->receive(left);
    if (!received) {
      err << "mocker stats: " << received.error().message << "\n";
      return 1;
    }
    if (!*received) continue;
    if (const auto* reply = std::get_if<protocol::StatsReply>(&**received)) {
      out << (command.json ? formatStatsJson(*reply) : formatStatsText(*reply));
      return 0;
    }
    if (const auto* error = std::get_if<protocol::ErrorReply>(&**received)) {
      err << "mocker stats: error from the service: " << errorCodeName(error->code) << ": "
          << error->message << "\n";
      return 1;
    }
  }
  err << "mocker stats: no reply from " << command.endpoint << " within " << command.timeout_s
      << " s\n";
  return 1;
}

}  // namespace mocker::tools
