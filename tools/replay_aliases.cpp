// The aliases of `mocker replay`'s flags folded into the native ones (contract in
// replay_aliases.h).
#include "tools/replay_aliases.h"

#include <algorithm>
#include <string>
#include <vector>

#include "service/fleet.h"
#include "tools/cli_options.h"

namespace mocker::tools {

namespace {

/// --connect-prefill / --prefill-fleet / --decode-fleet / --fleet into --connect,
/// --connect-cancel, --connect-decode, --connect-decode-cancel and the fleet's KV endpoints.
Status applyServerAliases(ReplayFlags& f, const GivenFlags& given) {
  // Live disaggregated: the prefill servers are the --connect / --fleet servers.
  const bool prefill_given = !f.connect_prefill.empty() || !f.prefill_fleet.empty();
  const bool decode_given = !f.connect_decode.empty() || !f.decode_fleet.empty();
  if (prefill_given != decode_given) {
    return invalidArgument(prefill_given ? "--connect-prefill / --prefill-fleet need the decode "
                                           "servers: --connect-decode or --decode-fleet"
                                         : "--connect-decode / --decode-fleet need the prefill "
                                           "servers: --connect-prefill or --prefill-fleet");
  }
  if (!f.connect_decode_cancel.empty() && f.connect_decode.empty()) {
    return invalidArgument("--connect-decode-cancel is for --connect-decode servers");
  }
  if (prefill_given) {
    if (!f.connect.empty() || !f.fleet_file.empty()) {
      return invalidArgument(
          "--connect-prefill / --prefill-fleet replace --connect / --fleet: give one or the other");
    }
    if (!f.connect_prefill.empty() && !f.prefill_fleet.empty()) {
      return invalidArgument(
          "give the prefill servers with --connect-prefill or --prefill-fleet, "
          "not both");
    }
    if (!f.connect_decode.empty() && !f.decode_fleet.empty()) {
      return invalidArgument(
          "give the decode servers with --connect-decode or --decode-fleet, "
          "not both");
    }
    if (given.contains("--mode") && f.mode == "offline") {
      return invalidArgument(
          "--connect-prefill / --prefill-fleet are for --mode live (got --mode "
          "offline; offline disaggregation is --num-prefill-workers)");
    }
    f.connect = f.connect_prefill;
    f.fleet_file = f.prefill_fleet;
    if (!f.decode_fleet.empty()) {
      auto manifest = service::loadFleetManifest(f.decode_fleet);
      if (!manifest) return invalidArgument("--decode-fleet: " + manifest.error().message);
      for (const service::FleetManifest::Worker& w : manifest->workers) {
        f.connect_decode.push_back(w.submit);
        f.connect_decode_cancel.push_back(w.cancel);
      }
    }
  }
  if (!f.fleet_file.empty()) {
    // --fleet is one --connect / --connect-cancel pair per worker, read from the file.
    if (!f.connect.empty() || !f.connect_cancel.empty()) {
      return invalidArgument(
          "--fleet replaces --connect and --connect-cancel: give one or the other");
    }
    if (given.contains("--mode") && f.mode == "offline") {
      return invalidArgument("--fleet is for --mode live (got --mode offline)");
    }
    auto manifest = service::loadFleetManifest(f.fleet_file);
    if (!manifest) return invalidArgument("--fleet: " + manifest.error().message);
    for (const service::FleetManifest::Worker& w : manifest->workers) {
      f.connect.push_back(w.submit);
      f.connect_cancel.push_back(w.cancel);
      auto& events = f.fleet_kv_events.emplace_back();
      auto& replays = f.fleet_kv_replay.emplace_back();
      for (const service::FleetManifest::Rank& r : w.ranks) {
        events.push_back(r.kv_events);
        replays.push_back(r.kv_replay);
      }
    }
  }
  return {};
}

/// --num-prompts into --num-requests, --burstiness into --arrival gamma.
Status applyWorkloadAliases(ReplayFlags& f, const GivenFlags& given) {
  if (given.contains("--num-prompts")) {
    if (f.turns_per_session != 1) {
      return invalidArgument(
          "--num-prompts counts single-turn requests; with --turns-per-session " +
          std::to_string(f.turns_per_session) + " give the number of sessions with --num-requests");
    }
    f.num_requests = f.num_prompts;
  }
  if (given.contains("--burstiness")) {
    if (given.contains("--arrival") && f.arrival != "gamma") {
      return invalidArgument(
          "--burstiness sets gamma arrivals; it does not combine with --arrival " + f.arrival);
    }
    f.arrival = "gamma";
    f.gamma_smoothness = f.burstiness;
  }
  return {};
}

/// --goodput KEY:MS items into the --slo-*-ms values.
Status applyGoodput(ReplayFlags& f) {
  std::vector<std::string> seen;
  for (const std::string& item : f.goodput) {
    const std::size_t colon = item.find(':');
    const std::string key = item.substr(0, colon);
    double* slo = key == "ttft"   ? &f.slo_ttft_ms
                  : key == "tpot" ? &f.slo_tpot_ms
                  : key == "e2el" ? &f.slo_e2e_ms
                                  : nullptr;
    if (colon == std::string::npos || slo == nullptr) {
      return invalidArgument(
          "--goodput: expected KEY:MS with KEY one of ttft, tpot, e2el, got '" + item + "'" +
          (colon == std::string::npos ? " (it takes every following word: put TRACE first)" : ""));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return invalidArgument("--goodput: " + key + " given twice");
    }
    seen.push_back(key);
    std::string ms = item.substr(colon + 1);
    if (const std::string problem = atLeast(0)(ms); !problem.empty()) {
      return invalidArgument("--goodput: " + key + ": " + problem);
    }
    *slo = std::stod(ms);
  }
  return {};
}

}  // namespace

Status applyReplayAliases(ReplayFlags& f, const GivenFlags& given) {
  MOCKER_TRY_VOID(applyServerAliases(f, given));
  MOCKER_TRY_VOID(applyWorkloadAliases(f, given));
  return applyGoodput(f);
}

}  // namespace mocker::tools
